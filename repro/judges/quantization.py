"""The judge of quantization (C10): LLM.int8() (Dettmers et al., NeurIPS 2022, arXiv 2208.07339: Table 1, C4
perplexity of int8 methods beside 32-bit; Section 3 memory; Section 4.2 / Fig. 3a outlier emergence, by the criteria
of Section 4.1) and GPTQ (Frantar et al., ICLR 2023, arXiv 2210.17323: Tables 3-5, GPTQ against round-to-nearest at
3 and 4 bits; its generation speedups).

Judges the rows repro/claims/quantization.py measured on the suite's trained models (or an imported Hugging Face
model): the fp32 models' gates, LLM.int8()'s unchanged perplexity and GPTQ's win over RTN (headlines), and the
secondary checks listed in :func:`judge`, with the thresholds of the ``judge:`` section of
config/claims/quantization.yaml. The papers' numbers come from the registry (repro/registry/published.yaml).
"""
from __future__ import annotations

import math

import numpy as np

from repro import registry
from repro.intervals import t_interval
from repro.verdicts import (Rows, both, check, decide_interval, decide_point, decide_within, decisive_share, gate,
                            gated, numbers, power, setup_table, side, sized, uses, verdict_from_checks,
                            clopper_pearson)
from repro.vocabulary.quantization import CLAIM


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


# --- the two sources of a paired perplexity comparison
PREDATES = ("the rows carry no paired per-sentence losses (paired_nll_diff: measured by older code), so the "
            "evaluation tokens' own sampling error is not estimated")


def _snap(x: float, *edges: float) -> float:
    """``x`` on an edge when it differs from it by float rounding only (a log or ratio of numbers set exactly on a
    threshold, as the tie controls do), so a tie is seen as one."""
    for e in edges:
        if math.isfinite(x) and abs(x - e) <= 1e-12 * max(1.0, abs(e)):
            return e
    return x


def _within(lo: float, hi: float, a: float, b: float) -> bool | None:
    return decide_within(_snap(lo, a, b), _snap(hi, a, b), a, b)


def _above(lo: float, hi: float, t: float) -> bool | None:
    return decide_interval(_snap(lo, t), _snap(hi, t), above=t)


def _below(lo: float, hi: float, t: float) -> bool | None:
    return decide_interval(_snap(lo, t), _snap(hi, t), below=t)


def _t975(df: float) -> float:
    """t_{0.975, df} (repro.intervals' table, floored df: conservative for a fractional Satterthwaite df)."""
    if not math.isfinite(df) or df > 1e6:
        return 1.96
    n = max(math.floor(df), 1) + 1
    return t_interval(0.0, math.sqrt(n), n)[1]


def _paired(R: Rows, m, a, b) -> dict | None:
    """The measured paired comparison of ``a`` against ``b`` on the evaluation units (repro.claims.quantization
    .paired_rows): its standard error over the units (``spread``), the units (``n``), ``identical``."""
    return R.metric("paired_nll_diff").where(model=m, method=a, versus=b).first()


def _identical(R: Rows, m, a, b) -> bool:
    """``a`` and ``b`` gave the same losses on every evaluation unit (or, in rows without the paired losses, the same
    perplexity to the last bit): one measurement, counted once."""
    p = _paired(R, m, a, b)
    if p is not None and "identical" in p["sweep"]:
        return bool(p["sweep"]["identical"])
    va = R.metric("valid_ppl").where(model=m, method=a).values()
    vb = R.metric("valid_ppl").where(model=m, method=b).values()
    return bool(va) and va == vb


def _logs(R: Rows, m, method) -> list[float]:
    return [math.log(v) for v in R.metric("valid_ppl").where(model=m, method=method).values() if v and v > 0]


def _diff(R: Rows, m, a, b) -> dict | None:
    """The per-token NLL difference D = ln ppl(a) - ln ppl(b) on the same evaluation tokens (mean over ``a``'s
    calibration seeds; ``b`` deterministic or its seed mean) with its 95% interval from both sources: the spread of
    D over a's calibration seeds (s^2 / k) and the evaluation tokens' sampling error of the paired difference (se^2,
    the paired_nll_diff row's spread: per-sentence losses, the seed-mean's), added as variances with the
    Welch-Satterthwaite degrees of freedom. The point values come from the valid_ppl rows (what the controls edit);
    the evaluation error from the paired rows. ``se`` None: rows without paired losses (the interval then has the
    seeds only; ``predates`` says so)."""
    la, lb = _logs(R, m, a), _logs(R, m, b)
    if not la or not lb:
        return None
    return _interval([x - float(np.mean(lb)) for x in la], _paired(R, m, a, b), _seeded(R, m, a))


def _interval(ds: list[float], p: dict | None, seeded: bool) -> dict:
    """:func:`_diff`'s interval of the mean of ``ds`` (D per calibration seed; one value for a deterministic
    method) with the evaluation error of the paired row ``p``."""
    k, d = len(ds), float(np.mean(ds))
    s = float(np.std(ds, ddof=1)) if k > 1 else None
    se = None if p is None or p.get("spread") is None or not math.isfinite(float(p["spread"])) else float(p["spread"])
    n = int(p["n"]) if p is not None and p.get("n") else None
    va = (s * s / k if s is not None else math.inf) if seeded else 0.0  # a deterministic method: no seeds
    vb = 0.0 if se is None else se * se
    var = va + vb
    if not math.isfinite(var):
        return {"d": d, "lo": -math.inf, "hi": math.inf, "k": k, "s": s, "se": se, "n": n, "t": math.inf,
                "seed_half": math.inf, "eval_half": math.inf, "predates": se is None}
    den = (va * va / (k - 1) if va > 0 else 0.0) + (vb * vb / (n - 1) if vb > 0 and n and n > 1 else 0.0)
    t = _t975(var * var / den if den > 0 else math.inf)
    half = t * math.sqrt(var)
    return {"d": d, "lo": d - half, "hi": d + half, "k": k, "s": s, "se": se, "n": n, "t": t,
            "seed_half": t * math.sqrt(va), "eval_half": t * math.sqrt(vb), "predates": se is None}


def _pooled(R: Rows, m, bits: int) -> tuple[dict, list] | None:
    """GPTQ against RTN at ``bits``, pooled over the group settings (GPTQ Tables 3-5 compare at a bit width): per
    calibration seed D_s = mean over settings of ln ppl(GPTQ, s) - mean over settings of ln ppl(RTN), its interval
    (:func:`_interval`) with the pooled paired row's evaluation error (rows measured before it: the mean of the
    settings' errors, an upper bound); and the settings. None without settings."""
    pairs = [(g, g.replace("gptq", "rtn", 1)) for g in sorted(_gptq_methods(R, m, bits=bits))
             if _ppl(R, m, g.replace("gptq", "rtn", 1))]
    if not pairs:
        return None
    seeds = sorted({r["sweep"].get("calibration_seed") for g, _ in pairs
                    for r in R.metric("valid_ppl").where(model=m, method=g)}, key=str)
    rtn = float(np.mean([np.mean(_logs(R, m, b)) for _, b in pairs]))
    ds = []
    for seed in seeds:
        v = [R.metric("valid_ppl").where(model=m, method=g, calibration_seed=seed).values() for g, _ in pairs]
        if all(len(x) == 1 and x[0] > 0 for x in v):
            ds.append(float(np.mean([math.log(x[0]) for x in v])) - rtn)
    if not ds:
        return None
    p = _paired(R, m, f"gptq_{bits}bit", f"rtn_{bits}bit")
    if p is None:  # rows without the pooled row: the sd of a mean is at most the mean of the sds (conservative)
        each = [_paired(R, m, g, b) for g, b in pairs]
        if all(e is not None and e.get("spread") is not None and math.isfinite(float(e["spread"])) for e in each):
            p = {"spread": float(np.mean([float(e["spread"]) for e in each])), "n": min(int(e["n"]) for e in each)}
    return _interval(ds, p, True), [g for g, _ in pairs]


def _seeded(R: Rows, m, method) -> bool:
    return any("calibration_seed" in r["sweep"] for r in R.metric("valid_ppl").where(model=m, method=method))


def _needed(gap: float, shrinking: float, fixed: float, n: int) -> int | None:
    """The sample at which a 95% half-width sqrt(fixed^2 + shrinking^2 n / n') falls below the share of ``gap`` (the
    distance to the threshold) that decides with the power table's power if the estimate held
    (repro.verdicts.decisive_share); None when the part that does not shrink already takes that share."""
    gap = gap * decisive_share()
    if not (math.isfinite(gap) and math.isfinite(fixed) and math.isfinite(shrinking)) or fixed >= gap:
        return None
    return max(math.ceil(n * shrinking ** 2 / (gap ** 2 - fixed ** 2)), int(n) + (shrinking > 0))


def _power_two(iv: dict, thr: float, show=lambda x: x) -> dict:
    """power= of an interval from the two sources of :func:`_diff` against ``thr`` (on D's scale; ``show`` maps D's
    scale to the page's, monotone): the calibration seeds that would decide it with the evaluation's error as
    measured; when that error alone is too wide for it, the evaluation sentences that would (no seed count can)."""
    args = (_snap(show(iv["d"]), show(thr)), show(iv["lo"]), show(iv["hi"]), show(thr))
    pw = power(*args, iv["k"], "calibration seeds")
    if pw["n_needed"] is None or pw["n_needed"] <= iv["k"] or not math.isfinite(iv["seed_half"]):
        return pw  # a tie, already decided, or fewer than two seeds (power says 2)
    gap = abs(_snap(iv["d"], thr) - thr)
    by_seeds = _needed(gap, iv["seed_half"], iv["eval_half"], iv["k"])
    if by_seeds is not None:
        pw["n_needed"] = by_seeds
        return pw
    pw = power(*args, iv["n"] or 0, "evaluation sentences")
    pw["n_needed"] = _needed(gap, iv["eval_half"], iv["seed_half"], iv["n"]) if iv["n"] else None
    pw["why"] = ("the evaluation tokens' sampling error alone is too wide to exclude the threshold at the power "
                 "table's power, so no number of calibration seeds decides it"
                 + ("" if pw["n_needed"] is not None else "; the seeds' spread alone is too, so no sample of this "
                    "model decides it: only a larger difference would (a model or bit width at which the two methods' "
                    "perplexities lie further apart)"))
    return pw


def _power_sentences(iv: dict, thr: float, show=lambda x: x) -> dict:
    """power= of a deterministic method's comparison (:func:`_diff` with no seeds): its interval is the evaluation
    sentences' paired sampling error alone, so the sentences that would decide it at the power table's power if
    the estimate held; rows without the paired losses say so."""
    lo_t, hi_t = (thr if isinstance(thr, tuple) else (thr, thr))
    edge = lo_t if abs(iv["d"] - lo_t) < abs(iv["d"] - hi_t) else hi_t
    pw = power(_snap(show(iv["d"]), *map(show, (lo_t, hi_t))), show(iv["lo"]), show(iv["hi"]),
               tuple(map(show, thr)) if isinstance(thr, tuple) else show(thr), iv["n"] or 0, "evaluation sentences")
    if iv["predates"]:
        pw.update(n_needed=None, why=PREDATES)
    elif pw["n_needed"] is not None and iv["n"] and pw["n_needed"] > iv["n"]:
        pw["n_needed"] = _needed(abs(_snap(iv["d"], edge) - edge), iv["eval_half"], 0.0, iv["n"])
    return pw


def _worst(pws: list[dict]) -> dict | None:
    """The power of a check that holds when every setting's interval lies below its threshold: sized by the setting
    projected to decide it first (repro.verdicts.sized: the cheapest failing one, else the last to hold)."""
    return sized([(side(p, "below"), p) for p in pws if p])[1]


def _no_outlier_features(R: Rows, m, params: dict) -> str | None:
    """Why ``m``'s activations hold no outlier features of the size LLM.int8() is about, or None when they do (or
    the rows predate the count and LLM.int8() decomposed some dimension). Dettmers et al. Section 4.1: a feature
    dimension with |x| >= 6 in at least 25% of the layers and 6% of the sequence positions (the measurement's
    ``systematic_outlier_dims``, with the config's ``outliers`` criteria); a few isolated values past the threshold
    (``decomposed_dims``) are not such a feature."""
    row = R.metric("systematic_outlier_dims").where(model=m).first()
    thr = params.get("int8", {}).get("threshold", _pub("int8_outlier_threshold"))
    if row is None:
        return "0 outlier dimensions reached the threshold" if _no_outliers(R, m) else None
    if row["value"] >= 1:
        return None
    crit = params.get("outliers") or {}
    peak = R.metric("outlier_max_abs").where(model=m).values()
    dd = R.metric("decomposed_dims").where(model=m, method="llm_int8").value(None)
    return (f"no outlier features: 0 feature dimensions with |x| >= {thr:g} in >= {crit.get('layers_min_pct', 25)}% "
            f"of the layers and >= {crit.get('seq_min_pct', 6)}% of the sequence positions (LLM.int8() Section 4.1)"
            + (f"; largest |x| {max(peak):.2f}" if peak else "")
            + (f"; LLM.int8() took {int(dd)} (layer, dim) pairs of isolated values to 16 bits" if dd else ""))


def _vectorwise_here(R: Rows, m) -> str | None:
    """Why LLM.int8() is the vector-wise int8 product on ``m`` (one measurement, counted once), or None."""
    if _no_outliers(R, m):
        return "0 outlier dimensions reached the threshold, so LLM.int8() multiplies every value as vector-wise int8"
    if R.metric("valid_ppl").where(model=m, method="int8_vectorwise") and _identical(R, m, "llm_int8",
                                                                                      "int8_vectorwise"):
        return "LLM.int8() and vector-wise int8 gave identical losses"
    return None


def _eval_words(iv: dict) -> str:
    if iv["predates"]:
        return "; " + PREDATES
    return (f"; evaluation: paired per-sentence losses, se {iv['se']:.2g} nats/token over {iv['n']} sentences"
            if iv["se"] is not None else "")


def _pct(x: float) -> float:
    return 100 * (math.exp(x) - 1) if math.isfinite(x) else x


# --- the checks, in the order of the page; each returns its check(s) on one model (none without the rows)
def _vw_degrades(R: Rows, m) -> str | None:
    """Why the int8 comparison on ``m`` cannot discriminate though it has outlier features, or None: vector-wise
    int8 must measurably degrade there (the interval of its change against fp32 above 0), else an LLM.int8() that
    keeps perplexity shows nothing vector-wise int8 would not (LLM.int8() Section 3.2: the decomposition is for
    the outliers that break vector-wise quantization)."""
    if not R.metric("valid_ppl").where(model=m, method="int8_vectorwise"):
        return None
    iv = _diff(R, m, "int8_vectorwise", "fp32")
    if iv is None or iv["predates"]:
        return None
    if _above(iv["lo"], iv["hi"], 0.0):
        return None
    return (f"vector-wise int8 does not measurably degrade here ({_pct(iv['d']):+.3f}% "
            f"[{_pct(iv['lo']):+.3f}%, {_pct(iv['hi']):+.3f}%])")


def _int8_headline_here(R: Rows, m, params: dict) -> bool:
    """LLM.int8()'s equivalence is a headline on ``m`` when ``m`` can discriminate it, or when no measured model
    can (then each model's not-applicable check is the headline: the run could not decide the claim)."""
    models = R.metric("valid_ppl").where(method="llm_int8").sweep("model")
    able = [x for x in models if _no_outlier_features(R, x, params) is None and _vw_degrades(R, x) is None]
    return m in able or not able


def _int8_unchanged(R: Rows, m, params: dict, T: dict, gates: list[dict]) -> list[dict]:
    """1. LLM.int8() keeps perplexity: an equivalence test, the whole 95% interval of the change inside the suite's
    +-tol (derived from LLM.int8() Table 1; the paper states none). LLM.int8() is deterministic: its interval is the
    evaluation sentences' paired sampling error (:func:`_diff`). Not applicable where the comparison cannot
    discriminate: activations without outlier features (:func:`_no_outlier_features`), or vector-wise int8 not
    measurably degrading on them (:func:`_vw_degrades`); then it is reported, never held, and a headline only when
    no model of the run can discriminate (the outlier copy, model lm_outliers, is where it can)."""
    fp, li = _ppl(R, m, "fp32"), _ppl(R, m, "llm_int8")
    if not (fp and li):
        return []
    tol_pct = _pub("int8_ppl_equivalence_tol")
    tol = tol_pct / 100
    bounds = (math.log(1 - tol), math.log(1 + tol))
    iv = _diff(R, m, "llm_int8", "fp32")
    r, lo, hi = _pct(iv["d"]), _pct(iv["lo"]), _pct(iv["hi"])
    none = _no_outlier_features(R, m, params) or _vw_degrades(R, m)
    ok = None if none or iv["predates"] else _within(iv["lo"], iv["hi"], *bounds)
    why = (f"not applicable: {none}; without outliers that break vector-wise int8 the comparison cannot "
           "discriminate what LLM.int8() is about (it keeps perplexity where outliers break vector-wise int8)"
           if none else PREDATES if iv["predates"] else
           f"the change's interval [{lo:+.3f}%, {hi:+.3f}%] reaches the +-{tol_pct}% tolerance")
    return [gated(check(f"{m}: LLM.int8() leaves perplexity unchanged", ok,
                        f"fp32 {fp[0]:.3f}, LLM.int8() {li[0]:.3f} ({r:+.3f}%)",
                        f"13B C4: fp32 {_pub('int8_c4_ppl_13b_fp32')}, LLM.int8() "
                        f"{_pub('int8_c4_ppl_13b_llm_int8')}; suite: equivalence, the change's interval inside "
                        f"+-{tol_pct}% (the suite's bound, derived from LLM.int8() Table 1's largest change: "
                        "registry int8_ppl_equivalence_tol; the paper states no tolerance)",
                        headline=_int8_headline_here(R, m, params),
                        interval=f"[{lo:+.3f}%, {hi:+.3f}%]: 95% interval of the change from the evaluation "
                        "sentences (LLM.int8() is deterministic)" + _eval_words(iv),
                        undecided_because=None if ok is not None else why,
                        numbers=numbers(r, "% perplexity change", lo=lo, hi=hi,
                                        paper=100 * (_pub("int8_c4_ppl_13b_llm_int8")
                                                     / _pub("int8_c4_ppl_13b_fp32") - 1),
                                        compare="difference", criterion="suite", rule=f"within +-{tol_pct:g}%",
                                        source="int8_c4_ppl_13b_llm_int8"),
                        power=None if none else _power_sentences(iv, bounds, _pct)),
                  gates)]


def _gptq_rtn_models(R: Rows) -> list:
    """The models on which GPTQ against RTN counts: the outlier copies (models with an ``outlier_copy_fp32_change``
    row) that have GPTQ rows, where RTN's grid meets the OPT-size situation GPTQ Tables 3-5 are about; when no
    copy has them (rows of the design before, or a run without the copy), every model with GPTQ rows."""
    gptq = R.metric("valid_ppl").where(family="gptq").sweep("model")
    copies = [x for x in gptq if R.metric("outlier_copy_fp32_change").where(model=x)]
    return copies or gptq


def _reported_only(R: Rows, m) -> str | None:
    """Why GPTQ against RTN on ``m`` is reported and never counted (the plan states it in advance): another
    model, the outlier copy, carries the comparison; None when it counts on ``m``."""
    counted = _gptq_rtn_models(R)
    if m in counted:
        return None
    return (f"reported only, never counted: GPTQ against RTN is decided on {', '.join(counted)} (the LM's outlier "
            "copy, where 4-bit RTN measurably hurts; on this model it barely does, so no sample decides it)")


def _bits_words(bits: list[int]) -> str:
    return " and ".join(str(b) for b in sorted(bits)) + " bits"


def _gptq_rtn_check(m, items: list[tuple[str, dict, str]], name: str, headline: bool, unit_words: str,
                    gates: list[dict], reported_only: str | None = None, thresholds: dict | None = None,
                    rule: str = "< 0 in every setting") -> list[dict]:
    """A check that GPTQ's perplexity lies below RTN's in every item (label, interval of :func:`_diff` or
    :func:`_pooled`, measured words): each interval from both sources below 0; rows without paired losses decide
    nothing. Its numbers: the item nearest to failing, as the % perplexity change GPTQ vs RTN. ``reported_only``
    (:func:`_reported_only`): shown with its decision, never counted, never a headline."""
    if not items:
        return []
    decisions, ivs, pws, old_rows, worst = [], [], [], False, None
    for label, iv, _ in items:
        old_rows = old_rows or iv["predates"]
        decisions.append(None if iv["predates"] else _below(iv["lo"], iv["hi"], 0.0))
        ivs.append(f"{label} {_pct(iv['d']):+.2f}% [{_pct(iv['lo']):+.2f}%, {_pct(iv['hi']):+.2f}%] (seeds +- "
                   f"{_pct(iv['seed_half']):.2f}%" + ("" if iv["predates"] else
                                                       f", evaluation +- {_pct(iv['eval_half']):.2f}%") + ")")
        if worst is None or iv["hi"] > worst[1]["hi"]:
            worst = (label, iv)
        pws.append(_power_two(iv, 0.0, _pct) if not iv["predates"] else
                   {**power(_pct(iv["d"]), _pct(iv["lo"]), _pct(iv["hi"]), 0.0, iv["k"], "calibration seeds"),
                    "n_needed": None, "why": PREDATES})
    ok = both(*decisions)
    why = None if ok is not None else (
        PREDATES + ", so no interval holds both sources" if old_rows else
        "an interval of GPTQ - RTN (calibration seeds and evaluation sentences) reaches 0")
    w = worst[1]
    return [gated(check(f"{m}: {name}", ok, "; ".join(t for *_, t in items),
                        "GPTQ Tables 3-5: GPTQ < RTN at 3 and 4 bits (RTN collapses at 3 bits)"
                        + (f"; {reported_only}" if reported_only else ""),
                        headline=headline and not reported_only, counts=not reported_only,
                        interval=f"perplexity change GPTQ vs RTN {unit_words}, 95% interval from "
                        "the calibration seeds' spread and the evaluation sentences' paired error "
                        "(Welch-Satterthwaite): " + "; ".join(ivs), undecided_because=why,
                        thresholds=thresholds,
                        numbers=numbers(_pct(w["d"]), f"% perplexity, GPTQ vs RTN ({worst[0]})",
                                        lo=_pct(w["lo"]), hi=_pct(w["hi"]),
                                        paper_text="GPTQ below RTN at 3 and 4 bits (GPTQ Tables 3-5)",
                                        rule=rule),
                        power=_worst(pws)),
                  gates)]


def _gptq_below_rtn(R: Rows, m, params: dict, T: dict, gates: list[dict]) -> list[dict]:
    """2. The headline: GPTQ's perplexity below RTN's at each bit width of ``gptq_rtn_headline_bits`` (GPTQ Tables
    3-5 compare GPTQ and RTN at 3 and 4 bits), pooled over the group settings (:func:`_pooled`: per calibration seed
    the mean over settings of ln ppl(GPTQ) - ln ppl(RTN), with the pooled paired row's evaluation error), every
    interval below 0; the other measured bit widths: the same test as a counted secondary check. Pooling was chosen
    on exploration data (the committed references): single settings differ between machines' models (4-bit per
    channel -0.02% on one, -0.37% on another) while the bit width's mean holds on each."""
    heads, by_head = {int(b) for b in T["gptq_rtn_headline_bits"]}, {True: [], False: []}
    for bits in sorted({r["sweep"].get("bits") for r in R.metric("valid_ppl").where(model=m, family="gptq")}
                       - {None}, reverse=True):
        got = _pooled(R, m, int(bits))
        if got:
            iv, settings = got
            by_head[int(bits) in heads].append((int(bits), (
                f"{int(bits)}-bit", iv, f"{int(bits)} bits ({', '.join(settings)}): "
                f"{_pct(iv['d']):+.2f}% over {iv['k']} seeds")))
    out = []
    for head in (True, False):
        if by_head[head]:
            bits = [b for b, _ in by_head[head]]
            out += _gptq_rtn_check(m, [it for _, it in by_head[head]],
                                   f"GPTQ's perplexity is below RTN's at {_bits_words(bits)}", head,
                                   "per bit width (pooled over group settings)", gates, _reported_only(R, m),
                                   uses(T, "gptq_rtn_headline_bits"), "< 0 at every bit width")
    return out


def _gptq_each_setting(R: Rows, m, params: dict, T: dict, gates: list[dict]) -> list[dict]:
    """2b. GPTQ below RTN in every setting (bits and groups): each interval of :func:`_diff` below 0 (secondary:
    a single setting of a small model may tie)."""
    items, bits = [], set()
    for meth in sorted(_gptq_methods(R, m)):
        rtn = meth.replace("gptq", "rtn", 1)
        g, rt = _ppl(R, m, meth), _ppl(R, m, rtn)
        if g and rt:
            bits |= set(R.metric("valid_ppl").where(model=m, method=meth).sweep("bits"))
            items.append((meth, _diff(R, m, meth, rtn),
                          f"{meth} {g[0]:.2f} +- {g[1] or 0:.2f} over {g[2]} seeds vs {rtn} {rt[0]:.2f}"))
    if len(items) == len(bits):
        return []  # one setting per bit width: the bit widths' pooled intervals are these, one decision counted once
    return _gptq_rtn_check(m, items, "GPTQ's perplexity is below RTN's in every setting (bits and groups)", False,
                           "per setting", gates, _reported_only(R, m))


def _int8_worse(R: Rows, m, a: str, name: str, expected: str, gates: list[dict], same=None) -> list[dict]:
    """int8 method ``a`` loses more perplexity than LLM.int8() on the same sentences: the 95% interval of
    ln ppl(a) - ln ppl(LLM.int8()), both deterministic, from the evaluation sentences' paired error (:func:`_diff`),
    above 0. ``same``: why the two are one measurement (then not applicable)."""
    ab, li = _ppl(R, m, a), _ppl(R, m, "llm_int8")
    iv = _diff(R, m, a, "llm_int8")
    ok = None if same or iv["predates"] else _above(iv["lo"], iv["hi"], 0.0)
    why = (f"not applicable: {same}; the two are one measurement, so it cannot credit the decomposition" if same
           else PREDATES if iv["predates"] else None if ok is not None else
           "the difference's interval includes 0: the two are within the evaluation sentences' error"
           + (" (with 0 outlier dimensions there is no outlier to lose precision to)" if _no_outliers(R, m) else ""))
    return [gated(check(f"{m}: {name}", ok,
                        f"{a.replace('int8_', '')} {ab[0]:.3f} vs LLM.int8() {li[0]:.3f} ({_pct(iv['d']):+.3f}%)",
                        expected, interval=None if same else
                        f"[{_pct(iv['lo']):+.3f}%, {_pct(iv['hi']):+.3f}%] (both deterministic: the evaluation "
                        "sentences' paired error" + _eval_words(iv) + ")",
                        undecided_because=why, power=None if same else _power_sentences(iv, 0.0, _pct)),
                  gates)]


def _absmax_worse(R: Rows, m, params: dict, T: dict, gates: list[dict]) -> list[dict]:
    """3. Tensor-wise absmax int8 worse than LLM.int8() (LLM.int8() Table 1: 19.08 vs 12.45 at 13B)."""
    if not (_ppl(R, m, "int8_absmax") and _ppl(R, m, "llm_int8") and _ppl(R, m, "fp32")):
        return []
    same = _vectorwise_here(R, m)
    out = _int8_worse(R, m, "int8_absmax", "tensor-wise absmax int8 loses more than LLM.int8()",
                      f"13B: absmax {_pub('int8_c4_ppl_13b_absmax')} vs {_pub('int8_c4_ppl_13b_llm_int8')} "
                      "(strictly worse, beyond the evaluation's error)", gates)
    if same:
        out[0]["measured"] += f"; {same}"
    return out


def _decomposition(R: Rows, m, params: dict, T: dict, gates: list[dict]) -> list[dict]:
    """4. The check that credits LLM.int8()'s outlier decomposition: vector-wise int8 loses perplexity that
    LLM.int8() keeps. Not applicable when LLM.int8() is the vector-wise product (0 outlier dimensions, identical
    losses) or the activations hold no outlier features: the measurement cannot credit the decomposition."""
    dd = R.metric("decomposed_dims").where(model=m, method="llm_int8").first()
    if not (_ppl(R, m, "int8_vectorwise") and _ppl(R, m, "llm_int8") and dd):
        return []
    out = _int8_worse(R, m, "int8_vectorwise", "the outlier decomposition improves on vector-wise int8",
                      "vector-wise int8 degrades once outliers emerge (>= 6.7B); the decomposition keeps fp16 "
                      "quality", gates, same=_vectorwise_here(R, m) or _no_outlier_features(R, m, params))
    out[0]["measured"] += f"; {int(dd['value'])} (layer, dim) pairs reached |x| >= {params['int8']['threshold']}"
    return out


def _values_8bit(R: Rows, m, params: dict, T: dict, gates: list[dict]) -> list[dict]:
    """5. The share of values LLM.int8() multiplies in 8 bits (by construction without outliers: not applicable)."""
    row = R.metric("values_8bit_pct").where(model=m, method="llm_int8").first()
    if not row:
        return []
    v, none, share = row["value"], _no_outliers(R, m), _pub("int8_fraction_values_8bit")
    if R.metric("outlier_copy_fp32_change").where(model=m):
        return [check(f"{m}: more than {share:g}% of the values are multiplied in 8 bits", None, f"{v:.4f}%",
                      f"> {share}%", undecided_because="not applicable: the outlier copy's outlier dimensions are set "
                      "by construction (outlier_copy.dims of d_model), so the share in 16 bits measures the copy, "
                      "not LLM.int8() (the paper's 0.1% is a few dimensions of d_model >= 4096)")]
    return [check(f"{m}: more than {share:g}% of the values are multiplied in 8 bits",
                  None if none else decide_point(v, above=share),
                  f"{v:.4f}%" + ("; 0 outlier dimensions" if none else ""), f"> {share}%",
                  undecided_because="not applicable: 0 outlier dimensions reached the threshold, so "
                  "every value is multiplied in 8 bits by construction" if none else None)]


def _int8_memory(R: Rows, m, params: dict, T: dict, gates: list[dict]) -> list[dict]:
    """6. LLM.int8()'s stored weights against 16-bit weights (an exact count: a value on the bound is a tie)."""
    c = T
    v = R.metric("weight_bytes_vs_fp16").where(model=m, method="llm_int8").first()
    if not v:
        return []
    return [check(f"{m}: LLM.int8() weights take about half of 16-bit weights",
                  decide_point(v["value"], below=c["int8_bytes_max"]),
                  f"{v['value']:.3f} x fp16 (int8 codes + fp32 scale per output channel)",
                  f"~{100 - _pub('int8_memory_reduction')}% of 16-bit (< {c['int8_bytes_max']})",
                  undecided_because=f"exactly on the bound {c['int8_bytes_max']}: a tie"
                  if v["value"] == c["int8_bytes_max"] else None,
                  thresholds=uses(T, "int8_bytes_max"))]


def _gptq4_loss(R: Rows, m, params: dict, T: dict, gates: list[dict]) -> list[dict]:
    """7. GPTQ 4-bit (every group setting) loses little: the interval of its perplexity change against fp32 (both
    sources, :func:`_diff`) below ``gptq4_ppl_tol``."""
    c, fp = T, _ppl(R, m, "fp32")
    if not fp:
        return []
    parts, decisions, ivs, pws = [], [], [], []
    bound = math.log(1 + c["gptq4_ppl_tol"])
    for meth in sorted(_gptq_methods(R, m, bits=4)):
        iv = _diff(R, m, meth, "fp32")
        decisions.append(_below(iv["lo"], iv["hi"], bound))
        parts.append(f"{meth} {math.exp(iv['d']) * fp[0]:.2f} ({_pct(iv['d']):+.1f}%)")
        ivs.append(f"{meth} [{_pct(iv['lo']):+.2f}%, {_pct(iv['hi']):+.2f}%]" + _eval_words(iv))
        pws.append(_power_two(iv, bound, _pct))
    if not decisions:
        return []
    ok = both(*decisions)
    return [gated(check(f"{m}: GPTQ 4-bit loses little perplexity", ok, f"fp32 {fp[0]:.2f}; " + "; ".join(parts),
                        f"'negligible' at 175B (<= {100 * c['gptq4_ppl_tol']:.0f}% here); small OPT "
                        "models lose more (GPTQ Table 3)",
                        interval="95% interval of the change (calibration seeds and evaluation sentences): "
                        + "; ".join(ivs),
                        undecided_because=None if ok is not None else "interval straddles the bound",
                        thresholds=uses(T, "gptq4_ppl_tol"), power=_worst(pws)),
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
    construction; only rows scored on held-out inputs can decide (the calibration rows are shown undecided). The
    share of (layer, setting, seed) cases GPTQ wins, over the decided cases (an exact tie decides nothing), decides
    by its exact binomial 95% interval against ``layer_win_min``."""
    c = T
    errors = R.metric("layer_rel_error").where(model=m)
    in_sample = errors.filter(lambda r: not _held_out(r))
    for name, held, scored in (("held-out", True, errors.filter(_held_out)), ("calibration", False, in_sample)):
        pairs = _gptq_rtn_pairs(scored)
        if not pairs:
            continue
        decided = [v for v in pairs if v["gptq"] != v["rtn"]]
        wins, n = sum(bool(v["gptq"] < v["rtn"]) for v in decided), len(decided)
        rs = [v["gptq"] / v["rtn"] for v in pairs if v["rtn"] > 0]
        ratio = float(np.median(rs)) if rs else float("nan")
        lo, hi = clopper_pearson(wins, n, 0.025) if n else (0.0, 1.0)
        ok = (decide_interval(lo, hi, above=c["layer_win_min"]) if n else None) if held else None
        why = None
        if not held:
            why = ("in-sample: the errors are scored on GPTQ's own calibration inputs, which GPTQ minimises by "
                   "construction; the rows have no held-out inputs")
        elif ok is None:
            why = (f"the share's interval [{lo:.3f}, {hi:.3f}] reaches {c['layer_win_min']}" if n
                   else "every case is a tie")
        return [check(f"{m}: GPTQ's layer-wise reconstruction error is below RTN's", ok,
                      f"{wins}/{n} (layer, setting, seed) cases on {name} inputs"
                      + (f" ({len(pairs) - n} ties left out)" if len(pairs) > n else "")
                      + f"; median error ratio GPTQ/RTN {ratio:.3f}",
                      f"GPTQ minimises ||WX - QX||^2 layer by layer (Eq. 1); more than "
                      f"{100 * c['layer_win_min']:.0f}% of the cases on held-out inputs",
                      interval=f"exact binomial 95% interval of the share won [{lo:.3f}, {hi:.3f}]" if held else None,
                      undecided_because=why, thresholds=uses(T, "layer_win_min") if held else None,
                      power=power(wins / n, lo, hi, c["layer_win_min"], n, "(layer, setting, seed) cases")
                      if held and n else None)]
    return []


MODEL_CHECKS = (_int8_unchanged, _gptq_below_rtn, _gptq_each_setting, _absmax_worse, _decomposition, _values_8bit,
                _int8_memory, _gptq4_loss, _layer_error)


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
    cp = R.metric("outlier_copy_fp32_change").where(model=m).first()
    if cp:
        out.append(gate(f"{m}: the outlier copy computes the LM's function in fp32",
                        cp["value"] <= c["copy_fp32_tol"],
                        f"largest per-sentence change of the fp32 NLL against the LM's: {cp['value']:.2g} nats/token "
                        f"over {int(cp['n'])} sentences (dims {cp['sweep'].get('dims')} x {cp['sweep'].get('scale')})",
                        f"<= {c['copy_fp32_tol']:g} nats/token (float rounding only)",
                        thresholds=uses(c, "copy_fp32_tol")))
    cb, fb = R.metric("copy_bleu").where(model=m).first(), R.metric("bleu").where(model=m, method="fp32").first()
    if cb and fb:
        bleu_margin = float(c["bleu_gate_margin"])
        out.append(gate(f"{m}: the fp32 model translates (BLEU vs the copy baseline)",
                        fb["value"] > cb["value"] + bleu_margin,
                        f"BLEU {fb['value']:.2f} vs copy {cb['value']:.2f}",
                        f"more than {bleu_margin} BLEU above the copy baseline"))
    return out


def _emergence(R: Rows, models: list) -> list[dict]:
    """9. Outlier emergence with scale (Section 4.2; the criteria: Section 4.1): reported, undecided (one model size
    shows no trend)."""
    emer = []
    for m in models:
        la, sa, p = (R.metric(k).where(model=m).first()
                     for k in ("outlier_layers_affected", "outlier_seq_affected", "model_parameters"))
        if la and sa and p:
            emer.append((m, la["value"], sa["value"], p["value"]))
    if not emer:
        return []
    la_pub, sa_pub = _pub("int8_emergence_layers_affected"), _pub("int8_emergence_seq_dims_affected")
    return [check("outlier features emerge with scale (LLM.int8() Section 4.2, Fig. 3a)", None,
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
        ev = params["eval"]
        n_test = ev.get("ppl_test_sentences", 0)
        return {"data": "the suite's corpus (perplexity on "
                        + (f"the first {ev['valid_sentences']}" if ev["valid_sentences"] else "all")
                        + " validation sentences" + ("" if n_test == 0 else " and " + (
                            f"the first {n_test}" if n_test else "all") + " test sentences") + ")",
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
    """Checks (``thresholds``: the judge: section of config/claims/quantization.yaml). Every perplexity comparison
    is paired (two methods on the same evaluation tokens) and decided on D = ln ppl(a) - ln ppl(b) with a 95%
    interval from both of its sources (:func:`_diff`): the spread of D over GPTQ's calibration seeds and the
    evaluation tokens' own sampling error, the standard error of the paired per-sentence difference the measurement
    records (``paired_nll_diff``), added as variances (Welch-Satterthwaite degrees of freedom). The noise of one
    deterministic method (LLM.int8(), absmax, vector-wise int8, RTN) is its own: the evaluation sentences' paired
    error alone (it has no calibration seeds). A value or an interval edge on a
    threshold is a tie: undecided. Every interval-decided check carries ``power=`` (the seeds or evaluation sentences
    that would decide it if the estimate held). Gates: the fp32 LM's validation perplexity is below
    ``lm_gate_ratio`` x the unigram baseline (translation: BLEU more than ``bleu_gate_margin`` above the copy
    baseline); checks on a model that did not learn are undecided.

    Headlines:
    1. LLM.int8() keeps perplexity - the interval of ppl(llm_int8) / ppl(fp32) - 1 lies inside
       +-``int8_ppl_equivalence_tol`` (13B C4: 12.45 = 12.45), on the models where it can discriminate (outlier
       features that measurably break vector-wise int8: the LM's outlier copy lm_outliers): the suite's bound
       (registry: derived from Table 1's largest change, not a number the paper states), shown as the suite's
       criterion. Not applicable (reported, never held, and a headline only when no model can discriminate) where
       the activations hold no outlier features of the paper's size (Section 4.1: |x| >= 6 in >= 25% of the layers
       and 6% of the sequence positions; ``systematic_outlier_dims`` 0) or vector-wise int8 does not measurably
       degrade on them: then the comparison cannot discriminate.
    2. GPTQ beats RTN at the bit widths of ``gptq_rtn_headline_bits`` (GPTQ Tables 3-5: 3 and 4 bits; the default
       scale's 3: there 4-bit RTN barely loses, so no sample decides a gain; the other measured bit widths are a
       counted secondary check): at each bit width, the interval of ln ppl(GPTQ) - ln ppl(RTN) pooled over the
       group settings lies below 0 (every single setting: a secondary check, left out where a bit width has one
       setting). Rows without the paired per-sentence losses (measured before they were recorded) decide nothing.
       Decided on the LM's outlier copy where it has GPTQ rows (:func:`_gptq_rtn_models`: rows of the earlier
       design, whose copy ran GPTQ and RTN); the other models' comparisons are then reported only
       (``counts=False``, stated in the plan), so one decision counts once.
    Secondary:
    3. absmax (tensor-wise) int8 loses more than LLM.int8() (19.08 vs 12.45): beyond the evaluation sentences'
       paired error (both deterministic).
    4. The decomposition matters where there are outliers (the check that credits it): ppl(vectorwise) >
       ppl(llm_int8); not applicable without outlier features or when LLM.int8() is the vector-wise product (0
       outlier dimensions, identical losses).
    5. More than 99.9% of the values are multiplied in 8 bits (not applicable without outlier dimensions).
    6. LLM.int8() weights take about half of 16-bit weights (< ``int8_bytes_max`` x fp16, scales included).
    7. GPTQ 4-bit (every group setting) loses little: the interval of its perplexity change against fp32 below
       ``gptq4_ppl_tol``.
    8. GPTQ's layer-wise reconstruction error is below RTN's on the same held-out inputs: the exact binomial 95%
       interval of the share of (layer, setting, seed) cases won (exact ties left out) above ``layer_win_min``;
       undecided on GPTQ's own calibration inputs.
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
