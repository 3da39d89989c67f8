"""What a metrics row measures: the ``kind`` column of metrics.csv (repro.io.metric).

| kind | what | unit examples |
|---|---|---|
| time | a duration | s, ms, s/1k steps |
| memory | bytes held or moved | bytes, MiB, GB |
| rate | work per second (throughput, bandwidth) | tokens/s, GB/s, TFLOP/s |
| ratio_time | a dimensionless comparison of times (speed-up, time reduction, overhead) | x, ratio, percent |
| ratio_memory | a dimensionless comparison of memory | x, ratio, percent |
| quality | model quality (BLEU, perplexity, loss) | BLEU, perplexity, nats/token |
| count | a number of things (parameters, heads, updates) | params, heads, updates |
| statistic | anything else: slopes, norms, cosines, fractions, exponents | frobenius, cosine, "" |

:func:`infer_kind` reads the kind from the unit where the unit alone says it; a dimensionless unit (ratio, x,
percent, fraction) does not say whether times, memory or something else were compared, so such a row needs an
explicit ``kind=``. :func:`legacy_kind` is the one fallback for metrics.csv files written before the column existed:
the unit plus the metric-name patterns the hardware comparison used to guess with.
"""
from __future__ import annotations

import re

KINDS = ("time", "memory", "rate", "ratio_time", "ratio_memory", "quality", "count", "statistic")
PERF_KINDS = ("time", "memory", "rate", "ratio_time", "ratio_memory")  # what the hardware comparison shows

# Units convertible to a base unit (seconds, bytes).
TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0, "min": 60.0, "h": 3600.0}
MEMORY_UNITS = {"b": 1.0, "bytes": 1.0, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
                "kib": 2.0**10, "mib": 2.0**20, "gib": 2.0**30, "tib": 2.0**40}
# Rates: anything per second (GB/s, TFLOP/s, tokens/s, ...) and the FLOPS spellings.
RATE_RE = re.compile(r"^[\w.]+\s*/\s*s$|^[gtp]?flops$", re.IGNORECASE)
# Time per unit of work ("s/1k steps", "ms/step", "s/epoch").
TIME_PER_RE = re.compile(r"^(ns|us|µs|ms|s|min|h)\s*/\s*\S", re.IGNORECASE)
QUALITY_UNITS = {"bleu", "perplexity", "ppl", "nats/token", "nats/token (label-smoothed)", "loss"}
COUNT_UNITS = {"params", "heads", "dims", "pairs", "pieces", "updates", "decodes", "(layer, dim) pairs"}
DIMENSIONLESS = {"ratio", "x", "percent", "%", "fraction"}

# Only for metrics.csv written before the kind column (legacy_kind): the names the comparison used to guess by.
PERF_NAME_RE = re.compile(r"time|speed|latency|throughput|mem|peak|bandwidth|overhead|reduction|flops|mfu|"
                          r"utili[sz]ation|gbps|tflops|faster|slower|runtime|_ms\b|_s\b", re.IGNORECASE)
MEMORY_NAME_RE = re.compile(r"mem|peak|alloc|activation|footprint|rss|cache|hbm|traffic", re.IGNORECASE)


class KindError(ValueError):
    """A metrics row whose kind is missing where it must be stated, unknown, or contradicts its unit."""


def unit_key(unit) -> str:
    return str(unit).strip().lower() if isinstance(unit, str) else ""


def is_dimensionless(unit) -> bool:
    u = unit_key(unit)
    return u in DIMENSIONLESS or u.startswith("percent")


def infer_kind(unit) -> str | None:
    """The kind the unit alone says; None for a dimensionless unit (ratio, x, percent..., fraction), which does
    not say what was compared. A unit without a table entry (and no unit) is a statistic."""
    u = unit_key(unit)
    if u in TIME_UNITS or TIME_PER_RE.match(u):
        return "time"
    if u in MEMORY_UNITS:
        return "memory"
    if RATE_RE.match(u):
        return "rate"
    if u in QUALITY_UNITS:
        return "quality"
    if u in COUNT_UNITS:
        return "count"
    if is_dimensionless(u):
        return None
    return "statistic"


def resolve_kind(name: str, unit, kind: str | None) -> str:
    """The kind of a new row: ``kind`` when given (checked), else :func:`infer_kind`. A dimensionless row without
    ``kind`` and a ``kind`` naming another measured quantity than its unit (``kind='memory'`` in seconds) raise
    KindError naming the metric."""
    inferred = infer_kind(unit)
    if kind is None:
        if inferred is None:
            raise KindError(f"metric {name!r} (unit {unit!r}): a dimensionless row needs kind= "
                            f"(ratio_time or ratio_memory when it compares times or memory; else one of {KINDS})")
        return inferred
    if kind not in KINDS:
        raise KindError(f"metric {name!r}: kind {kind!r} is not one of {KINDS}")
    if inferred in ("time", "memory", "rate") and kind in PERF_KINDS and kind != inferred:
        raise KindError(f"metric {name!r}: kind {kind!r} contradicts its unit {unit!r} (a {inferred} unit)")
    return kind


def legacy_kind(name: str, unit) -> str:
    """The kind of a row from a metrics.csv without a kind column (written before it existed): what the hardware
    comparison guessed from the unit and the metric name. Memory units count as memory only under a memory-like
    name (``weights_gb`` is a computed size), dimensionless rows as time or memory comparisons only under a
    performance-like name; everything else keeps the unit's kind or is a statistic."""
    name = str(name)
    u = unit_key(unit)
    inferred = infer_kind(u)
    if inferred == "memory":
        return "memory" if MEMORY_NAME_RE.search(name) else "statistic"
    if inferred is None:
        if not PERF_NAME_RE.search(name):
            return "statistic"
        return "ratio_memory" if MEMORY_NAME_RE.search(name) else "ratio_time"
    return inferred


def stored_kind(name, unit, kind) -> str:
    """The kind of a stored row (metrics.csv cell, or a row dict): the recorded kind, or :func:`legacy_kind` where
    the file predates the column (the one fallback, used by writer and reader alike)."""
    return kind if isinstance(kind, str) and kind in KINDS else legacy_kind(name, unit)
