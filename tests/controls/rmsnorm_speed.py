"""rmsnorm_speed negative controls: RMSNorm slower than LayerNorm where both are written the same way, and ties on
the paper's 7% floor (tests/test_judge_contract.py)."""
from __future__ import annotations

from controls import edit

SAME_WAY_OPS = ("eager", "compile", "triton")  # op providers with both norms written the same way
SAME_WAY_STEPS = ("manual", "triton")  # model norm_impl values with both norms written the same way


def _set(rows, ratio, spread):
    """The same-framework RMS/LN time ratios set to ``ratio`` (the step's IQR to ``spread``), reductions to match."""
    rows = edit(rows, "op_time_ratio_rms_over_ln", lambda r: ratio, sweep_provider=SAME_WAY_OPS)
    rows = edit(rows, "op_time_reduction", lambda r: 100 * (1 - ratio), sweep_provider=SAME_WAY_OPS)
    rows = edit(rows, "step_time_ratio_rms_over_ln", lambda r: ratio, sweep_impl=SAME_WAY_STEPS)
    rows = edit(rows, "step_time_reduction_rms", lambda r: 100 * (1 - ratio), sweep_impl=SAME_WAY_STEPS)
    return [{**r, "spread": spread * (100 if r["metric"] == "step_time_reduction_rms" else 1)}
            if r.get("metric") in ("step_time_ratio_rms_over_ln", "step_time_reduction_rms")
            and r.get("sweep", {}).get("impl") in SAME_WAY_STEPS and r.get("value") is not None else r for r in rows]


def paper_false(rows: list[dict]) -> list[dict]:
    """RMSNorm 20% slower than LayerNorm in the same-framework rows (ratio 1.2, step IQR 0.02)."""
    return _set(rows, 1.2, 0.02)


def ties(rows: list[dict]) -> list[dict]:
    """A reduction exactly on the registry's floor (reduction_range: 7%) with no spread; RMSNorm and LayerNorm equal
    (ratio 1). (The judge has no threshold of its own: config/claims/rmsnorm_speed.yaml's judge: section is empty.)"""
    from repro import registry

    floor = registry.published("rmsnorm_speed", "reduction_range")["value"][0]
    return [_set(rows, 1 - floor / 100, 0.0), _set(rows, 1.0, 0.0)]
