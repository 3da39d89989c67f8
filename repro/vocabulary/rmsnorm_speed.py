"""The names repro/claims/rmsnorm_speed.py and repro/judges/rmsnorm_speed.py share: the claim's id."""

CLAIM = "rmsnorm_speed"
