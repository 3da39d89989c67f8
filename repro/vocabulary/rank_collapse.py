"""The names repro/claims/rank_collapse.py and repro/judges/rank_collapse.py share: the claim's id."""

CLAIM = "rank_collapse"
