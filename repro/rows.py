"""Metric rows with the queries measurements and judges ask of them (``Rows(rows).metric("bleu").where(norm="pre")``).

Neutral ground: measurement code (a summary row computed from measured rows) and judges both query rows, so this
module belongs to neither side; changing it changes both keys.
"""
from __future__ import annotations

from typing import Any


class Rows(list):
    """Metric rows (the dicts of metrics.csv, or of ``repro.io.metric``) with the queries a judge asks of them:
    ``Rows(rows).metric("bleu").where(norm="pre").values()``. Every query returns rows in their stored order."""

    def metric(self, *names: str) -> "Rows":
        """The rows of any of the metrics ``names``."""
        return Rows(r for r in self if r["metric"] in names)

    def where(self, **sweep: Any) -> "Rows":
        """The rows whose sweep variables equal the given values (a variable a row lacks matches None)."""
        return Rows(r for r in self if all(r["sweep"].get(k) == v for k, v in sweep.items()))

    def having(self, *keys: str) -> "Rows":
        """The rows that set every sweep variable in ``keys``."""
        return Rows(r for r in self if all(k in r["sweep"] for k in keys))

    def filter(self, keep) -> "Rows":
        """The rows for which ``keep(row)`` is true (for a condition ``where`` cannot state)."""
        return Rows(r for r in self if keep(r))

    def measured(self) -> "Rows":
        """The rows with a value (a row whose measurement was skipped or failed has value None)."""
        return Rows(r for r in self if r["value"] is not None)

    def values(self) -> list:
        return [r["value"] for r in self]

    def first(self, default: Any = None) -> Any:
        return self[0] if self else default

    def value(self, default: Any = None) -> Any:
        """The first row's value (``default`` when there is none)."""
        return self[0]["value"] if self else default

    def sweep(self, key: str) -> list:
        """The distinct values of sweep variable ``key`` in order of first appearance (rows without it skipped)."""
        return list(dict.fromkeys(r["sweep"][key] for r in self if key in r["sweep"]))

    def by(self, key: str) -> dict[Any, "Rows"]:
        """The rows grouped by sweep variable ``key`` (in order of first appearance; rows without it skipped)."""
        out: dict[Any, Rows] = {}
        for r in self:
            if key in r["sweep"]:
                out.setdefault(r["sweep"][key], Rows()).append(r)
        return out
