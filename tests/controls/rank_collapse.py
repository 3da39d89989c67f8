"""rank_collapse (Dong et al. 2021): paper-false = pure attention decays only exponentially (per-layer exponent 1,
like the stacks with skips), so the doubly-exponential collapse is gone."""
from controls import edit


def paper_false(rows):
    rows = edit(rows, "per_layer_exponent", lambda r: 1.0, sweep_variant="attention")
    return edit(rows, "exponent_gap_vs_skip", lambda r: 0.0)


def ties(rows):
    """The pure-attention exponent exactly on the edge of the cubic band (3 - tolerance, the judge's threshold)."""
    from repro import config

    tol = config.thresholds("rank_collapse", "default")["cubic_tolerance"]
    return [edit(rows, "per_layer_exponent", lambda r: 3.0 - tol, sweep_variant="attention")]
