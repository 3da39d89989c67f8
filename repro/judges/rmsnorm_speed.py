"""The judge of rmsnorm_speed (Zhang & Sennrich 2019, NeurIPS, arXiv 1910.07467, Tables 2-4, 6, 8, 10: RMSNorm
"reduces the running time by 7%~64%" against LayerNorm; ScaleNorm beside it as context, Nguyen & Salazar 2019, arXiv
1910.05895, Sec. 3.2): the verdict from the rows repro/claims/rmsnorm_speed.py measured (op-level and whole-model
time ratios of RMSNorm over LayerNorm), one verdict per implementation beside the claim's.

It has no threshold of its own (the judge: section of config/claims/rmsnorm_speed.yaml is empty): the floor RMSNorm
must beat is the paper's smallest reduction as the paper states it, the registry's ``transformer_reduction`` (Table 4:
248 -> 231 s/1k steps, 6.9%), the low end of ``reduction_range`` ("7%~64%" in the abstract, 6.9% rounded up).
"""
from __future__ import annotations

import logging
import math
import statistics

from repro import registry
from repro.verdicts import (Rows, check, load_note, numbers, power, ratio_interval, recorded_version, setup_table,
                            verdict_from_checks)
from repro.vocabulary.rmsnorm_speed import CLAIM

log = logging.getLogger("repro.judges.rmsnorm_speed")
PROVIDER_IMPL = {"torch": "torch", "eager": "manual", "compile": "compile", "triton": "triton"}  # op provider -> name

NATIVE_WHY = ("for information: torch's native LayerNorm (F.layer_norm) is a fused kernel, RMSNorm (F.rms_norm) "
              "is not; the paper compared both norms written in the same framework")


# ----------------------------------------------------------------------------------------------- verdict
def judge(rows: list[dict], thresholds: dict, context: dict) -> dict:
    """Zhang & Sennrich's claim on norms written the same way, judged against the paper's smallest running-time
    reduction (the registry's ``transformer_reduction``, 6.9%; % reduction = 100 (1 - t_RMS / t_LN)).

    HEADLINE: the whole-model training step with both norms written the same way: ``norm_impl=manual`` (the
    hand-written formula) and ``triton`` (the suite's kernels) where measured. Interval: the distribution-free
    confidence interval of the median of the paired per-round ratios (order statistics at the level the measurement
    recorded: Bonferroni over its planned looks, 95% overall; rows measured before it carry only the IQR, and then
    the interval is McGill's notch, median +- 1.58 IQR / sqrt(n)), turned into a reduction interval. Holds when the
    whole interval lies above the floor (strictly), fails when it lies wholly below it (RMSNorm slower included),
    undecided when it straddles or touches the floor (a tie; then the reason names the machine's load when it was
    busy); ``power=`` gives the rounds that would decide it if the estimate held.
    Secondary: the op alone (fwd+bwd) for the same-framework providers (``eager``, ``compile``, ``triton``), with
    the quartiles over sizes x dtypes as the interval, same rule. Context, not judged: torch's native ops
    (F.layer_norm is a fused kernel, F.rms_norm is not) and ScaleNorm (hand-written) against torch's fused
    LayerNorm. ``thresholds`` (the judge: section) is empty: the floor is the paper's. ``context``: the scale, the
    measured parameters, the device and the machine's load the measurement recorded.
    """
    R, load, params, scale = Rows(rows), context.get("load") or {}, context["params"], context["scale"]
    floor = float(registry.published(CLAIM, "transformer_reduction")["value"])
    low, top = registry.published(CLAIM, "reduction_range")["value"]
    expected = (f"reduction > {floor:g}% (the paper's smallest: Transformer, Table 4; its abstract's "
                f"{low:g}%~{top:g}% over models and frameworks)")
    by_impl = [*_op_checks(R, floor, expected), *_step_checks(R, floor, top, expected, load_note(load))]
    checks = [c for _, c in by_impl]
    setup = this_setup(params, context.get("device"), recorded_version(context, "torch"))
    v = verdict_from_checks(CLAIM, checks, scale, setup=setup_table(CLAIM, setup), load=load)
    v["per_implementation"] = _per_implementation(R, by_impl, scale)
    for impl, sub in v["per_implementation"].items():
        log.info("verdict for %s: %s", impl, sub["verdict"])
    return v


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
    paper_tf = [registry.published(CLAIM, k)["value"] for k in ("transformer_ln_time", "transformer_rms_time")]

    # one round times one step of every variant (the rows' median step times): what each more round costs
    round_s = sum(v for v in R.metric("step_time").values() if v is not None and math.isfinite(v))

    def rms(r):
        impl, med, iqr, n = r["sweep"]["impl"], float(r["value"]), r["spread"] or 0.0, int(r.get("n") or 0)
        native = impl == "torch"
        lo, hi, how = ratio_interval(r)
        passed, r_lo, r_hi = _decide(lo, hi, floor)
        red = 100 * (1 - med)
        snap = (lambda x: floor if abs(x - floor) <= 1e-7 else x)  # on the floor within _decide's tie tolerance
        level = r["sweep"].get("confidence") or 0.95  # rows before the order-statistic interval: McGill's ~95%
        pw = power(snap(red), snap(r_lo), snap(r_hi), floor, n, "rounds", confidence=float(level))
        if round_s:
            pw["unit_s"] = round_s
        need = pw["n_needed"]
        why = (f"the reduction's interval {r_lo:.1f}..{r_hi:.1f}% straddles or touches the paper's {floor:g}% floor "
               f"after {n} rounds" + (f" (stop: {r['sweep']['stop']})" if r["sweep"].get("stop") else "")
               + (f"; about {need} rounds would decide it if the estimate held" if need and need > n else "")
               + (f"; {pw['why']}" if pw["why"] else "") + (f"; {busy}" if busy else ""))
        return impl, check(f"model training step, norm_impl={impl}: RMSNorm faster than LayerNorm"
                           + (" (torch native ops)" if native else " (both norms written the same way)"),
                           None if native else passed,
                           f"paired ratio {med:.3f} (IQR {iqr:.3f}, n={n}); reduction {red:.1f}% "
                           f"(interval {r_lo:.1f}..{r_hi:.1f}%)",
                           expected + f"; Transformer {floor:g}% ({paper_tf[0]:g} -> {paper_tf[1]:g} s/1k "
                           "steps, V100)",
                           headline=not native, interval=how + ", as a reduction",
                           undecided_because=NATIVE_WHY if native else why,
                           numbers=numbers(red, "% less time", lo=r_lo, hi=r_hi, paper=floor,
                                           paper_text=f"Transformer; {floor:g}-{top:g}% over models",
                                           compare="difference", rule=f"> {floor:g}",
                                           source="transformer_reduction"),
                           power=None if native else pw)

    def scale(r):
        med, iqr = float(r["value"]), r["spread"] or 0.0
        lo, hi, how = ratio_interval(r)
        return None, check("model training step: ScaleNorm vs LayerNorm (context)", None,
                           f"paired ratio {med:.3f} (IQR {iqr:.3f}, n={int(r.get('n') or 0)}); reduction "
                           f"{100 * (1 - med):.1f}% (interval {100 * (1 - hi):.1f}..{100 * (1 - lo):.1f}%)",
                           "Nguyen & Salazar: 'around 5% faster'", interval=how,
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


def this_setup(params: dict, device: str | None = None, torch_version: str = "(version not recorded)") -> dict:
    """This run's side of the "Setup beside the paper" table (``device``: the one the measurement recorded, else its
    ``device`` parameter; ``torch_version``: the one it recorded)."""
    m = params.get("model", {})
    return {
        "implementations": "PyTorch " + torch_version + ": F.rms_norm/F.layer_norm, the hand-written formula, "
                           "torch.compile of it, the suite's Triton kernels (GPU only)",
        "models": f"the shared DecoderLM, {m.get('layers')} layers, d {m.get('d_model')}, seq {m.get('seq_len')}, "
                  f"batch {m.get('batch')}; the op alone at hidden {params['op_sweep']['hidden']}",
        "measure": "median of paired per-round ratios, variants interleaved in one process, "
                   + (f"with its order-statistic interval, {m.get('reps')}-{m.get('max_rounds')} rounds within "
                      f"{m.get('max_time_s'):g} s, stopping early once the interval excludes the floor"
                      if m.get("max_rounds") else f"at least {m.get('reps')} rounds and {m.get('min_time_s')} s")
                   + " (op: sizes x dtypes)",
        "hardware": f"device {device or params.get('device')} (this machine's fingerprint below)",
        "precision": f"op: {', '.join(params['op_sweep']['dtypes'])}; model: {m.get('dtype')}",
    }
