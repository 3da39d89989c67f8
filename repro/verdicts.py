"""The verdict contract (docs/verdicts.md): a claim's checks, gates and setup rows, and the one rule that turns
them into a verdict. Judge-side code: the workflow re-judges stored measurements when this module changes and
measures nothing again (repro.provenance.JUDGE_SIDE)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any, Callable, Mapping

import numpy as np

from repro import registry
from repro.intervals import sample_interval, t_interval
from repro.rows import Rows  # noqa: F401 (the judges' row queries; measurement code imports repro.rows)

VERDICTS = ("reproduced", "partially", "not_reproduced", "inconclusive", "not_applicable", "not_implemented")


def verdict(claim: str, status: str, reason: str, *, checks: list[dict] | None = None, **extra) -> dict:
    if status not in VERDICTS:
        raise ValueError(f"verdict: {status!r} is not one of {VERDICTS}")
    return {"claim": claim, "verdict": status, "reason": reason, "checks": checks or [], **extra}


def uses(thresholds: Mapping, *keys: str) -> dict:
    """``{key: value}`` of the thresholds a check decides with (its ``thresholds=``): verdict.json and the page show
    them beside the check, under the key names of the config's ``judge:`` section."""
    missing = [k for k in keys if k not in thresholds]
    if missing:
        raise KeyError(f"threshold {missing[0]!r} is not in the judge: section (known: {', '.join(thresholds)})")
    return {k: thresholds[k] for k in keys}


CONFIDENCE, POWER = 0.95, 0.9  # the intervals' usual level; the power a "what would decide this" size aims at


def decisive_share(confidence: float = CONFIDENCE, target: float = POWER) -> float:
    """The share of the distance to a threshold an interval's half-width may take for the check to decide with
    probability ``target`` if the estimate held: an interval est +- z_(1-a/2) se excludes the threshold with
    probability Phi(gap / se - z_(1-a/2)), which reaches ``target`` at gap = (z_(1-a/2) + z_target) se, i.e. at a
    half-width of gap x z_(1-a/2) / (z_(1-a/2) + z_target) (0.605 at 95% and 90%; 1 would be a coin flip, 50%)."""
    z_a, z_p = NormalDist().inv_cdf(1 - (1 - confidence) / 2), NormalDist().inv_cdf(target)
    return z_a / (z_a + z_p)


def power(value: float, lo: float, hi: float, threshold: float | tuple[float, float], n: int, unit: str,
          *, confidence: float = CONFIDENCE, target: float = POWER) -> dict:
    """What would decide an interval check if its point estimate held (the page's "What would decide this"): the
    interval's half-width shrinks as 1/sqrt(n) (seeds, sentences, rounds, draws averaged), so at ``target`` power
    (the interval, at level ``confidence``, excludes the threshold with that probability) the check decides at
    ``n_needed = n * ((z_(1-a/2) + z_target) * se / gap)^2`` with ``se = half-width / z_(1-a/2)`` and ``gap`` the
    distance to the threshold (:func:`decisive_share`); a band threshold (lo, hi) counts the distance to its nearer
    edge. A value exactly on the threshold (a tie) is decided by no size: ``n_needed`` None, ``why`` says so; a
    check its own interval decides already needs its own ``n``. Computed from the measured numbers, never typed."""
    edges = [threshold] if isinstance(threshold, (int, float)) else list(threshold)
    finite = all(map(math.isfinite, (value, lo, hi)))
    half = (hi - lo) / 2 if finite else math.inf
    gap = min(abs(value - float(e)) for e in edges) if math.isfinite(value) else math.nan
    out = {"n": int(n), "unit": unit, "value": value, "lo": lo, "hi": hi, "threshold": threshold,
           "half_width": half, "n_needed": None, "why": None, "power": target, "confidence": confidence}
    if not finite or not math.isfinite(gap):
        out["why"] = "no finite interval: fewer than two measurements"
        out["n_needed"] = 2 if n < 2 else None
    elif gap == 0:
        out["why"] = "the estimate sits on the threshold: no sample size decides a tie"
    elif half <= gap:
        out["n_needed"] = int(n)  # already decided by its own interval
    else:
        out["n_needed"] = int(math.ceil(n * (half / (gap * decisive_share(confidence, target))) ** 2))
    return out


def side(pw: dict | None, rule: str) -> bool | None:
    """Which side of its threshold a power item's estimate lies on: True the claimed one (``rule`` "above" /
    "below" a single threshold, "within" a band), False the failing one, None on the threshold (a tie) or with no
    estimate: what :func:`sized` needs to tell the parts projected to fail from those projected to pass."""
    if not pw or not isinstance(pw.get("value"), (int, float)) or not math.isfinite(pw["value"]):
        return None
    v, t = float(pw["value"]), pw["threshold"]
    if rule == "within":
        lo, hi = (float(x) for x in t)
        return None if v in (lo, hi) else lo < v < hi
    if isinstance(t, (list, tuple)):
        raise ValueError(f"side: rule {rule!r} takes one threshold, not a band")
    t = float(t)
    if rule not in ("above", "below"):
        raise ValueError(f"side: rule {rule!r} is not above, below or within")
    return None if v == t else (v > t) == (rule == "above")


def sized(items: list[tuple[bool | None, dict | None]], mode: str = "all") -> tuple[bool | None, dict | None]:
    """The power of a check made of several interval decisions, sized by the part projected to decide it first if
    every estimate held. ``items``: (:func:`side` of the part's estimate, True = the claimed one; its power).
    ``mode`` "all" (a conjunction: every part must hold): when a part is projected to fail the check fails as soon
    as the cheapest failing part decides (the smallest size among them); when every part is projected to hold it
    holds only when the last part decides (the largest); a tie among them then leaves no size. "any" (one part
    holding suffices) is the dual. Sizes are compared as the factor n_needed / n (the same order as n_needed where
    the parts share their sample), so parts counted in different units (seeds, sentences) compare. Returns the
    projected decision and the deciding part's power (None: no part has one), with ``sized_by`` saying which."""
    def factor(it):
        pw = it[1]
        if pw is None or pw.get("n_needed") is None:
            return math.inf
        return pw["n_needed"] / pw["n"] if pw.get("n") else float(pw["n_needed"])

    if not items:
        return None, None
    if mode not in ("all", "any"):
        raise ValueError(f"sized: mode {mode!r} is not all or any")
    decisive = [it for it in items if it[0] is (mode != "all")]  # failing parts of "all", holding parts of "any"
    if decisive:
        side_, pick, how = mode != "all", min(decisive, key=factor), "the part projected to decide it first"
    else:
        side_, pick, how = mode == "all", max(items, key=factor), "the last part to decide (none projected to " \
            + ("fail)" if mode == "all" else "hold)")
    return side_, None if pick[1] is None else {**pick[1], "sized_by": how}


def check(name: str, passed: bool | None, measured: str, expected: str, *, headline: bool = False,
          interval: str | None = None, undecided_because: str | None = None, numbers: dict | None = None,
          thresholds: Mapping | None = None, power: dict | None = None, counts: bool = True,
          look: dict | None = None) -> dict:
    """One verdict criterion: what was measured, what the paper says, and whether it holds.

    ``headline``: the claim's main statement (see ``verdict_from_checks``). ``interval``: the uncertainty that
    decided it (seeds' spread, bootstrap interval), in words. ``passed=None`` means the run could not decide the
    check; ``undecided_because`` says why (the control did not learn, the spread is too wide, a CPU stand-in...).
    ``numbers`` (:func:`numbers`): the check's measured value and the paper's, as numbers, for the headline tables
    of the matrix and the pages. ``thresholds`` (:func:`uses`): the judge's thresholds this check decided with.
    ``power`` (:func:`power`): the sample size that would decide it, for the page's "What would decide this".
    ``counts`` False: a secondary the plan states in advance as reported only (e.g. a second learning rate): shown
    with its decision, never part of the verdict (:func:`verdict_from_checks` skips it); never a headline.
    ``look``: the planned look that decided it ({k, of, n, confidence}: :func:`sequential`)."""
    if headline and not counts:
        raise ValueError(f"check {name!r}: a headline always counts toward the verdict")
    if passed is None and not undecided_because:
        undecided_because = "not decided by this run"
    if headline and passed is not None and interval and numbers is not None and numbers.get("value") is not None \
            and (numbers.get("lo") is None or numbers.get("hi") is None):
        raise ValueError(f"check {name!r}: a headline decided by an interval ({interval[:80]}) must give that "
                         "interval in its numbers (lo, hi)")
    out = {"name": name, "passed": None if passed is None else bool(passed), "measured": measured,
           "expected": expected, "headline": bool(headline), "interval": interval,
           "undecided_because": None if passed is not None else undecided_because}
    if numbers is not None:
        out["numbers"] = numbers
    if thresholds:
        out["thresholds"] = dict(thresholds)
    if power is not None:
        out["power"] = dict(power)
    if not counts:
        out["counts"] = False
    if look is not None:
        out["look"] = dict(look)
    return out


COMPARE = ("ratio", "difference", None)
CRITERIA = ("paper", "suite")


def numbers(value: float | None, unit: str, *, paper: float | None = None, paper_text: str | None = None,
            lo: float | None = None, hi: float | None = None, compare: str | None = None,
            criterion: str = "paper", rule: str | None = None, source: str | None = None) -> dict:
    """A check's numbers for the headline tables: the measured ``value`` in ``unit`` with the interval that decided
    it [``lo``, ``hi``] (None: a point value), the paper's number in the same unit (``paper``, from the registry)
    or, when the paper states another quantity or only words, ``paper_text`` only. ``compare`` says how the two
    may be set side by side: "ratio" (like quantities on a ratio scale: times, counts), "difference" (percentages,
    exponents, log-scale values: the difference in the unit's points), None (not comparable).

    ``criterion`` says what decided the check: "paper" (the paper's own number or statement, ``rule`` the form it
    takes, e.g. "> 1x", "< 1") or "suite" (a threshold of the suite's own, from the ``judge:`` section of
    config/claims/<id>.yaml, e.g. "> 0.1": the pages show "suite: > 0.1" and never present it as the paper's
    number); a suite criterion needs its ``rule``. ``source``: the registry key (published.yaml) of the paper's
    number or statement, so the pages can say where the paper states it."""
    if compare not in COMPARE:
        raise ValueError(f"numbers: compare {compare!r} is not one of {COMPARE}")
    if compare is not None and paper is None:
        raise ValueError("numbers: a comparison needs the paper's number in the same unit")
    if criterion not in CRITERIA:
        raise ValueError(f"numbers: criterion {criterion!r} is not one of {CRITERIA}")
    if criterion == "suite" and not rule:
        raise ValueError("numbers: a suite criterion needs its rule (the threshold it decided with, in words)")
    if (lo is None) != (hi is None):
        raise ValueError("numbers: an interval needs both ends (lo and hi)")

    def f(x):
        return None if x is None else float(x)

    return {"value": f(value), "unit": unit, "lo": f(lo), "hi": f(hi), "paper": f(paper),
            "paper_text": paper_text, "compare": compare, "criterion": criterion, "rule": rule, "source": source}


def gate(name: str, passed: bool, measured: str, required: str, *, thresholds: Mapping | None = None) -> dict:
    """A precondition of the checks on a trained model (e.g. "the control model learned"): when it fails, the
    checks that rest on it are undecided (the run could not decide them), never held or failed. ``thresholds``
    (:func:`uses`): the judge's thresholds it decided with."""
    out = {"name": name, "passed": bool(passed), "measured": measured, "required": required}
    if thresholds:
        out["thresholds"] = dict(thresholds)
    return out


def gated(c: dict, gates: list[dict]) -> dict:
    """``c`` undecided when any of ``gates`` failed (the measured text is kept, the reason names the gate)."""
    failed = [g for g in gates if not g["passed"]]
    if not failed or c["passed"] is None:
        return c
    because = "; ".join(f"gate '{g['name']}' failed: {g['measured']} (required {g['required']})" for g in failed)
    return {**c, "passed": None, "undecided_because": because}


def _check_text(c: dict) -> str:
    tail = ("" if c["passed"] else " [fails]") if c["passed"] is not None else " [undecided]"
    return f"{c['name']}: {c['measured']} (paper: {c['expected']}){tail}"


def verdict_from_checks(claim: str, checks: list[dict], scale: str, *, gates: list[dict] | None = None,
                        setup: list[dict] | None = None, meaning: str | None = None, **extra) -> dict:
    """The verdict contract (docs/verdicts.md).

    Every claim marks its headline check(s) (``headline=True``); the others are secondary.
    - ``reproduced``: every headline holds and every decided secondary holds;
    - ``partially``: every headline holds, a secondary fails;
    - ``not_reproduced``: a decided headline fails;
    - ``inconclusive``: no headline fails but one could not be decided (control did not learn, spread too wide,
      CPU stand-in for a GPU measurement); the reason says why;
    - ``not_applicable``: tiny scale (plumbing only), or nothing this hardware can measure.
    ``gates`` (``gate(...)``) are stated on the page; checks resting on a failed gate are made undecided by the
    claim (``gated``). ``setup`` rows (aspect / paper / this_run) and ``meaning`` go to the page. A check made with
    ``counts=False`` (a reported-only secondary the plan states in advance) is shown and never decides.
    """
    heads = [c for c in checks if c.get("headline")]
    meaning = meaning or _meaning(heads, scale)
    extra = {**extra, "gates": list(gates or []), "setup": list(setup or []),
             "meaning": meaning}
    counted = [c for c in checks if c.get("counts", True)]  # reported-only secondaries decide nothing
    decided = [c for c in counted if c["passed"] is not None]
    failed = [c for c in decided if not c["passed"]]
    failed_heads = [c for c in heads if c["passed"] is False]
    undecided_heads = [c for c in heads if c["passed"] is None]
    if scale == "tiny":
        return verdict(claim, "not_applicable", "tiny scale checks plumbing only; no verdict is claimed. "
                       + "; ".join(_check_text(c) for c in heads[:3]), checks=checks, **extra)
    if not checks or (not decided and all((c.get("undecided_because") or "").startswith("not applicable")
                                          for c in checks)):
        return verdict(claim, "not_applicable", "no check can be measured on this hardware/scale"
                       + (": " + checks[0]["undecided_because"] if checks else ""), checks=checks, **extra)
    n_pass = len(decided) - len(failed)
    counts = f"{n_pass}/{len(decided)} decided checks hold ({len(counted) - len(decided)} undecided)" + (
        f"; {len(checks) - len(counted)} reported only" if len(counted) < len(checks) else "")
    if failed_heads:
        status, shown = "not_reproduced", failed_heads + [c for c in failed if c not in failed_heads]
        lead = f"headline fails; {counts}. "
    elif not heads:  # the run was too small to make the headline check at all (e.g. a 1-layer stack)
        return verdict(claim, "inconclusive", f"no headline check could be made by this run; {counts}",
                       checks=checks, **extra)
    elif undecided_heads:
        status, shown = "inconclusive", undecided_heads
        lead = f"headline undecided; {counts}. "
        shown_text = "; ".join(f"{c['name']}: {c['undecided_because']}" for c in shown[:4])
        return verdict(claim, status, lead + shown_text, checks=checks, **extra)
    elif failed:
        status, shown = "partially", failed
        lead = f"headline holds, a secondary check fails; {counts}. Failing: "
    else:
        status, shown = "reproduced", heads
        lead = f"{counts}; headline: "
    summary = "; ".join(_check_text(c) for c in shown[:5])
    if len(shown) > 5:
        summary += f"; ... and {len(shown) - 5} more (see checks)"
    return verdict(claim, status, lead + summary, checks=checks, **extra)


def _meaning(heads: list[dict], scale: str) -> str:
    """The page's "What this verdict means" line (the contract, with this claim's headline named)."""
    names = " and ".join(f"'{c['name']}'" for c in heads) or "its headline"
    return (f"At the {scale} scale, with the setup above: reproduced = {names} and every decided secondary check "
            f"held; partially = {names} held, a secondary check failed; not_reproduced = {names} failed with the "
            f"interval shown; inconclusive = this run could not decide {names} (the reason says why). A verdict "
            f"here is about this setup, not the paper's scale.")


def recorded_version(context: Mapping, package: str) -> str:
    """The version of ``package`` the measurement ran with, as its fingerprint.json recorded it (the context's
    ``software``, repro.judging.judge_context), never the judging process's: "(version not recorded)" for a
    result that recorded none."""
    return str(((context.get("software") or {}).get(package)) or "(version not recorded)")


def setup_table(claim: str, this_run: Mapping[str, str]) -> list[dict]:
    """The page's "Setup beside the paper" rows: the paper's setup from the registry (``paper_setup`` of the
    claim: model, data, steps, seeds, precision, hardware, ...) beside this run's (``this_run``, built by the claim
    from its config). An aspect known on one side only shows "not stated" on the other."""
    paper = registry.claim(claim).get("paper_setup") or {}
    aspects = list(paper) + [a for a in this_run if a not in paper]
    return [{"aspect": a, "paper": str(paper.get(a, "not stated")), "this_run": str(this_run.get(a, "not stated"))}
            for a in aspects]


# ----------------------------------------------------------------------------------------------- decisions
def both(*decisions: bool | None) -> bool | None:
    """Three-valued AND: False if any is False, None if any is undecided, else True."""
    if any(d is False for d in decisions):
        return False
    return None if any(d is None for d in decisions) else True


def decide_interval(lo: float, hi: float, *, above: float | None = None, below: float | None = None) -> bool | None:
    """Decide "value > above" / "value < below" from an interval [lo, hi]: True when the whole interval is strictly
    on the claimed side, False when it is strictly on the other side, None (undecided) when it straddles or touches
    the threshold: a tie (a value, or an interval's edge, exactly on it) decides nothing, neither pass nor fail."""
    if above is not None:
        return True if lo > above else False if hi < above else None
    if below is not None:
        return True if hi < below else False if lo > below else None
    raise ValueError("decide_interval: give above= or below=")


def decide_point(value: float, *, above: float | None = None, below: float | None = None,
                 within: tuple[float, float] | None = None) -> bool | None:
    """A point value (an exact count, a deterministic computation) against a threshold or band: the same rule as an
    interval of zero width, so a value exactly on the edge is a tie and decides nothing."""
    if within is not None:
        return decide_within(value, value, *within)
    return decide_interval(value, value, above=above, below=below)


def decide_within(lo: float, hi: float, target_lo: float, target_hi: float) -> bool | None:
    """Decide "value in [target_lo, target_hi]" from an interval [lo, hi]: True when [lo, hi] lies strictly inside
    the target band, False when it lies wholly outside, None when it overlaps or touches an edge (too little
    precision: a tie never passes) or is NaN."""
    if target_lo < lo and hi < target_hi:
        return True
    if hi < target_lo or lo > target_hi:
        return False
    return None


NOTCH = 1.58  # McGill, Tukey & Larsen 1978: median +- 1.58 IQR / sqrt(n), about a 95% interval of the median


def ratio_interval(r: dict) -> tuple[float, float, str]:
    """(lo, hi, how) of a paired timing-ratio row (rmsnorm_speed's step ratios, activation_checkpointing's overheads,
    flash_attention's speed-ups): the order-statistic interval of the median paired ratio the measurement recorded
    (``ci_below`` / ``ci_above``: its distances below and above the median, in the row's unit, at level
    ``confidence``; None: too few rounds for one; repro.bench.timing.ci_fields), else, for rows measured before it,
    McGill's notch from the IQR; no n: no interval."""
    med, sw, n = float(r["value"]), r["sweep"], int(r.get("n") or 0)
    if "ci_below" in sw or "ci_above" in sw:
        below, above = sw.get("ci_below"), sw.get("ci_above")
        level, looks, planned = sw.get("confidence"), sw.get("looks"), sw.get("planned_looks")
        how = (f"distribution-free {'' if level is None else f'{100 * level:.4g}% '}interval of the median of {n} "
               "paired per-round ratios (order statistics"
               + (f"; Bonferroni over at most {planned} looks of the sequential stop, {looks} taken, stop: "
                  f"{sw.get('stop')})" if planned else ")"))
        if _missing(below) or _missing(above):
            return -math.inf, math.inf, how + ": too few rounds for an interval at this level"
        return med - float(below), med + float(above), how
    if not n or _missing(r.get("spread")):
        return -math.inf, math.inf, "no interval: the row records neither an interval nor n rounds"
    half = NOTCH * float(r["spread"]) / math.sqrt(float(n))
    return med - half, med + half, (f"about 95% interval of the median of {int(n)} paired per-round ratios from their "
                                    "IQR (McGill's notch: median +- 1.58 IQR / sqrt(n)); measured before the "
                                    "order-statistic interval")


def load_note(load: dict) -> str:
    """A short phrase for the reasons of a timing check: how busy the machine was while the measurement timed
    (its ``load`` context, repro.bench.timing.load_summary); "" on an idle machine."""
    if not load.get("busy"):
        return ""
    return (f"the machine was busy while timing (1-min load average up to {load['loadavg_1m_max']} on "
            f"{load['cpus']} cores with {load['threads']} thread(s) of our own)")


def _missing(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


# ----------------------------------------------------------------------------------------------- declared checks
RULES = ("above", "below", "within", "equivalent")
STATISTICS = ("t_interval", "mean_over_rows", "interval_columns")


@dataclass(frozen=True)
class Declared:
    """A check declared as data (docs/adding_a_claim.md): which rows, which statistic, which rule with which
    threshold of the judge: section, headline or gate, and the registry key of the paper's number.

    - ``metric`` / ``where``: the rows (``Rows(rows).metric(metric).where(**where)``); ``each``: one check per
      distinct value of that sweep variable (``{each}`` in ``name`` is replaced by it).
    - ``statistic``: how the rows become a value and a 95% interval: ``t_interval`` (the first row's value with
      the t-interval of its recorded spread over its n), ``mean_over_rows`` (the mean of the rows' values, one per
      seed, with their t-interval), ``interval_columns`` (the first row's value with the sweep's ``lo``/``hi``).
    - ``rule``: ``above`` / ``below`` the threshold (the interval wholly on the claimed side holds, wholly on the
      other fails, straddling or touching is undecided); ``within``: inside a band (``threshold`` a pair of keys
      [low, high], or one key, a half-width around ``center``); ``equivalent``: "no difference" as an equivalence
      test, the interval inside +- the margin ``threshold`` around ``center`` (0 unless given).
    - ``center``: a number, or ``"paper"`` for the registry's value of ``paper``.
    - ``paper``: registry key of the published number (shown beside the measured one; ``compare`` says how).
    - ``gate``: a precondition (the control learned) rather than a check: :func:`gate`, decided on the interval.
    """
    name: str
    metric: str
    rule: str
    threshold: str | tuple[str, str]
    statistic: str = "t_interval"
    where: Mapping[str, Any] = field(default_factory=dict)
    each: str | None = None
    center: float | str | None = None
    headline: bool = False
    gate: bool = False
    paper: str | None = None
    unit: str = ""
    compare: str | None = None
    power_unit: str = "seeds"

    def __post_init__(self):
        if self.rule not in RULES:
            raise ValueError(f"Declared {self.name!r}: rule {self.rule!r} is not one of {RULES}")
        if self.statistic not in STATISTICS:
            raise ValueError(f"Declared {self.name!r}: statistic {self.statistic!r} is not one of {STATISTICS}")
        if self.rule in ("above", "below") and not isinstance(self.threshold, str):
            raise ValueError(f"Declared {self.name!r}: rule {self.rule} takes one threshold key")

    def keys(self) -> tuple[str, ...]:
        return (self.threshold,) if isinstance(self.threshold, str) else tuple(self.threshold)


def _declared_statistic(d: Declared, R: "Rows") -> tuple[float, float, float, str] | None:
    R = R.measured()
    if not R:
        return None
    if d.statistic == "mean_over_rows":
        mean, lo, hi, _ = sample_interval(R.values())
        return mean, lo, hi, f"95% t-interval over {len(R)} values"
    row = R[0]
    if d.statistic == "interval_columns":
        lo, hi = row["sweep"].get("lo"), row["sweep"].get("hi")
        lo, hi = (-math.inf if lo is None else float(lo)), (math.inf if hi is None else float(hi))
        return float(row["value"]), lo, hi, "the measurement's 95% interval"
    lo, hi = t_interval(float(row["value"]), row.get("spread"), row.get("n"))
    return float(row["value"]), lo, hi, f"95% t-interval over n={row.get('n') or 1}"


def _declared_n(d: Declared, R: "Rows") -> int:
    R = R.measured()
    if d.statistic == "mean_over_rows":
        return len(R)
    return int((R[0].get("n") if R else None) or 1)


def _declared_band(d: Declared, T: Mapping, paper: float | None) -> tuple[float, float, str]:
    if not isinstance(d.threshold, str):
        lo_key, hi_key = d.threshold
        return float(T[lo_key]), float(T[hi_key]), f"[{T[lo_key]:g}, {T[hi_key]:g}]"
    if isinstance(T[d.threshold], (list, tuple)):
        lo, hi = (float(x) for x in T[d.threshold])
        return lo, hi, f"[{lo:g}, {hi:g}]"
    center = paper if d.center == "paper" else float(d.center or 0.0)
    if center is None:
        raise ValueError(f"Declared {d.name!r}: center 'paper' needs paper= (a registry key with a value)")
    half = float(T[d.threshold])
    return center - half, center + half, f"{center:g} +- {half:g}"


def evaluate(claim: str, d: Declared, rows: list[dict], thresholds: Mapping) -> list[dict]:
    """The checks (or gates) of one declared check on ``rows`` with ``thresholds``: the statistic, the rule's
    decision, and the text saying what was measured, against what, and why it is undecided when it is."""
    R = Rows(rows).metric(d.metric).where(**d.where)
    groups = list(R.by(d.each).items()) if d.each else [(None, R)]
    paper = registry.published(claim, d.paper).get("value") if d.paper else None
    paper = float(paper) if isinstance(paper, (int, float)) else None
    used = uses(thresholds, *d.keys())
    out = []
    for value, G in groups:
        name = d.name.format(each=value) if d.each else d.name
        stat = _declared_statistic(d, G)
        if d.rule in ("above", "below"):
            t = float(thresholds[d.threshold])
            expected = f"{'>' if d.rule == 'above' else '<'} {t:g} ({d.threshold})"
        else:
            b_lo, b_hi, band = _declared_band(d, thresholds, paper)
            expected = (f"within {band}" if d.rule == "within" else f"equivalent: inside {band}") + \
                f" ({', '.join(d.keys())})"
        if stat is None:
            passed, measured, interval, why = None, "no measured rows", None, f"no rows of {d.metric}"
        else:
            v, lo, hi, how = stat
            if any(map(math.isnan, (v, lo, hi))):
                passed = None
            elif d.rule in ("above", "below"):
                passed = decide_interval(lo, hi, **{d.rule: t})
            else:
                passed = decide_within(lo, hi, b_lo, b_hi)
            unit = f" {d.unit}" if d.unit else ""
            measured, interval = f"{v:.4g}{unit} [{lo:.4g}, {hi:.4g}]", how
            why = f"the interval [{lo:.4g}, {hi:.4g}] overlaps or touches {expected}"
        if d.gate:
            g = gate(name, bool(passed), measured, expected, thresholds=used)
            g["decided"] = passed is not None
            out.append(g)
            continue
        nums = None
        if d.headline and stat is not None:
            nums = numbers(stat[0], d.unit or d.metric, lo=stat[1], hi=stat[2], paper=paper,
                           compare=d.compare if paper is not None else None)
        pw = None
        if stat is not None:
            edge = t if d.rule in ("above", "below") else (b_lo, b_hi)
            pw = power(stat[0], stat[1], stat[2], edge, _declared_n(d, G), d.power_unit)
        out.append(check(name, passed, measured, expected + (f"; paper {paper:g}" if paper is not None else ""),
                         headline=d.headline, interval=interval, undecided_because=why, numbers=nums,
                         thresholds=used, power=pw))
    return out


def evaluate_all(claim: str, declared: list[Declared], rows: list[dict], thresholds: Mapping) -> tuple[list, list]:
    """(checks, gates) of every declared check, in the declared order; checks resting on a failed gate are made
    undecided (:func:`gated`)."""
    checks, gates = [], []
    for d in declared:
        (gates if d.gate else checks).extend(evaluate(claim, d, rows, thresholds))
    return [gated(c, gates) for c in checks], gates


# ----------------------------------------------------------------------------------------------- exact binomial
def binom_tail(k: int, n: int, p: float = 0.5, upper: bool = True) -> float:
    """P(X >= k) (``upper``) or P(X <= k) for X ~ Binomial(n, p): exact sums (integers at p = 1/2, log space
    otherwise).
    Here, not in scipy: the suite does not depend on scipy (the GPU image has none; repro/intervals.py)."""
    idx = range(max(k, 0), n + 1) if upper else range(min(k, n) + 1)
    if not len(idx):
        return 0.0
    if p == 0.5:
        return min(1.0, sum(math.comb(n, i) for i in idx) / 2 ** n)
    if p <= 0.0 or p >= 1.0:
        hit = (n if p >= 1.0 else 0) in idx
        return 1.0 if hit else 0.0
    logs = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * math.log(p)
            + (n - i) * math.log1p(-p) for i in idx]
    top = max(logs)
    return min(1.0, math.exp(top) * sum(math.exp(x - top) for x in logs))


def clopper_pearson(k: int, n: int, tail: float) -> tuple[float, float]:
    """The exact (Clopper-Pearson) interval of a binomial share with ``tail`` in each tail (dual to the one-sided
    tests: the lower edge lies above 1/2 exactly when P(X >= k | 1/2) < tail)."""
    def solve(f, target):  # f increasing in p: the p where f(p) = target
        a, b = 0.0, 1.0
        for _ in range(60):
            m = (a + b) / 2
            a, b = (m, b) if f(m) < target else (a, m)
        return (a + b) / 2
    lo = 0.0 if k == 0 else solve(lambda q: binom_tail(k, n, q, upper=True), tail)
    hi = 1.0 if k == n else solve(lambda q: -binom_tail(k, n, q, upper=False), -tail)
    return lo, hi


def sign_test_size(share: float, alpha: float, *, start: int = 0, target: float = POWER,
                   top: int = 5000) -> int | None:
    """The smallest number of decided comparisons n > ``start`` at which the one-sided exact sign test against 1/2
    at level ``alpha`` (in the direction of ``share``) rejects with probability >= ``target`` if each comparison
    is won with probability ``share``: the exact binomial power, P(X >= c_n | share) with c_n the smallest count
    whose P(X >= c_n | 1/2) < alpha (mirrored below 1/2). Exact sums up to ``top`` comparisons, the normal
    approximation n = ((z_(1-alpha) / 2 + z_target sqrt(p (1 - p))) / |p - 1/2|)^2 beyond; None at share 1/2."""
    if share == 0.5 or not 0.0 <= share <= 1.0:
        return None
    p = share if share > 0.5 else 1.0 - share  # the test's power is symmetric in the direction of the share
    lg = np.array([math.lgamma(x + 1) for x in range(top + 1)])
    for n in range(max(start + 1, 1), top + 1):
        i = np.arange(n + 1)
        comb = lg[n] - lg[i] - lg[n - i]
        null_tail = np.cumsum(np.exp(comb - n * math.log(2))[::-1])[::-1]  # P(X >= k | 1/2), k = 0..n
        reject = np.nonzero(null_tail < alpha)[0]
        if not len(reject):
            continue
        c = int(reject[0])
        if p >= 1.0:
            return n
        tail = np.exp(comb[c:] + i[c:] * math.log(p) + (n - i[c:]) * math.log1p(-p)).sum()
        if tail >= target:
            return n
    z_a, z_p = NormalDist().inv_cdf(1 - alpha), NormalDist().inv_cdf(target)
    return max(top + 1, math.ceil(((z_a * 0.5 + z_p * math.sqrt(p * (1 - p))) / (p - 0.5)) ** 2))


def sequential(decide: Callable[[int, float], tuple[bool | None, Any]], at: list[int], alpha: float = 0.05,
               unit: str = "seeds") -> dict:
    """A check over planned looks (the plan's ``looks``, repro.plan): at look k of K (sizes ``at`` = n_1 < ... <
    n_K) ``decide(n_k, confidence)`` judges the first n_k values at confidence 1 - alpha / K (Bonferroni over the K
    looks: the chance of a wrong decision at any look stays <= alpha) and returns (held True / failed False /
    undecided None, what it measured). The first look that decides decides; else undecided at the last. Returns
    {passed, result, look: {k, of, n, confidence, unit}}."""
    K = len(at)
    confidence = 1 - alpha / K
    for k, n in enumerate(at, 1):
        passed, result = decide(n, confidence)
        if passed is not None or k == K:
            return {"passed": passed, "result": result,
                    "look": {"k": k, "of": K, "n": n, "confidence": confidence, "unit": unit}}
    raise ValueError("sequential: no look planned (at is empty)")


def look_text(look: Mapping | None) -> str:
    """'decided at look k of K (n seeds, 97.5% interval)' (or 'undecided at the last look ...')."""
    if not look:
        return ""
    where = f"({look['n']} {look.get('unit', 'seeds')}, {100 * look['confidence']:g}% interval)"
    if look.get("decided", True):
        return f"decided at look {look['k']} of {look['of']} {where}"
    return f"undecided at the last look, {look['k']} of {look['of']} {where}"


def looks_for(plan: Mapping | None, params: Mapping, param: str) -> list[int] | None:
    """The planned look sizes (the plan's ``looks``, repro.plan) for checks over the values of ``param`` when the
    measurement used exactly the plan's size of it (a measurement with other seeds, e.g. an override, is judged at
    one look); None: no looks."""
    lk = (plan or {}).get("looks")
    if not lk or lk["param"] != param:
        return None
    values = params.get(param)
    return list(lk["at"]) if isinstance(values, list) and len(values) == lk["at"][-1] else None
