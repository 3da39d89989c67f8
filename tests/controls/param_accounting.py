"""param_accounting (Vaswani et al. 2017, the model cards' parameter counts): paper-false = every count 30% off; ties
= each exact published percentage (printed to one decimal) measured exactly on the edge of its rounding band
(``percent_rounding`` from the published value): a tie, which decides nothing. (An exact count has no band to sit on:
one parameter off is a decided failure, tested in tests/test_claims_foundation.py.)"""
from controls import default_thresholds, edit

from repro import registry


def paper_false(rows):
    return edit(rows, tuple({r["metric"] for r in rows}), lambda r: float(r["value"]) * 1.3)


def _exact(r) -> bool:
    key = r.get("published_key")
    return bool(isinstance(key, str) and key and registry.published("param_accounting", key).get("exact"))


def ties(rows):
    pct = default_thresholds("param_accounting")["percent_rounding"]

    def edge(r):
        pub = registry.published("param_accounting", r["published_key"])
        p = float(pub["value"]) * (100 if pub["unit"] == "fraction" else 1)
        return p + pct

    return [[{**r, "value": edge(r)} if _exact(r) and r.get("unit") == "percent" else r for r in rows]]
