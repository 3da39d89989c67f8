"""The names repro/claims/layer_pruning.py and repro/judges/layer_pruning.py share: the claim's id."""

CLAIM = "layer_pruning"
