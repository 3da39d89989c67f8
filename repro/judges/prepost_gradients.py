"""The judge of prepost_gradients (Xiong et al., ICML 2020, arXiv 2002.04745, "On Layer Normalization in the
Transformer Architecture": Fig 3(a,b) per-layer FFN gradient norms at initialization, Post-LN growing toward the
output and Pre-LN flat; Fig 3(c,d) and Theorem 1, the final W2 gradient's depth exponent, Post-LN ~L^0 and Pre-LN
~L^-1/2; Lemma 2, the hidden states' expected squared norms): the verdict from the rows
repro/claims/prepost_gradients.py measured, with the thresholds of the judge: section of
config/claims/prepost_gradients.yaml. The paper's constants come from the registry (repro/registry/published.yaml).
"""
from __future__ import annotations

import math
import statistics

from repro import registry
from repro.intervals import sample_interval_at, t_interval
from repro.verdicts import (Rows, both, check, decide_interval, decide_within, look_text, looks_for, numbers, power,
                            sequential, setup_table, side, sized, uses, verdict_from_checks)
from repro.vocabulary.prepost_gradients import CLAIM, FFN_MATRICES


# ------------------------------------------------------------------------------------------------ verdict
def judge(rows: list[dict], thresholds: dict, context: dict) -> dict:
    """Checks, each decided by a 95% interval and strict at its edges (an interval touching a threshold, or NaN, is
    undecided or fails, never holds); the paper's constants are read from the registry
    (repro/registry/published.yaml), the tolerances around them from ``thresholds`` (the judge: section of
    config/claims/prepost_gradients.yaml):

    - Fig 3(a,b), each norm kind, encoder and decoder FFN W1 and W2 (95% t-interval over seeds): Post-LN's slope of
      ln(norm) per layer above ``grow_slope_min`` (grows toward the output) and Pre-LN's slope inside
      +-``flat_ratio_max`` x Post-LN's ("roughly flat": holds when Pre-LN's interval lies inside the band built on
      Post-LN's lower bound, fails when it lies outside the band built on Post-LN's upper bound). HEADLINE:
      LayerNorm, decoder, W2 (Xiong's Fig 3, "Post-LN has large gradients near the output"); the rest secondary.
      Norm kinds whose slope rows are equal (RMSNorm and ScaleNorm at initialisation: the same map) are one
      measurement and make one check ("rmsnorm = scalenorm"), never two confirmations.
    Every interval check carries its power (repro.verdicts.power: the sample that would decide it if the estimate
    held; for a check of several intervals, its undecided part needing the most; "Pre flat" on the flatness margin
    |pre| - flat_ratio_max x post, whose half-width is Pre's plus flat_ratio_max x Post's).
    - Fig 3(c,d) full model and the Theorem 1 simplified setting: the Post-LN final-W2 depth exponent inside
      Theorem 1's exponent (``thm1_postln_depth_exponent``, L^0) +-``flat_depth_exponent_max``, Pre-LN's inside
      ``thm1_preln_depth_exponent`` (-1/2) +-``exponent_tolerance``, and the Pre/Post ratio's inside
      ``thm1_preln_over_postln_depth_exponent`` +-``exponent_tolerance`` (HEADLINE for Fig 3(c,d)).
    - Lemma 2 (Monte Carlo; the rows' spread is the standard error of the mean over samples, the interval the 95%
      t-interval of that mean): Post-LN E||x^{post,5}||^2/d inside ``lemma2_postln_sq_norm_over_d`` (3/2) x
      (1 +- ``lemma2_rel_tol``) at every layer; Pre-LN inside [a + b l, a' + b' l] from ``lemma2_preln_sq_norm_lower``
      / ``_upper`` (1 + l/2, 1 + 3l/2) at every layer. Holds when every layer's interval lies inside, fails when one
      lies wholly outside, undecided otherwise (noise never widens the tolerance).

    Planned looks (the plan's ``looks`` over ``seeds``, repro.plan; context["plan"]): when the measurement used the
    plan's seeds, the Fig 3(a,b) and Fig 3(c,d) checks are judged on the first n_1 < ... < n_K seeds' per-seed fits
    (from the per-seed rows) at 1 - 0.05/K each (Bonferroni), decided at the first look that decides, and record it
    (``look``: {k, of, n, confidence}); otherwise once on every seed at 95%. The Theorem 1 setting has its own seeds
    and no looks.
    """
    R, T, params = Rows(rows), thresholds, context["params"]
    at = looks_for(context.get("plan"), params, "seeds")
    checks = [*_layer_slope_checks(R, params["norms"], T, _slope_seeds(R, params, at)),
              *_depth_exponent_checks(R, T, _fig3_seeds(R, params, at)),
              *_lemma2_postln_checks(R, T), *_lemma2_preln_checks(R), *_absolute_norm_checks(R)]
    return verdict_from_checks(CLAIM, checks, context["scale"],
                               setup=setup_table(CLAIM, this_setup(params, context.get("device"))))


def _paper(key: str):
    return registry.published(CLAIM, key)["value"]


def _ci(r: dict) -> tuple[float, float]:
    """95% t-interval of a seed-mean row (spread is the seeds' std)."""
    return t_interval(r["value"], r["spread"], r["n"])


def _txt(r: dict) -> str:
    lo, hi = _ci(r)
    return f"{r['value']:+.3f} [{lo:+.3f}, {hi:+.3f}]"


def _se_interval(r: dict) -> tuple[float, float]:
    """95% t-interval of a Monte Carlo mean whose spread is its standard error."""
    if r["spread"] is None or r["n"] is None:
        return -math.inf, math.inf
    return t_interval(r["value"], r["spread"] * math.sqrt(r["n"]), r["n"])


# Two norm kinds whose slope rows differ by less than this fraction of (|value| + the seeds' std) are one measurement:
# RMSNorm (unit gain) and ScaleNorm (g = sqrt(d)) are the same map sqrt(d) x / ||x|| at initialisation, and their rows
# differ only by float rounding (about 1e-5 relative on the committed reference), far inside the seeds' spread.
IDENTICAL_RTOL = 1e-3
_SLOPE_KEYS = [(pos, stack, matrix) for pos in ("post", "pre") for stack in ("decoder", "encoder")
               for matrix in FFN_MATRICES]


def _slope_rows(slopes: Rows, norm: str) -> dict:
    return {k: slopes.where(norm=norm, position=k[0], stack=k[1], matrix=k[2]).first() for k in _SLOPE_KEYS}


def _close(a: float | None, b: float | None, scale: float) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return abs(float(a) - float(b)) <= IDENTICAL_RTOL * scale


def _same_measurement(a: dict, b: dict) -> bool:
    """Every slope row of two norm kinds equal (value, spread and seeds) to within ``IDENTICAL_RTOL`` of the rows'
    own size and spread: the same measurement twice, to be counted once."""
    present = [k for k in _SLOPE_KEYS if a[k] or b[k]]
    if not present:
        return False
    for k in present:
        ra, rb = a[k], b[k]
        if not (ra and rb) or (ra.get("n") or 0) != (rb.get("n") or 0):
            return False
        scale = abs(float(ra["value"])) + float(ra.get("spread") or 0.0)
        if not (_close(ra["value"], rb["value"], scale) and _close(ra.get("spread"), rb.get("spread"), scale)):
            return False
    return True


def _norm_groups(slopes: Rows, norms: list[str]) -> list[list[str]]:
    """The norm kinds grouped by identical measurements (in the configured order; the first of a group stands for
    it): RMSNorm and ScaleNorm at initialisation, decided once, never two independent confirmations."""
    groups: list[list[str]] = []
    rows = {n: _slope_rows(slopes, n) for n in norms}
    for norm in norms:
        for g in groups:
            if _same_measurement(rows[g[0]], rows[norm]):
                g.append(norm)
                break
        else:
            groups.append([norm])
    return groups


def _pick_power(parts: list[tuple[str, dict]]) -> dict | None:
    """The power of a check made of several interval decisions, each part given as (its rule: "above", "below" or
    "within" its threshold; its power): sized by the part projected to decide it first (repro.verdicts.sized: the
    cheapest part projected to fail, else the last part to hold)."""
    return sized([(side(pw, rule), pw) for rule, pw in parts])[1]


def _flat_power(post: dict, pre: dict, ratio: float, n: int) -> dict:
    """Power of "Pre-LN flat": the check holds when |Pre| + its half-width < ratio x (Post - its half-width), fails
    when |Pre| - its half-width > ratio x (Post + its half-width); both half-widths shrink as 1/sqrt(seeds), so the
    statistic is the flatness margin |Pre| - ratio x Post, with half-width Pre's + ratio x Post's, against 0."""
    (plo, phi), (qlo, qhi) = _ci(post), _ci(pre)
    margin = abs(pre["value"]) - ratio * post["value"]
    half = (qhi - qlo) / 2 + ratio * (phi - plo) / 2
    return power(margin, margin - half, margin + half, 0.0, n, "seeds")


def _grows_and_flat(plo: float, phi: float, qlo: float, qhi: float, c: dict) -> bool | None:
    """Fig 3(a,b)'s decision from Post-LN's slope interval (plo, phi) and Pre-LN's (qlo, qhi)."""
    narrow, wide = c["flat_ratio_max"] * max(plo, 0.0), c["flat_ratio_max"] * max(phi, 0.0)
    flat = True if decide_within(qlo, qhi, -narrow, narrow) else \
        False if decide_within(qlo, qhi, -wide, wide) is False else None
    return both(decide_interval(plo, phi, above=c["grow_slope_min"]), flat)


def _slope_seeds(R: Rows, params: dict, at: list[int] | None) -> dict | None:
    """Fig 3(a,b)'s per-seed slopes of ln(FFN gradient norm) on the layer, {(norm, position, stack, matrix): [slope
    per seed in the order of the ``seeds`` parameter]}, as the measurement fits them, for the planned looks ``at``;
    None without looks or per-seed rows."""
    grads = R.metric("weight_grad_norm").filter(lambda r: r["sweep"]["matrix"] in FFN_MATRICES)
    if not at or not grads:
        return None
    out = {"at": at}
    for key in sorted({tuple(r["sweep"][k] for k in ("norm", "position", "stack", "matrix")) for r in grads}):
        sel, vals = grads.where(**dict(zip(("norm", "position", "stack", "matrix"), key))), []
        for seed in params["seeds"]:
            pts = sorted((r["sweep"]["layer"], r["value"]) for r in sel.where(seed=seed))
            if len(pts) < 2:
                return None
            vals.append(statistics.linear_regression([a for a, _ in pts], [math.log(b) for _, b in pts]).slope)
        out[key] = vals
    return out


def _layer_slope_checks(R: Rows, norms: list[str], c: dict, seeds: dict | None = None) -> list[dict]:
    """Fig 3(a,b) per norm kind, stack and FFN matrix: Post-LN grows with the layer, Pre-LN roughly flat. Norm
    kinds whose rows are the same measurement (RMSNorm = ScaleNorm at init) make one check, decided once. With
    planned looks (``seeds``: :func:`_slope_seeds`) each is decided at the first look that decides."""
    checks = []
    slopes = R.metric("ffn_grad_log_slope_per_layer")
    for group in _norm_groups(slopes, norms):
        norm, label = group[0], " = ".join(group)
        same = (f"; {', '.join(group[1:])}'s rows equal {norm}'s (within {IDENTICAL_RTOL:g} of the seeds' spread): "
                f"one measurement, counted once") if len(group) > 1 else ""
        for stack in ("decoder", "encoder"):
            for matrix in FFN_MATRICES:
                post = slopes.where(norm=norm, position="post", stack=stack, matrix=matrix).first()
                pre = slopes.where(norm=norm, position="pre", stack=stack, matrix=matrix).first()
                if not (post and pre):
                    continue
                n = int(post["n"] or 1)
                (plo, phi), (qlo, qhi) = _ci(post), _ci(pre)
                pw = _pick_power([("above", power(post["value"], plo, phi, c["grow_slope_min"], n, "seeds")),
                                  ("below", _flat_power(post, pre, c["flat_ratio_max"], n))])
                checks.append(check(
                    f"Fig 3(a,b) {label} {stack} {matrix}: Post grows with layer, Pre flat",
                    _grows_and_flat(plo, phi, qlo, qhi, c),
                    f"slope of ln(norm) per layer: post {_txt(post)}, pre {_txt(pre)} (mean [95% CI], "
                    f"{n} seeds){same}",
                    f"post > {c['grow_slope_min']}; |pre| < {c['flat_ratio_max']} x post",
                    headline=norm == "layernorm" and stack == "decoder" and matrix == "ffn.fc2",
                    interval=f"95% t-interval over {n} seeds (strict at the edges); 'Pre flat' is sized on the "
                             f"flatness margin |pre| - {c['flat_ratio_max']} x post (holds below 0, with Pre's "
                             f"half-width plus {c['flat_ratio_max']} x Post's)",
                    undecided_because=f"a 95% interval straddles or touches its threshold ({n} seeds)",
                    numbers=numbers(post["value"], "Post-LN d ln|grad| / layer", lo=plo, hi=phi,
                                    paper_text="grows with the layer; Pre-LN flat", criterion="suite",
                                    rule=f"> {c['grow_slope_min']:g}; |Pre| < {c['flat_ratio_max']:g} x Post",
                                    source="fig3_per_layer_grad_trend"),
                    thresholds=uses(c, "grow_slope_min", "flat_ratio_max"), power=pw))
                if seeds and (norm, "post", stack, matrix) in seeds and (norm, "pre", stack, matrix) in seeds:
                    looked = {"at": seeds["at"], "post": seeds[(norm, "post", stack, matrix)],
                              "pre": seeds[(norm, "pre", stack, matrix)]}
                    checks[-1] = _with_looks(checks[-1], looked, ("post", "pre"),
                                             lambda iv: _grows_and_flat(*iv["post"], *iv["pre"], c),
                                             "slope of ln(norm) per layer")
    return checks


def _fig3_seeds(R: Rows, params: dict, at: list[int] | None) -> dict | None:
    """Fig 3(c,d)'s per-seed depth exponents (post, pre, ratio: the slope of ln(norm) on ln(L) per seed, as the
    measurement fits them) in the order of the ``seeds`` parameter, with the planned look sizes ``at``, for the checks
    to judge over planned looks (repro.verdicts.sequential); None without looks or per-seed rows."""
    per = R.metric("final_w2_grad_norm").where(norm="layernorm")
    if not at or not per:
        return None
    out = {"at": at, "post": [], "pre": [], "ratio": []}
    for seed in params["seeds"]:
        post, pre = ({r["sweep"]["depth"]: r["value"] for r in per.where(position=pos, seed=seed)}
                     for pos in ("post", "pre"))
        depths = sorted(set(post) & set(pre))
        if len(depths) < 2:
            return None
        lx = [math.log(L) for L in depths]
        for kind, ys in (("post", [post[L] for L in depths]), ("pre", [pre[L] for L in depths]),
                         ("ratio", [pre[L] / post[L] for L in depths])):
            out[kind].append(statistics.linear_regression(lx, [math.log(y) for y in ys]).slope)
    return out


def _looked(seeds: dict, kinds: tuple[str, ...], decide) -> tuple[bool | None, dict, dict]:
    """A Fig 3(c,d) check over the planned looks: ``decide({kind: (lo, hi)})`` on the first n seeds' intervals at
    each look's confidence -> (passed, {kind: (mean, lo, hi)} at the deciding look, the look)."""
    def at_look(n: int, confidence: float):
        ivs = {k: sample_interval_at(seeds[k][:n], confidence) for k in kinds}
        return decide({k: iv[1:] for k, iv in ivs.items()}), ivs

    out = sequential(at_look, seeds["at"])
    return out["passed"], out["result"], {**out["look"], "decided": out["passed"] is not None}


def _depth_exponent_checks(R: Rows, c: dict, seeds: dict | None = None) -> list[dict]:
    """Fig 3(c,d) and the Theorem 1 setting: the final-W2 depth exponents of Post-LN, Pre-LN and their ratio. With
    planned looks (``seeds``: :func:`_fig3_seeds`), Fig 3(c,d)'s checks are decided at the first look whose interval
    (at 1 - 0.05 / looks) decides, and record it (``look``)."""
    tol, flat_tol = c["exponent_tolerance"], c["flat_depth_exponent_max"]
    e_post, e_pre = _paper("thm1_postln_depth_exponent"), _paper("thm1_preln_depth_exponent")
    e_ratio = _paper("thm1_preln_over_postln_depth_exponent")
    checks = []
    for prefix, label in (("fig3", "Fig 3(c,d) full model"), ("thm1", "Theorem 1 simplified setting")):
        ratio = R.metric(f"{prefix}_depth_exponent_ratio").where(norm="layernorm").first()
        post = R.metric(f"{prefix}_depth_exponent_post").where(norm="layernorm").first()
        pre = R.metric(f"{prefix}_depth_exponent_pre").where(norm="layernorm").first()
        if not ratio:
            continue
        why = f"the 95% interval overlaps or touches the edge of the band ({int(ratio['n'])} seeds)"
        unit = "seeds" if prefix == "fig3" else "seeds (Theorem 1 setting)"
        if post and pre:
            post_band, pre_band = (e_post - flat_tol, e_post + flat_tol), (e_pre - tol, e_pre + tol)
            ok_post, ok_pre = decide_within(*_ci(post), *post_band), decide_within(*_ci(pre), *pre_band)
            ok = both(ok_post, ok_pre)
            pw = _pick_power([("within", power(post["value"], *_ci(post), post_band, int(post["n"] or 1), unit)),
                              ("within", power(pre["value"], *_ci(pre), pre_band, int(pre["n"] or 1), unit))])
            checks.append(check(f"{label}: Post-LN final W2 grad flat in depth (~L^{e_post:g}), Pre-LN ~L^{e_pre:g}",
                                ok, f"d ln(norm)/d ln(L): post {_txt(post)}, pre {_txt(pre)} (mean [95% CI], "
                                f"{int(pre['n'])} seeds)",
                                f"post {e_post:g} +- {flat_tol}; pre {e_pre:g} +- {tol} (Theorem 1)",
                                interval="95% t-interval over seeds (strict at the edges)", undecided_because=why,
                                thresholds=uses(c, "flat_depth_exponent_max", "exponent_tolerance"), power=pw))
        if seeds and prefix == "fig3" and post and pre:
            checks[-1] = _with_looks(checks[-1], seeds, ("post", "pre"), lambda iv: both(
                decide_within(*iv["post"], *post_band), decide_within(*iv["pre"], *pre_band)), "d ln(norm)/d ln(L)")
        checks.append(check(f"{label}: depth exponent of the Pre/Post ratio",
                            decide_within(*_ci(ratio), e_ratio - tol, e_ratio + tol),
                            f"{_txt(ratio)} (mean [95% CI], {int(ratio['n'])} seeds)",
                            f"{e_ratio:g} (Theorem 1, 1/sqrt(L)) +- {tol}", headline=prefix == "fig3",
                            interval="95% t-interval over seeds (strict at the edges)", undecided_because=why,
                            numbers=numbers(ratio["value"], "depth exponent", lo=_ci(ratio)[0], hi=_ci(ratio)[1],
                                            paper=e_ratio, compare="difference", criterion="suite",
                                            rule=f"{e_ratio:g} +- {tol:g}",
                                            source="thm1_preln_over_postln_depth_exponent"),
                            thresholds=uses(c, "exponent_tolerance"),
                            power=power(ratio["value"], *_ci(ratio), (e_ratio - tol, e_ratio + tol),
                                        int(ratio["n"] or 1), unit)))
        if seeds and prefix == "fig3":
            checks[-1] = _with_looks(checks[-1], seeds, ("ratio",),
                                     lambda iv: decide_within(*iv["ratio"], e_ratio - tol, e_ratio + tol),
                                     "d ln(norm)/d ln(L)")
    return checks


def _with_looks(chk: dict, seeds: dict, kinds: tuple[str, ...], decide, what: str) -> dict:
    """``chk`` decided over the planned looks instead of once on every seed (:func:`_looked`): its decision, the
    intervals of the deciding look, the look and the interval's words; its power stays the full sample's."""
    passed, ivs, look = _looked(seeds, kinds, decide)
    pct = f"{100 * look['confidence']:g}%"
    txt = ", ".join(f"{k} {m:+.3f} [{lo:+.3f}, {hi:+.3f}]" for k, (m, lo, hi) in ivs.items())
    out = {**chk, "passed": passed, "look": look,
           "measured": f"{what}: {txt} (mean [{pct} CI], first {look['n']} of {seeds['at'][-1]} "
                       f"seeds); {look_text(look)}",
           "interval": f"{pct} t-interval over the first n seeds at each planned look (n = "
                       f"{', '.join(map(str, seeds['at']))}; Bonferroni over {look['of']} looks; strict at the edges)",
           "undecided_because": None if passed is not None else
           f"no planned look decided: the {pct} interval overlaps or touches the edge of the band at every look"}
    if chk.get("numbers"):  # the check's headline number is its first part's (Post-LN's slope, the ratio's exponent)
        out["numbers"] = {**chk["numbers"], "value": ivs[kinds[0]][0], "lo": ivs[kinds[0]][1], "hi": ivs[kinds[0]][2]}
    return out


def _lemma2_postln_checks(R: Rows, c: dict) -> list[dict]:
    """Lemma 2, Post-LN: E||x^{post,5}||^2 = 3d/2 at every layer, within ``lemma2_rel_tol``."""
    post5 = R.metric("lemma2_postln_sq_norm_over_d").measured()
    if not post5:
        return []
    target = _paper("lemma2_postln_sq_norm_over_d")
    band = (target * (1 - c["lemma2_rel_tol"]), target * (1 + c["lemma2_rel_tol"]))
    ivs = [_se_interval(r) for r in post5]
    oks = [decide_within(lo, hi, *band) for lo, hi in ivs]
    pw = _pick_power([("within", power(r["value"], lo, hi, band, int(r["n"] or 1), "samples"))
                      for r, (lo, hi) in zip(post5, ivs)])
    return [check(f"Lemma 2 Post-LN: E||x^{{post,5}}||^2 = {target:g} d at every layer", both(*oks),
                  ", ".join(f"{r['value']:.3f} [{lo:.3f}, {hi:.3f}]" for r, (lo, hi) in zip(post5, ivs))
                  + f" (x d; mean [95% CI], {int(post5[0]['n'] or 0)} samples)",
                  f"{target:g} x d (Lemma 2), inside {band[0]:.3f}..{band[1]:.3f} (+-{c['lemma2_rel_tol']:g} "
                  "relative)", interval="95% t-interval of each layer's Monte Carlo mean, inside the band",
                  undecided_because="a layer's 95% interval overlaps the edge of the tolerance band",
                  thresholds=uses(c, "lemma2_rel_tol"), power=pw)]


def _lemma2_preln_checks(R: Rows) -> list[dict]:
    """Lemma 2, Pre-LN: (1 + l/2) d <= E||x_l||^2 <= (1 + 3l/2) d at every layer l."""
    pre_l = R.metric("lemma2_preln_sq_norm_over_d").measured()
    if not pre_l:
        return []
    (a0, b0), (a1, b1) = _paper("lemma2_preln_sq_norm_lower"), _paper("lemma2_preln_sq_norm_upper")
    ivs = [_se_interval(r) for r in pre_l]
    bands = [(a0 + b0 * r["sweep"]["layer"], a1 + b1 * r["sweep"]["layer"]) for r in pre_l]
    oks = [decide_within(lo, hi, *band) for (lo, hi), band in zip(ivs, bands)]
    pw = _pick_power([("within", power(r["value"], lo, hi, band, int(r["n"] or 1), "samples"))
                      for r, (lo, hi), band in zip(pre_l, ivs, bands)])
    return [check(f"Lemma 2 Pre-LN: ({a0:g} + {b0:g} l) d <= E||x_l||^2 <= ({a1:g} + {b1:g} l) d", both(*oks),
                  ", ".join(f"l={r['sweep']['layer']}: {r['value']:.2f} [{lo:.2f}, {hi:.2f}]"
                            for r, (lo, hi) in zip(pre_l, ivs)) + " (x d; mean [95% CI])",
                  f"between {a0:g} + {b0:g} l and {a1:g} + {b1:g} l (Lemma 2)",
                  interval="95% t-interval of each layer's Monte Carlo mean, inside the bounds",
                  undecided_because="a layer's 95% interval overlaps a bound", power=pw)]


def _absolute_norm_checks(R: Rows) -> list[dict]:
    """Post-LN's absolute final-W2 gradient norm beside the paper's: reported, not judged (it depends on the
    vocabulary, the data and the loss normalisation)."""
    post_abs = R.metric("final_w2_grad_norm_mean").where(position="post", norm="layernorm")
    if not post_abs:
        return []
    return [check("Fig 3(c,d) Post-LN final W2 gradient norm (absolute; informational)", None,
                  ", ".join(f"{r['sweep']['depth']}-{r['sweep']['depth']}: {r['value']:.3g}" for r in post_abs),
                  f"around {_paper('fig3_postln_final_w2_grad_norm'):g} (IWSLT14 vocabulary and batches)",
                  undecided_because="reported, not judged: the absolute norm depends on the vocabulary, "
                                    "the batches and the loss normalisation")]


def this_setup(params: dict, device: str | None = None) -> dict:
    """This run's side of the "Setup beside the paper" table, from its parameters and the device the measurement
    recorded (its ``device`` parameter for measurements that did not record one)."""
    m, d, t = params["model"], params["data"], params["theorem1"]
    return {
        "model": f"{params['per_layer_depth']}+{params['per_layer_depth']} Transformer, d {m['d_model']}, FFN "
                 f"{m['d_ff']}, {m['n_heads']} heads; depth sweep {params['depths'][0]}-{params['depths'][-1]}; "
                 f"norms {', '.join(params['norms'])}",
        "data": f"{d['corpus']} ({d['direction']}, sentencepiece vocabulary {d['vocab_size']}), {d['n_batches']} "
                f"batch(es) of <= {d['max_tokens']} tokens" if not d.get("data_bin") else f"data-bin {d['data_bin']}",
        "init": params["init"],
        "seeds": f"{len(params['seeds'])} ({len(t['seeds'])} for the Theorem 1 setting, d {t['d_model']}, depths "
                 f"{t['depths']})",
        "measured at": "initialisation (no training)",
        "precision": "fp32",
        "device": str(device or params.get("device")),
    }
