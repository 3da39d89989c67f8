"""The verdict contract (docs/verdicts.md): a claim's checks, gates and setup rows, and the one rule that turns
them into a verdict. Judge-side code: the workflow re-judges stored measurements when this module changes and
measures nothing again (repro.provenance.JUDGE_SIDE)."""
from __future__ import annotations

from typing import Any, Mapping

from repro import registry

VERDICTS = ("reproduced", "partially", "not_reproduced", "inconclusive", "not_applicable", "not_implemented")


def verdict(claim: str, status: str, reason: str, *, checks: list[dict] | None = None, **extra) -> dict:
    if status not in VERDICTS:
        raise ValueError(f"verdict: {status!r} is not one of {VERDICTS}")
    return {"claim": claim, "verdict": status, "reason": reason, "checks": checks or [], **extra}


def check(name: str, passed: bool | None, measured: str, expected: str, *, headline: bool = False,
          interval: str | None = None, undecided_because: str | None = None, numbers: dict | None = None) -> dict:
    """One verdict criterion: what was measured, what the paper says, and whether it holds.

    ``headline``: the claim's main statement (see ``verdict_from_checks``). ``interval``: the uncertainty that
    decided it (seeds' spread, bootstrap interval), in words. ``passed=None`` means the run could not decide the
    check; ``undecided_because`` says why (the control did not learn, the spread is too wide, a CPU stand-in...).
    ``numbers`` (:func:`numbers`): the check's measured value and the paper's, as numbers, for the headline tables
    of the matrix and the pages."""
    if passed is None and not undecided_because:
        undecided_because = "not decided by this run"
    out = {"name": name, "passed": None if passed is None else bool(passed), "measured": measured,
           "expected": expected, "headline": bool(headline), "interval": interval,
           "undecided_because": None if passed is not None else undecided_because}
    if numbers is not None:
        out["numbers"] = numbers
    return out


COMPARE = ("ratio", "difference", None)


def numbers(value: float | None, unit: str, *, paper: float | None = None, paper_text: str | None = None,
            lo: float | None = None, hi: float | None = None, compare: str | None = None) -> dict:
    """A check's numbers for the headline tables: the measured ``value`` in ``unit`` with its interval
    [``lo``, ``hi``] (None: a point value), the paper's number in the same unit (``paper``, from the registry) or, when
    the paper states another quantity, ``paper_text`` only. ``compare`` says how the two may be set side by side:
    "ratio" (like quantities on a ratio scale: times, counts), "difference" (percentages, exponents, log-scale
    values: the difference in the unit's points), None (not comparable: no ratio or difference is shown)."""
    if compare not in COMPARE:
        raise ValueError(f"numbers: compare {compare!r} is not one of {COMPARE}")
    if compare is not None and paper is None:
        raise ValueError("numbers: a comparison needs the paper's number in the same unit")

    def f(x):
        return None if x is None else float(x)

    return {"value": f(value), "unit": unit, "lo": f(lo), "hi": f(hi), "paper": f(paper),
            "paper_text": paper_text, "compare": compare}


def gate(name: str, passed: bool, measured: str, required: str) -> dict:
    """A precondition of the checks on a trained model (e.g. "the control model learned"): when it fails, the
    checks that rest on it are undecided (the run could not decide them), never held or failed."""
    return {"name": name, "passed": bool(passed), "measured": measured, "required": required}


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
    claim (``gated``). ``setup`` rows (aspect / paper / this_run) and ``meaning`` go to the page.
    """
    heads = [c for c in checks if c.get("headline")]
    meaning = meaning or _meaning(heads, scale)
    extra = {**extra, "gates": list(gates or []), "setup": list(setup or []),
             "meaning": meaning}
    decided = [c for c in checks if c["passed"] is not None]
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
    counts = f"{n_pass}/{len(decided)} decided checks hold ({len(checks) - len(decided)} undecided)"
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
    """Decide "value > above" / "value < below" from an interval [lo, hi]: True when the whole interval is on the
    claimed side, False when the whole interval is on the other side, None (undecided) when it straddles."""
    if above is not None:
        return True if lo > above else False if hi <= above else None
    if below is not None:
        return True if hi < below else False if lo >= below else None
    raise ValueError("decide_interval: give above= or below=")


def decide_within(lo: float, hi: float, target_lo: float, target_hi: float) -> bool | None:
    """Decide "value in [target_lo, target_hi]" from an interval [lo, hi]: True when [lo, hi] lies strictly inside
    the target band, False when it lies wholly outside, None when it overlaps or touches an edge (too little
    precision: a tie never passes) or is NaN."""
    if target_lo < lo and hi < target_hi:
        return True
    if hi < target_lo or lo > target_hi:
        return False
    return None


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
