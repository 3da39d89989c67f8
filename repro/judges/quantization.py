"""The judge of quantization (C10): LLM.int8() (Dettmers et al., NeurIPS 2022, arXiv 2208.07339: Table 1, C4
perplexity of int8 methods beside 32-bit; Section 3 memory; Section 4.1 outlier emergence) and GPTQ (Frantar et al.,
ICLR 2023, arXiv 2210.17323: Tables 2-4, GPTQ against round-to-nearest at 3 and 4 bits; its generation speedups).

Judges the rows repro/claims/quantization.py measured on the suite's trained models (or an imported Hugging Face
model): the fp32 models' gates, LLM.int8()'s unchanged perplexity and GPTQ's win over RTN (headlines), and the
secondary checks listed in :func:`judge`, with the thresholds of the ``judge:`` section of
config/claims/quantization.yaml. The papers' numbers come from the registry (repro/registry/published.yaml).
"""
from __future__ import annotations

import numpy as np

from repro import registry
from repro.claims.quantization import CLAIM
from repro.stats import t_interval
from repro.verdicts import (Rows, both, check, decide_interval, decide_within, gate, gated, numbers, setup_table, uses,
                            verdict_from_checks)


def _pub(key: str):
    return registry.published(CLAIM, key)["value"]


def _ppl(R: Rows, model, method):
    """(mean, std, n) of the validation perplexity of ``method`` over calibration seeds (n = 1 without seeds)."""
    v = R.metric("valid_ppl").where(model=model, method=method).values()
    if not v:
        return None
    return float(np.mean(v)), (float(np.std(v, ddof=1)) if len(v) > 1 else None), len(v)


def _gptq_methods(R: Rows, model, **sweep) -> list:
    """The GPTQ methods (settings) with a perplexity row on ``model``, in first-appearance order."""
    return R.metric("valid_ppl").where(model=model, family="gptq", **sweep).sweep("method")


def _no_outliers(R: Rows, model) -> bool:
    """LLM.int8() took no (layer, dim) pair to 16 bits on ``model``: then it is the vector-wise int8 product."""
    dims = R.metric("decomposed_dims").where(model=model, method="llm_int8").value(None)
    return dims is not None and dims == 0


def _noise(R: Rows, m):
    """(relative half-width, words): the 95% prediction half-width of one quantized model's perplexity change,
    bounded by the largest spread of GPTQ's perplexity over calibration seeds on the same model and tokens (how
    far a quantizer's rounding moves the perplexity when the rounding is perturbed); LLM.int8() and absmax are
    deterministic and measured once, so that spread is the only noise estimate the rows carry. None when no
    GPTQ setting has two seeds."""
    fp, best = _ppl(R, m, "fp32"), None
    for meth in _gptq_methods(R, m):
        g = _ppl(R, m, meth)
        if g and g[1] is not None and np.isfinite(g[1]) and (best is None or g[1] > best[1]):
            best = (meth, g[1], g[2])
    if not fp or best is None:
        return None, "no calibration-seed spread in the rows to bound the change"
    lo_, hi_ = t_interval(0.0, best[1] * np.sqrt(best[2] + 1) / fp[0], best[2])
    return float(hi_), (f"+- {100 * hi_:.2f}%: 95% t prediction half-width of one run from the largest "
                        f"calibration-seed spread ({best[0]}: sd {best[1]:.3f} ppl over {best[2]} seeds)")


def _decided_noise(R: Rows, m, diff) -> bool:
    """a perplexity difference counts only when it exceeds two runs' noise (sqrt 2 x the half-width)"""
    h, _ = _noise(R, m)
    fp = _ppl(R, m, "fp32")
    return h is not None and fp and np.isfinite(diff) and abs(diff) / fp[0] > h * np.sqrt(2)


# --- the checks, in the order of the page; each returns its check(s) on one model (none without the rows)
def _int8_unchanged(R: Rows, m, params: dict, T: dict, gates: list[dict]) -> list[dict]:
    """1. LLM.int8() perplexity unchanged: an equivalence test (the whole interval of the change inside +-tol)."""
    fp, li = _ppl(R, m, "fp32"), _ppl(R, m, "llm_int8")
    if not (fp and li):
        return []
    tol_pct = _pub("int8_ppl_equivalence_tol")
    r = li[0] / fp[0] - 1
    h, how = _noise(R, m)
    tol = tol_pct / 100
    ok = None if h is None or not np.isfinite(r) else decide_within(r - h, r + h, -tol, tol)
    if ok is True and not (abs(r) + h < tol):  # an interval touching the tolerance is no equivalence
        ok = None
    scope = (" (0 outlier dimensions at this scale: this is LLM.int8()'s vector-wise int8 part only, which "
             "any int8 method would match; the outlier part is the not-applicable decomposition check)"
             if _no_outliers(R, m) else "")
    iv = None if h is None else f"[{100 * (r - h):+.2f}%, {100 * (r + h):+.2f}%]"
    return [gated(check(f"{m}: LLM.int8() leaves perplexity unchanged", ok,
                        f"fp32 {fp[0]:.3f}, LLM.int8() {li[0]:.3f} ({100 * r:+.2f}%){scope}",
                        f"13B C4: fp32 {_pub('int8_c4_ppl_13b_fp32')}, LLM.int8() "
                        f"{_pub('int8_c4_ppl_13b_llm_int8')}; equivalence: the change's interval inside "
                        f"+-{tol_pct}% (LLM.int8() Table 1's largest change, registry "
                        "int8_ppl_equivalence_tol)", headline=True,
                        interval=None if h is None else f"{iv} " + how,
                        undecided_because=None if ok is not None else (
                            how if h is None else f"the change's interval {iv} reaches the +-{tol_pct}% tolerance"),
                        numbers=numbers(100 * r, "% perplexity change", lo=None if h is None else 100 * (r - h),
                                        hi=None if h is None else 100 * (r + h),
                                        paper=100 * (_pub("int8_c4_ppl_13b_llm_int8")
                                                     / _pub("int8_c4_ppl_13b_fp32") - 1),
                                        compare="difference")),
                  gates)]


def _gptq_below_rtn(R: Rows, m, params: dict, T: dict, gates: list[dict]) -> list[dict]:
    """2. GPTQ's perplexity below RTN's at the same bits and groups, for every setting (t-interval over seeds)."""
    parts, decisions, ivs, ratios = [], [], [], []
    for meth in sorted(_gptq_methods(R, m)):
        g, rt = _ppl(R, m, meth), _ppl(R, m, meth.replace("gptq", "rtn"))
        if not (g and rt):
            continue
        lo, hi = t_interval(*g)
        decisions.append(decide_interval(lo, hi, below=rt[0]))
        ivs.append(f"{meth} [{lo:.2f}, {hi:.2f}]")
        ratios.append(g[0] / rt[0])
        parts.append(f"{meth} {g[0]:.2f} +- {g[1] or 0:.2f} vs {meth.replace('gptq', 'rtn')} {rt[0]:.2f}")
    if not decisions:
        return []
    ok = both(*decisions)
    return [gated(check(f"{m}: GPTQ's perplexity is below RTN's at the same bits and groups", ok,
                        "; ".join(parts), "GPTQ Tables 2-4: GPTQ < RTN at 3 and 4 bits (RTN collapses at 3 bits)",
                        headline=True, interval="95% t-interval over calibration seeds: " + "; ".join(ivs),
                        undecided_because=None if ok is not None else
                        "an interval over calibration seeds straddles RTN's perplexity",
                        numbers=numbers(max(ratios), "GPTQ / RTN perplexity (worst setting)",
                                        paper_text="< 1 at 3 and 4 bits")),
                  gates)]


def _absmax_worse(R: Rows, m, params: dict, T: dict, gates: list[dict]) -> list[dict]:
    """3. absmax worse than LLM.int8(): strictly, by more than the noise of one run on each side."""
    ab, li, fp = _ppl(R, m, "int8_absmax"), _ppl(R, m, "llm_int8"), _ppl(R, m, "fp32")
    if not (ab and li and fp):
        return []
    none = _no_outliers(R, m)
    h, how = _noise(R, m)
    d = (ab[0] - li[0]) / fp[0]
    band = None if h is None else h * np.sqrt(2)  # two independent single runs
    ok = None if band is None or not np.isfinite(d) else decide_interval(d - band, d + band, above=0.0)
    return [gated(check(f"{m}: tensor-wise absmax int8 loses more than LLM.int8()", ok,
                        f"absmax {ab[0]:.3f} vs LLM.int8() {li[0]:.3f} ({100 * d:+.2f}% of fp32)"
                        + ("; 0 outlier dimensions at this scale" if none else ""),
                        f"13B: absmax {_pub('int8_c4_ppl_13b_absmax')} vs "
                        f"{_pub('int8_c4_ppl_13b_llm_int8')} (strictly worse, beyond the noise)",
                        interval=None if band is None else
                        f"[{100 * (d - band):+.2f}%, {100 * (d + band):+.2f}%] (" + how + ", x sqrt 2)",
                        undecided_because=None if ok is not None else (
                            how if band is None else "the difference's interval includes 0: absmax "
                            "and LLM.int8() are within the noise" + (
                                " (with 0 outlier dimensions tensor-wise absmax has no outlier to "
                                "lose precision to)" if none else ""))),
                  gates)]


def _decomposition(R: Rows, m, params: dict, T: dict, gates: list[dict]) -> list[dict]:
    """4. The outlier decomposition against vector-wise int8: not applicable without outlier dimensions."""
    vw, li = _ppl(R, m, "int8_vectorwise"), _ppl(R, m, "llm_int8")
    dd = R.metric("decomposed_dims").where(model=m, method="llm_int8").first()
    if not (vw and li and dd):
        return []
    none = dd["value"] == 0
    return [gated(check(f"{m}: the outlier decomposition improves on vector-wise int8",
                        None if none else (li[0] < vw[0] if _decided_noise(R, m, vw[0] - li[0]) else None),
                        f"vector-wise {vw[0]:.3f} vs LLM.int8() {li[0]:.3f}; {int(dd['value'])} "
                        f"(layer, dim) pairs reached |x| >= {params['int8']['threshold']}",
                        "vector-wise int8 degrades once outliers emerge (>= 6.7B); the decomposition "
                        "keeps fp16 quality", undecided_because="not applicable: 0 outlier "
                        "dimensions (no feature reached the outlier threshold), so LLM.int8() is the "
                        "vector-wise product here" if none else None),
                  gates)]


def _values_8bit(R: Rows, m, params: dict, T: dict, gates: list[dict]) -> list[dict]:
    """5. The share of values LLM.int8() multiplies in 8 bits (by construction without outliers: not applicable)."""
    row = R.metric("values_8bit_pct").where(model=m, method="llm_int8").first()
    if not row:
        return []
    v, none, share = row["value"], _no_outliers(R, m), _pub("int8_fraction_values_8bit")
    return [check(f"{m}: more than {share:g}% of the values are multiplied in 8 bits",
                  None if none else v > share,
                  f"{v:.4f}%" + ("; 0 outlier dimensions" if none else ""), f"> {share}%",
                  undecided_because="not applicable: 0 outlier dimensions reached the threshold, so "
                  "every value is multiplied in 8 bits by construction" if none else None)]


def _int8_memory(R: Rows, m, params: dict, T: dict, gates: list[dict]) -> list[dict]:
    """6. LLM.int8()'s stored weights against 16-bit weights."""
    c = T
    v = R.metric("weight_bytes_vs_fp16").where(model=m, method="llm_int8").first()
    if not v:
        return []
    return [check(f"{m}: LLM.int8() weights take about half of 16-bit weights", v["value"] < c["int8_bytes_max"],
                  f"{v['value']:.3f} x fp16 (int8 codes + fp32 scale per output channel)",
                  f"~{100 - _pub('int8_memory_reduction')}% of 16-bit (< {c['int8_bytes_max']})",
                  thresholds=uses(T, "int8_bytes_max"))]


def _gptq4_loss(R: Rows, m, params: dict, T: dict, gates: list[dict]) -> list[dict]:
    """7. GPTQ 4-bit (every group setting) loses little: its perplexity ratio to fp32 below 1 + ``gptq4_ppl_tol``."""
    c, fp = T, _ppl(R, m, "fp32")
    if not fp:
        return []
    parts, decisions = [], []
    for meth in sorted(_gptq_methods(R, m, bits=4)):
        g = _ppl(R, m, meth)
        lo, hi = t_interval(*g)
        decisions.append(decide_interval(lo / fp[0], hi / fp[0], below=1 + c["gptq4_ppl_tol"]))
        parts.append(f"{meth} {g[0]:.2f} ({100 * (g[0] / fp[0] - 1):+.1f}%)")
    if not decisions:
        return []
    ok = both(*decisions)
    return [gated(check(f"{m}: GPTQ 4-bit loses little perplexity", ok, f"fp32 {fp[0]:.2f}; " + "; ".join(parts),
                        f"'negligible' at 175B (<= {100 * c['gptq4_ppl_tol']:.0f}% here); small OPT "
                        "models lose more (GPTQ Table 3)",
                        undecided_because=None if ok is not None else "interval straddles the bound",
                        thresholds=uses(T, "gptq4_ppl_tol")),
                  gates)]


def _held_out(r: dict) -> bool:
    """The layer error was scored on inputs GPTQ was not calibrated on (sweep split/inputs = held_out)."""
    return str(r["sweep"].get("split", r["sweep"].get("inputs", ""))).replace("-", "_") in ("held_out", "heldout",
                                                                                          "valid")


def _gptq_rtn_pairs(errors: Rows) -> list[dict]:
    """{"gptq": error, "rtn": error} per (method, calibration seed, layer) that has both quantizers' errors."""
    by = {}
    for r in errors:
        key = (r["sweep"]["method"], r["sweep"].get("calibration_seed"), r["sweep"]["layer"])
        by.setdefault(key, {})[r["sweep"]["quantizer"]] = r["value"]
    return [v for v in by.values() if "gptq" in v and "rtn" in v]


def _layer_error(R: Rows, m, params: dict, T: dict, gates: list[dict]) -> list[dict]:
    """8. Layer-wise error: GPTQ minimises the error on its calibration inputs, so in-sample errors win by
    construction; only rows scored on held-out inputs can decide (the calibration rows are shown undecided)."""
    c = T
    errors = R.metric("layer_rel_error").where(model=m)
    in_sample = errors.filter(lambda r: not _held_out(r))
    for name, held, scored in (("held-out", True, errors.filter(_held_out)), ("calibration", False, in_sample)):
        pairs = _gptq_rtn_pairs(scored)
        if not pairs:
            continue
        wins = sum(bool(v["gptq"] < v["rtn"]) for v in pairs)
        rs = [v["gptq"] / v["rtn"] for v in pairs if v["rtn"] > 0]
        ratio = float(np.median(rs)) if rs else float("nan")
        return [check(f"{m}: GPTQ's layer-wise reconstruction error is below RTN's",
                      wins > c["layer_win_min"] * len(pairs) if held else None,
                      f"{wins}/{len(pairs)} (layer, setting, seed) cases on {name} inputs; median error "
                      f"ratio GPTQ/RTN {ratio:.3f}",
                      f"GPTQ minimises ||WX - QX||^2 layer by layer (Eq. 1); more than "
                      f"{100 * c['layer_win_min']:.0f}% of the cases on held-out inputs",
                      undecided_because=None if held else "in-sample: the errors are scored on GPTQ's own "
                      "calibration inputs, which GPTQ minimises by construction; the rows have no "
                      "held-out inputs", thresholds=uses(T, "layer_win_min") if held else None)]
    return []


MODEL_CHECKS = (_int8_unchanged, _gptq_below_rtn, _absmax_worse, _decomposition, _values_8bit, _int8_memory,
                _gptq4_loss, _layer_error)


def _gates(R: Rows, m, c: dict) -> list[dict]:
    """The gates of model ``m``: the fp32 model learned (perplexity below ``lm_gate_ratio`` x the unigram baseline)
    and, for the translation model, translates (BLEU more than ``bleu_gate_margin`` above the copy baseline)."""
    out = []
    fp, u = _ppl(R, m, "fp32"), R.metric("unigram_ppl").where(model=m).first()
    if fp and u:
        uni = u["value"]
        out.append(gate(f"{m}: the fp32 model learned (validation perplexity vs the unigram baseline)",
                        fp[0] < c["lm_gate_ratio"] * uni,
                        f"perplexity {fp[0]:.2f} vs unigram {uni:.2f}",
                        f"below {c['lm_gate_ratio']} x the unigram perplexity ({c['lm_gate_ratio'] * uni:.2f})"))
    cb, fb = R.metric("copy_bleu").where(model=m).first(), R.metric("bleu").where(model=m, method="fp32").first()
    if cb and fb:
        bleu_margin = float(c["bleu_gate_margin"])
        out.append(gate(f"{m}: the fp32 model translates (BLEU vs the copy baseline)",
                        fb["value"] > cb["value"] + bleu_margin,
                        f"BLEU {fb['value']:.2f} vs copy {cb['value']:.2f}",
                        f"more than {bleu_margin} BLEU above the copy baseline"))
    return out


def _emergence(R: Rows, models: list) -> list[dict]:
    """9. Outlier emergence with scale: reported, undecided (one model size shows no trend)."""
    emer = []
    for m in models:
        la, sa, p = (R.metric(k).where(model=m).first()
                     for k in ("outlier_layers_affected", "outlier_seq_affected", "model_parameters"))
        if la and sa and p:
            emer.append((m, la["value"], sa["value"], p["value"]))
    if not emer:
        return []
    la_pub, sa_pub = _pub("int8_emergence_layers_affected"), _pub("int8_emergence_seq_dims_affected")
    return [check("outlier features emerge with scale (LLM.int8() Section 4.1)", None,
                  "; ".join(f"{m} ({p / 1e6:.1f}M params): {la:.0f}% of layers, {sa:.1f}% of sequence "
                            "positions" for m, la, sa, p in emer),
                  f"{la_pub[0]}% -> {la_pub[1]}% of layers and {sa_pub[0]}% -> {sa_pub[1]}% of sequence "
                  "positions between 6B and 6.7B parameters",
                  undecided_because="one model size cannot show a trend with scale; the paper's phase "
                  "shift is between 6B and 6.7B parameters" + (
                      ", and the models measured here are far below it" if max(p for *_, p in emer) < 1e9
                      else ""))]


def _speed(R: Rows, device: str | None) -> list[dict]:
    """10. GPTQ's generation speedups: undecided (the int8 matmul timing is for information)."""
    mm = {r["sweep"]["kernel"]: r["value"] for r in R.metric("matmul_seconds")}
    return [check("GPTQ's packed low-bit kernels speed up generation", None,
                  (f"this {'GPU' if device == 'cuda' else 'CPU'}: int8 torch._int_mm "
                   f"{mm['fp32'] / mm['int8']:.2f}x fp32 on one matmul (for information)")
                  if {"fp32", "int8"} <= mm.keys() else "not timed",
                  f"{_pub('gptq_speedup_a100')}x (A100), {_pub('gptq_speedup_a6000')}x (A6000) vs FP16",
                  undecided_because="GPTQ's speedups come from its packed 3/4-bit CUDA kernels; this suite "
                  "has no such kernel (weight-only methods run dequantized here)")]


def _data_setup(R: Rows, params: dict) -> dict:
    """The data and calibration lines of the setup table (the suite's corpus, or hf_model's text)."""
    cal = params["calibration"]
    txt = R.metric("text_tokens").first()
    if not txt:
        return {"data": "the suite's corpus (validation perplexity on the first "
                        f"{params['eval']['valid_sentences']} validation sentences)",
                "calibration": f"{cal['sentences']} training sentences, seeds {cal['seeds']}"}
    t = txt["sweep"]
    return {"data": f"{t['text_path']}: perplexity over {int(txt['value'])} tokens in {t['windows']} windows of "
                    f"{t['seq_len']} tokens, stride {t['stride']}",
            "calibration": f"{cal['sentences']} random segments of {t['calibration_seq_len']} tokens from "
                           f"{t['calibration']}, seeds {cal['seeds']}"}


def _setup(R: Rows, models: list, params: dict, device: str | None) -> list[dict]:
    sizes = {m: R.metric("model_parameters").where(model=m).first() for m in models}
    return setup_table(CLAIM, {
        "models": ", ".join(f"{m} ({p['value'] / 1e6:.1f}M params)" for m, p in sizes.items() if p),
        **_data_setup(R, params),
        "precision": "fp32 reference; int8 by exact integer products; weight-only methods dequantized from packed codes",
        "hardware": {"cpu": "CPU", "cuda": "GPU"}.get(device, device)})


def judge(rows: list[dict], thresholds: dict, context: dict) -> dict:
    """Checks (``thresholds``: the judge: section of config/claims/quantization.yaml); the interval of a GPTQ
    number is the 95% t-interval of its mean over the calibration seeds. Gates: the fp32 LM's validation perplexity
    is below ``lm_gate_ratio`` x the unigram baseline (translation: BLEU more than ``bleu_gate_margin`` above the
    copy baseline); checks on a model that did not learn are undecided. The noise of one deterministic run
    (LLM.int8(), absmax) is bounded by the largest spread of GPTQ's perplexity over calibration seeds
    (:func:`_noise`).

    Headlines:
    1. LLM.int8(): perplexity unchanged - the interval of ppl(llm_int8) / ppl(fp32) - 1 lies inside the registry's
       +-``int8_ppl_equivalence_tol`` (13B C4: 12.45 = 12.45), for every model.
    2. GPTQ beats RTN at 3 and 4 bits (GPTQ Tables 2-4): for every GPTQ setting, the interval of GPTQ's perplexity
       lies below RTN's with the same bits and groups.
    Secondary:
    3. absmax (tensor-wise) int8 loses more than LLM.int8() (19.08 vs 12.45): ppl(absmax) > ppl(llm_int8) by more
       than two runs' noise.
    4. The decomposition matters where there are outliers: ppl(vectorwise) > ppl(llm_int8) when LLM.int8() took any
       dimension to 16 bits; undecided when no |x| >= threshold appeared (then both are the same product).
    5. More than 99.9% of the values are multiplied in 8 bits (not applicable without outlier dimensions).
    6. LLM.int8() weights take about half of 16-bit weights (<= ``int8_bytes_max`` x fp16, scales included).
    7. GPTQ 4-bit (every group setting) loses little: ppl ratio to fp32 at most ``gptq4_ppl_tol`` + 1 (interval).
    8. GPTQ's layer-wise reconstruction error is below RTN's on the same held-out inputs in more than
       ``layer_win_min`` of the (layer, setting, seed) cases; undecided on GPTQ's own calibration inputs.
    9. Outlier emergence (6.7B: 100% of layers, 75% of sequence positions): undecided at this scale, the measured
       shares are reported (the phase shift is at 6.7B parameters).
    10. GPTQ's 3.25x / 4.5x generation speedups: undecided (needs its packed 3/4-bit CUDA kernels).
    """
    R, T, params, scale = Rows(rows), thresholds, context["params"], context["scale"]
    device = context.get("device") or params.get("device")  # older measurements recorded no context
    models = sorted(R.metric("valid_ppl").sweep("model"))
    gate_of = {m: _gates(R, m, T) for m in models}
    checks = [c for build in MODEL_CHECKS for m in models for c in build(R, m, params, T, gate_of[m])]
    checks += _emergence(R, models) + _speed(R, device)
    return verdict_from_checks(CLAIM, checks, scale, gates=[g for m in models for g in gate_of[m]],
                               setup=_setup(R, models, params, device))
