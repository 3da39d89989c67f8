"""The judge of C11 block_numerics (Ba et al. 2016 and Zhang & Sennrich 2019, eq. 4: LayerNorm and RMSNorm of
[2, 4, 6, 8]; the ReLU / GELU / SiLU table; He et al. 2016: a chain of 40 layers passes 0.9^40 = 0.0148 or
1.1^40 = 45.3 without residuals, 1 + F'(x) per layer with them; fp16's norm epsilon; a deep stack without residuals
does not train): the worked values (textbook values in the registry) and the trainability experiment as
repro/claims/block_numerics.py computed them with the suite's own modules, against the thresholds of the judge:
section of config/claims/block_numerics.yaml.
"""
from __future__ import annotations

import math

from repro import registry
from repro.verdicts import Rows, check, decide_point, gate, gated, numbers, setup_table, uses, verdict_from_checks
from repro.vocabulary.block_numerics import CLAIM


def judge(rows: list[dict], thresholds: dict, context: dict) -> dict:
    """Headline: the worked values (norms, activations, 0.9^40 / 1.1^40) match the published ones to their
    rounding. Secondary: the residual chain's gradient (1 + F'(x), branch gain about 1), fp16 epsilon, and the
    deep-stack trainability experiment, which is decided only when its two controls (the shallow plain stack and
    the deep residual stack) learned in every seed and the deep plain stack agrees across seeds."""
    # the published values as the registry holds them now (a stored row names its registry key, not the number)
    R, params, T = Rows(registry.with_published(rows)), context["params"], thresholds
    deep_checks, gates = _deep_stack_checks(R, T)
    checks = [*_worked_value_checks(R, T), *_plain_chain_checks(R, T), *_residual_chain_checks(R, T),
              *_fp16_checks(R), *deep_checks]
    scale = context["scale"]
    return verdict_from_checks(CLAIM, checks, scale, gates=gates, setup=_setup(params))


def _worked_value_checks(R: Rows, T: dict) -> list[dict]:
    """The norm and activation outputs against their published values (to ``value_tolerance``)."""
    tol, checks = T["value_tolerance"], []
    for r in R.filter(lambda r: r["metric"].endswith("_output")):
        pv = r.get("published_value")
        if isinstance(pv, (int, float)):
            checks.append(check(f"{r['metric']}[{r['sweep'].get('index', r['sweep'].get('x'))}]",
                                decide_point(r["value"], within=(pv - tol, pv + tol)), f"{r['value']:.4f}",
                                f"{pv} ({r['source']})", undecided_because="exactly on the tolerance's edge (a tie)",
                                headline=True, numbers=numbers(r["value"], r.get("unit") or "value", paper=pv,
                                                               compare="difference", criterion="suite",
                                                               rule=f"{pv:g} +- {tol:g}",
                                                               source=r.get("published_key")),
                                thresholds=uses(T, "value_tolerance")))
    return checks


def _plain_chain_checks(R: Rows, T: dict) -> list[dict]:
    """g^L through a plain chain of L layers of gain g, against the published 0.9^40 and 1.1^40."""
    checks = []
    for r in R.metric("plain_chain_gradient_gain"):
        if isinstance(r.get("published_value"), (int, float)):
            pv = r["published_value"]
            checks.append(check(f"gradient through {r['sweep']['depth']} layers of gain {r['sweep']['gain']}",
                                decide_point(r["value"], within=(pv - (T["plain_chain_rel_tolerance"] * pv + 0.00005),
                                                                 pv + (T["plain_chain_rel_tolerance"] * pv + 0.00005))),
                                f"{r['value']:.4g}", f"{pv}", headline=True,
                                numbers=numbers(r["value"], "gradient gain", paper=pv, compare="ratio",
                                                criterion="suite",
                                                rule=f"{pv:g} +- {T['plain_chain_rel_tolerance']:g} x {pv:g}",
                                                source=r.get("published_key")),
                                thresholds=uses(T, "plain_chain_rel_tolerance")))
    return checks


def _residual_chain_checks(R: Rows, T: dict) -> list[dict]:
    """The residual chain's gradient passes through 1 + F'(x): never below 1, per-layer factor below the bound."""
    res, plain = R.metric("residual_chain_gradient_gain"), R.metric("plain_chain_gradient_gain")
    if not res:
        return []
    tol_rel = T["residual_growth_tolerance"]
    # 1 + F'(x) with F' = c g Q (random orthogonal): each layer multiplies E||grad||^2 by 1 + (c g)^2, so the
    # geometric-mean factor per layer lies between 1 and sqrt(1 + (c g)^2) (Jensen); no skip would give g < 1
    parts, ok = [], []
    for g in sorted(res.sweep("gain")):
        vals = res.where(gain=g).values()
        c, depth = res[0]["sweep"]["branch_gain"], res[0]["sweep"]["depth"]
        per_layer = [v ** (1 / depth) for v in vals]
        pred = math.sqrt(1 + (c * g) ** 2)
        plain_g = plain.where(gain=g).value(float("nan"))
        ok.append(min(vals) >= 1.0 and all(1.0 <= pl < pred * (1 + tol_rel) for pl in per_layer))
        parts.append(f"gain {g}: residual {min(vals):.3g}..{max(vals):.3g} over {len(vals)} seeds (plain "
                     f"{plain_g:.3g}); per layer {min(per_layer):.4f}..{max(per_layer):.4f} vs sqrt(1+(cg)^2) = "
                     f"{pred:.4f}")
    return [check("residual chain: the gradient passes through 1 + F'(x) and does not vanish", all(ok),
                  "; ".join(parts), f"every seed >= 1 where the plain chain gives g^{depth}; per-layer "
                  f"factor between 1 (the identity path) and sqrt(1 + (c g)^2) (+{tol_rel:.0%}), the root of "
                  f"E||(I + c W)u||^2 / ||u||^2 for random orthogonal W (branch gain c = {c})",
                  thresholds=uses(T, "residual_growth_tolerance"))]


def _fp16_checks(R: Rows) -> list[dict]:
    """An fp16 norm epsilon of 1e-8 underflows to 0 (a constant row normalises to NaN); 1e-5 does not."""
    stored = {r["sweep"]["eps"]: r["value"] for r in R.metric("fp16_stored_eps")}
    finite = {r["sweep"]["eps"]: r["value"] for r in R.metric("fp16_norm_of_constant_is_finite")}
    if not (1e-8 in stored and 1e-5 in stored):
        return []
    return [check("fp16: eps 1e-8 underflows, 1e-5 does not",
                  stored[1e-8] == 0.0 and stored[1e-5] > 0 and finite[1e-8] == 0 and finite[1e-5] == 1,
                  f"1e-8 -> {stored[1e-8]:g} (norm finite: {bool(finite[1e-8])}), 1e-5 -> {stored[1e-5]:.4g} "
                  f"(norm finite: {bool(finite[1e-5])})", "1e-8 underflows to 0; 1e-5 is representable")]


def _deep_stack_checks(R: Rows, T: dict) -> tuple[list[dict], list[dict]]:
    """(checks, gates) of the copy task: the deep plain stack does not train, gated on its two controls learning."""
    frac = T["learned_fraction"]
    by = {stack: g.values() for stack, g in R.metric("copy_task_final_loss_ratio").by("stack").items()}
    if not by:
        return [], []
    controls = {k: v for k, v in by.items() if k != "deep_plain"}
    gates = [gate("the control stacks learned (shallow plain, deep residual)",
                  all(max(v) < frac for v in controls.values()) and len(controls) == 2,
                  ", ".join(f"{k}: final/initial loss {min(v):.2f}..{max(v):.2f}" for k, v in controls.items()),
                  f"every seed below {frac} of ln(vocab)", thresholds=uses(T, "learned_fraction"))]
    deep = by.get("deep_plain", [])
    fails_all, learns_all = all(v > frac for v in deep), all(v < frac for v in deep)
    c = check("a deep stack without residuals does not train where shallow and residual ones do",
              True if fails_all else False if learns_all else None,
              f"deep plain: final/initial loss {min(deep):.2f}..{max(deep):.2f} over {len(deep)} seeds",
              f"deep plain stays above {frac} of ln(vocab) in every seed",
              interval=f"range over {len(deep)} seeds",
              undecided_because=None if fails_all or learns_all else "the seeds disagree",
              thresholds=uses(T, "learned_fraction"))
    return [gated(c, gates)], gates


def _setup(params: dict) -> list[dict]:
    """The page's "Setup beside the paper" rows."""
    p = params["deep_stack"]
    return setup_table(CLAIM, {
        "source": "the suite's own modules (repro.model norms and activations), chains of orthogonal matrices",
        "training claim": f"copy task on Pre-LN encoder stacks ({p['shallow_layers']} vs {p['deep_layers']} layers, "
                          f"d {p['d_model']}, {p['steps']} Adam steps, seeds {p['seeds']}), with and without skips"})

