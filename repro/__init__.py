"""Reproduction suite for published claims about the Transformer block."""
import os

# OpenMP threads that finish a parallel region sleep instead of spinning (libgomp reads this when torch loads it,
# so it is set before anything imports torch). Measured on the 2-core Intel Xeon with other jobs running: 300 Adam
# steps of a 16-layer d=32 MLP at 2 threads took 25.6 s with the default spin-wait and 1.7 s passive (1 thread:
# 1.4 s); every job of the workflow shares the machine with another one or with the user. Set OMP_WAIT_POLICY to
# override.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
