"""The names repro/claims/head_pruning.py and repro/judges/head_pruning.py share: the claim's id."""

CLAIM = "head_pruning"
