"""Timing helpers.

CPU: the variants being compared are interleaved in one process (A B C A B C ...) so drift and other load hit
them alike; report medians, inter-quartile spread and median *ratios*, never absolute times across runs.
GPU: CUDA events around each call, warm-up first, and an L2 flush (writing a buffer larger than L2) between
repetitions so no variant profits from the previous one's cache.
"""
from __future__ import annotations

import logging
import os
import statistics
import time
from typing import Callable, Mapping

import torch


_LOAD: list[float] = []  # 1-minute load averages sampled at the start and end of every interleaved timing


def sample_load() -> None:
    """Record the machine's 1-minute load average (part of the results: timing checks on a busy machine are
    reported as such, and an undecided one names the load)."""
    if hasattr(os, "getloadavg"):
        _LOAD.append(os.getloadavg()[0])


def load_summary() -> dict:
    """The load seen during this process's timings: samples, max 1-minute load average, the cores, torch's threads,
    and ``busy`` = other work kept at least half a core runnable beside this process's own threads."""
    cpus, threads = os.cpu_count() or 1, torch.get_num_threads()
    if not _LOAD:
        return {"samples": 0, "cpus": cpus, "threads": threads, "busy": None}
    top = max(_LOAD)
    return {"samples": len(_LOAD), "loadavg_1m_max": round(top, 2), "loadavg_1m_min": round(min(_LOAD), 2),
            "cpus": cpus, "threads": threads, "busy": bool(top > threads + 0.5)}


def load_note(load: dict) -> str:
    """A short phrase for reasons: "" on an idle machine."""
    if not load.get("busy"):
        return ""
    return (f"the machine was busy while timing (1-min load average up to {load['loadavg_1m_max']} on "
            f"{load['cpus']} cores with {load['threads']} thread(s) of our own)")


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


def paired_ratios(samples: Mapping[str, list[float]], numerator: str, denominator: str) -> dict:
    """Per-round ratios numerator/denominator (paired by interleaving round), summarised."""
    pairs = [a / b for a, b in zip(samples[numerator], samples[denominator]) if b > 0]
    return summarize(pairs)
