"""C4 rmsnorm_speed: RMSNorm vs LayerNorm running time.

Reproduces Zhang & Sennrich 2019 (NeurIPS, arXiv 1910.07467): replacing LayerNorm by RMSNorm "reduces the running
time by 7%~64%" (Table 4: Transformer-base 248 -> 231 s/1k steps, 6.9%; Tables 2-3, 6, 8, 10 for the other models),
reported as the paper does: % running-time reduction = 100 (1 - t_RMS / t_LN). Also ScaleNorm (Nguyen & Salazar 2019,
arXiv 1910.05895, Sec. 3.2: "around 5% faster" than LayerNorm).

- The op alone: the kernel benchmark's norm sweep (repro.bench.kernels.run_norm_sweep: RMSNorm and LayerNorm
  interleaved per provider, forward and forward+backward, hidden sizes and dtypes from config). Providers: ``torch``
  (F.rms_norm / F.layer_norm), ``eager`` (the hand-written formula of the model's ``norm_impl: manual``,
  repro.model.norms.rms_norm_manual / layer_norm_manual), ``compile`` (torch.compile of it) and ``triton``
  (the suite's fused kernels; recorded as skipped on CPU, where Triton runs only under its interpreter).
- The whole model: the training-step time (forward, backward, Adam step) of the shared DecoderLM with
  norm = layernorm / rmsnorm / scalenorm for each ``norm_impl`` (torch, manual, triton), all variants interleaved
  round by round in one process; the reduction is the median of the per-round paired ratios.
- A verdict per implementation: does RMSNorm run faster than LayerNorm, at the op (median over sizes and dtypes of
  the fwd+bwd time ratio) and in the model (paired ratio, beyond its spread)?
"""
from __future__ import annotations

import logging
import statistics
from pathlib import Path

import torch
import torch.nn.functional as F

from repro import registry
from repro.bench import kernels, timing
from repro.bench.timing import paired_ratios, summarize, time_interleaved
from repro.config import resolve_device
from repro.io import metric
from repro.model import BlockConfig, DecoderLM, ModelConfig
from repro.verdicts import Rows, check, numbers, setup_table, verdict_from_checks

CLAIM = "rmsnorm_speed"
log = logging.getLogger("repro.rmsnorm_speed")
PROVIDER_IMPL = {"torch": "torch", "eager": "manual", "compile": "compile", "triton": "triton"}  # op provider -> name
KERNEL_TIME_RATIO = ("rmsnorm_vs_layernorm", "time_ratio")  # (op, metric) of the kernel sweep's paired-ratio rows


# ----------------------------------------------------------------------------------------------- the op
def op_level(p: dict, device, out: Path) -> list[dict]:
    """RMSNorm vs LayerNorm per provider via the kernel benchmark's sweep; raw rows go to out/kernels_norms.csv."""
    sweep = {**p["op_sweep"], "device": device.type}
    if "compile" in sweep.get("providers", ()):
        import torch._inductor.config as inductor_config  # lazy: slow import, only for the compile provider
        inductor_config.compile_threads = p["compile_threads"]  # no compile-worker pool competing with the timing
    krows = kernels.run_norm_sweep(sweep, log=log.info)
    kernels.write_csv(krows, out / "kernels_norms.csv")
    rows = []
    for r in krows:
        common = dict(provider=r["provider"], dtype=r["dtype"], hidden=r["hidden"], rows=r["rows"], **{"pass": r["pass"]})
        if r["op"] in ("rmsnorm", "layernorm"):
            if r["status"] == "ok":
                rows.append(metric(CLAIM, "op_time", r["median_ms"] / 1e3, "s", spread=r["iqr_ms"] / 1e3, n=r["n"],
                                   op=r["op"], **common))
                rows.append(metric(CLAIM, "op_bandwidth", r["gbps"], "GB/s", op=r["op"], **common))
                if r.get("peak_mb") is not None:
                    rows.append(metric(CLAIM, "op_peak_memory", r["peak_mb"], "MiB", op=r["op"], **common))
            else:
                rows.append(metric(CLAIM, "op_time", None, "s", op=r["op"], status=r["status"], reason=r["reason"],
                                   **common))
        elif (r["op"], r["metric"]) == KERNEL_TIME_RATIO:
            rows.append(metric(CLAIM, "op_time_ratio_rms_over_ln", r["value"], "ratio", spread=r.get("value_iqr"),
                               n=r["n"], kind="ratio_time", **common))
            rows.append(metric(CLAIM, "op_time_reduction", 100 * (1 - r["value"]), "percent", n=r["n"],
                               kind="ratio_time", published_key="reduction_range", **common))
    return rows


# ----------------------------------------------------------------------------------------------- the model
def _variants(p: dict, device) -> tuple[dict, dict]:
    """(norm, impl) variants to time; triton variants are skipped off CUDA (the interpreter is not a speed path)."""
    run, skipped = {}, {}
    for impl in p["model_impls"]:
        for norm in p["model_norms"]:
            if norm == "scalenorm" and impl != p["model_impls"][0]:
                continue  # ScaleNorm has one implementation (eager); time it once
            name = f"{norm}/{impl if norm != 'scalenorm' else 'eager'}"
            if impl == "triton" and device.type != "cuda":
                skipped[name] = kernels.INTERPRETER_REASON
                continue
            run[name] = (norm, impl)
    return run, skipped


def model_level(p: dict, device) -> list[dict]:
    m = p["model"]
    variants, skipped = _variants(p, device)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[m["dtype"]]
    g = torch.Generator(device="cpu").manual_seed(p["seed"])
    tokens = torch.randint(1, m["vocab"], (m["batch"], m["seq_len"] + 1), generator=g).to(device)
    fns = {}
    for name, (norm, impl) in variants.items():
        torch.manual_seed(p["seed"])
        cfg = ModelConfig(block=BlockConfig(d_model=m["d_model"], n_heads=m["n_heads"], d_ff=m["d_ff"], norm=norm,
                                            norm_impl=impl if norm != "scalenorm" else "torch", ffn=m["ffn"],
                                            attention=m["attention"]),
                          vocab_size=m["vocab"], n_decoder_layers=m["layers"], max_seq_len=m["seq_len"],
                          positional="learned")
        model = DecoderLM(cfg).to(device=device, dtype=dtype).train()
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)

        def step(model=model, opt=opt):
            logits = model(tokens[:, :-1])
            loss = F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())
            opt.zero_grad(set_to_none=False)
            loss.backward()
            opt.step()

        fns[name] = step
    log.info("model: timing %d variants interleaved (%s); skipped: %s", len(fns), ", ".join(fns), skipped or "none")
    samples = time_interleaved(fns, reps=m["reps"], warmup=m["warmup"], device=device, min_time=m["min_time_s"],
                           label="model step timing")
    common = dict(layers=m["layers"], d_model=m["d_model"], seq_len=m["seq_len"], batch=m["batch"], dtype=m["dtype"])
    rows = []
    for name, sm in samples.items():
        s = summarize(sm)
        norm, impl = name.split("/")
        rows.append(metric(CLAIM, "step_time", s["median"], "s", spread=s["iqr"], n=s["n"], norm=norm, impl=impl,
                           **common))
        log.info("model %s: %.1f ms/step (IQR %.1f ms, n=%d)", name, 1e3 * s["median"], 1e3 * s["iqr"], s["n"])
    for name, reason in skipped.items():
        norm, impl = name.split("/")
        rows.append(metric(CLAIM, "step_time", None, "s", norm=norm, impl=impl, status="skipped", reason=reason,
                           **common))
    for impl in p["model_impls"]:
        pairs = [(f"rmsnorm/{impl}", "rms")] + ([("scalenorm/eager", "scale")] if impl == p["model_impls"][0] else [])
        for name, short in pairs:
            if name in samples and f"layernorm/{impl}" in samples:
                r = paired_ratios(samples, name, f"layernorm/{impl}")
                rows.append(metric(CLAIM, f"step_time_ratio_{short}_over_ln", r["median"], "ratio", spread=r["iqr"],
                                   n=r["n"], kind="ratio_time", impl=impl, **common))
                rows.append(metric(CLAIM, f"step_time_reduction_{short}", 100 * (1 - r["median"]), "percent",
                                   spread=100 * r["iqr"], n=r["n"], kind="ratio_time", impl=impl,
                                   published_key="transformer_reduction" if short == "rms" else None, **common))
                log.info("model %s vs layernorm/%s: %.1f%% running-time reduction (paired ratio %.3f, IQR %.3f)",
                         name, impl, 100 * (1 - r["median"]), r["median"], r["iqr"])
    return rows


# ----------------------------------------------------------------------------------------------- verdict
def judge(rows: list[dict], params: dict, scale: str, load: dict | None = None) -> dict:
    """Zhang & Sennrich's claim on norms written the same way, judged against the registry's running-time
    reduction range (``reduction_range``, 7%~64%; % reduction = 100 (1 - t_RMS / t_LN)).

    HEADLINE: the whole-model training step with both norms written the same way: ``norm_impl=manual`` (the
    hand-written formula) and ``triton`` (the suite's kernels) where measured. Interval: median +- IQR/2 of the
    paired per-round ratios (the row's spread is their IQR), turned into a reduction interval. Holds when the whole
    interval lies above the range's floor (strictly), fails when it lies wholly below it (RMSNorm slower included),
    undecided when it straddles or touches the floor (then the reason names the machine's load when it was busy).
    Secondary: the op alone (fwd+bwd) for the same-framework providers (``eager``, ``compile``, ``triton``), with
    the quartiles over sizes x dtypes as the interval, same rule. Context, not judged: torch's native ops
    (F.layer_norm is a fused kernel, F.rms_norm is not) and ScaleNorm (hand-written) against torch's fused
    LayerNorm. ``ratio_margin`` is not used: the floor is the paper's.
    """
    R, load = Rows(rows), load or {}
    floor, top = registry.published(CLAIM, "reduction_range")["value"]
    expected = f"reduction > {floor:g}% (paper: {floor:g}%~{top:g}% over models and frameworks)"
    by_impl = [*_op_checks(R, floor, expected), *_step_checks(R, floor, top, expected, timing.load_note(load))]
    checks = [c for _, c in by_impl]
    v = verdict_from_checks(CLAIM, checks, scale, setup=setup_table(CLAIM, this_setup(params)), load=load)
    v["per_implementation"] = _per_implementation(R, by_impl, scale)
    return v


NATIVE_WHY = ("for information: torch's native LayerNorm (F.layer_norm) is a fused kernel, RMSNorm (F.rms_norm) "
              "is not; the paper compared both norms written in the same framework")


def _decide(lo_ratio: float, hi_ratio: float, floor: float) -> tuple[bool | None, float, float]:
    """(decision, reduction interval) from a time-ratio interval: holds when the whole reduction interval lies above
    ``floor`` %, strict at the floor (a ratio within 1e-9 of it is a tie), NaN undecided."""
    ceiling, eps = 1 - floor / 100, 1e-9  # the floor as a time ratio
    r_lo, r_hi = 100 * (1 - hi_ratio), 100 * (1 - lo_ratio)
    return (True if hi_ratio < ceiling - eps else False if lo_ratio > ceiling + eps else None), r_lo, r_hi


def _op_checks(R: Rows, floor: float, expected: str) -> list[tuple[str, dict]]:
    """(implementation, check) per op provider: the fwd+bwd time ratio over sizes x dtypes (quartiles)."""
    out = []
    op = R.metric("op_time_ratio_rms_over_ln").where(**{"pass": "fwd_bwd"}).measured().by("provider")
    for provider, ratio_rows in op.items():
        ratios = ratio_rows.values()
        med = statistics.median(ratios)
        lo, hi = statistics.quantiles(ratios, n=4)[0::2] if len(ratios) >= 2 else (med, med)
        passed, r_lo, r_hi = _decide(lo, hi, floor)
        native = provider == "torch"
        c = check(f"op fwd+bwd, {provider}: RMSNorm faster than LayerNorm" + (" (torch native ops)" if native else ""),
                  None if native else passed,
                  f"median rms/ln time ratio {med:.3f} over {len(ratios)} sizes x dtypes (quartiles {lo:.2f}-"
                  f"{hi:.2f}, range {min(ratios):.2f}-{max(ratios):.2f}); reduction {100 * (1 - med):.1f}% "
                  f"(quartiles {r_lo:.1f}..{r_hi:.1f}%)", expected,
                  interval="quartiles over sizes x dtypes of the fwd+bwd ratio",
                  undecided_because=NATIVE_WHY if native else
                  f"sizes and dtypes disagree (the quartiles straddle or touch the {floor:g}% floor)")
        out.append((PROVIDER_IMPL.get(provider, provider), c))
    return out


def _step_checks(R: Rows, floor: float, top: float, expected: str, busy: str | None) -> list[tuple[str | None, dict]]:
    """(implementation, check) per whole-model step ratio, in the rows' order: RMSNorm vs LayerNorm per
    ``norm_impl`` (the headline where both are written the same way), ScaleNorm as context (no implementation)."""
    spread_why = f"the reduction's interval straddles or touches the paper's {floor:g}% floor" + \
        (f"; {busy}" if busy else "")
    paper_tf = [registry.published(CLAIM, k)["value"] for k in
                ("transformer_ln_time", "transformer_rms_time", "transformer_reduction")]

    def rms(r):
        impl, med, iqr = r["sweep"]["impl"], r["value"], r["spread"] or 0.0
        native = impl == "torch"
        passed, r_lo, r_hi = _decide(med - iqr / 2, med + iqr / 2, floor)
        return impl, check(f"model training step, norm_impl={impl}: RMSNorm faster than LayerNorm"
                           + (" (torch native ops)" if native else " (both norms written the same way)"),
                           None if native else passed,
                           f"paired ratio {med:.3f} (IQR {iqr:.3f}); reduction {100 * (1 - med):.1f}% "
                           f"(interval {r_lo:.1f}..{r_hi:.1f}%)",
                           expected + f"; Transformer {paper_tf[2]:g}% ({paper_tf[0]:g} -> {paper_tf[1]:g} s/1k "
                           "steps, V100)",
                           headline=not native, interval="median +- IQR/2 of paired per-round ratios, as a reduction",
                           undecided_because=NATIVE_WHY if native else spread_why,
                           numbers=numbers(100 * (1 - med), "% less time", lo=r_lo, hi=r_hi, paper=floor,
                                           paper_text=f"{floor:g}-{top:g}%", compare="difference"))

    def scale(r):
        med, iqr = r["value"], r["spread"] or 0.0
        return None, check("model training step: ScaleNorm vs LayerNorm (context)", None,
                           f"paired ratio {med:.3f} (IQR {iqr:.3f}); reduction {100 * (1 - med):.1f}%",
                           "Nguyen & Salazar: 'around 5% faster'",
                           interval="median +- IQR/2 of paired per-round ratios",
                           undecided_because="for information: the hand-written ScaleNorm is timed against "
                                             "torch's fused native LayerNorm, not a norm written the same way")

    build = {"step_time_ratio_rms_over_ln": rms, "step_time_ratio_scale_over_ln": scale}
    return [build[r["metric"]](r) for r in R.metric(*build).measured()]


def _per_implementation(R: Rows, by_impl: list[tuple[str | None, dict]], scale: str) -> dict:
    """{implementation: {verdict, reason}}: each implementation's checks judged alone (its model step the headline,
    else its op), and "not_applicable" for an implementation this machine skipped."""
    per_impl: dict[str, list[dict]] = {}
    for impl, c in by_impl:
        if impl is not None:
            per_impl.setdefault(impl, []).append(c)
    out = {}
    for impl, cs in per_impl.items():
        has_step = any("model training step" in c["name"] for c in cs)
        cs = [{**c, "headline": "model training step" in c["name"] or not has_step} for c in cs]
        sub = verdict_from_checks(CLAIM, cs, scale)
        out[impl] = {"verdict": sub["verdict"], "reason": sub["reason"]}
    unmeasured = R.filter(lambda r: r["value"] is None)
    skipped = sorted({r["sweep"]["provider"] for r in unmeasured.metric("op_time")}
                     | {r["sweep"]["impl"] for r in unmeasured.metric("step_time")})
    for impl in skipped:
        row = unmeasured.filter(lambda r: impl in (r["sweep"].get("provider"), r["sweep"].get("impl"))).first()
        reason = row["sweep"].get("reason") if row else ""
        out.setdefault(PROVIDER_IMPL.get(impl, impl),
                       {"verdict": "not_applicable", "reason": f"not measured here: {reason}"})
    return out


def this_setup(params: dict) -> dict:
    """This run's side of the "Setup beside the paper" table."""
    m = params.get("model", {})
    return {
        "implementations": "PyTorch " + torch.__version__ + ": F.rms_norm/F.layer_norm, the hand-written formula, "
                           "torch.compile of it, the suite's Triton kernels (GPU only)",
        "models": f"the shared DecoderLM, {m.get('layers')} layers, d {m.get('d_model')}, seq {m.get('seq_len')}, "
                  f"batch {m.get('batch')}; the op alone at hidden {params['op_sweep']['hidden']}",
        "measure": "median of paired per-round ratios, variants interleaved in one process (op: sizes x dtypes)",
        "hardware": f"device {params.get('device')} (this machine's fingerprint below)",
        "precision": f"op: {', '.join(params['op_sweep']['dtypes'])}; model: {m.get('dtype')}",
    }


def run(params: dict, scale: str, out) -> tuple[list[dict], dict]:
    """Op-level sweep (kernel benchmark) and whole-model training-step time with LayerNorm / RMSNorm / ScaleNorm."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    device = resolve_device(params["device"], "rmsnorm_speed.device")
    torch.manual_seed(params["seed"])
    log.info("device %s: op sweep, then the model", device)
    rows = op_level(params, device, out)
    rows += model_level(params, device)
    v = judge(rows, params, scale, timing.load_summary())
    for impl, sub in v["per_implementation"].items():
        log.info("verdict for %s: %s", impl, sub["verdict"])
    return rows, v


if __name__ == "__main__":
    from repro.claims._cli import main

    raise SystemExit(main(CLAIM, run))
