"""The power table (repro.verdicts.power, sized, sign_test_size; docs/verdicts.md "What a page shows"): the size
at which a check would decide with 90% power if its estimate held, checked against simulation and exact sums."""
import math

import numpy as np
import pytest

from repro.intervals import sample_interval
from repro.verdicts import binom_tail, decisive_share, power, side, sign_test_size, sized

Z975, Z90 = 1.959964, 1.281552


def test_decisive_share_is_the_normal_quantiles_ratio():
    # an interval est +- 1.96 se excludes the threshold with probability Phi(gap / se - 1.96): 0.9 at
    # gap = (1.96 + 1.2816) se, i.e. half-width = 1.96 / 3.2415 = 0.6046 of the gap; at 50% power the whole gap
    assert decisive_share() == pytest.approx(Z975 / (Z975 + Z90), rel=1e-5)
    assert decisive_share(0.95, 0.5) == pytest.approx(1.0)
    assert decisive_share(0.99, 0.9) == pytest.approx(2.575829 / (2.575829 + Z90), rel=1e-5)


def test_power_of_a_mean_is_the_analytic_90_percent_size_and_simulation_agrees():
    """A pilot of 10 draws of N(0.4, 1) with its 95% z half-width 1.96 / sqrt(10): the analytic 90% size is
    ((1.96 + 1.2816) / 0.4)^2 = 65.7; at the returned n the 95% t-interval of n fresh draws excludes 0 in >= 88% of
    4,000 simulated runs, and at a quarter of it in far fewer (the test can fail)."""
    delta, n0 = 0.4, 10
    half = Z975 / math.sqrt(n0)
    pw = power(delta, delta - half, delta + half, 0.0, n0, "draws")
    analytic = ((Z975 + Z90) / delta) ** 2
    assert pw["n_needed"] == pytest.approx(analytic, rel=0.05) and pw["power"] == 0.9 and pw["confidence"] == 0.95
    assert pw["n_needed"] == math.ceil(n0 * ((Z975 + Z90) * (half / Z975) / delta) ** 2)  # the docstring's formula
    rng = np.random.default_rng(0)

    def excluded(n, runs=4000):
        draws = rng.normal(delta, 1.0, size=(runs, n))
        return np.mean([sample_interval(d)[1] > 0.0 for d in draws])

    assert excluded(pw["n_needed"]) >= 0.88
    assert excluded(max(pw["n_needed"] // 4, 2)) < 0.6
    # the old 50% size, n0 (half / gap)^2 = 24, decides about half the time
    assert 0.4 < excluded(math.ceil(n0 * (half / delta) ** 2)) < 0.6


def test_power_keeps_ties_decided_checks_and_band_edges():
    assert power(1.0, 0.5, 1.5, 1.0, 5, "seeds")["n_needed"] is None  # a tie: no size decides it
    assert "tie" in power(1.0, 0.5, 1.5, 1.0, 5, "seeds")["why"]
    assert power(2.0, 1.5, 2.5, 1.0, 5, "seeds")["n_needed"] == 5  # decided by its own interval
    assert power(2.0, -math.inf, math.inf, 1.0, 1, "seeds")["n_needed"] == 2  # one seed: two give an interval
    # a band (0, 1): the distance to the nearer edge, 0.2, with half-width 0.4 over 8 seeds:
    # 8 x (0.4 / (0.6046 x 0.2))^2 = 8 x 3.308^2 = 87.5 -> 88
    pw = power(0.8, 0.4, 1.2, (0.0, 1.0), 8, "seeds")
    assert pw["n_needed"] == math.ceil(8 * (0.4 / (decisive_share() * 0.2)) ** 2) == 88


def test_side_tells_the_claimed_side():
    pw = power(0.3, 0.1, 0.5, 0.2, 4, "seeds")
    assert side(pw, "above") is True and side(pw, "below") is False
    assert side(power(0.2, 0.1, 0.3, 0.2, 4, "seeds"), "above") is None  # on the threshold
    band = power(0.5, 0.1, 0.9, (0.0, 1.0), 4, "seeds")
    assert side(band, "within") is True and side(power(1.5, 1.1, 1.9, (0.0, 1.0), 4, "seeds"), "within") is False
    with pytest.raises(ValueError):
        side(band, "above")


def _part(value, n_needed, n=10, threshold=0.0):
    return {"value": value, "threshold": threshold, "n": n, "n_needed": n_needed, "unit": "seeds"}


def test_a_conjunction_is_sized_by_the_part_that_decides_first():
    """Every part must hold: one part projected to fail decides it (failed) at its own size, the cheapest failing
    part when several fail; every part projected to hold: it holds only when the last one decides."""
    cheap_fail, dear_fail = _part(-1.0, 45), _part(-0.1, 900)
    dear_pass, cheap_pass = _part(0.1, 24_394), _part(1.0, 30)
    # prepost_gradients' case: the dear part is the one projected to hold, the failing one decides at 45
    side_, pw = sized([(side(dear_pass, "above"), dear_pass), (side(cheap_fail, "above"), cheap_fail)])
    assert side_ is False and pw["n_needed"] == 45 and "first" in pw["sized_by"]
    side_, pw = sized([(False, dear_fail), (True, dear_pass), (False, cheap_fail)])
    assert side_ is False and pw["n_needed"] == 45  # the smallest among the failing parts
    side_, pw = sized([(True, cheap_pass), (True, dear_pass)])
    assert side_ is True and pw["n_needed"] == 24_394 and "last" in pw["sized_by"]  # both hold: the largest
    # a tie among parts projected to hold leaves no size; beside a failing part, the failing part decides
    assert sized([(True, cheap_pass), (None, _part(0.0, None))])[1]["n_needed"] is None
    assert sized([(None, _part(0.0, None)), (False, cheap_fail)])[1]["n_needed"] == 45
    # parts in different units compare by the factor n_needed / n: 30 / 3 seeds (x10) after 900 / 400 sentences
    seeds, sentences = _part(1.0, 30, n=3), {**_part(1.0, 900, n=400), "unit": "sentences"}
    assert sized([(True, seeds), (True, sentences)])[1]["unit"] == "seeds"
    # "any": one part holding suffices, the dual
    side_, pw = sized([(True, dear_pass), (True, cheap_pass), (False, cheap_fail)], "any")
    assert side_ is True and pw["n_needed"] == 30
    assert sized([], "all") == (None, None)


def _exact_power(n, share, alpha):
    """The one-sided exact sign test's power at n comparisons, from binom_tail alone: the rejection region's
    smallest count c with P(X >= c | 1/2) < alpha, then P(X >= c | share)."""
    c = next((k for k in range(n + 1) if binom_tail(k, n, 0.5) < alpha), None)
    return 0.0 if c is None else binom_tail(c, n, share)


@pytest.mark.parametrize("share,start", [(0.7, 10), (0.8, 5), (0.25, 8), (1.0, 4)])
def test_sign_test_size_is_the_first_count_with_90_percent_exact_power(share, start):
    n = sign_test_size(share, 0.05, start=start)
    p = share if share > 0.5 else 1 - share
    assert _exact_power(n, p, 0.05) >= 0.9
    assert all(_exact_power(m, p, 0.05) < 0.9 for m in range(start + 1, n))
    if share == 1.0:  # every comparison won: the first count whose all-wins p-value 2^-n is below 0.05
        assert n == 5
    assert sign_test_size(0.5, 0.05) is None
