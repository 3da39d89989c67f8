"""The names repro/claims/quantization.py and repro/judges/quantization.py share: the claim's id."""

CLAIM = "quantization"
