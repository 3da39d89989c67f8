"""Timing helpers.

CPU: the variants being compared are interleaved in one process (A B C A B C ...) so drift and other load hit
them alike; report medians, inter-quartile spread and median *ratios*, never absolute times across runs.
GPU: CUDA events around each call, warm-up first, and an L2 flush (writing a buffer larger than L2) between
repetitions so no variant profits from the previous one's cache.

Subnormal floats: a timing claim calls :func:`flush_subnormals` first, so that its CPU arithmetic flushes subnormal
floats to zero. Without it rmsnorm_speed's model step (4 layers at d 256, Adam, 2 threads) ran ~120-150 ms for about
65 steps per variant, then ~400-530 ms, drifting back to ~190 ms by round 120 (also with a new random batch every
step): x86 takes microcode assists on subnormal operands, so those rounds timed the CPU's subnormal handling rather
than the variants (flushed, the rounds stay flat). GPUs have no such penalty. The mode belongs to each thread, and a
thread inherits it from the thread that creates it, so it is set before torch's intra-op pool exists;
:func:`flush_subnormals` checks every thread of the pool and the load summary records the result.

OpenMP's wait: the timing claims hold every core of the idle machine, so they take libgomp's default spin between
parallel regions (:func:`repro.openmp_default_wait`, called before torch loads) instead of the suite's short spin,
which put the threads to sleep and woke them around every kernel; the load summary records which wait a process had
(``openmp_wait``).
"""
from __future__ import annotations

import logging
import math
import os
import statistics
import time
from typing import Callable, Mapping

import torch

import repro

_LOAD: list[float] = []  # 1-minute load averages sampled at the start and end of every interleaved timing
_FLUSH: dict = {"state": None}  # subnormals flushed in every intra-op thread (None: not asked; False: not possible)


def subnormals_flushed_everywhere() -> bool:
    """Whether every thread of torch's intra-op pool flushes subnormals: a tensor of the smallest subnormal float,
    large enough to be split across the pool, multiplied by one must come out all zeros."""
    tiny = torch.ones(1 << 22, dtype=torch.int32).view(torch.float32)  # 1.4e-45, built from bits (no rounding)
    return bool(((tiny * 1.0) == 0).all())


def flush_subnormals() -> bool:
    """Flush subnormal floats to zero on the CPU for the rest of this process (the module docstring says why). Call
    it before any parallel torch work: threads created earlier keep their mode. Returns (and records for
    :func:`load_summary`) whether every intra-op thread now flushes; warns when not."""
    ok = bool(torch.set_flush_denormal(True)) and subnormals_flushed_everywhere()
    _FLUSH["state"] = ok
    if not ok:
        logging.getLogger("repro.timing").warning(
            "subnormal floats are not flushed in every thread (CPU without the mode, or the thread pool was created "
            "first): a timing whose values turn subnormal runs slower for that reason")
    return ok


def sample_load() -> None:
    """Record the machine's 1-minute load average (part of the results: timing checks on a busy machine are
    reported as such, and an undecided one names the load)."""
    if hasattr(os, "getloadavg"):
        _LOAD.append(os.getloadavg()[0])


def load_summary() -> dict:
    """The load seen during this process's timings: samples, max 1-minute load average, the cores, torch's threads,
    ``busy`` = other work kept at least half a core runnable beside this process's own threads, and the CPU modes the
    timings ran under (subnormals flushed, OpenMP's wait)."""
    cpus, threads = os.cpu_count() or 1, torch.get_num_threads()
    modes = {"subnormals_flushed": _FLUSH["state"], "openmp_wait": repro.openmp_wait()}
    if not _LOAD:
        return {"samples": 0, "cpus": cpus, "threads": threads, "busy": None, **modes}
    top = max(_LOAD)
    return {"samples": len(_LOAD), "loadavg_1m_max": round(top, 2), "loadavg_1m_min": round(min(_LOAD), 2),
            "cpus": cpus, "threads": threads, "busy": bool(top > threads + 0.5), **modes}


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


_L2_FLUSH: dict = {}


def flush_l2(device) -> None:
    if torch.device(device).type != "cuda":
        return
    buf = _L2_FLUSH.get(str(device))
    if buf is None:
        buf = _L2_FLUSH[str(device)] = torch.empty(256 * 2**20 // 4, dtype=torch.int32, device=device)
    buf.zero_()


def time_once(fn: Callable[[], object], device="cpu") -> float:
    """Seconds for one call of ``fn`` (CUDA events on GPU, perf_counter on CPU)."""
    if torch.device(device).type == "cuda":
        flush_l2(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(); fn(); end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / 1e3
    t0 = time.perf_counter(); fn(); return time.perf_counter() - t0


def time_interleaved(fns: Mapping[str, Callable[[], object]], *, reps: int = 10, warmup: int = 2,
                     device="cpu", min_time: float = 0.0, label: str | None = None) -> dict[str, list[float]]:
    """Interleave the variants round by round; returns the per-variant list of seconds.

    ``min_time`` keeps adding rounds (beyond ``reps``) until the total measured time exceeds it. With ``label``,
    every round is logged (progress for long timings).
    """
    sample_load()
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    _sync(device)
    samples: dict[str, list[float]] = {k: [] for k in fns}
    start, rounds = time.perf_counter(), 0
    while rounds < reps or time.perf_counter() - start < min_time:
        for name, fn in fns.items():
            samples[name].append(time_once(fn, device))
        rounds += 1
        if label:
            logging.getLogger("repro.timing").info(
                "%s: round %d (%s)", label, rounds, ", ".join(f"{k} {1e3 * v[-1]:.1f} ms" for k, v in samples.items()))
    sample_load()
    return samples


def summarize(samples: list[float]) -> dict:
    """median, inter-quartile range and n of a list of times (seconds)."""
    s = sorted(samples)
    if not s:
        return {"median": float("nan"), "iqr": float("nan"), "n": 0}
    q = statistics.quantiles(s, n=4) if len(s) >= 2 else [s[0]] * 3
    return {"median": statistics.median(s), "iqr": q[2] - q[0], "n": len(s)}


def median_interval(values, confidence: float) -> tuple[float, float, float]:
    """(lo, hi, coverage): the distribution-free confidence interval of the median of ``values`` from order
    statistics: [x_(k), x_(n-k+1)] with the largest k whose coverage 1 - 2 P(B <= k-1), B ~ Binomial(n, 1/2), is at
    least ``confidence``. Too few values for that coverage: (-inf, inf, 1.0). The binomial tail is summed exactly in
    integers (no scipy: the GPU image the speed claims run on has none)."""
    x = sorted(float(v) for v in values)
    n, alpha = len(x), 1 - confidence
    total, tail, k = 2 ** n, 0, 0  # tail = 2^n P(B <= k-1)
    while k < n and 2 * (tail + math.comb(n, k)) <= alpha * total:  # rank k+1 still keeps the coverage
        tail += math.comb(n, k)
        k += 1
    if k < 1:
        return -math.inf, math.inf, 1.0
    return x[k - 1], x[n - k], 1 - 2 * tail / total


def paired_ratios(samples: Mapping[str, list[float]], numerator: str, denominator: str,
                  confidence: float | None = None) -> dict:
    """Per-round ratios numerator/denominator (paired by interleaving round), summarised; with ``confidence``, also
    the distribution-free interval of their median (:func:`median_interval`) as ``ci_lo`` / ``ci_hi`` (None when
    there are too few rounds for that coverage) and its ``coverage``."""
    pairs = [a / b for a, b in zip(samples[numerator], samples[denominator]) if b > 0]
    out = summarize(pairs)
    if confidence is not None:
        lo, hi, cov = median_interval(pairs, confidence)
        finite = math.isfinite(lo) and math.isfinite(hi)
        out.update(ci_lo=lo if finite else None, ci_hi=hi if finite else None, coverage=cov)
    return out


def ci_fields(r: dict, confidence: float, scale: float = 1.0) -> dict:
    """The row fields of a :func:`paired_ratios` summary's median interval, as the judges read them
    (repro.verdicts.ratio_interval): ``ci_below`` / ``ci_above``, its distances below and above the median times
    ``scale`` (100 for a ratio written as percent), None when the rounds are too few for that coverage, and its level
    ``confidence``."""
    if r.get("ci_lo") is None:
        return {"ci_below": None, "ci_above": None, "confidence": confidence}
    return {"ci_below": scale * (r["median"] - r["ci_lo"]), "ci_above": scale * (r["ci_hi"] - r["median"]),
            "confidence": confidence}
