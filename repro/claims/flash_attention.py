"""C7 flash_attention: IO-aware exact attention (Dao et al., NeurIPS 2022, arXiv 2205.14135).

Standard (materialised) attention, the ``math`` backend of the shared block, against PyTorch SDPA (a fused kernel:
FlashAttention / memory-efficient on CUDA, a flash-style CPU kernel on CPU) and the suite's Triton FlashAttention
kernel (``triton``; GPU only, recorded as skipped on CPU where Triton runs under its interpreter).

- Kernel sweep (repro.bench.kernels.run_attention_sweep; providers interleaved per case): time and peak memory vs
  sequence length N, forward / backward / forward+backward, causal and not, at a fixed batch so memory is
  comparable across N; the fitted log-log exponent of peak memory in N (about 2 for the materialised N x N scores,
  about 1 for the fused kernels: "memory linear in N", Sec. 3 and Appendix E.6).
- Table 21 (Appendix E.6: fwd+bwd, 8 heads, d 64, batch 16; MB): 1K 209 vs 1184, 4K 836 vs 17024, PyTorch out of
  memory beyond. Measured: peak memory including q, k, v and dO, per backend and N; the published values are
  attached where the configured shape is the paper's.
- Fig 2 (GPT-2-medium attention, N 1024, d 64, 16 heads, batch 64, A100): fwd+bwd 41.7 -> 7.3 ms and HBM traffic
  40.3 -> 4.4 GB. Measured: the fwd+bwd time of each backend at that shape (batch from config); HBM traffic needs a
  hardware profiler (Nsight Compute) and is recorded as not measured, with the reason.
- End to end: a training step of a GPT-2-small-shaped DecoderLM (12 layers, d 768, 12 heads, N 1024 on GPU; a
  smaller one on CPU) with each attention backend, interleaved; step time and peak memory.
"""
from __future__ import annotations

import logging
from pathlib import Path

import repro

repro.openmp_default_wait()  # before torch loads OpenMP: this claim times work alone on the idle machine

import torch  # noqa: E402 (after the OpenMP wait is chosen)
import torch.nn.functional as F

from repro.bench import kernels, timing
from repro.bench.memory import peak_memory
from repro.bench.timing import paired_ratios, summarize, time_interleaved
from repro.config import resolve_device
from repro.io import metric
from repro.model import BlockConfig, DecoderLM, ModelConfig
from repro.model.attention import attention_core
from repro.stats import loglog_slope
from repro.rows import Rows
from repro.vocabulary.flash_attention import CLAIM

log = logging.getLogger("repro.flash_attention")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
TABLE21 = {1024: ("memory_1k_flash", "memory_1k_pytorch"), 4096: ("memory_4k_flash", "memory_4k_pytorch"),
           65536: ("memory_64k_flash", None)}
PAPER_TABLE21_SHAPE = dict(batch=16, heads=8, head_dim=64)


def _skip_reason(backend: str, device) -> str | None:
    if backend == "triton" and device.type != "cuda":
        return kernels.INTERPRETER_REASON
    return None


# ----------------------------------------------------------------------------------------------- kernel sweep
def kernel_sweep(p: dict, device, out: Path) -> list[dict]:
    sweep = {**p["sweep"], "device": device.type}
    krows = kernels.run_attention_sweep(sweep, log=log.info)
    kernels.write_csv(krows, out / "kernels_attention.csv")
    rows = []
    for r in krows:
        common = dict(provider=r["provider"], seq_len=r["seq_len"], causal=r["causal"], batch=r["batch"],
                      heads=r["heads"], head_dim=r["head_dim"], dtype=r["dtype"], **{"pass": r["pass"]})
        if r["status"] == "ok":
            rows.append(metric(CLAIM, "attn_time", r["median_ms"] / 1e3, "s", spread=r["iqr_ms"] / 1e3, n=r["n"], **common))
            rows.append(metric(CLAIM, "attn_tflops", r["tflops"], "TFLOP/s", **common))
            if r.get("peak_mb") is not None:
                rows.append(metric(CLAIM, "attn_peak_memory", r["peak_mb"], "MiB", **common))
            if r.get("ratio_to_baseline") is not None and r["provider"] != "sdpa":
                rows.append(metric(CLAIM, "attn_time_ratio_to_sdpa", r["ratio_to_baseline"], "ratio", kind="ratio_time",
                                   **common))
        else:
            rows.append(metric(CLAIM, "attn_time", None, "s", status=r["status"], reason=r["reason"], **common))
    # fitted exponent of peak memory in N, per provider / pass / causal
    groups = {}
    for r in Rows(rows).metric("attn_peak_memory"):
        if r["value"] and r["value"] > 0:
            s = r["sweep"]
            groups.setdefault((s["provider"], s["pass"], s["causal"]), []).append((s["seq_len"], r["value"]))
    for (provider, pass_, causal), pts in sorted(groups.items(), key=str):
        if len({n for n, _ in pts}) >= 2:
            slope = loglog_slope([n for n, _ in pts], [v for _, v in pts])
            rows.append(metric(CLAIM, "memory_exponent_in_n", slope, "exponent of N", provider=provider, causal=causal,
                               **{"pass": pass_}))
            log.info("peak memory ~ N^%.2f for %s %s causal=%s", slope, provider, pass_, causal)
    return rows


# ----------------------------------------------------------------------------------------------- Table 21 / Fig 2
def _qkv(b, h, n, d, dtype, device, seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    return [torch.randn(b, h, n, d, generator=g).to(device=device, dtype=dtype).requires_grad_(i < 3) for i in range(4)]


def _fwd_bwd(backend, q, k, v, do, causal):
    o = attention_core(q, k, v, backend=backend, causal=causal)
    torch.autograd.grad(o, (q, k, v), do)


def table21(p: dict, device) -> list[dict]:
    """Peak memory of one fwd+bwd per backend (inputs q, k, v, dO added, as the paper's totals include them)."""
    t = p["table21"]
    dtype, rows = DTYPES[t["dtype"]], []
    paper_shape = all(t[k] == v for k, v in PAPER_TABLE21_SHAPE.items())
    for n in t["seq_lens"]:
        for backend in t["backends"]:
            common = dict(backend=backend, seq_len=n, batch=t["batch"], heads=t["heads"], head_dim=t["head_dim"],
                          dtype=t["dtype"], causal=False)
            reason = _skip_reason(backend, device)
            if backend == "math" and n > t["math_max_seq_len"]:
                reason = (f"standard attention beyond table21.math_max_seq_len={t['math_max_seq_len']} "
                          "(its N x N scores do not fit; the paper's PyTorch baseline runs out of memory beyond 4K)")
            if reason:
                rows.append(metric(CLAIM, "table21_peak_memory", None, "MB", status="skipped", reason=reason, **common))
                continue
            try:
                q, k, v, do = _qkv(t["batch"], t["heads"], n, t["head_dim"], dtype, device)
                inputs = 4 * q.numel() * q.element_size()
                peak = peak_memory(lambda: _fwd_bwd(backend, q, k, v, do, False), device)
            except (torch.cuda.OutOfMemoryError, RuntimeError) as e:  # recorded, not fatal
                rows.append(metric(CLAIM, "table21_peak_memory", None, "MB", status="oom",
                                   reason=str(e).splitlines()[0][:200], **common))
                log.info("table21 %s N=%d: %s", backend, n, str(e).splitlines()[0][:120])
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                continue
            total_mb = (peak + inputs) / 1e6
            keys = TABLE21.get(n, (None, None))
            key = (keys[1] if backend == "math" else keys[0]) if paper_shape else None
            rows.append(metric(CLAIM, "table21_peak_memory", total_mb, "MB", published_key=key, **common))
            log.info("table21 %s N=%d: %.1f MB (fwd+bwd peak incl. q, k, v, dO)", backend, n, total_mb)
            del q, k, v, do
            if device.type == "cuda":
                torch.cuda.empty_cache()
    by = {(r["sweep"]["backend"], r["sweep"]["seq_len"]): r["value"] for r in rows if r["value"]}
    for n in t["seq_lens"]:
        for fused in ("sdpa", "triton"):
            if by.get(("math", n)) and by.get((fused, n)):
                rows.append(metric(CLAIM, "table21_memory_ratio_math_over_fused", by[("math", n)] / by[(fused, n)], "x",
                                   kind="ratio_memory", backend=fused, seq_len=n, batch=t["batch"], heads=t["heads"]))
    return rows


def fig2(p: dict, device) -> list[dict]:
    """GPT-2-medium attention shape, fwd+bwd time per backend (interleaved); HBM traffic not measurable here."""
    f = p["fig2"]
    dtype = DTYPES[f["dtype"]]
    q, k, v, do = _qkv(f["batch"], f["heads"], f["seq_len"], f["head_dim"], dtype, device)
    common = dict(seq_len=f["seq_len"], batch=f["batch"], heads=f["heads"], head_dim=f["head_dim"], dtype=f["dtype"])
    fns, rows = {}, []
    for backend in f["backends"]:
        reason = _skip_reason(backend, device)
        if reason:
            rows.append(metric(CLAIM, "fig2_time_fwd_bwd", None, "ms", backend=backend, status="skipped", reason=reason,
                               **common))
            continue
        fns[backend] = (lambda b=backend: _fwd_bwd(b, q, k, v, do, f["causal"]))
    samples = time_interleaved(fns, reps=f["reps"], warmup=f["warmup"], device=device)
    for backend, sm in samples.items():
        s = summarize(sm)
        rows.append(metric(CLAIM, "fig2_time_fwd_bwd", 1e3 * s["median"], "ms", spread=1e3 * s["iqr"], n=s["n"],
                           backend=backend, **common))
        log.info("fig2 shape %s: %.2f ms fwd+bwd", backend, 1e3 * s["median"])
    for fused in ("sdpa", "triton"):
        if "math" in samples and fused in samples:
            r = paired_ratios(samples, "math", fused, confidence=f["confidence"])
            rows.append(metric(CLAIM, "fig2_speedup_over_math", r["median"], "x", spread=r["iqr"], n=r["n"],
                               kind="ratio_time", backend=fused, **timing.ci_fields(r, f["confidence"]), **common))
    rows.append(metric(CLAIM, "fig2_hbm_traffic", None, "GB", backend="all", status="not_measured",
                       reason="HBM traffic needs a hardware counter profiler (Nsight Compute); not collected",
                       **common))
    return rows


# ----------------------------------------------------------------------------------------------- end to end
def end_to_end(p: dict, device) -> list[dict]:
    m = p["model"]
    dtype = DTYPES[m["dtype"]]
    g = torch.Generator(device="cpu").manual_seed(p["seed"])
    tokens = torch.randint(1, m["vocab"], (m["batch"], m["seq_len"] + 1), generator=g).to(device)
    fns, rows = {}, []
    common = dict(layers=m["layers"], d_model=m["d_model"], heads=m["n_heads"], seq_len=m["seq_len"],
                  batch=m["batch"], dtype=m["dtype"])
    for backend in m["backends"]:
        reason = _skip_reason(backend, device)
        if reason:
            rows.append(metric(CLAIM, "train_step_time", None, "s", backend=backend, status="skipped", reason=reason,
                               **common))
            continue
        torch.manual_seed(p["seed"])
        cfg = ModelConfig(block=BlockConfig(d_model=m["d_model"], n_heads=m["n_heads"], d_ff=4 * m["d_model"],
                                            ffn="gelu", attention=backend),
                          vocab_size=m["vocab"], n_decoder_layers=m["layers"], max_seq_len=m["seq_len"],
                          positional="learned")
        model = DecoderLM(cfg).to(device=device, dtype=dtype).train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step(model=model, opt=opt):
            loss = F.cross_entropy(model(tokens[:, :-1]).float().flatten(0, 1), tokens[:, 1:].flatten())
            opt.zero_grad(set_to_none=False)
            loss.backward()
            opt.step()

        step()  # optimizer state allocated before memory is measured
        peak = peak_memory(step, device)
        rows.append(metric(CLAIM, "train_step_peak_memory", peak / 2**20, "MiB", backend=backend, **common))
        fns[backend] = step
    samples = time_interleaved(fns, reps=m["reps"], warmup=m["warmup"], device=device, min_time=m["min_time_s"],
                           label="training step timing")
    for backend, sm in samples.items():
        s = summarize(sm)
        rows.append(metric(CLAIM, "train_step_time", s["median"], "s", spread=s["iqr"], n=s["n"], backend=backend,
                           **common))
        log.info("train step %s: %.1f ms (IQR %.1f)", backend, 1e3 * s["median"], 1e3 * s["iqr"])
    for fused in ("sdpa", "triton"):
        if "math" in samples and fused in samples:
            r = paired_ratios(samples, "math", fused, confidence=m["confidence"])
            rows.append(metric(CLAIM, "train_step_speedup_over_math", r["median"], "x", spread=r["iqr"], n=r["n"],
                               kind="ratio_time", backend=fused, **timing.ci_fields(r, m["confidence"]), **common))
            log.info("train step speed-up of %s over math: %.2fx", fused, r["median"])
    return rows


def run(params: dict, scale: str, out) -> tuple[list[dict], dict]:
    """Kernel sweep (time, memory vs N), Table 21 memory, Fig 2 shape timing and an end-to-end training step."""
    timing.flush_subnormals()  # first, before torch starts its threads (repro/bench/timing.py)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    device = resolve_device(params["device"], "flash_attention.device")
    torch.manual_seed(params["seed"])
    log.info("device %s: kernel sweep, Table 21, Fig 2 shape, end-to-end step", device)
    rows = kernel_sweep(params, device, out)
    rows += table21(params, device)
    rows += fig2(params, device)
    rows += end_to_end(params, device)
    return rows, {"device": str(device), "load": timing.load_summary()}


if __name__ == "__main__":
    from repro.claims._cli import main

    raise SystemExit(main(CLAIM, run))
