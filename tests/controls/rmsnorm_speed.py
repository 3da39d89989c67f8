"""rmsnorm_speed negative controls: RMSNorm slower than LayerNorm where both are written the same way, and ties on
the paper's floor, the registry's Transformer reduction (6.9%) (tests/test_judge_contract.py)."""
from __future__ import annotations

from controls import edit

SAME_WAY_OPS = ("eager", "compile", "triton")  # op providers with both norms written the same way
SAME_WAY_STEPS = ("manual", "triton")  # model norm_impl values with both norms written the same way
STEP_METRICS = ("step_time_ratio_rms_over_ln", "step_time_reduction_rms")


def _floor() -> float:
    from repro import registry

    return float(registry.published("rmsnorm_speed", "transformer_reduction")["value"])


def _set(rows, ratio, spread, below=None, above=None):
    """The same-framework RMS/LN time ratios set to ``ratio``; the step rows' IQR to ``spread`` and their interval
    (``ci_below`` / ``ci_above``: distances below and above the median ratio; default ``spread / 2`` each) to match,
    reductions too (their interval mirrored: a reduction is 100 (1 - ratio))."""
    below = spread / 2 if below is None else below
    above = spread / 2 if above is None else above
    rows = edit(rows, "op_time_ratio_rms_over_ln", lambda r: ratio, sweep_provider=SAME_WAY_OPS)
    rows = edit(rows, "op_time_reduction", lambda r: 100 * (1 - ratio), sweep_provider=SAME_WAY_OPS)
    rows = edit(rows, "step_time_ratio_rms_over_ln", lambda r: ratio, sweep_impl=SAME_WAY_STEPS)
    rows = edit(rows, "step_time_reduction_rms", lambda r: 100 * (1 - ratio), sweep_impl=SAME_WAY_STEPS)
    out = []
    for r in rows:
        if r.get("metric") in STEP_METRICS and r.get("value") is not None \
                and (r.get("sweep") or {}).get("impl") in SAME_WAY_STEPS:
            pct = r["metric"] == "step_time_reduction_rms"
            ci = {"ci_below": 100 * above, "ci_above": 100 * below} if pct else {"ci_below": below, "ci_above": above}
            r = {**r, "spread": spread * (100 if pct else 1), "sweep": {**r["sweep"], **ci}}
        out.append(r)
    return out


def paper_false(rows: list[dict]) -> list[dict]:
    """RMSNorm 20% slower than LayerNorm in the same-framework rows (ratio 1.2, step IQR and interval 0.02 wide)."""
    return _set(rows, 1.2, 0.02)


def ties(rows: list[dict]) -> list[dict]:
    """Data on the registry's floor (transformer_reduction: 6.9%): the median reduction exactly on it with no spread,
    and a median clearly above it (reduction 8%) whose interval's lower edge touches it. (The judge has no threshold
    of its own: config/claims/rmsnorm_speed.yaml's judge: section is empty.)"""
    ceiling = 1 - _floor() / 100  # the floor as a time ratio
    return [_set(rows, ceiling, 0.0), _set(rows, 0.92, 2 * (ceiling - 0.92), below=0.01, above=ceiling - 0.92)]
