"""Benchmark plumbing: hardware/software fingerprint, timing, memory, and atomic results records."""
