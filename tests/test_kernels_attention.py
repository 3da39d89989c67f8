"""Triton FlashAttention (repro.kernels.attention) against an fp32 materialised-softmax reference.

Dao et al. 2022 (FlashAttention, arXiv 2205.14135). On CPU the kernels run under Triton's interpreter;
the same parametrised tests run on CUDA when marked ``cuda`` (``pytest -m cuda``). Small 16x16 tiles
are forced in most tests so that short sequences (37, 45: not multiples of the tile) still span
several tiles, exercising the online-softmax rescaling, the causal diagonal split and the tails.
"""
import math

import pytest
import torch

import repro.kernels as K
from repro.kernels import flash_attention
from repro.kernels.attention import _flash_forward, attention_launch_config

DEVICES = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=pytest.mark.cuda)]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# (atol, rtol); atol is scaled by the reference's max magnitude (gradients are sums over many keys).
TOL = {torch.float32: (2e-5, 1e-4), torch.float16: (4e-3, 4e-3), torch.bfloat16: (3e-2, 3e-2)}
SMALL = dict(BLOCK_M_FWD=16, BLOCK_N_FWD=16, BLOCK_M_DKDV=16, BLOCK_N_DKDV=16, BLOCK_M_DQ=16, BLOCK_N_DQ=16)


def _skip_unless_runnable(device):
    if device == "cpu" and not K.interpreter_enabled():
        pytest.skip("CPU kernels need the Triton interpreter (TRITON_INTERPRET=1); it is off on this machine")
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")


def reference_attention(q, k, v, causal=False, key_padding_mask=None, scale=None, window=None):
    """softmax(scale * q k^T + mask) v in fp32, materialised; GQA by repeating kv heads; rows with
    every key masked give 0 (the kernel's contract); ``window``: key j visible to query i only if
    i - window < j (sliding window, with causal)."""
    q, k, v = q.float(), k.float(), v.float()
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = (q @ k.transpose(-1, -2)) * scale
    nq, nk = s.shape[-2:]
    mask = torch.zeros(s.shape, dtype=torch.bool, device=s.device)
    if causal:
        mask |= torch.ones(nq, nk, dtype=torch.bool, device=s.device).triu(1)
    if window is not None:
        mask |= torch.ones(nq, nk, dtype=torch.bool, device=s.device).tril(-window)
    if key_padding_mask is not None:
        mask |= key_padding_mask[:, None, None, :]
    empty = mask.all(-1, keepdim=True)
    s = s.masked_fill(mask, float("-inf")).masked_fill(empty, 0.0)
    p = torch.softmax(s, -1) * (~empty)
    return p @ v


def _close(actual, expected, dtype, name):
    atol, rtol = TOL[dtype]
    scale = max(1.0, expected.abs().max().item())
    torch.testing.assert_close(actual.float(), expected.float(), atol=atol * scale, rtol=rtol,
                               msg=lambda m: f"{name} ({dtype}): {m}")


def _inputs(device, dtype, b, h, hkv, nq, nk, d, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, nq, d, generator=g).to(device=device, dtype=dtype)
    k = torch.randn(b, hkv, nk, d, generator=g).to(device=device, dtype=dtype)
    v = torch.randn(b, hkv, nk, d, generator=g).to(device=device, dtype=dtype)
    return q, k, v


def _padding(device, b, nk):
    """Batch 0 pads its tail, batch 1 its head (left padding): with causal=True the first rows of
    batch 1 see no key at all, so the all-masked path (output 0, no NaN) is exercised."""
    m = torch.zeros(b, nk, dtype=torch.bool)
    m[0, nk - 7:] = True
    if b > 1:
        m[1, :3] = True
    return m.to(device)


def _check(q, k, v, dtype, config=None, **kw):
    """Output and dq, dk, dv vs the fp32 reference on the same (rounded) inputs."""
    q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    o = flash_attention(q, k, v, _config=config, **kw)
    assert o.shape == q.shape and o.dtype == q.dtype
    do = torch.randn_like(o)
    o.backward(do)
    ref = [t.detach().float().requires_grad_(True) for t in (q, k, v)]
    o_ref = reference_attention(*ref, **kw)
    o_ref.backward(do.float())
    _close(o, o_ref, dtype, "out")
    for name, t, r in zip(("dq", "dk", "dv"), (q, k, v), ref):
        assert t.grad is not None and t.grad.shape == t.shape and t.grad.dtype == t.dtype, name
        assert torch.isfinite(t.grad).all(), f"{name} has NaN/inf"
        _close(t.grad, r.grad, dtype, name)
    return o


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("masked", [False, True], ids=["nomask", "kpm"])
@pytest.mark.parametrize("heads", [(2, 2), (4, 1)], ids=["mha", "gqa4"])
def test_attention_matches_reference(device, dtype, causal, masked, heads):
    _skip_unless_runnable(device)
    b, n, d = 2, 37, 32
    q, k, v = _inputs(device, dtype, b, heads[0], heads[1], n, n, d)
    kpm = _padding(device, b, n) if masked else None
    o = _check(q, k, v, dtype, SMALL, causal=causal, key_padding_mask=kpm)
    if masked and causal:  # rows of batch 1 before its first real key: exactly 0
        assert (o[1, :, :3].float() == 0).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n,window,heads,masked", [
    (37, 1, (2, 2), False),  # only the diagonal: every other tile skipped
    (37, 5, (4, 1), True),  # narrower than a tile: band edge and diagonal in the same tiles, GQA, padding
    (45, 16, (2, 2), True),  # exactly one tile wide
    (45, 20, (2, 1), False),  # band edge mid-tile, a tail tile (45 = 2 * 16 + 13)
    (37, 36, (2, 2), False),  # one key short of the full causal band
], ids=["w1", "w5-gqa-kpm", "w16-kpm", "w20-gqa", "w36"])
def test_sliding_window_matches_reference(device, n, window, heads, masked):
    """Sliding-window causal attention (Mistral's sliding_window; FlashAttention-2's window_size):
    forward and all gradients at odd lengths, the band's left edge inside, across and beyond tiles."""
    _skip_unless_runnable(device)
    q, k, v = _inputs(device, torch.float32, 2, heads[0], heads[1], n, n, 32, seed=20 + window)
    kpm = _padding(device, 2, n) if masked else None
    _check(q, k, v, torch.float32, SMALL, causal=True, key_padding_mask=kpm, window=window)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_sliding_window_default_tiles_and_semantics(device, dtype):
    """The launcher's own tiles (32 x 32 on CPU) with a window not a multiple of them; keys left of the
    band do not change the output (they are never read); a window covering the sequence is causal."""
    _skip_unless_runnable(device)
    q, k, v = _inputs(device, dtype, 1, 2, 2, 77, 77, 16, seed=30)
    o = _check(q, k, v, dtype, None, causal=True, window=23)
    k2, v2 = k.clone(), v.clone()
    k2[:, :, :40], v2[:, :, :40] = 9.0, -9.0  # rows >= 62 see keys > 39 only
    o2 = flash_attention(q, k2, v2, causal=True, window=23)
    torch.testing.assert_close(o2[:, :, 62:], o[:, :, 62:])
    assert not torch.allclose(o2[:, :, :62].float(), o[:, :, :62].float())
    torch.testing.assert_close(flash_attention(q, k, v, causal=True, window=77), flash_attention(q, k, v, causal=True))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("head_dim", [16, 64, 128])
def test_head_dims(device, head_dim):
    _skip_unless_runnable(device)
    q, k, v = _inputs(device, torch.float16, 1, 2, 2, 20, 20, head_dim, seed=1)
    _check(q, k, v, torch.float16, SMALL, causal=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_cross_attention_default_tiles(device, dtype):
    """Nq != Nk, launcher's own tile sizes, GQA group 2, padding mask."""
    _skip_unless_runnable(device)
    q, k, v = _inputs(device, dtype, 2, 4, 2, 21, 45, 64, seed=2)
    _check(q, k, v, dtype, None, key_padding_mask=_padding(device, 2, 45))


@pytest.mark.parametrize("device", DEVICES)
def test_custom_scale(device):
    """A kernel that ignored `scale` (or applied it twice) fails here."""
    _skip_unless_runnable(device)
    q, k, v = _inputs(device, torch.float32, 1, 2, 2, 24, 24, 32, seed=3)
    _check(q, k, v, torch.float32, SMALL, scale=0.37)
    default = flash_attention(q, k, v, _config=SMALL)
    explicit = flash_attention(q, k, v, scale=1 / math.sqrt(32), _config=SMALL)
    torch.testing.assert_close(default, explicit)


@pytest.mark.parametrize("device", DEVICES)
def test_strided_inputs(device):
    """q, k, v as views of a packed (B, N, 3, H, D) projection: head/seq strides are not those of a
    contiguous (B, H, N, D) tensor; a kernel assuming them reads the wrong rows."""
    _skip_unless_runnable(device)
    b, n, h, d = 2, 33, 2, 32
    qkv = torch.randn(b, n, 3, h, d, device=device)
    q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, H, N, D), seq stride 3*H*D
    assert not q.is_contiguous()
    _check(q, k, v, torch.float32, SMALL, causal=True)


@pytest.mark.parametrize("device", DEVICES)
def test_mask_semantics(device):
    """True in key_padding_mask means 'ignore this key': changing padded keys/values leaves the
    output unchanged; under causal, changing future keys leaves earlier rows unchanged."""
    _skip_unless_runnable(device)
    q, k, v = _inputs(device, torch.float32, 2, 2, 2, 30, 30, 16, seed=4)
    kpm = _padding(device, 2, 30)
    o1 = flash_attention(q, k, v, key_padding_mask=kpm, _config=SMALL)
    k2, v2 = k.clone(), v.clone()
    k2[kpm[:, None, :, None].expand_as(k2)] = 100.0
    v2[kpm[:, None, :, None].expand_as(v2)] = -50.0
    torch.testing.assert_close(flash_attention(q, k2, v2, key_padding_mask=kpm, _config=SMALL), o1)
    assert not torch.allclose(flash_attention(q, k2, v2, _config=SMALL), o1)
    c1 = flash_attention(q, k, v, causal=True, _config=SMALL)
    k3, v3 = k.clone(), v.clone()
    k3[:, :, 20:] = 7.0
    v3[:, :, 20:] = 7.0
    c2 = flash_attention(q, k3, v3, causal=True, _config=SMALL)
    torch.testing.assert_close(c2[:, :, :20], c1[:, :, :20])
    assert not torch.allclose(c2[:, :, 20:], c1[:, :, 20:])


@pytest.mark.parametrize("device", DEVICES)
def test_all_keys_masked_gives_zero(device):
    _skip_unless_runnable(device)
    q, k, v = _inputs(device, torch.float32, 2, 2, 2, 18, 18, 16, seed=5)
    kpm = torch.zeros(2, 18, dtype=torch.bool, device=device)
    kpm[1] = True  # batch 1 has no valid key
    o = _check(q, k, v, torch.float32, SMALL, key_padding_mask=kpm)
    assert (o[1] == 0).all() and torch.isfinite(o).all()


@pytest.mark.parametrize("device", DEVICES)
def test_saved_lse(device):
    """The forward's saved statistic is the natural-log log-sum-exp of the scaled scores (+inf for
    a row with no visible key)."""
    _skip_unless_runnable(device)
    q, k, v = _inputs(device, torch.float32, 1, 2, 2, 19, 19, 32, seed=6)
    cfg = {**attention_launch_config(32, q.dtype, q.device), **SMALL}
    _, lse = _flash_forward(q, k, v, None, True, 0.25, cfg)
    s = (q @ k.transpose(-1, -2)) * 0.25
    s = s.masked_fill(torch.ones(19, 19, dtype=torch.bool, device=device).triu(1), float("-inf"))
    torch.testing.assert_close(lse, torch.logsumexp(s, -1), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_module(device):
    _skip_unless_runnable(device)
    q, k, v = _inputs(device, torch.float32, 1, 2, 1, 16, 16, 16, seed=7)
    torch.testing.assert_close(K.FlashAttention(causal=True)(q, k, v), reference_attention(q, k, v, causal=True),
                               atol=1e-5, rtol=1e-4)


def test_bad_arguments_name_the_argument():
    q, k, v = _inputs("cpu", torch.float32, 1, 4, 2, 8, 8, 16)
    with pytest.raises(ValueError, match="head_dim"):
        flash_attention(*_inputs("cpu", torch.float32, 1, 2, 2, 8, 8, 48))
    with pytest.raises(ValueError, match="causal"):
        flash_attention(q, k[:, :, :5], v[:, :, :5], causal=True)
    with pytest.raises(ValueError, match="multiple of k/v heads"):
        flash_attention(q, k[:, :1].repeat(1, 3, 1, 1), v[:, :1].repeat(1, 3, 1, 1))
    with pytest.raises(ValueError, match="key_padding_mask"):
        flash_attention(q, k, v, key_padding_mask=torch.zeros(1, 7, dtype=torch.bool))
    with pytest.raises(ValueError, match="key_padding_mask"):
        flash_attention(q, k, v, key_padding_mask=torch.zeros(1, 8))
    with pytest.raises(ValueError, match="dtype"):
        flash_attention(q, k.half(), v)
    with pytest.raises(ValueError, match="scale"):
        flash_attention(q, k, v, scale=-1.0)
    with pytest.raises(ValueError, match="4-D"):
        flash_attention(q[0], k[0], v[0])
    with pytest.raises(ValueError, match="window.*causal=True"):
        flash_attention(q, k, v, window=4)
    with pytest.raises(ValueError, match="window must be a positive integer"):
        flash_attention(q, k, v, causal=True, window=0)


def test_attention_flop_model():
    """The benchmark's TFLOP/s model counts the two forward matmuls over visible (query, key) pairs."""
    from repro.bench.kernels import attention_flops
    b, h, n, d = 2, 3, 10, 16
    assert attention_flops(b, h, n, n, d, False, "fwd") == 2 * (2 * b * h * n * n * d)  # QK^T and PV
    assert attention_flops(b, h, n, n, d, True, "fwd") == 4 * b * h * (n * (n + 1) / 2) * d
    assert attention_flops(b, h, n, n, d, False, "fwd_bwd") == 3.5 * attention_flops(b, h, n, n, d, False, "fwd")


@pytest.mark.cuda
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_gpu_sizes_default_tiles(causal, head_dim):
    """Benchmark-like sizes with the GPU launch configuration (128x64 forward tiles, 32x128 / 128x32
    backward tiles): many tiles per row, a tail (1000 is not a multiple of 64 or 128), the causal
    split on the diagonal. Too slow for the interpreter, so CUDA only."""
    _skip_unless_runnable("cuda")
    q, k, v = _inputs("cuda", torch.bfloat16, 2, 4, 4, 1000, 1000, head_dim, seed=8)
    _check(q, k, v, torch.bfloat16, None, causal=causal)


@pytest.mark.cuda
@pytest.mark.parametrize("window", [1, 300])
def test_gpu_window_default_tiles(window):
    """The sliding window with the GPU tiles (128x64 forward, 32x128 / 128x32 backward): band edges inside
    and across tiles, a tail (1000). CUDA only (the interpreter covers the same code at small tiles)."""
    _skip_unless_runnable("cuda")
    q, k, v = _inputs("cuda", torch.bfloat16, 2, 4, 2, 1000, 1000, 128, seed=9)
    _check(q, k, v, torch.bfloat16, None, causal=True, window=window)


def test_kernels_compile_for_hopper():
    """Ahead-of-time compile (PTX + cubin via Triton's bundled ptxas, no GPU needed) of the Hopper
    launch configuration: catches GPU-only compile errors the interpreter cannot see."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import triton
    if not (Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas").exists():
        pytest.skip("triton's bundled ptxas is not installed")
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "TRITON_INTERPRET": "0", "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run([sys.executable, "-m", "repro.kernels.aot_check", "--quick", "--match",
                           "attn_(fwd|dq) D=128 bfloat16 causal=(True|window)|norm_bwd ln N=11008"],
                          env=env, cwd=root, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "0 failure(s)" in proc.stdout, proc.stdout + proc.stderr
    assert proc.stdout.count("ok  ") == 5, proc.stdout
