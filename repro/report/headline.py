"""Each claim's headline in numbers: the measured value with its interval beside the paper's, for the matrix, the
claim pages and ``reports/matrix.csv``.

A judge marks its headline check(s) (repro.verdicts.check, ``headline=True``) and gives them ``numbers``
(repro.verdicts.numbers: value, interval, unit, the paper's number from the registry and how the two compare).
:func:`headline_check` picks the one check that stands for the verdict (a failing headline before an undecided one
before the rest); :func:`cells` formats it in short cells. Verdicts written before the judges gave numbers fall back
to the check's measured text, shortened. :func:`mark` is the one rule by which a number is set against another on
every page (the headline's 'vs paper', the hardware comparison's ratios through :func:`versus`, the claim pages'
'vs published'): a ratio never below 1, with the word of the side that wins; '~' only from the deciding interval.
"""
from __future__ import annotations

import math
import re
from functools import lru_cache
from pathlib import Path

from repro import registry, yamlload

VERDICT_ORDER = {False: 0, None: 1, True: 2}
# the order scales are listed in wherever several are shown: the default first, the smoke test (tiny) last
SCALE_ORDER = ("default", "paper", "tiny")


def scale_key(scale: str) -> tuple[int, str]:
    """Sort key of a scale: :data:`SCALE_ORDER`, unknown scales before the smoke test, by name."""
    return (SCALE_ORDER.index(scale) if scale in SCALE_ORDER[:-1] else
            len(SCALE_ORDER) if scale == SCALE_ORDER[-1] else len(SCALE_ORDER) - 1, scale)


def headline_check(verdict: dict) -> dict | None:
    """The headline check that decided ``verdict``: the first failing one, else the first undecided (one the run
    could have decided before one that does not apply to it, e.g. LLM.int8() where the activations hold no outlier
    feature), else the first; among those, the one repro/registry/headlines.yaml names for the claim (the check in
    the paper's unit), then one with numbers. None when the verdict has no headline check."""
    heads = [c for c in verdict.get("checks") or [] if c.get("headline")]
    if not heads:
        return None
    named = headline_entry(verdict.get("claim")).get("check")
    return min(heads, key=lambda c: (VERDICT_ORDER.get(c.get("passed"), 1), _not_applicable(c),
                                     not (named and str(c.get("name", "")).startswith(named)), "numbers" not in c))


def _not_applicable(c: dict) -> bool:
    return c.get("passed") is None and str(c.get("undecided_because") or "").startswith("not applicable")


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
    """The paper's number ('20'), its words when it states no number in this unit ('< 1 at 3 and 4 bits'), or
    both ('6.9 (6.9% (Transformer); ...)'); '-' when neither."""
    if nums.get("paper") is not None:
        return fmt_number(nums["paper"]) + (f", {nums['paper_text']}" if nums.get("paper_text") else "")
    return nums.get("paper_text") or "-"


def measured_text(nums: dict, check: dict | None = None) -> str:
    """The headline's measured cell: value [interval] unit. A decided check whose rule names an interval but whose
    numbers carry none (a verdict judged before the judges recorded it) says so instead of passing for a point."""
    text = value_text(nums)
    if text != "-" and nums.get("unit"):
        text += f" {nums['unit']}"
    if missing_interval(nums, check):
        text += " (deciding interval not recorded)"
    elif text != "-" and (nums.get("lo") is None or nums.get("hi") is None):
        text += " (no interval)"  # said once, here: the comparison beside it is of point values
    return text


def missing_interval(nums: dict, check: dict | None) -> bool:
    """Whether a decided headline check was decided by an interval (its ``interval`` text) that its numbers lack."""
    return bool(check and check.get("passed") is not None and check.get("interval") and nums.get("value") is not None
                and (nums.get("lo") is None or nums.get("hi") is None))


# the direction words of a comparison (asv's convention), by what the unit measures: (measured above, below)
FASTER_UNITS = ("/s", "per second", "less time", "throughput")
SPEEDUP_UNITS = ("speed-up", "speedup")
TIME_UNITS = ("s", "ms", "us", "ns", "min", "h", "seconds", "sec", "minutes", "hours")
MEMORY_UNITS = ("b", "byte", "bytes", "kib", "mib", "gib", "kb", "mb", "gb", "sbh", "as^2b", "memory", "params")


def direction_words(unit) -> tuple[str, str]:
    """(word when the measured value is above the other, word when below): time is slower above, a throughput is
    faster above, a speed-up is a larger speed-up above, memory and counts are larger above, anything else is higher
    above."""
    u = str(unit or "").strip().lower()
    if any(k in u for k in SPEEDUP_UNITS):
        return "larger speed-up", "smaller speed-up"
    if any(k in u for k in FASTER_UNITS):
        return "faster", "slower"
    if (u in TIME_UNITS or u.split("/")[0] in TIME_UNITS or u.endswith((" s", " ms", "(s)", "(ms)")) or "time" in u
            or "latency" in u):
        return "slower", "faster"
    if u in MEMORY_UNITS or "memory" in u or u.endswith((" bytes", " gib", " mib")):
        return "larger", "smaller"
    return "higher", "lower"


def mark(a: float, b: float, how: str, unit, *, within: bool = False, than: str = "") -> str:
    """a against b, the one rule of every comparison on the pages (asv's convention). A ratio of two positive
    numbers is shown as the larger of a/b and b/a with the word of the side that wins ('2.24x smaller speed-up
    than the paper', '3.3x faster than A'), never a ratio below 1; a signed quantity (``how`` 'difference':
    percentage points, nats, % changes; or a ratio whose numbers are not both positive) as the size of the
    difference in the unit's points with its word ('2.44 pp slower'). ``within``: the interval that decided ``a``
    holds ``b`` (the caller's interval, never another noise rule): '~' in front and no direction word. 'equal'
    when the two are the same number. ``than``: who ``b`` is, named after the direction word."""
    if a == b:
        return "equal" + (f" to {than}" if than else "")
    up, down = direction_words(unit)
    word = up if a > b else down
    if how == "ratio" and a > 0 and b > 0:
        r = max(a / b, b / a)
        text = f"{r:.3g}x"
        if text == "1x":  # a difference the third digit hides: as many digits as show it
            text = f"{r:.6g}x"
    else:
        d = a - b
        points = " pp" if is_percent(unit) else ""
        if within:
            return f"~{d:+.3g}{points}"
        text = f"{abs(d):.3g}{points}"
    if within:
        return "~" + text
    return f"{text} {word}" + (f" than {than}" if than else "")


def compare_parts(nums: dict) -> tuple[str, str]:
    """(the measured value against the paper's number by :func:`mark`, '~' only when the interval that decided the
    value holds the paper's number; '' when not comparable; the criterion that decided the check, 'suite: > 0.1'
    for a threshold of the suite's own, 'paper: > 1x' for the paper's, '' when the judge gave none). A value
    without an interval says so once, in its measured cell (:func:`measured_text`)."""
    v, p, how = nums.get("value"), nums.get("paper"), nums.get("compare")
    versus_paper = ""
    if v is not None and p is not None and how is not None and (p or how != "ratio"):
        lo, hi = nums.get("lo"), nums.get("hi")
        within = lo is not None and hi is not None and lo <= p <= hi
        versus_paper = mark(v, p, how, nums.get("unit"), within=within)  # the column says whom: 'vs paper'
    rule = f"{nums.get('criterion') or 'paper'}: {nums['rule']}" if nums.get("rule") else ""
    return versus_paper, rule


def compare_text(nums: dict) -> str:
    """The 'vs paper' cell: the measured value against the paper's number by :func:`mark` ('~' when the paper's
    value lies inside the measured interval), then the criterion that decided the check when the judge gave one
    ('suite: > 0.1' for a threshold of the suite's own, 'paper: > 1x' for the paper's); '' when neither."""
    return "; ".join(x for x in compare_parts(nums) if x)


PERCENT_UNITS = ("percent", "%", "pct", "percent points")


def is_percent(unit) -> bool:
    """Whether ``unit`` is a percentage (compared by a difference in points, never by a ratio)."""
    return isinstance(unit, str) and (unit.strip().lower() in PERCENT_UNITS or unit.strip().lower().startswith(
        ("percent", "% ")))


def versus(a: float | None, b: float | None, percent: bool, unit: str, than: str = "") -> str:
    """Two point values by :func:`mark` (the compare pages, the claim pages' 'vs published'): a difference in points
    for percentages, else a ratio of like quantities, with the direction word of ``unit``; never '~', which only the
    interval that decided a number gives (the headline's, :func:`compare_parts`): a spread beside a point value
    decides nothing here. '' where either is missing or a ratio would divide by 0."""
    if a is None or b is None or (not percent and not b):
        return ""
    return mark(a, b, "difference" if percent else "ratio", "%" if percent else unit, than=than)


HEADLINES = Path(__file__).resolve().parents[1] / "registry" / "headlines.yaml"


@lru_cache(maxsize=1)
def _headlines() -> dict:
    return yamlload.load(HEADLINES.read_text()) or {} if HEADLINES.is_file() else {}


def headline_entry(claim: str | None) -> dict:
    """A claim's entry of repro/registry/headlines.yaml as {"title": ..., "check": ...} (a bare sentence is the
    title alone; {} for a claim it does not list)."""
    entry = _headlines().get(claim)
    if entry is None:
        return {}
    return dict(entry) if isinstance(entry, dict) else {"title": str(entry)}


def headline_name(claim: str | None, check: dict) -> str:
    """The headline's name as a reader knows it from the paper (repro/registry/headlines.yaml), else the check's."""
    return str(headline_entry(claim).get("title") or check.get("name", "?"))


def where_text(claim: str | None, key: str | None) -> str:
    """Where the paper states the number of registry key ``key``: 'Michel et al. 2019, Fig. 3' ('' when unknown)."""
    owner = _registry_claim(claim, key)
    if owner is None:
        return ""
    data = registry.load()
    v = next(v for v in data["claims"][owner]["values"] if v.get("key") == key)
    src = data["sources"].get(v.get("source"), {})
    year = registry._YEAR_RE.search(str(src.get("venue", "")))
    who = registry._short_authors(str(src.get("authors", ""))) + (f" {year.group(0)}" if year else "")
    where = re.split(r" \(|;", str(v.get("where") or ""), maxsplit=1)[0].strip()
    return ", ".join(x for x in (who.strip(), where) if x)


def _registry_claim(claim: str | None, key: str | None) -> str | None:
    """The claim whose registry entries hold ``key`` (``claim``'s own first), None when none does."""
    if not key:
        return None
    data = registry.load()
    ids = ([claim] if claim in data["claims"] else []) + [c for c in data["claims"] if c != claim]
    return next((cid for cid in ids if any(v.get("key") == key for v in data["claims"][cid].get("values") or [])),
                None)


def derived_formula(claim: str | None, key: str | None) -> str:
    """The formula of the registry value ``key`` when the suite derives it from printed numbers ('mean(21..29) /
    (32 - 1)'), '' when the paper prints it."""
    owner = _registry_claim(claim, key)
    return registry.derived_text(owner, key) if owner else ""


def paper_cell(nums: dict, claim: str | None = None) -> str:
    """The headline's paper cell: the paper's number (or its words when it states no number in this unit) and
    where it states it, from the registry ('20 (Michel et al. 2019, Section 4)'); a number the suite derives from
    printed ones is labelled so, with its formula ('derived 0.8065 = mean(21..29) / (32 - 1) (Men et al. 2025,
    official README and Sec. 4)')."""
    text = paper_text(nums)
    formula = derived_formula(claim, nums.get("source")) if nums.get("paper") is not None else ""
    if formula:
        head, _, rest = text.partition(", ")
        text = f"derived {head} = {formula}" + (f"; {rest}" if rest else "")
    where = where_text(claim, nums.get("source"))
    return f"{text} ({where})" if where and text != "-" else (where if where else text)


def cells(verdict: dict, limit: int = 60) -> dict:
    """The headline of one verdict as short cells: name (the paper's words, from the registry), unit, value
    (value [interval] unit), paper (number and where), compare (vs paper and the deciding criterion), criterion
    ("paper"/"suite"), and the check itself."""
    c = headline_check(verdict)
    if c is None:
        return {"name": "-", "unit": "", "value": "-", "paper": "-", "compare": "", "mark": "", "rule": "",
                "criterion": "", "check": None}
    name = clip(headline_name(verdict.get("claim"), c), limit)
    nums = c.get("numbers")
    if nums is None:  # judged before the judges gave numbers: the measured text, shortened
        return {"name": name, "unit": "", "value": clip(str(c.get("measured")), limit),
                "paper": clip(str(c.get("expected")), limit), "compare": "", "mark": "", "rule": "", "criterion": "",
                "check": c}
    versus_paper, rule = compare_parts(nums)
    return {"name": name, "unit": nums.get("unit") or "", "value": measured_text(nums, c),
            "paper": clip(paper_cell(nums, verdict.get("claim")), limit), "compare": compare_text(nums),
            "mark": versus_paper, "rule": rule, "criterion": nums.get("criterion") or "paper", "check": c}


# the headline row of the matrix, every index and every claim page, in this order
COLUMNS = ("claim", "paper", "measured [interval]", "vs paper", "verdict")


def row(verdict: dict, claim: str, verdict_cell: str, limit: int = 60) -> dict:
    """One headline row (:data:`COLUMNS`): ``claim`` (the caller's cell: id, link) with the headline's name in the
    paper's words, the paper's number and where, the measured value with the interval that decided it, the
    comparison with the criterion, and ``verdict_cell``."""
    h = cells(verdict, limit)
    name = h["name"] if h["check"] is not None else ""
    return {"claim": f"{claim}: {name}" if name else claim, "paper": h["paper"], "measured [interval]": h["value"],
            "vs paper": clip(h["compare"], limit), "verdict": verdict_cell}


def record(verdict: dict) -> dict:
    """The headline as plain values for reports/matrix.csv: the title the pages name it by, the check, its numbers,
    the comparison with the paper's number as the pages mark it, where the paper states it (with the formula of a
    number the suite derives from printed ones) and the method of the interval that decided it."""
    c = headline_check(verdict)
    nums = (c or {}).get("numbers") or {}
    claim = verdict.get("claim")
    return {"title": headline_name(claim, c) if c else None, "headline": (c or {}).get("name"),
            "headline_holds": (c or {}).get("passed"),
            "value": nums.get("value"), "lo": nums.get("lo"), "hi": nums.get("hi"), "unit": nums.get("unit"),
            "interval_method": (c or {}).get("interval") if nums.get("lo") is not None else None,
            "paper": nums.get("paper"), "paper_text": nums.get("paper_text"),
            "paper_where": where_text(claim, nums.get("source")) or None,
            "paper_derived": (derived_formula(claim, nums.get("source")) or None) if nums.get("paper") is not None
            else None,
            "compare": nums.get("compare"), "vs_paper": compare_parts(nums)[0] if nums else None,
            "criterion": (nums.get("criterion") or "paper") if nums else None, "rule": nums.get("rule")}


def clip(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters with '...' (for short table cells)."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."
