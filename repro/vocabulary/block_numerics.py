"""The names repro/claims/block_numerics.py and repro/judges/block_numerics.py share: the claim's id."""

CLAIM = "block_numerics"
