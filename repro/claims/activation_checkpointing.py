"""C8 activation_checkpointing: activation memory traded for recomputation.

Reproduces, on the shared block (repro.model; the Encoder's BlockStack with ``ModelConfig.checkpoint``):

- Chen et al. 2016 (arXiv 1604.06174, Sec. 4, Fig. 7): with sqrt(n) segments the activation memory grows as
  O(sqrt n) in depth n for about one extra forward pass (~30% more time). Measured: the peak bytes allocated
  during forward+backward vs depth for the policies none / full / every_k / sqrt / selective, the log-log slope
  (about 1 without checkpointing, about 0.5 with sqrt(n) segments), and the time overhead of each policy
  (interleaved, median of paired ratios) beside the one-extra-forward prediction t_fwd / t_fwd+bwd.
- Korthikanti et al. 2023 (arXiv 2205.05198, Eq. 1, Table 2, Table 4): a layer keeps sbh(34 + 5as/h) bytes
  (attention 11sbh + 5as^2b, MLP 19sbh, the two norms 4sbh; 16-bit activations, 1-byte dropout masks); full
  recomputation keeps 2sbh, selective recomputation of the attention core keeps 34sbh. Measured: every tensor
  autograd saves (storage-deduplicated, parameters excluded), attributed to norms / attention / MLP by the module
  running when it was saved and to the sbh or the as^2b term by its shape; converted to the paper's convention
  (2 bytes per float element, 1 byte per dropout-mask element) and also reported as stored. Term-by-term for
  the math backend (the materialised scores that give 5as^2b) and SDPA (no as^2b term), fp32 and bf16,
  dropout on and off. Time overheads beside Table 4 (full +39%, selective +7%).
"""
from __future__ import annotations

import logging
from pathlib import Path

import repro

repro.openmp_default_wait()  # before torch loads OpenMP: this claim times work alone on the idle machine

import torch  # noqa: E402 (after the OpenMP wait is chosen)

from repro.bench import timing
from repro.bench.memory import peak_memory
from repro.bench.timing import paired_ratios, summarize, time_interleaved
from repro.config import resolve_device
from repro.io import atomic_write_json, metric
from repro.model import BlockConfig, EncoderModel, ModelConfig
from repro.stats import loglog_slope
from repro.rows import Rows
from repro.vocabulary.activation_checkpointing import CLAIM

log = logging.getLogger("repro.activation_checkpointing")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
SECTIONS = {"norms": "norms", "attention": "attention", "ffn": "mlp"}  # module slot -> Korthikanti's term


def build_stack(block: dict, depth: int, policy: str, every: int, dtype: torch.dtype, device, **overrides):
    """The shared Encoder's BlockStack with a checkpoint policy (ModelConfig.checkpoint / checkpoint_every)."""
    cfg = ModelConfig(block=BlockConfig.from_dict({**block, **overrides}, prefix="activation_checkpointing.block."),
                      n_encoder_layers=depth, checkpoint=policy, checkpoint_every=every, vocab_size=8,
                      max_seq_len=8, pad_id=0)
    with torch.device(device):  # initialised where it runs: a GPT-3-width stack is slow to build on the host
        stack = EncoderModel(cfg).encoder.layers.to(dtype=dtype).train()
    for p in stack.parameters():  # gradients exist before measuring, so backward only accumulates into them
        p.grad = torch.zeros_like(p)
    return stack


def _inputs(b, s, h, dtype, device, seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    x0 = torch.randn(b, s, h, generator=g).to(device=device, dtype=dtype).requires_grad_(True)
    dy = torch.randn(b, s, h, generator=g).to(device=device, dtype=dtype)
    return x0, dy


# ----------------------------------------------------------------------------------------------- saved tensors
def _is_mask(t: torch.Tensor, probs: list[float]) -> bool:
    """A dropout mask: bool (CUDA native_dropout) or a float tensor holding only 0 and 1/(1-p) (CPU dropout)."""
    if t.dtype == torch.bool:
        return True
    if not t.is_floating_point() or not probs or t.numel() == 0:
        return False
    for p in probs:
        scale = torch.tensor(1.0 / (1.0 - p), dtype=t.dtype, device=t.device)
        if bool(((t == 0) | (t == scale)).all()):
            return True
    return False


def saved_terms(stack, x0: torch.Tensor, seq: int, dropout_probs: list[float]) -> list[dict]:
    """Every storage autograd saves during one forward of ``stack`` (parameters excluded, each storage once).

    Each entry: section (norms / attention / mlp / stack: the module running when it was saved; the block's
    residual dropout counts with the sublayer it follows), kind (score: a (.., s, s) tensor, the as^2b term;
    sbh otherwise), mask (a dropout mask), stored bytes, and bytes in the paper's convention (2 per float
    element, 1 per mask element)."""
    params = {p.untyped_storage().data_ptr() for p in stack.parameters()}
    stackl, last, seen, handles = [], ["stack"], {}, []

    def pre(label):
        def hook(mod, args):
            stackl.append(label)
            if label in ("attention", "mlp"):
                last[0] = label
        return hook

    def post(mod, args, out):
        stackl.pop()

    for m in stack.modules():
        label = SECTIONS.get(getattr(m, "slot", None))
        if label:
            handles += [m.register_forward_pre_hook(pre(label)), m.register_forward_hook(post)]

    def pack(t: torch.Tensor):
        st = t.untyped_storage()
        key = (st.data_ptr(), st.nbytes())
        if st.data_ptr() not in params and key not in seen:
            numel = st.nbytes() // t.element_size()
            mask = _is_mask(t, dropout_probs)
            score = t.dim() >= 2 and t.shape[-1] == seq and t.shape[-2] == seq
            section = stackl[-1] if stackl else last[0]
            seen[key] = dict(section=section, kind="score" if score else "sbh", mask=mask, dtype=str(t.dtype),
                             stored_bytes=st.nbytes(), bytes16=numel * (1 if mask else 2))
        return t.detach()  # the tensor itself would tie a saved output to its own graph node: a cycle gc never sees

    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = stack(x0 * 1.0)
    finally:
        for h in handles:
            h.remove()
    del out
    return list(seen.values())


def term_coefficients(entries: list[dict], b: int, s: int, h: int, a: int, depth: int = 1) -> dict:
    """Per-layer coefficients: bytes / sbh for the sbh terms, bytes / (a s^2 b) for the score term."""
    sbh, as2b = s * b * h * depth, a * s * s * b * depth
    out = {}
    for e in entries:
        for sec in (e["section"], "total"):
            k = (sec, e["kind"])
            d = out.setdefault(k, {"bytes16": 0, "stored": 0, "mask16": 0})
            d["bytes16"] += e["bytes16"]
            d["stored"] += e["stored_bytes"]
            d["mask16"] += e["bytes16"] if e["mask"] else 0
    return {k: {"coeff16": v["bytes16"] / (sbh if k[1] == "sbh" else as2b),
                "coeff_stored": v["stored"] / (sbh if k[1] == "sbh" else as2b),
                "mask_coeff16": v["mask16"] / (sbh if k[1] == "sbh" else as2b)} for k, v in out.items()}


PUBLISHED_TERMS = {("attention", "sbh"): "korthikanti_attention_sbh_coeff", ("mlp", "sbh"): "korthikanti_mlp_sbh_coeff",
                   ("norms", "sbh"): "korthikanti_norm_sbh_coeff", ("total", "sbh"): "korthikanti_total_sbh_coeff",
                   ("total", "score"): "korthikanti_score_coeff"}
PUBLISHED_POLICY = {"full": "korthikanti_full_recompute_sbh_coeff", "selective": "korthikanti_selective_sbh_coeff"}


def measure_terms(p: dict, device) -> list[dict]:
    """Term-by-term per-layer saved bytes vs Korthikanti Eq. 1, per backend, dtype, dropout, policy."""
    t, blk = p["terms"], p["block"]
    b, s, h, a = t["batch"], t["seq_len"], blk["d_model"], blk["n_heads"]
    head_dim = blk.get("head_dim") or h // a
    if s == head_dim:
        raise ValueError(f"activation_checkpointing.terms.seq_len: {s} equals the head dimension {head_dim}; score "
                         "tensors (.., s, s) must be distinguishable from per-head activations (.., s, d)")
    rows = []
    for backend in t["backends"]:
        for dname in t["dtypes"]:
            for drop in t["dropout"]:
                for policy in t["policies"]:
                    # the formula's setting: residual and attention dropout p (Megatron); SDPA takes no attention
                    # dropout on CPU here (FlashAttention regenerates its mask in-kernel instead of storing it)
                    attn_drop = drop if backend == "math" else 0.0
                    stack = build_stack(blk, 1, policy, 1, DTYPES[dname], device, attention=backend,
                                        dropout=drop, attn_dropout=attn_drop)
                    x0, _ = _inputs(b, s, h, DTYPES[dname], device)
                    entries = saved_terms(stack, x0, s, [q for q in (drop, attn_drop) if q > 0])
                    coeffs = term_coefficients(entries, b, s, h, a)
                    formula = (backend == "math" and dname == "float32" and drop > 0)
                    for (sec, kind), c in sorted(coeffs.items()):
                        key = None
                        if formula and policy == "none":
                            key = PUBLISHED_TERMS.get((sec, kind))
                        elif formula and sec == "total" and kind == "sbh":
                            key = PUBLISHED_POLICY.get(policy)
                        common = dict(backend=backend, dtype=dname, dropout=drop, policy=policy, section=sec,
                                      kind=kind, batch=b, seq_len=s, hidden=h, heads=a)
                        unit = "x sbh bytes" if kind == "sbh" else "x as^2b bytes"
                        rows.append(metric(CLAIM, "saved_coeff_16bit", c["coeff16"], unit, published_key=key, sweep=common))
                        rows.append(metric(CLAIM, "saved_coeff_stored", c["coeff_stored"], unit, sweep=common))
                        rows.append(metric(CLAIM, "mask_coeff_16bit", c["mask_coeff16"], unit, sweep=common))
                    tot = coeffs.get(("total", "sbh"), {}).get("coeff16", 0.0)
                    sc = coeffs.get(("total", "score"), {}).get("coeff16", 0.0)
                    log.info("terms %s %s dropout=%g policy=%s: %.3f sbh + %.3f as^2b (16-bit convention); "
                             "formula 34 sbh + 5 as^2b", backend, dname, drop, policy, tot, sc)
                    del stack
    return rows


# ----------------------------------------------------------------------------------------------- memory sweeps
def retained_bytes(stack, x0) -> int:
    """Bytes the forward keeps for backward: saved storages (parameters excluded), checkpoint inputs included."""
    params = {p.untyped_storage().data_ptr() for p in stack.parameters()}
    seen = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in params:
            seen[(st.data_ptr(), st.nbytes())] = st.nbytes()
        return t.detach()  # returning t kept every stack's graph (and parameters) alive: OOM at paper depth 64

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = stack(x0 * 1.0)
    del out
    return sum(seen.values())


def fwd_bwd_peak(stack, x0, dy, device) -> int:
    """Peak bytes allocated above the starting level during forward+backward (parameters and their gradient
    buffers exist beforehand, so this is activations, recomputation and transient gradients)."""
    x0.grad = None

    def step():
        stack(x0 * 1.0).backward(dy)

    if torch.device(device).type == "cuda":
        step()  # warm-up: cuBLAS workspaces and other lazily allocated buffers
        x0.grad = None
    return peak_memory(step, device)


def measure_sweeps(p: dict, device) -> list[dict]:
    rows, blk = [], p["block"]
    for sweep, var in (("depth_sweep", "depth"), ("seq_sweep", "seq_len")):
        sw = p[sweep]
        dtype = DTYPES[sw["dtype"]]
        values = sw["depths"] if var == "depth" else sw["seq_lens"]
        for backend in sw["backends"]:
            for policy in sw["policies"]:
                for v in values:
                    depth = v if var == "depth" else sw["depth"]
                    s = v if var == "seq_len" else sw["seq_len"]
                    stack = build_stack(blk, depth, policy, p["checkpoint_every"], dtype, device, attention=backend)
                    x0, dy = _inputs(sw["batch"], s, blk["d_model"], dtype, device)
                    kept = retained_bytes(stack, x0)
                    peak = fwd_bwd_peak(stack, x0, dy, device)
                    common = dict(axis=var, backend=backend, policy=policy, depth=depth, seq_len=s,
                                  batch=sw["batch"], hidden=blk["d_model"], heads=blk["n_heads"], dtype=sw["dtype"],
                                  segment=stack.segment_length())
                    rows.append(metric(CLAIM, "retained_bytes_after_forward", kept, "bytes", **common))
                    rows.append(metric(CLAIM, "peak_bytes_fwd_bwd", peak, "bytes", **common))
                    log.info("%s %s policy=%s depth=%d seq=%d: kept %.2f MiB after forward, peak %.2f MiB in "
                             "fwd+bwd", var, backend, policy, depth, s, kept / 2**20, peak / 2**20)
                    del stack, x0, dy
                for m in ("peak_bytes_fwd_bwd", "retained_bytes_after_forward"):
                    pts = [(r["sweep"][var], r["value"]) for r in Rows(rows).metric(m).where(
                        axis=var, policy=policy, backend=backend).filter(lambda r: r["value"] > 0)]
                    if len(pts) >= 2:
                        slope = loglog_slope([x for x, _ in pts], [y for _, y in pts])
                        key = "chen_memory_exponent" if (var == "depth" and policy == "sqrt"
                                                         and m == "peak_bytes_fwd_bwd") else None
                        rows.append(metric(CLAIM, f"loglog_slope_{m}", slope, f"exponent of {var}", published_key=key,
                                           axis=var, backend=backend, policy=policy))
                        log.info("slope of %s vs %s (%s, %s): %.3f", m, var, backend, policy, slope)
    return rows


def memory_reduction(rows: list[dict]) -> list[dict]:
    """Peak fwd+bwd memory of no checkpointing over each policy at the deepest depth measured (Chen et al.:
    48G -> 7G, 6.9x, for a 1000-layer ResNet)."""
    peaks = {(r["sweep"]["backend"], r["sweep"]["policy"], r["sweep"]["depth"]): r["value"]
             for r in Rows(rows).metric("peak_bytes_fwd_bwd").where(axis="depth")}
    out = []
    for (backend, policy, depth), v in peaks.items():
        deepest = max(d for b, _, d in peaks if b == backend)
        base = peaks.get((backend, "none", depth))
        if depth == deepest and policy != "none" and base and v:
            out.append(metric(CLAIM, "peak_reduction_vs_none", base / v, "x", kind="ratio_memory", axis="depth", backend=backend,
                              policy=policy, depth=depth))
            log.info("peak memory at depth %d: none / %s = %.2fx", depth, policy, base / v)
    return out


# ----------------------------------------------------------------------------------------------- time
def measure_time(p: dict, device) -> list[dict]:
    """fwd+bwd time of each policy, interleaved in one process; overhead = median paired ratio to none - 1."""
    tm, blk = p["timing"], p["block"]
    dtype = DTYPES[tm["dtype"]]
    x0, dy = _inputs(tm["batch"], tm["seq_len"], blk["d_model"], dtype, device)
    stacks = {pol: build_stack(blk, tm["depth"], pol, p["checkpoint_every"], dtype, device, attention=tm["backend"])
              for pol in tm["policies"]}
    base = stacks["none"]
    for pol, st in stacks.items():  # identical weights, so every policy does the same arithmetic
        st.load_state_dict(base.state_dict())

    def fwd_bwd(st):
        return lambda: st(x0 * 1.0).backward(dy)

    fns = {pol: fwd_bwd(st) for pol, st in stacks.items()}
    fns["forward_only"] = lambda: base(x0 * 1.0)  # with autograd recording, as a recomputation runs
    samples = time_interleaved(fns, reps=tm["reps"], warmup=tm["warmup"], device=device, min_time=tm["min_time_s"],
                           label="policy timing")
    rows = []
    common = dict(depth=tm["depth"], seq_len=tm["seq_len"], batch=tm["batch"], backend=tm["backend"], dtype=tm["dtype"])
    for name, sm in samples.items():
        s = summarize(sm)
        rows.append(metric(CLAIM, "time_fwd_bwd" if name != "forward_only" else "time_forward", s["median"], "s",
                           spread=s["iqr"], n=s["n"], policy=name, **common))
    conf = tm["confidence"]
    pred = paired_ratios(samples, "forward_only", "none", confidence=conf)
    rows.append(metric(CLAIM, "predicted_overhead_one_forward", 100 * pred["median"], "percent", spread=100 * pred["iqr"],
                       n=pred["n"], kind="ratio_time", published_key="chen_extra_time",
                       **timing.ci_fields(pred, conf, 100), **common))
    keys = {"full": "korthikanti_full_recompute_overhead", "selective": "korthikanti_selective_overhead"}
    for pol in stacks:
        if pol == "none":
            continue
        r = paired_ratios(samples, pol, "none", confidence=conf)
        rows.append(metric(CLAIM, "time_overhead", 100 * (r["median"] - 1), "percent", spread=100 * r["iqr"], n=r["n"],
                           kind="ratio_time",
                           published_key=keys.get(pol), policy=pol, **timing.ci_fields(r, conf, 100), **common))
        log.info("time overhead %s: %+.1f%% (IQR %.1f%%, n=%d); one extra forward predicts %+.1f%%", pol,
                 100 * (r["median"] - 1), 100 * r["iqr"], r["n"], 100 * pred["median"])
    return rows


def run(params: dict, scale: str, out) -> tuple[list[dict], dict]:
    """Saved-activation bytes term by term, memory vs depth and sequence length, and time per policy."""
    timing.flush_subnormals()  # first, before torch starts its threads (repro/bench/timing.py)
    device = resolve_device(params["device"], "activation_checkpointing.device")
    torch.manual_seed(params["seed"])
    log.info("device %s; terms, then memory sweeps, then timing", device)
    rows = measure_terms(params, device)
    rows += measure_sweeps(params, device)
    rows += memory_reduction(rows)
    rows += measure_time(params, device)
    atomic_write_json(Path(out) / "slopes.json", {f"{r['sweep'].get('axis')}/{r['sweep']['backend']}/"
                                                  f"{r['sweep']['policy']}/{r['metric']}": r["value"]
                                                  for r in Rows(rows).filter(
                                                      lambda r: r["metric"].startswith("loglog_slope"))})
    return rows, {"device": str(device), "load": timing.load_summary()}


if __name__ == "__main__":
    from repro.claims._cli import main

    raise SystemExit(main(CLAIM, run))
