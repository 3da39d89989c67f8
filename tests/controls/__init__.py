"""Negative controls of the verdict contract, one module per registered claim (tests/test_judge_contract.py).

``tests/controls/<claim>.py`` defines, from the claim's own metric schema (its committed reference rows):

- ``paper_false(rows) -> rows``: the paper's effect reversed (RMSNorm slower, Post-LN flat, pruning destroys BLEU,
  GPTQ worse than RTN, ...), every gate a trained model must pass kept as measured, so the judge can decide: the
  verdict must be ``not_reproduced``;
- ``ties(rows) -> list[rows]`` (optional): data sitting exactly on the judge's thresholds (a measured value equal
  to the published bound, a variant equal to its baseline); none may give ``reproduced`` or ``partially``.

Helpers here edit rows by metric and sweep values (``edit``) so a control reads like the effect it removes. A claim
is not registered without its control module (the coverage test fails).
"""
from __future__ import annotations

from typing import Callable


def edit(rows: list[dict], metric: str | tuple[str, ...], fn: Callable[[dict], float | None], **where) -> list[dict]:
    """``rows`` with ``value`` replaced by ``fn(row)`` on the rows of ``metric`` (one or several) whose columns
    match ``where`` (``sweep.norm="post"`` is passed as ``sweep_norm="post"``); the rest unchanged."""
    metrics = (metric,) if isinstance(metric, str) else tuple(metric)
    cond = {k.replace("sweep_", "sweep.", 1) if k.startswith("sweep_") else k: v for k, v in where.items()}
    out = []
    for r in rows:
        if r.get("metric") in metrics and all(_eq(r.get(k), v) for k, v in cond.items()) and r.get("value") is not None:
            r = {**r, "value": fn(r)}
        out.append(r)
    return out


def _eq(a, b) -> bool:
    if isinstance(b, (list, tuple, set)):
        return any(_eq(a, x) for x in b)
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return str(a) == str(b)


def values(rows: list[dict], metric: str, **where) -> list[float]:
    cond = {k.replace("sweep_", "sweep.", 1) if k.startswith("sweep_") else k: v for k, v in where.items()}
    return [float(r["value"]) for r in rows if r.get("metric") == metric and r.get("value") is not None
            and all(_eq(r.get(k), v) for k, v in cond.items())]


def on_edge(center: float, width: float) -> float:
    """The value ``v`` nearest above ``center + width`` whose distance the judge computes, ``abs(v - center)``, is
    not below ``width``: exactly on a tolerance band's edge, or one float past it where no float lands on it."""
    import math

    v = center + width
    for _ in range(64):  # step down while the float below still reaches the edge
        below = math.nextafter(v, -math.inf)
        if abs(below - center) < width:
            break
        v = below
    while abs(v - center) < width:
        v = math.nextafter(v, math.inf)
    return v


def default_thresholds(claim: str) -> dict:
    """The claim's default-scale judge thresholds (what a tie control sits on)."""
    from repro import config

    return config.thresholds(claim, "default")
