"""The names repro/claims/activation_checkpointing.py and repro/judges/activation_checkpointing.py share:
the claim's id."""

CLAIM = "activation_checkpointing"
