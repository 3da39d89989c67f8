"""Reproduction suite for published claims about the Transformer block."""
import os

# OpenMP threads that finish a parallel region spin only briefly (1000 iterations, microseconds) before they sleep
# (libgomp reads this when torch loads it, so it is set before anything imports torch). Measured on the 2-core Intel
# Xeon: 300 Adam steps of a 16-layer d=32 MLP at 2 threads beside a 1-thread job took 2.9 s with libgomp's default
# spin (300000), 0.6-0.8 s with OMP_WAIT_POLICY=PASSIVE or this spin count; a training step of the default
# translation model at 2 threads on the idle machine took 0.93-1.03 s passive (threads sleeping and waking between
# every pair of kernels) and 0.82-0.85 s with this spin count (0.78-0.82 s spinning freely). Set OMP_WAIT_POLICY or
# GOMP_SPINCOUNT to override.
if "OMP_WAIT_POLICY" not in os.environ:
    os.environ.setdefault("GOMP_SPINCOUNT", "1000")
