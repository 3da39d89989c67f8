"""How fast the host is, at the start and at the end of a run: one hardware id runs on hosts of different speeds.

A VM's CPU name may carry no clock, and the clock its kernel reports may not change when the host does: two fresh
default runs of the same jobs under ``cpu-intel-xeon-2c``, both at a reported 2600 MHz, took 27.1 and 35.1 minutes
(docs/sizing.md). So each ``snakemake`` invocation that runs jobs measures the host once before its first job and
once after its last (both with nothing else of the run on the machine) and records the numbers in run.json; the
index pages show them beside the run time.

The probe is the fp32 ceiling of docs/pilots/matmul.md (``scripts/pilots/matmul.py``): one 2048 x 2048 x 2048 fp32
matmul on one torch thread, the best of ``reps`` timed calls after ``warmup`` untimed ones, in GFLOP/s. It runs in a
subprocess (``python -m repro.report.hostspeed``), so the Snakemake process never imports torch, and takes about
two seconds. It is a report, not a measurement: no claim reads it, and a probe that fails records nothing.
On a cluster it measures the node that runs Snakemake (named in the record), not the compute nodes.
"""
from __future__ import annotations

import json
import platform
import subprocess
import sys
import time

PROBE = "fp32 2048^3 matmul, one torch thread, best of 5 timed calls (GFLOP/s)"


def matmul_gflops(n: int = 2048, reps: int = 5, warmup: int = 2) -> float:
    """GFLOP/s of the best of ``reps`` timed ``n x n x n`` fp32 matmuls on one torch thread."""
    import torch  # lazy: the Snakemake process imports this module for probe(), which must not load torch

    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, n, generator=gen), torch.randn(n, n, generator=gen)
    for _ in range(warmup):
        a @ b
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * n ** 3 / best / 1e9


def probe(timeout: float = 120.0) -> float | None:
    """:func:`matmul_gflops` measured in a fresh process of this Python; None if it fails or times out."""
    try:
        out = subprocess.run([sys.executable, "-m", "repro.report.hostspeed"], capture_output=True, text=True,
                             timeout=timeout, check=True).stdout
        return round(float(json.loads(out.strip().splitlines()[-1])["gflops"]), 1)
    except (OSError, subprocess.SubprocessError, ValueError, KeyError, IndexError):
        return None


def record(start: float | None, end: float | None) -> dict | None:
    """run.json's ``host_speed``: the probe at the start and the end of the run, where it ran, and what it is."""
    if start is None and end is None:
        return None
    return {"start_gflops": start, "end_gflops": end, "node": platform.node(), "probe": PROBE}


def text(rec: dict | None) -> str:
    """``"host 150/148 GFLOP/s (fp32 matmul, one thread, at start/end)"`` or "" when not recorded."""
    hs = (rec or {}).get("host_speed") or {}
    vals = [hs.get("start_gflops"), hs.get("end_gflops")]
    if not any(v is not None for v in vals):
        return ""
    shown = "/".join("?" if v is None else f"{v:.0f}" for v in vals)
    return f"host {shown} GFLOP/s (fp32 matmul, one thread, at start/end)"


if __name__ == "__main__":
    print(json.dumps({"gflops": matmul_gflops()}))
