"""param_accounting (Kaplan et al. / the model cards' parameter counts): paper-false = every count 30% off; ties =
each exact published count missed by the smallest possible amount (one parameter), which an exact figure must not
forgive."""
from controls import edit

from repro import registry


def paper_false(rows):
    return edit(rows, tuple({r["metric"] for r in rows}), lambda r: float(r["value"]) * 1.3)


def _exact(r) -> bool:
    key = r.get("published_key")
    return bool(isinstance(key, str) and key and registry.published("param_accounting", key).get("exact"))


def ties(rows):
    return [[{**r, "value": float(r["value"]) + 1} if _exact(r) else r for r in rows]]
