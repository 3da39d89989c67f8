"""The judge of C1 param_accounting (Vaswani et al. 2017 Table 3; Geva et al. 2021; Michel et al. 2019; the Llama-2
and Mixtral model cards): the suite's parameter counts (repro/claims/param_accounting.py) against the registry's
published figures, exact ones exactly (the headline), rounded ones within ``rounded_rel_tolerance``.
"""
from __future__ import annotations

from repro import registry
from repro.verdicts import Rows, check, decide_point, numbers, setup_table, uses, verdict_from_checks
from repro.vocabulary.param_accounting import CLAIM


def _num(x: float) -> str:
    return f"{x:,.0f}" if float(x).is_integer() and abs(x) >= 1000 else f"{x:.4g}"


def judge(rows: list[dict], thresholds: dict, context: dict) -> dict:
    """Exact published figures must match exactly (HEADLINE; a percentage within ``percent_rounding`` points, the
    papers' printed decimal); rounded ones within ``rounded_rel_tolerance`` (secondary; the difference and the
    reason are shown)."""
    params, scale = context["params"], context["scale"]
    rel_tol, pct = thresholds["rounded_rel_tolerance"], thresholds["percent_rounding"]
    notes = {name: spec.get("note", "") for name, spec in params["models"].items()}
    checks = []
    for r in Rows(rows).filter(lambda r: r.get("published_key")):
        pub = registry.published(CLAIM, r["published_key"])
        m, p = r["value"], float(pub["value"])
        if pub["unit"] == "fraction" and r["unit"] == "percent":
            p *= 100
        exact = bool(pub.get("exact"))
        if exact:
            is_pct = r["unit"] == "percent"
            if is_pct:  # printed to one decimal: a band, whose edge is a tie (undecided, never a pass or a fail)
                ok, tol = decide_point(m, within=(p - pct, p + pct)), "exact"
            else:  # an exact count: equal or not (a whole count to the unit; float rounding aside), no band to sit on
                whole = float(p).is_integer() and float(m).is_integer()
                ok, tol = abs(m - p) < (0.5 if whole else 1e-9 * max(1.0, abs(p))), "exact"
            used = uses(thresholds, "percent_rounding") if is_pct else None
        else:
            ok = decide_point(m, within=(p - rel_tol * abs(p), p + rel_tol * abs(p)))
            tol, used = f"rounded figure, accepted within {rel_tol:.0%}", uses(thresholds, "rounded_rel_tolerance")
        model = r["sweep"]["model"]
        measured = _num(m) if exact else f"{_num(m)} ({(m - p) / p:+.2%} vs published)"
        why = "" if exact or abs(m - p) < 1e-9 else f"; {notes.get(model) or 'the paper rounds'}"
        checks.append(check(f"{model}.{r['metric']}", ok, measured, f"{_num(p)} ({tol}{why}; {pub['citation']})",
                            headline=exact, undecided_because="exactly on the tolerance's edge: a tie decides nothing",
                            numbers=numbers(m, r["unit"], paper=p, compare="ratio", source=r["published_key"],
                                            rule="exact" if exact else f"+- {rel_tol:.0%}",
                                            criterion="paper" if exact else "suite"),
                            thresholds=used))
    setup = setup_table(CLAIM, {
        "models": ", ".join(sorted({r["sweep"]["model"] for r in rows})) + " (the suite's own model classes)",
        "method": "exact count of the suite's modules built on the meta device; exact published figures must match "
                  f"exactly (headline), rounded ones within {rel_tol:.0%} (secondary)",
        "hardware": "none (meta device, no memory)"})
    return verdict_from_checks(CLAIM, checks, scale, setup=setup)

