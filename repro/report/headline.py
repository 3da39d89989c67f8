"""Each claim's headline in numbers: the measured value with its interval beside the paper's, for the matrix, the
claim pages and ``reports/matrix.csv``.

A judge marks its headline check(s) (repro.verdicts.check, ``headline=True``) and gives them ``numbers``
(repro.verdicts.numbers: value, interval, unit, the paper's number from the registry and how the two compare).
:func:`headline_check` picks the one check that stands for the verdict (a failing headline before an undecided one
before the rest); :func:`cells` formats it in short cells. Verdicts written before the judges gave numbers fall back
to the check's measured text, shortened. :func:`versus` is the one rule by which a measured number is set against
another (the hardware comparison's ratios, the claim pages' 'vs published'): like quantities only.
"""
from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path

import yaml

VERDICT_ORDER = {False: 0, None: 1, True: 2}


def headline_check(verdict: dict) -> dict | None:
    """The headline check that decided ``verdict``: the first failing one, else the first undecided, else the first;
    among those, one with numbers first. None when the verdict has no headline check."""
    heads = [c for c in verdict.get("checks") or [] if c.get("headline")]
    if not heads:
        return None
    return min(heads, key=lambda c: (VERDICT_ORDER.get(c.get("passed"), 1), "numbers" not in c))


def fmt_number(v: float | None) -> str:
    """Four significant digits; integers of five or more digits in scientific notation; '' for None/NaN."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    v = float(v)
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if v != 0 and (abs(v) >= 1e5 or abs(v) < 1e-3):
        return f"{v:.4g}"
    return f"{v:.4g}" if abs(v) < 1000 else f"{v:,.0f}"


def value_text(nums: dict) -> str:
    """'34.06' or '4.5 [1.0, 8.1]' (the measured value and its interval)."""
    v = fmt_number(nums.get("value"))
    if nums.get("lo") is not None and nums.get("hi") is not None:
        v += f" [{fmt_number(nums['lo'])}, {fmt_number(nums['hi'])}]"
    return v or "-"


def paper_text(nums: dict) -> str:
    if nums.get("paper") is not None:
        return fmt_number(nums["paper"]) + (f" ({nums['paper_text']})" if nums.get("paper_text") else "")
    return nums.get("paper_text") or "-"


def compare_text(nums: dict) -> str:
    """'x1.002' (ratio of like quantities) or '+0.06' (difference in the unit's points); '' when not comparable.
    Noise-aware (asv's convention): '~' in front when the paper's value lies inside the measured interval (the
    difference is within the noise), ' (no spread)' after it when the value has no interval (a point value: an
    exact count, or a measurement whose spread was not recorded)."""
    v, p, how = nums.get("value"), nums.get("paper"), nums.get("compare")
    if v is None or p is None or how is None:
        return ""
    if how == "ratio":
        if not p:
            return ""
        text = f"x{v / p:.3g}"
    else:
        text = f"{v - p:+.3g}"
    lo, hi = nums.get("lo"), nums.get("hi")
    if lo is None or hi is None:
        return text + " (no spread)" if v != p else text
    return ("~" + text) if lo <= p <= hi else text


PERCENT_UNITS = ("percent", "%", "pct", "percent points")


def is_percent(unit) -> bool:
    """Whether ``unit`` is a percentage (compared by a difference in points, never by a ratio)."""
    return isinstance(unit, str) and (unit.strip().lower() in PERCENT_UNITS or unit.strip().lower().startswith(
        ("percent", "% ")))


def versus(a: float | None, sa: float | None, b: float | None, sb: float | None, percent: bool) -> str:
    """a against b, the rule of the compare pages and the claim pages' 'vs published': a difference in points for
    percentages, else a ratio; '~' when the difference lies within the two spreads (noise), so only differences
    beyond the noise stand out."""
    if a is None or b is None:
        return ""
    noise = (sa or 0.0) + (sb or 0.0)
    within = "~" if noise > 0 and abs(a - b) <= noise else ""
    if percent:
        return f"{within}{a - b:+.3g} pp"
    return f"{within}{a / b:.3g}x" if b else ""


HEADLINES = Path(__file__).resolve().parents[1] / "registry" / "headlines.yaml"


@lru_cache(maxsize=1)
def _headlines() -> dict:
    return yaml.safe_load(HEADLINES.read_text()) or {} if HEADLINES.is_file() else {}


def headline_name(claim: str | None, check: dict) -> str:
    """The headline's name as a reader knows it from the paper (repro/registry/headlines.yaml), else the check's."""
    return str(_headlines().get(claim) or check.get("name", "?"))


def cells(verdict: dict, limit: int = 60) -> dict:
    """The headline of one verdict as short cells: name (the paper's words, from the registry), unit, value, paper,
    compare (and the check itself)."""
    c = headline_check(verdict)
    if c is None:
        return {"name": "-", "unit": "", "value": "-", "paper": "-", "compare": "", "check": None}
    name = clip(headline_name(verdict.get("claim"), c), limit)
    nums = c.get("numbers")
    if nums is None:  # judged before the judges gave numbers: the measured text, shortened
        return {"name": name, "unit": "", "value": clip(str(c.get("measured")), limit),
                "paper": clip(str(c.get("expected")), limit), "compare": "", "check": c}
    return {"name": name, "unit": nums.get("unit") or "", "value": value_text(nums),
            "paper": clip(paper_text(nums), limit), "compare": compare_text(nums), "check": c}


def record(verdict: dict) -> dict:
    """The headline as plain values for reports/matrix.csv."""
    c = headline_check(verdict)
    nums = (c or {}).get("numbers") or {}
    return {"headline": (c or {}).get("name"), "headline_holds": (c or {}).get("passed"),
            "value": nums.get("value"), "lo": nums.get("lo"), "hi": nums.get("hi"), "unit": nums.get("unit"),
            "paper": nums.get("paper"), "paper_text": nums.get("paper_text"), "compare": nums.get("compare")}


def clip(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters with '...' (for short table cells; pages.shorten cuts
    prose at a clause boundary instead)."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."
