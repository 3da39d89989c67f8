"""Statistics the measurements compute: slope fits (a fitted exponent is a measured row), mean and spread over
seeds.

Pure functions, no I/O; measurement side (part of the claims' code keys). The confidence intervals a judge decides
with are judge-side, in repro.intervals.
"""
from __future__ import annotations

import math

import numpy as np


# ----------------------------------------------------------------------------------------------- slope fits
def fit_slope(x, y) -> float:
    """Least-squares slope of ``y`` on ``x``; NaN when every ``x`` is the same."""
    x, y = [float(v) for v in x], [float(v) for v in y]
    mx, my = sum(x) / len(x), sum(y) / len(y)
    den = sum((a - mx) ** 2 for a in x)
    return sum((a - mx) * (b - my) for a, b in zip(x, y)) / den if den else float("nan")


def loglog_slope(xs, ys) -> float:
    """Exponent of a power law ``y ~ x^k``: the least-squares slope of log y on log x (all values > 0)."""
    return fit_slope([math.log(x) for x in xs], [math.log(y) for y in ys])


# ----------------------------------------------------------------------------------------------- mean / spread
def mean_std(values) -> tuple[float, float]:
    """(mean, sample std with ddof=1) of ``values``; the std is 0.0 for a single value."""
    v = np.asarray(values, float)
    return float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else 0.0
