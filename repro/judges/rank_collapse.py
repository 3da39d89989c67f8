"""The judge of rank_collapse (Dong et al. 2021, Table/Fig. 1-2: pure attention loses rank doubly exponentially;
Noci et al. 2022, Fig. 1: Q/K gradients vanish with depth unless the residual branches are scaled): the verdict from
the rows repro/claims/rank_collapse.py measured, with the thresholds of the judge: section of
config/claims/rank_collapse.yaml.
"""
from __future__ import annotations

import math

from repro import registry
from repro.intervals import t_interval
from repro.verdicts import (Rows, both, check, decide_interval, decide_within, numbers, setup_table, uses,
                            verdict_from_checks)
from repro.vocabulary.rank_collapse import CLAIM

SKIP_VARIANTS = ("attention_skip", "full_post", "full_pre")  # the measured stacks with a skip connection
# the setup table's words for each init scheme (repro.model.init)
INITS = {"pytorch": "PyTorch default (nn.Linear: U(+-1/sqrt(fan_in)) weights and biases)",
         "fairseq": "fairseq (Xavier uniform, q/k/v gain 1/sqrt(2), zero biases)",
         "xavier": "Xavier uniform gain 1, zero biases"}

MLP_NOT_A_PREDICTION = (
    "an observation, not a test of the paper: in Dong et al. the MLP enters the upper bound on the residual through "
    "its Lipschitz constant (a large one loosens the bound and can slow the collapse); the bound predicts nothing "
    "about a randomly initialised MLP, so a faster or slower collapse here neither confirms nor refutes the paper")

CUBIC_INTERVAL = "95% t-interval over the seeds' per-layer exponents (fitted per seed)"


def _int_n(row: dict | None) -> dict | None:
    """``row`` with ``n`` as an int (a re-read metrics.csv has floats)."""
    return None if row is None else {**row, "n": int(row["n"]) if row.get("n") is not None else None}


def _ci(row) -> tuple[float, float]:
    return t_interval(row["value"], row["spread"], row["n"]) if row["value"] is not None else (-math.inf, math.inf)


def _ci_text(row, fmt=".2f") -> str:
    lo, hi = _ci(row)
    return f"[{lo:{fmt}}, {hi:{fmt}}] ({row['n']} seeds)"


def _geo_ci(row) -> tuple[float, float]:
    """95% interval of a geometric-mean row (spread = std of the logs), back on the ratio scale."""
    lo, hi = t_interval(math.log(max(row["value"], 1e-300)), row["spread"], row["n"])
    return math.exp(max(lo, -700)), math.exp(min(hi, 700))


def _num(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 0.01 or abs(x) >= 1000 else f"{x:.3f}"


def _exp_text(row) -> str:
    if row is None or row["value"] is None:
        return "n/a"
    lo, hi = _ci(row)
    return f"{row['value']:.2f} [{lo:.2f}, {hi:.2f}]"


def _contrast_with_skip(R: Rows, init: str, c: dict) -> tuple[bool | None, str]:
    """Does pure attention collapse faster than the same stack with skips? By the paired exponent gap when the skip
    stack's residual decays enough to fit an exponent; when it does not decay at all, by its residual ratio at the
    last layer staying above ``skip_min_residual`` (the strongest contrast)."""
    skip = _int_n(R.metric("per_layer_exponent").where(init=init, variant="attention_skip").first())
    if skip is None:
        return None, "no attention + skip stack in this run to contrast with"
    gap = _int_n(R.metric("exponent_gap_vs_skip").where(init=init).first())
    rho = _int_n(R.metric("final_residual_ratio").where(init=init, variant="attention_skip").first())
    by_gap = gap is not None and gap["value"] is not None and gap["n"] >= 2
    flat = skip["n"] < rho["n"]  # seeds whose skip residual did not move enough to fit an exponent
    lo, hi = _geo_ci(rho)
    decisions, texts = [], []
    if by_gap:
        decisions.append(decide_interval(*_ci(gap), above=c["exponent_gap_min"]))
        texts.append(f"minus attention + skip's (paired by seed) {_exp_text(gap)}")
    if flat or not by_gap:
        decisions.append(decide_interval(lo, hi, above=c["skip_min_residual"]))
        texts.append(f"attention + skip: {rho['n'] - skip['n']} of {rho['n']} seeds without an exponent to fit (the "
                     f"residual did not move, or fell to rounding at once); its rho at the last layer "
                     f"{_num(rho['value'])} [{_num(lo)}, {_num(hi)}]")
    return both(*decisions), "; ".join(texts)


def _dong_checks(R: Rows, params: dict, T: dict) -> list[dict]:
    """Dong et al., per init: the collapse of pure attention (headline), the skip variants, the MLP observation."""
    checks = []
    for init in params["inits"]:
        att, mlp = R.where(init=init, variant="attention"), R.where(init=init, variant="attention_mlp")
        if not att.metric("per_layer_exponent"):
            continue
        checks.append(_collapse_check(R, init, params, T))
        checks += [_skip_check(R.where(init=init, variant=variant), variant, init, params, T)
                   for variant in SKIP_VARIANTS if variant in params["dong"]["variants"]]
        if mlp.metric("per_layer_exponent"):
            checks.append(_mlp_check(att, mlp, init, params))
    return checks


def _collapse_check(R: Rows, init: str, params: dict, c: dict) -> dict:
    """Headline: pure attention's per-layer exponent about 3 (doubly exponential), clearly above the skip stack's,
    and every seed collapsed within the stack."""
    cubic_paper = float(registry.published(CLAIM, "dong_rate_exponent_base")["value"])
    q = params["dong"]
    att_rows = R.where(init=init, variant="attention")
    att = _int_n(att_rows.metric("per_layer_exponent").first())
    depth = _int_n(att_rows.metric("collapse_depth").first())
    frac = _int_n(att_rows.metric("collapsed_fraction").first())
    why = None
    if att["value"] is None:
        cubic, why = None, "fewer than 2 layers above float64 rounding in every seed: no per-layer exponent"
    else:
        cubic = decide_within(*_ci(att), cubic_paper - c["cubic_tolerance"], cubic_paper + c["cubic_tolerance"])
        if cubic is None:
            why = "the seeds' interval of the exponent straddles the edge of the cubic band"
    contrast, contrast_text = _contrast_with_skip(R, init, c)
    if contrast is None:
        why = why or f"contrast with attention + skip undecided: {contrast_text}"
    passed = both(cubic, contrast, frac["value"] == 1.0)
    return check(
        f"pure attention collapses doubly exponentially ({init} init)", passed,
        f"per-layer exponent of rho = ||res(X_L)||/||res(X_0)||: {_exp_text(att)}; {contrast_text}; "
        f"rho < {q['collapse_threshold']:g} after {depth['value']:.2f} +- "
        f"{depth['spread']:.2f} layers in {frac['value']:.0%} of seeds",
        f"exponent {cubic_paper:g} +- {c['cubic_tolerance']} (res_(L+1) ~ res_L^3), above the same stack with skips by "
        f"more than {c['exponent_gap_min']} (or the skip stack does not decay); every seed collapses within "
        f"{q['depth']} layers",
        headline=True, interval=CUBIC_INTERVAL, undecided_because=why,
        numbers=numbers(att["value"], "per-layer exponent", lo=_ci(att)[0] if att["value"] is not None else None,
                        hi=_ci(att)[1] if att["value"] is not None else None, paper=cubic_paper,
                        compare="difference", criterion="suite", rule=f"{cubic_paper:g} +- {c['cubic_tolerance']:g}",
                        source="dong_rate_exponent_base"),
        thresholds=uses(c, "cubic_tolerance", "exponent_gap_min", "skip_min_residual"))


def _skip_check(V: Rows, variant: str, init: str, params: dict, c: dict) -> dict:
    """A skip variant (rows ``V`` of one init and variant): at most exponential decay (exponent about 1, not 3), or
    a residual that does not move and stays above ``skip_min_residual``."""
    q = params["dong"]
    ex = _int_n(V.metric("per_layer_exponent").first())
    rho = _int_n(V.metric("final_residual_ratio").first())
    rel = _int_n(V.metric("final_relative_residual").first())
    ln = _int_n(V.metric("final_layernorm_residual").first())
    lo, hi = _geo_ci(rho)
    decisions, basis = [], []
    if ex["value"] is not None and ex["n"] >= 2:
        decisions.append(decide_interval(*_ci(ex), below=c["not_doubly_max"]))
        basis.append("exponent")
    if ex["n"] < rho["n"] or not decisions:  # seeds whose residual did not move: judged by where it ended
        decisions.append(decide_interval(lo, hi, above=c["skip_min_residual"]))
        basis.append(f"residual ratio ({rho['n'] - ex['n']} of {rho['n']} seeds without an exponent to fit)")
    return check(
        f"skip connections stop the collapse ({variant}, {init} init)", both(*decisions),
        f"per-layer exponent {_exp_text(ex)}; at layer {q['depth']}: rho {_num(rho['value'])} [{_num(lo)}, "
        f"{_num(hi)}] (geometric mean over seeds); diagnostics: relative residual ||res(X)||/||X|| "
        f"{_num(rel['value'])}, after LayerNorm {_num(ln['value'])}",
        f"exponent < {c['not_doubly_max']} (about 1: at most exponential decay, not 3); a residual that does "
        f"not decay must stay above {c['skip_min_residual']} of the input's",
        interval=f"95% t-interval over seeds ({'; '.join(basis)})",
        undecided_because="a seeds' interval straddles its threshold",
        thresholds=uses(c, "not_doubly_max", "skip_min_residual"))


def _mlp_check(att_rows: Rows, mlp_rows: Rows, init: str, params: dict) -> dict:
    """"MLPs slow the collapse": an observation beside pure attention, not a prediction of the paper at init."""
    q = params["dong"]
    att, depth = (_int_n(att_rows.metric(m).first()) for m in ("per_layer_exponent", "collapse_depth"))
    mlp, mlp_depth = (_int_n(mlp_rows.metric(m).first()) for m in ("per_layer_exponent", "collapse_depth"))
    return check(
        f"MLPs slow the collapse ({init} init; observation)", None,
        f"layers to rho < {q['collapse_threshold']:g}: attention + MLP {mlp_depth['value']:.2f} +- "
        f"{mlp_depth['spread']:.2f}, attention {depth['value']:.2f} +- {depth['spread']:.2f}; per-layer "
        f"exponent attention + MLP {_exp_text(mlp)}, attention {_exp_text(att)}",
        "Dong et al.: the MLP's Lipschitz constant enters the bound (a loose bound, not a rate at init)",
        interval=CUBIC_INTERVAL, undecided_because=MLP_NOT_A_PREDICTION)


def _noci_checks(R: Rows, params: dict, T: dict) -> list[dict]:
    """Noci et al., per init and norm position: the Q/K gradient slopes and the token-cosine rise."""
    checks = []
    for init in params["inits"]:
        for position in params["noci"]["norm_positions"]:
            P = R.where(init=init, position=position)
            made = (_qk_gradient_check(P, init, position, T), _cosine_check(P, init, position, T))
            checks += [c for c in made if c is not None]
    return checks


def _qk_gradient_check(P: Rows, init: str, position: str, c: dict) -> dict | None:
    """Q/K over V gradient ratios fall with depth at residual scale 1 and stay flat with 1/sqrt(L) (rows ``P`` of one
    init and norm position); None without both scalings."""
    parts, decisions = [], []
    for m in ("q", "k"):
        slope = P.metric(f"{m}_over_v_depth_slope")
        plain, scaled = (_int_n(slope.where(scaled=s).first()) for s in (False, True))
        if not (plain and scaled):
            continue
        band = c["scaled_ratio_max"] * abs(plain["value"])
        decisions += [decide_interval(*_ci(plain), below=-c["qk_slope_min"]),
                      decide_within(*_ci(scaled), -band, band)]
        parts.append(f"{m.upper()}/V: scale 1 {_exp_text(plain)}, 1/sqrt(L) {_exp_text(scaled)}")
    if not parts:
        return None
    return check(
        f"Noci {position}-LN ({init} init): Q/K gradients vanish with depth unless branches are scaled",
        both(*decisions), "d mean ln(grad ratio) / d ln(L), mean [95% interval]: " + "; ".join(parts),
        f"scale 1 < -{c['qk_slope_min']}; |1/sqrt(L)| <= {c['scaled_ratio_max']} x |scale 1| (residual "
        "branches scaled by L^-0.5, Noci et al.)", interval="95% t-interval over the seeds' slopes",
        undecided_because="a seeds' interval straddles its threshold",
        thresholds=uses(c, "qk_slope_min", "scaled_ratio_max"))


def _cosine_check(P: Rows, init: str, position: str, c: dict) -> dict | None:
    """Noci Fig 1: the output token cosine rises with depth at residual scale 1, not with 1/sqrt(L)."""
    rise = {s: _int_n(P.metric("token_cosine_rise").where(scaled=s).first()) for s in (False, True)}
    if not (rise[False] and rise[True]):
        return None
    d0, d1 = rise[False]["sweep"]["from_depth"], rise[False]["sweep"]["to_depth"]
    return check(
        f"Noci {position}-LN ({init} init): token cosine rises with depth unless branches are scaled",
        both(decide_interval(*_ci(rise[False]), above=c["cosine_rise_min"]),
             decide_interval(*_ci(rise[True]), below=c["cosine_rise_min"])),
        f"output token cosine rise from depth {d0} to {d1}: scale 1 {rise[False]['value']:+.3f} "
        f"{_ci_text(rise[False], '+.3f')}; 1/sqrt(L) {rise[True]['value']:+.3f} "
        f"{_ci_text(rise[True], '+.3f')}",
        f"rise > {c['cosine_rise_min']} with scale 1, < {c['cosine_rise_min']} with 1/sqrt(L)",
        interval="95% t-interval over the seeds' rises",
        undecided_because="a seeds' interval straddles the threshold", thresholds=uses(c, "cosine_rise_min"))


def this_run(params: dict, device: str | None = None) -> dict[str, str]:
    """This run's side of the "Setup beside the paper" table, from its parameters."""
    q, n = params["dong"], params["noci"]
    return {
        "model": "stacks of the shared block at random init: pure attention, attention + skip, attention + MLP, "
                 "Post-LN and Pre-LN blocks (Dong); Pre-/Post-LN blocks with residual scale 1 and 1/sqrt(L) (Noci)",
        "width / depth": f"Dong: d {q['d_model']}, {q['n_heads']} heads, FFN {q['d_ff']}, {q['depth']} layers; "
                         f"Noci: d {n['d_model']}, {n['n_heads']} heads, FFN {n['d_ff']}, depths "
                         f"{', '.join(map(str, n['depths']))}",
        "tokens": f"{q['n_tokens']} tokens x {q['batch']} sequences (Dong); {n['n_tokens']} x {n['batch']} (Noci)",
        "init": "; ".join(INITS[i] for i in params["inits"]),
        "seeds": f"{len(params['seeds'])} (weights and inputs)",
        "precision": params["dtype"],
        "data": f"i.i.d. N(0, 1) token vectors; random labels over {n['classes']} classes for the gradient readout",
        "measure": "rho = ||res(X_L)|| / ||res(X_0)|| (Frobenius; 1,inf beside it); relative residual ||res(X)|| / "
                   "||X|| and the residual after LayerNorm as diagnostics; per-layer exponent fitted per seed",
        "hardware": device or params.get("device", "cpu"),
    }


def judge(rows: list[dict], thresholds: dict, context: dict) -> dict:
    """Checks (thresholds: the judge: section of config/claims/rank_collapse.yaml; every one decided by a 95%
    t-interval over the seeds, undecided when the interval straddles or touches it):

    1. Headline, per init: pure attention collapses doubly exponentially: its per-layer exponent a (ln rho_{L+1}
       against ln rho_L, fitted per seed) lies within ``cubic_tolerance`` of 3, exceeds attention + skip's exponent
       (paired by seed) by more than ``exponent_gap_min`` (so the measure tells the stacks apart), and every seed
       falls below ``collapse_threshold`` inside the stack.
    2. Per init and skip variant (attention + skip, Post-LN, Pre-LN block): the exponent lies below
       ``not_doubly_max`` (about 1, not 3); for seeds whose residual does not move (nothing to fit) its ratio to the
       input's at the last layer stays above ``skip_min_residual``.
    3. Per init: "MLPs slow the collapse" is reported as an observation (undecided: not a prediction at init).
    4. Noci et al., per init and norm position: without scaling, mean ln(||dW_Q||/||dW_V||) and
       ln(||dW_K||/||dW_V||) fall with depth (slope vs ln L below -``qk_slope_min``); with 1/sqrt(L) scaling the
       slope lies within ``scaled_ratio_max`` x |unscaled slope| of 0.
    5. Noci Fig 1, per init and position: the output token cosine rises by more than ``cosine_rise_min`` from the
       shallowest to the deepest stack without scaling, and by less with scaling.
    """
    R, params, scale = Rows(rows), context["params"], context["scale"]
    if not R.metric("final_residual_ratio") and R.metric("final_relative_residual"):
        raise ValueError("rank_collapse: these measurements predate the residual-ratio measurement ("
                         "rho = ||res(X_L)|| / ||res(X_0)||, swept over inits); rerun the claim, a re-judge cannot "
                         "apply the current rule to them")
    checks = _dong_checks(R, params, thresholds) + _noci_checks(R, params, thresholds)
    inits = ", ".join(params["inits"])
    meaning = (f"reproduced = for every init ({inits}) pure attention's residual collapsed doubly exponentially "
               "(per-layer exponent ~3, clearly above the same stack with skips) and every decided secondary check "
               "(skip connections, Noci et al.) held; partially = the collapse held, a secondary failed; "
               "not_reproduced = the collapse was measured and is not doubly exponential; inconclusive = the seeds' "
               "intervals could not decide it. At initialization only; a verdict about this setup, not trained models.")
    return verdict_from_checks(CLAIM, checks, scale, setup=setup_table(CLAIM, this_run(params, context.get("device"))),
                               meaning=meaning)

