"""The names repro/claims/warmup_stability.py and repro/judges/warmup_stability.py share: the claim's id and the
warm-up lengths of its grid (the measurement trains them, the judge compares the longest with none)."""
from __future__ import annotations

CLAIM = "warmup_stability"


def warmup_lengths(params: dict) -> list[int]:
    """The warm-up lengths of the grid, longest first (``warmup_steps``: one length or a list, e.g. Xiong's
    [4000, 500]); the longest is "with warm-up" in the verdict."""
    w = params["warmup_steps"]
    return sorted({int(x) for x in (w if isinstance(w, list) else [w])}, reverse=True)
