"""The names repro/claims/flash_attention.py and repro/judges/flash_attention.py share: the claim's id."""

CLAIM = "flash_attention"
