"""The confidence intervals the judges decide with (docs/verdicts.md): the Student-t interval of a mean over seeds,
of a sample's mean, and Welch's interval of a contrast of independent samples.

Pure functions, no I/O. Judge-side (repro.provenance.JUDGE_SIDE): changing them re-judges the stored measurements
and measures nothing again; no measurement imports them (the statistics a measurement computes, slope fits and
mean and spread over seeds, are repro.stats'). The decisions made from these intervals are repro.verdicts'
(``decide_interval``, ``decide_within``, ``both``).
"""
from __future__ import annotations

import math
import statistics


# two-sided 95% Student-t quantiles t_{0.975, df} (df = 1..30; the normal 1.96 beyond). A table, not scipy: the
# GPU node image the speed claims run on has no scipy, and these are the standard printed values.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t_interval(mean: float, std: float | None, n: int | None) -> tuple[float, float]:
    """95% confidence interval of a mean over ``n`` seeds with sample std ``std`` (Student t). With one seed (or no
    spread recorded) the interval is infinitely wide: a single run cannot decide a threshold."""
    n = int(n or 1)
    if n < 2 or std is None or not math.isfinite(std):
        return -math.inf, math.inf
    t = _T975[n - 2] if n - 1 <= len(_T975) else 1.96
    half = t * std / math.sqrt(n)
    return mean - half, mean + half


def sample_interval(xs) -> tuple[float, float, float, float]:
    """(mean, lower, upper, sample std) of the 95% t-interval of the mean of the values ``xs`` (one per seed);
    fewer than two values give an unbounded interval and a NaN std."""
    xs = [float(x) for x in xs]
    mean = statistics.fmean(xs) if xs else math.nan
    sd = statistics.stdev(xs) if len(xs) >= 2 else math.nan
    lo, hi = t_interval(mean, sd, len(xs))
    return mean, lo, hi, sd


def welch_interval(terms) -> tuple[float, float, float]:
    """(estimate, lower, upper) of the 95% Welch interval of the linear contrast sum_i c_i * mean(x_i) over
    independent samples ``terms`` = [(c_i, x_i), ...]: variance sum_i c_i^2 s_i^2 / n_i, the Welch-Satterthwaite
    degrees of freedom rounded down (conservative: the t table above). Two terms (1, a), (-1, b) give the interval of
    mean(a) - mean(b). A sample of fewer than two values gives an unbounded interval; no spread at all, a point."""
    terms = [(float(c), [float(v) for v in x]) for c, x in terms]
    est = sum(c * statistics.fmean(x) for c, x in terms)
    if any(len(x) < 2 for _, x in terms):
        return est, -math.inf, math.inf
    parts = [(c * c * statistics.variance(x) / len(x), len(x)) for c, x in terms]
    var = sum(v for v, _ in parts)
    if var == 0:
        return est, est, est
    df = var ** 2 / sum(v * v / (n - 1) for v, n in parts if v)
    k = max(2, int(math.floor(df)) + 1)  # t_interval(mean, std, n) uses n - 1 degrees of freedom
    return (est, *t_interval(est, math.sqrt(var) * math.sqrt(k), k))


def _t_central(t: float, df: int) -> float:
    """P(|T| < t) for Student's t with ``df`` (integer) degrees of freedom: the closed-form finite series in
    theta = atan(t / sqrt(df)) (Abramowitz and Stegun 26.7.3-4), exact without scipy."""
    theta = math.atan(t / math.sqrt(df))
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    if df % 2 == 0:
        term, total = 1.0, 1.0
        for k in range(2, df, 2):
            term *= c2 * (k - 1) / k
            total += term
        return s * total
    if df == 1:
        return 2 * theta / math.pi
    term, total = 1.0, 1.0
    for k in range(3, df, 2):
        term *= c2 * (k - 1) / k
        total += term
    return 2 / math.pi * (theta + s * math.cos(theta) * total)


def t_quantile(confidence: float, df: int) -> float:
    """The two-sided Student-t quantile t with P(|T| < t) = ``confidence`` (e.g. 0.975 for one of two planned
    looks at 95% overall), by bisection on :func:`_t_central`."""
    lo, hi = 0.0, 1.0
    while _t_central(hi, df) < confidence:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _t_central(mid, df) < confidence else (lo, mid)
    return (lo + hi) / 2


def sample_interval_at(xs, confidence: float) -> tuple[float, float, float]:
    """(mean, lower, upper) of the t-interval of the mean of ``xs`` at ``confidence`` (an interval of a planned
    look: repro.verdicts.sequential); fewer than two values give an unbounded interval."""
    xs = [float(x) for x in xs]
    mean = statistics.fmean(xs) if xs else math.nan
    if len(xs) < 2:
        return mean, -math.inf, math.inf
    half = t_quantile(confidence, len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))
    return mean, mean - half, mean + half
