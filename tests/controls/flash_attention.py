"""flash_attention negative controls (tests/test_judge_contract.py).

The speed headline is decided on a GPU only (on a CPU, SDPA is not the FlashAttention kernel and the verdict is
inconclusive by construction), so the paper-false and tie controls present the rows as a GPU run: every row's
``hardware`` a ``gpu-...`` id and no backend skipped as the CPU-only Triton interpreter (a GPU run whose backends
are math and sdpa); the judge reads the device from the rows when the measurement recorded none (the committed
references predate the recorded device). The thresholds are the judge: section of config/claims/flash_attention.yaml.
"""
from __future__ import annotations

from controls import edit

GPU = "gpu-nvidia-a100-sxm4-40gb"
INTERPRETER = "Triton interpreter on CPU is a correctness path, not a speed path"  # repro.bench.kernels


def _as_gpu(rows):
    return [{**r, "hardware": GPU} for r in rows
            if (r.get("sweep") or {}).get("reason") != INTERPRETER and r.get("sweep.reason") != INTERPRETER]


def on_device(rows):
    """The reference's rows presented as a GPU run (where the speed headline is decided): the null control runs on
    these too (tests/test_judge_contract.py), so it can fail the judge where speed is decided."""
    return _as_gpu(rows)


def context(ctx: dict) -> dict:
    """What every control here stands for: a GPU run (a recorded device wins over the rows' hardware ids)."""
    return {**ctx, "device": "cuda", "hardware": GPU}


def _speed(rows, ratio, spread):
    """Every speed-up at ``ratio`` with IQR ``spread`` and, as the measurement stores it, the interval of its median
    at +- spread / 2 (repro.bench.timing.ci_fields; the default Fig 2 shape's 3 rounds store none of their own)."""
    speed = ("fig2_speedup_over_math", "train_step_speedup_over_math")
    rows = edit(rows, speed, lambda r: ratio)
    ci = {"ci_below": spread / 2, "ci_above": spread / 2, "confidence": 0.95}
    flat = {f"sweep.{k}": v for k, v in ci.items()}
    return [{**r, "spread": spread, "sweep": {**(r.get("sweep") or {}), **ci}, **flat} if r.get("metric") in speed
            else r for r in rows]


def paper_false(rows: list[dict]) -> list[dict]:
    """On a GPU: the fused kernel 2x slower than standard attention (speed-up 0.5, interval +- 0.025) and its memory as
    quadratic in N as the materialised scores (exponent 2) and larger than standard attention's (Table 21 ratio 0.8)."""
    rows = _speed(_as_gpu(rows), 0.5, 0.05)
    rows = edit(rows, "memory_exponent_in_n", lambda r: 2.0, sweep_provider=("sdpa", "triton"))
    return edit(rows, "table21_memory_ratio_math_over_fused", lambda r: 0.8)


def ties(rows: list[dict]) -> list[dict]:
    """On a GPU: the fused kernel exactly as fast as standard attention (speed-up 1, a zero-width interval), with
    every memory exponent on its band's edge (the upper ends of linear_exponent and quadratic_exponent) and Table
    21's ratio at 1 (ties on the secondary checks are undecided, never failed, so they cannot turn the verdict into
    partially either)."""
    from repro import config

    T = config.thresholds("flash_attention", "default")
    tied = _speed(_as_gpu(rows), 1.0, 0.0)
    tied = edit(tied, "memory_exponent_in_n", lambda r: T["linear_exponent"][1], sweep_provider=("sdpa", "triton"))
    tied = edit(tied, "memory_exponent_in_n", lambda r: T["quadratic_exponent"][1], sweep_provider="math")
    return [tied, edit(tied, "table21_memory_ratio_math_over_fused", lambda r: 1.0)]


def threshold_rows(rows: list[dict], key: str) -> list[dict] | None:
    """Rows on which threshold ``key`` can decide (tests/test_thresholds.py): speed_fraction_of_paper decides on a
    GPU only, so the reference rows presented as a GPU run; None for the memory bands (the CPU reference decides
    them as measured)."""
    return _as_gpu(rows) if key == "speed_fraction_of_paper" else None
