"""The names repro/claims/param_accounting.py and repro/judges/param_accounting.py share: the claim's id."""

CLAIM = "param_accounting"
