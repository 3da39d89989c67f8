"""repro.quant (C10): RTN grids and packing, absmax / vector-wise int8 and LLM.int8() (Dettmers et al. 2022),
GPTQ (Frantar et al. 2023), with exact expectations on single layers, and comparisons with bitsandbytes
(LLM.int8()) and AutoGPTQ's reference GPTQ where those are installed."""
import importlib.util
import math
import sys
from importlib import metadata
from pathlib import Path

import pytest
import torch
from torch import nn

from repro import quant as Q

torch.set_num_threads(1)


def _calib(n_in=128, tokens=1024, seed=0):
    """Correlated inputs (a random low-rank mix plus noise, as real activations), (tokens, in)."""
    g = torch.Generator().manual_seed(seed)
    mix = torch.randn(16, n_in, generator=g)
    return torch.randn(tokens, 16, generator=g) @ mix + 0.3 * torch.randn(tokens, n_in, generator=g)


# ------------------------------------------------------------------------------------------------ grids, packing
@pytest.mark.parametrize("bits", [2, 3, 4, 8])
def test_rtn_round_trip_exact_at_grid_points(bits):
    maxq = 2 ** bits - 1
    g = torch.Generator().manual_seed(bits)
    rows, cols, scale = 8, 32, 2.0 ** -5  # a power-of-two scale: every grid point is exact in float32
    zero = torch.randint(1, maxq, (rows, 1), generator=g).float()
    codes = torch.randint(0, maxq + 1, (rows, cols), generator=g)
    codes[:, 0], codes[:, 1] = 0, maxq  # each row spans the full grid, so the min-max fit recovers the grid
    w = scale * (codes.float() - zero)
    qw = Q.rtn(w, bits)
    assert torch.equal(qw.codes.long(), codes) and torch.equal(qw.zero, zero)
    assert torch.equal(qw.dequantize(), w)
    assert torch.equal(Q.rtn(qw.dequantize(), bits).dequantize(), w)


@pytest.mark.parametrize("bits", [3, 4, 8])
def test_symmetric_grid_is_the_reference_one(bits):
    """GPTQ's reference symmetric grid: scale = 2 max|w| / maxq, zero = (maxq + 1) / 2 (so 0 is a grid point)."""
    maxq = 2 ** bits - 1
    w = torch.randn(4, 64, generator=torch.Generator().manual_seed(bits))
    qw = Q.rtn(w, bits, sym=True)
    assert torch.allclose(qw.scale.flatten(), 2 * w.abs().amax(1) / maxq)
    assert torch.all(qw.zero == (maxq + 1) / 2)
    assert torch.all((qw.dequantize() - w).abs() <= qw.scale / 2 + 1e-6)
    assert torch.equal(Q.rtn(torch.zeros(2, 8), bits, sym=True).dequantize(), torch.zeros(2, 8))


def test_rtn_error_bounded_by_half_step_and_groups_help():
    w = torch.randn(16, 128, generator=torch.Generator().manual_seed(1))
    for bits in (3, 4, 8):
        qw = Q.rtn(w, bits)
        step = qw.scale[:, qw.g_idx]
        assert torch.all((qw.dequantize() - w).abs() <= step / 2 + 1e-6)
        grouped = Q.rtn(w, bits, group_size=32)
        assert grouped.scale.shape == (16, 4)
        assert (grouped.dequantize() - w).norm() < (qw.dequantize() - w).norm()


@pytest.mark.parametrize("bits", [2, 3, 4, 5, 8])
def test_pack_unpack_round_trip_and_size(bits):
    n = 1001
    codes = torch.randint(0, 2 ** bits, (n,), generator=torch.Generator().manual_seed(bits)).to(torch.int16)
    data = Q.pack_bits(codes, bits)
    assert len(data) == math.ceil(n * bits / 8)
    assert torch.equal(Q.unpack_bits(data, bits, n), codes)
    with pytest.raises(ValueError):
        Q.pack_bits(torch.tensor([2 ** bits]), bits)


def test_packed_linear_stores_packed_bytes_and_reproduces_the_dequantized_weight():
    lin = nn.Linear(128, 64)
    for bits, gs in ((4, None), (3, 32), (8, 64)):
        qw = Q.rtn(lin.weight.detach(), bits, gs)
        pl = Q.PackedLinear(qw, lin.bias)
        n_groups = 1 if gs is None else 128 // gs
        b = pl.stored_bytes()
        assert b["codes"] == math.ceil(64 * 128 * bits / 8)
        assert b["scales"] == 64 * n_groups * 2 and b["zeros"] == math.ceil(64 * n_groups * bits / 8)
        assert b["g_idx"] == 0
        # the scales are stored in 16 bits: the weight is exactly the fp16 scale times (code - zero)
        fp16 = Q.QuantizedWeight(qw.codes, qw.scale.half().float(), qw.zero, qw.g_idx, bits, qw.group_size)
        assert torch.equal(pl.weight_dequantized(), fp16.dequantize())
        x = torch.randn(3, 128)
        assert torch.allclose(pl(x), nn.functional.linear(x, pl.weight_dequantized(), lin.bias))


# ------------------------------------------------------------------------------------------------ GPTQ
@pytest.mark.parametrize("bits,group_size,act_order", [(4, None, False), (3, None, False), (3, 32, False),
                                                        (4, 32, True), (3, None, True), (2, 64, False)])
def test_gptq_reconstruction_error_below_rtn(bits, group_size, act_order):
    torch.manual_seed(0)
    lin = nn.Linear(128, 96)
    X = _calib()
    g = Q.GPTQ(lin)
    for chunk in X.split(256):
        g.add_batch(chunk)
    assert torch.allclose(g.H, 2 * X.double().t() @ X.double() / len(X))
    qw, loss = g.quantize(bits, group_size, act_order, damp=0.01, block_size=32)
    W = lin.weight.detach()
    err = ((X @ (W - qw.dequantize()).t()).norm() / (X @ W.t()).norm()).item()
    err_rtn = ((X @ (W - Q.rtn(W, bits, group_size).dequantize()).t()).norm() / (X @ W.t()).norm()).item()
    assert err < 0.8 * err_rtn, (err, err_rtn)
    assert Q.relative_error(W, qw.dequantize(), g.H) == pytest.approx(err ** 2, rel=1e-4)
    assert loss > 0
    # codes on the grid, one grid per (row, group)
    assert qw.codes.min() >= 0 and qw.codes.max() <= 2 ** bits - 1
    assert qw.scale.shape[1] == (1 if group_size is None else 128 // group_size)


def test_gptq_block_size_does_not_change_the_result():
    """Lazy batch updates reorganise the computation only (Section 4, Step 2)."""
    lin = nn.Linear(64, 16)
    X = _calib(64, 256)
    outs = []
    for bs in (8, 16, 64):
        g = Q.GPTQ(lin)
        g.add_batch(X)
        outs.append(g.quantize(4, None, False, 0.01, bs)[0].dequantize())
    assert torch.allclose(outs[0], outs[1], atol=1e-5) and torch.allclose(outs[0], outs[2], atol=1e-5)


def test_gptq_dead_inputs_get_zero_weight_and_act_order_stores_group_index():
    lin = nn.Linear(64, 8)
    X = _calib(64, 256)
    X[:, 5] = 0
    g = Q.GPTQ(lin)
    g.add_batch(X)
    qw, _ = g.quantize(4, 16, act_order=True, damp=0.01)
    assert torch.all(qw.dequantize()[:, 5].abs() <= qw.scale.max() / 2 + 1e-6)
    assert sorted(torch.bincount(qw.g_idx).tolist()) == [16] * 4
    assert Q.PackedLinear(qw, None).stored_bytes()["g_idx"] == 64 * 4


def _load_autogptq():
    """AutoGPTQ's reference GPTQ (auto_gptq/quantization/gptq.py, the code of Frantar et al.'s repository with the
    group / act-order options), loaded without the package __init__ (which needs its CUDA model stack)."""
    try:
        dist = metadata.distribution("auto-gptq")
    except metadata.PackageNotFoundError:
        return None
    pkg = Path(dist.locate_file("auto_gptq/quantization"))
    if not (pkg / "gptq.py").exists() or importlib.util.find_spec("transformers") is None:
        return None
    spec = importlib.util.spec_from_file_location("_agq", pkg / "__init__.py", submodule_search_locations=[str(pkg)])
    mod = importlib.util.module_from_spec(spec)
    sys.modules["_agq"] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("bits,group_size,act_order", [(4, -1, False), (3, 32, False), (4, 32, True)])
def test_gptq_matches_autogptq_reference(bits, group_size, act_order, monkeypatch):
    agq = _load_autogptq()
    if agq is None:
        pytest.skip("AutoGPTQ's reference GPTQ is not installed (pip install --no-deps auto-gptq==0.7.1 transformers:"
                    " a test-only reference; its package needs CUDA extensions and is not a dependency)")
    for name in ("synchronize", "empty_cache"):  # fasterquant calls these unconditionally; no-ops on a CPU
        monkeypatch.setattr(torch.cuda, name, lambda: None)
    torch.manual_seed(0)
    lin = nn.Linear(64, 32)
    X = _calib(64, 512)
    ref_lin = nn.Linear(64, 32)
    ref_lin.load_state_dict(lin.state_dict())
    ref = agq.GPTQ(ref_lin)
    ref.quantizer = agq.Quantizer()
    ref.quantizer.configure(bits, perchannel=True, sym=False, mse=False)
    ref.add_batch(X.unsqueeze(0), None)
    ref.fasterquant(blocksize=16, percdamp=0.01, group_size=group_size, actorder=act_order)
    ours = Q.GPTQ(lin)
    ours.add_batch(X)
    qw, _ = ours.quantize(bits, None if group_size < 0 else group_size, act_order, 0.01, block_size=16)
    W_ref = ref_lin.weight.detach()
    # float32 (reference) vs float64 (here) arithmetic: a few weights may round to a neighbouring grid point
    same = torch.isclose(qw.dequantize(), W_ref, atol=1e-5).float().mean().item()
    assert same > 0.97, same
    err = lambda W: ((X @ (lin.weight.detach() - W).t()).norm() / (X @ lin.weight.detach().t()).norm()).item()
    assert err(qw.dequantize()) == pytest.approx(err(W_ref), rel=0.02)


# ------------------------------------------------------------------------------------------------ int8
OUT = [3, 17]  # outlier feature dimensions of the constructed inputs


def _outlier_case(seed=0, scale=20.0, d=512):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(64, d, generator=g)
    w = torch.randn(32, d, generator=g) / math.sqrt(d)
    xo = x.clone()
    c = OUT  # systematic outlier features: |x| >= 6 in every token of a few dimensions
    xo[:, c] = x[:, c].sign() * (6.0 + scale * x[:, c].abs())
    return x, xo, w


def _rel(y, ref):
    return ((y - ref).norm() / ref.norm()).item()


def _err(y, ref):
    return (y - ref).norm().item()


def test_absmax_quantize_codes():
    x = torch.tensor([[1.0, -2.0, 0.5], [4.0, 0.0, -1.0]])
    q, s = Q.absmax_quantize(x, dim=1)
    assert torch.equal(q, torch.tensor([[64, -127, 32], [127, 0, -32]], dtype=torch.int8))
    assert torch.allclose(s.flatten(), torch.tensor([2 / 127, 4 / 127]))
    q, s = Q.absmax_quantize(x)
    assert torch.equal(q[1], torch.tensor([127, 0, -32], dtype=torch.int8)) and s.item() == pytest.approx(4 / 127)


def test_outlier_columns_break_absmax_int8_but_not_the_decomposition():
    x, xo, w = _outlier_case()
    wq, sw = Q.absmax_quantize(w, dim=1)
    base_vw = _err(Q.matmul_vectorwise(x, w), x @ w.t())
    out_vw = _err(Q.matmul_vectorwise(xo, w), xo @ w.t())
    out_abs = _err(Q.matmul_absmax(xo, w), xo @ w.t())
    y, cols = Q.matmul_llm_int8(xo, wq, sw, 6.0)
    out_dec = _err(y, xo @ w.t())
    assert sorted(cols.tolist()) == OUT
    assert out_vw > 5 * base_vw and out_abs > 5 * base_vw  # the outliers squeeze every other feature's grid
    assert out_dec < 1.5 * base_vw  # what is left is the int8 weights' error on the outlier dims
    # exactly: 16-bit outlier dims (weights dequantized from int8, as stored) plus vector-wise int8 of the other
    # dims, whose codes and scales are the same with and without the outliers (they never see them)
    rest = [j for j in range(x.shape[1]) if j not in OUT]
    high = (xo[:, OUT].half().float() @ (wq[:, OUT].float() * sw).half().float().t()).half()
    low = Q.matmul_vectorwise(x[:, rest], None, wq[:, rest], sw)
    assert torch.allclose(y, high.float() + low, atol=1e-6)
    # without outliers the decomposition is vector-wise int8 exactly
    y0, cols0 = Q.matmul_llm_int8(x * (5.0 / x.abs().max()), wq, sw, 6.0)
    assert len(cols0) == 0
    assert torch.equal(y0, Q.matmul_vectorwise(x * (5.0 / x.abs().max()), None, wq, sw))


def test_int8_linear_counts_values_in_16_bits():
    x, xo, w = _outlier_case()
    lin = nn.Linear(512, 32)
    with torch.no_grad():
        lin.weight.copy_(w)
    m = Q.Int8Linear(lin, "llm_int8", 6.0)
    m(xo.view(2, 32, 512))
    s = m.stats
    assert s["x_values"] == 64 * 512 and s["x_values_16bit"] == 64 * 2 and s["outlier_dims"] == set(OUT)
    assert m.stored_bytes()["codes"] == 32 * 512 and m.stored_bytes()["scales"] == 32 * 4
    with pytest.raises(ValueError, match="mode"):
        Q.Int8Linear(lin, "int4")


def test_llm_int8_matches_bitsandbytes():
    bnb = pytest.importorskip("bitsandbytes", reason="bitsandbytes (LLM.int8() reference) is not installed")
    import bitsandbytes.functional as BF

    x, xo, w = _outlier_case(seed=3)
    # vector-wise quantization: the same codes and scales; the same outlier columns
    q_bnb, stats, cols = BF.int8_vectorwise_quant(xo, threshold=6.0)
    q, s = Q.absmax_quantize(xo.masked_fill(xo.abs() >= 6.0, 0.0), dim=1)
    assert torch.equal(q, q_bnb)
    assert torch.allclose(s.flatten() * 127, stats)
    assert sorted(cols.tolist()) == sorted(Q.outlier_dims(xo, 6.0).tolist())
    # the whole LLM.int8() linear layer
    lin = nn.Linear(512, 32)
    with torch.no_grad():
        lin.weight.copy_(w)
    ref = bnb.nn.Linear8bitLt(512, 32, bias=True, has_fp16_weights=False, threshold=6.0)
    ref.load_state_dict(lin.state_dict())
    ref = ref.to("cpu").eval()  # (in training mode bitsandbytes uses a dequantize-and-matmul path on CPUs)
    # bitsandbytes quantizes the weight here (from float16: a few codes differ by one)
    ours = Q.Int8Linear(lin, "llm_int8", 6.0)
    diff = (ours.weight_int8.int() - ref.weight.data.int()).abs()
    assert diff.max() <= 1 and diff.float().mean() < 0.01
    assert torch.allclose(ours.weight_scale.flatten() * 127, ref.weight.SCB.float(), rtol=1e-3)
    with torch.no_grad():  # with bitsandbytes' weight codes, the same layer output
        ours.weight_int8.copy_(ref.weight.data)
        ours.weight_scale.copy_(ref.weight.SCB.float().reshape(-1, 1) / 127)
        x16 = xo.half()  # bitsandbytes' int8 matmul takes (and returns) float16
        y_ref, y, y_fp = ref(x16).float(), ours(x16.float()), lin(x16.float())
    assert _rel(y, y_ref) < 0.05 * _rel(y, y_fp)


# ------------------------------------------------------------------------------------------------ whole model
def _tiny_lm():
    from repro.train.pipeline import build_model

    torch.manual_seed(0)
    mp = {"n_decoder_layers": 2, "max_seq_len": 32, "positional": "sinusoidal",
          "block": {"d_model": 32, "n_heads": 2, "d_ff": 64, "norm_position": "pre", "dropout": 0.0}}
    return build_model(mp, 50, 0, kind="lm").eval()


def test_model_level_quantization_replaces_block_linears_only():
    import copy

    lm = _tiny_lm()
    names = list(Q.block_linears(lm))
    assert len(names) == 2 * 6  # q, k, v, out, fc1, fc2 per block
    toks = torch.randint(3, 50, (4, 12), generator=torch.Generator().manual_seed(0))
    ref = lm(toks)
    fp = Q.stored_weight_bytes(lm)
    assert fp["bytes"] == fp["fp32_bytes"] == 4 * fp["params"]
    m4 = copy.deepcopy(lm)
    Q.quantize_rtn(m4, 4, 16)
    b4 = Q.stored_weight_bytes(m4)
    assert b4["params"] == fp["params"] and b4["bytes"] < fp["fp16_bytes"] / 3
    assert all(isinstance(m, Q.PackedLinear) for m in Q.block_linears(m4).values())
    assert lm.decoder.output is None or isinstance(lm.decoder.output, nn.Linear)
    m8 = copy.deepcopy(lm)
    Q.quantize_int8(m8, "llm_int8")
    assert _rel(m8(toks), ref) < 0.05
    mg = copy.deepcopy(lm)
    calib = [torch.randint(3, 50, (1, 16), generator=torch.Generator().manual_seed(i)) for i in range(16)]
    res = Q.quantize_gptq(mg, lambda m: [m(t) for t in calib], 3, None, False, 0.01)
    assert len(res) == 12 and all(r["tokens"] == 16 * 16 for r in res.values())
    assert sum(r["rel_error"] for r in res.values()) < sum(r["rel_error_rtn"] for r in res.values())
    assert torch.isfinite(mg(toks)).all()


def _gptq_one_pass_per_block(model, calibrate, *opts):
    """The plain form of sequential GPTQ: for every block a whole calibration pass through the model whose earlier
    blocks are already quantized (what quantize_gptq computes from cached block inputs)."""
    from repro.quant.apply import _gptq_block, blocks_of

    res = {}
    for bname, block in blocks_of(model):
        res.update(_gptq_block(bname, block, lambda: calibrate(model), *opts))
    return res


@pytest.mark.parametrize("kind", ["lm", "encdec"])
def test_gptq_on_cached_block_inputs_equals_a_calibration_pass_per_block(kind):
    """quantize_gptq runs each block alone on the captured stack inputs (the reference's opt_sequential); the codes
    must equal those of a full calibration pass per block, for an LM and for an encoder-decoder (the decoder's
    cross-attention reads the already quantized encoder's output) with padded batches."""
    import copy

    from repro.train.pipeline import build_model

    torch.manual_seed(0)
    mp = {"n_encoder_layers": 2, "n_decoder_layers": 2, "max_seq_len": 32, "positional": "sinusoidal",
          "block": {"d_model": 32, "n_heads": 2, "d_ff": 64, "norm_position": "pre", "dropout": 0.0}}
    model = build_model(mp if kind == "encdec" else {**mp, "n_encoder_layers": 0}, 50, 0, kind=kind).eval()
    g = torch.Generator().manual_seed(1)
    batches = []
    for i in range(6):
        t = torch.randint(3, 50, (2, 10), generator=g)
        pad = torch.zeros(2, 10, dtype=torch.bool)
        pad[1, 7:] = True
        batches.append((t, pad))
    if kind == "lm":
        calibrate = lambda m: [m(t, p) for t, p in batches]  # noqa: E731
    else:
        calibrate = lambda m: [m(t, t.flip(1), p, p) for t, p in batches]  # noqa: E731
    a, b = copy.deepcopy(model), copy.deepcopy(model)
    opts = (3, 16, True, 0.01, 128, False)
    ra = Q.quantize_gptq(a, calibrate, *opts)
    with torch.no_grad():
        rb = _gptq_one_pass_per_block(b, calibrate, *opts)
    assert ra.keys() == rb.keys() and len(ra) == (2 * 6 if kind == "lm" else 2 * 6 + 2 * 10)  # + cross-attention
    for name in rb:
        assert ra[name]["tokens"] == rb[name]["tokens"], name
        assert torch.equal(ra[name]["module"].codes_packed, rb[name]["module"].codes_packed), name
        assert ra[name]["rel_error"] == pytest.approx(rb[name]["rel_error"], rel=1e-6), name
    assert [type(m).__name__ for m in Q.block_linears(a).values()] == ["PackedLinear"] * len(rb)
