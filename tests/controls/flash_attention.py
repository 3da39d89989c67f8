"""flash_attention negative controls (tests/test_judge_contract.py).

The speed headline is decided on a GPU only (on a CPU, SDPA is not the FlashAttention kernel and the verdict is
inconclusive by construction), so the paper-false and tie controls present the rows as a GPU run: every row's
``hardware`` a ``gpu-...`` id and no backend skipped as the CPU-only Triton interpreter (a GPU run whose backends
are math and sdpa); the judge reads the device from the rows when the measurement recorded none (the committed
references predate the recorded device). The thresholds are the judge: section of config/claims/flash_attention.yaml.

A GPU run times every speed-up over the paper scale's rounds (config/claims/flash_attention.yaml, paper:
``fig2.reps`` and ``model.reps``), enough for the order-statistic interval of the median at its confidence; the
default-scale reference these controls start from may store fewer (its Fig 2 had 3 rounds: no interval, so a
control on it could decide nothing). So every speed row the controls present as a GPU run carries the paper scale's
rounds, summarised as the measurement summarises them (``_rounds``).
"""
from __future__ import annotations

import statistics

from controls import edit

from repro import config, registry
from repro.bench import timing

GPU = "gpu-nvidia-a100-sxm4-40gb"
INTERPRETER = "Triton interpreter on CPU is a correctness path, not a speed path"  # repro.bench.kernels


SPEED = ("fig2_speedup_over_math", "train_step_speedup_over_math")
SECTION = {"fig2_speedup_over_math": "fig2", "train_step_speedup_over_math": "model"}  # the config part timing each


def gpu_rounds(metric: str) -> int:
    """The rounds a GPU run times ``metric`` over: the paper scale's reps of its config part (at least; the
    end-to-end step adds rounds up to its min_time_s)."""
    return int(config.section("flash_attention", "paper")[SECTION[metric]]["reps"])


def _rounds(r: dict, ratio: float, spread: float, n: int) -> dict:
    """Speed-up row ``r`` as measured over ``n`` rounds whose paired ratios lie around ``ratio`` with inter-quartile
    range about ``spread`` (normal quantiles; all equal at spread 0), summarised as the measurement summarises them
    (repro.bench.timing.paired_ratios, ci_fields): median, IQR, n and the order-statistic interval of the median,
    None when ``n`` is too few for it."""
    z = statistics.NormalDist()
    pairs = [ratio + spread * z.inv_cdf((i + 0.5) / n) / 1.349 for i in range(n)]
    s = timing.summarize(pairs)
    conf = float((r.get("sweep") or {}).get("confidence") or 0.95)
    lo, hi, _ = timing.median_interval(pairs, conf)
    finite = lo != float("-inf") and hi != float("inf")
    ci = timing.ci_fields({**s, "ci_lo": lo if finite else None, "ci_hi": hi if finite else None}, conf)
    flat = {f"sweep.{k}": v for k, v in ci.items()}
    return {**r, "value": s["median"], "spread": s["iqr"], "n": s["n"], "sweep": {**(r.get("sweep") or {}), **ci},
            **flat}


def _as_gpu(rows, rounds=None):
    """The rows as a GPU run: every ``hardware`` id a GPU's, no backend skipped as the CPU-only interpreter, and
    every speed-up over ``rounds`` rounds (None: the paper scale's, :func:`gpu_rounds`) around its measured median
    with its measured IQR."""
    out = []
    for r in rows:
        if (r.get("sweep") or {}).get("reason") == INTERPRETER or r.get("sweep.reason") == INTERPRETER:
            continue
        r = {**r, "hardware": GPU}
        if r.get("metric") in SPEED and r.get("value") is not None:
            r = _rounds(r, float(r["value"]), float(r.get("spread") or 0.0), rounds or gpu_rounds(r["metric"]))
        out.append(r)
    return out


def on_device(rows, rounds=None):
    """The reference's rows presented as a GPU run (where the speed headline is decided), each speed-up over a GPU
    run's rounds: the null control runs on these too (tests/test_judge_contract.py), so it can fail the judge where
    speed is decided. ``rounds``: another count (tests/test_claim_flash_attention.py: the reference's 3)."""
    return _as_gpu(rows, rounds)


def null_reaches(v: dict) -> list[str]:
    """What the null on the GPU rows (tests/test_judge_contract.py) must reach to be able to fail the judge: every
    speed check decided by an interval of the median (a GPU run's rounds give one), undecided only where that
    interval straddles its threshold, never for too few rounds. Returns what it did not reach (empty: reached)."""
    speed = [c for c in v["checks"] if "faster than standard attention" in c["name"]]
    missed = [f"{c['name']}: {c['interval']}" for c in speed if "too few rounds" in (c["interval"] or "")
              or (c["passed"] is None and "straddles" not in (c["undecided_because"] or ""))]
    return missed if speed else ["no speed check"]


def context(ctx: dict) -> dict:
    """What every control here stands for: a GPU run (a recorded device wins over the rows' hardware ids)."""
    return {**ctx, "device": "cuda", "hardware": GPU}


def _speed(rows, ratio, spread, rounds=None):
    """Every speed-up at ``ratio`` with IQR ``spread`` over ``rounds`` rounds (None: a GPU run's), stored as the
    measurement stores it (:func:`_rounds`)."""
    return [_rounds(r, ratio, spread, rounds or gpu_rounds(r["metric"])) if r.get("metric") in SPEED
            and r.get("value") is not None else r for r in rows]


def paper_false(rows: list[dict], rounds=None) -> list[dict]:
    """On a GPU: the fused kernel 2x slower than standard attention (speed-up 0.5, IQR 0.05) and its memory as
    quadratic in N as the materialised scores (exponent 2) and larger than standard attention's (Table 21 ratio 0.8)."""
    rows = _speed(_as_gpu(rows, rounds), 0.5, 0.05, rounds)
    rows = edit(rows, "memory_exponent_in_n", lambda r: 2.0, sweep_provider=("sdpa", "triton"))
    return edit(rows, "table21_memory_ratio_math_over_fused", lambda r: 0.8)


def paper_true(rows: list[dict], rounds=None) -> list[dict]:
    """On a GPU: the paper's speed-ups (Fig 2: 41.7 -> 7.3 ms; end-to-end GPT-2 medium 3.0x; registry values) with
    IQR 0.2, the memory as measured (the reference's exponents and Table 21 ratios hold on any device): the verdict
    must be reproduced (tests/test_judge_contract.py), and is not where the rounds give no interval."""
    kt = registry.published("flash_attention", "kernel_time")["value"]
    e2e = registry.published("flash_attention", "gpt2_medium_speedup_vs_hf")["value"]
    target = {SPEED[0]: kt[0] / kt[1], SPEED[1]: e2e}
    return [_rounds(r, target[r["metric"]], 0.2, rounds or gpu_rounds(r["metric"])) if r.get("metric") in SPEED
            and r.get("value") is not None else r for r in _as_gpu(rows, rounds)]


def ties(rows: list[dict]) -> list[dict]:
    """On a GPU: the fused kernel exactly as fast as standard attention (speed-up 1, a zero-width interval), with
    every memory exponent on its band's edge (the upper ends of linear_exponent and quadratic_exponent) and Table
    21's ratio at 1 (ties on the secondary checks are undecided, never failed, so they cannot turn the verdict into
    partially either)."""
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
