"""Compare hardware: every machine's timing and memory numbers beside the paper's.

Gathers every hardware id found under ``results/`` (layout ``results/<hardware>/<scale>/<claim>/`` with
metrics.csv, verdict.json and fingerprint.json written by :mod:`repro.io`) and writes, for each claim
that has timing or memory metrics, one markdown table and one seaborn plot under ``reports/compare/<scale>/``:

- the paper's number and the hardware it was measured on (``published_value`` of the metrics rows; the hardware
  from the registry's ``hardware`` field, :mod:`repro.registry`);
- each measured hardware's value, joined by (claim, metric, sweep);
- the ratio of each machine to the paper (only where the units agree or convert, e.g. s -> ms) and to the
  reference machine (``--reference``, default the first hardware id in sorted order);
- the software behind each machine's numbers (torch, triton, CUDA, driver, python from fingerprint.json), with
  the fields that differ from the reference machine named beside every row that compares them.

A machine without results for a claim shows ``missing`` (never 0); a machine that ran the claim but has no row
for that metric/setting shows ``not measured``; a row whose value is empty (e.g. a provider skipped on CPU) shows
``n/a``. Which rows count as timing or memory is the row's ``kind`` in metrics.csv (time, memory, rate, ratio_time,
ratio_memory; repro.kinds); files written before that column get the one fallback of
:func:`repro.kinds.legacy_kind` when they are read.

    python -m repro.report.compare --results results --scale default --out reports/compare/default [--reference ID]
"""
from __future__ import annotations

import argparse
import glob
import json
import logging
import math
import os
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from repro import config, registry
from repro.kinds import MEMORY_UNITS, PERF_KINDS, TIME_UNITS, unit_key as _unit_key
from repro.io import atomic_write_text, read_metrics
from repro.report import runtime
from repro.report.headline import cells as headline_cells, headline_check, is_percent, versus as _versus
from repro.report.origin import Source, difference, origin_of, recorded_keys, sources
from repro.report.pages import _table

log = logging.getLogger("repro.compare")

MISSING, NOT_MEASURED, NOT_AVAILABLE = "missing", "not measured", "n/a"

SOFTWARE_FIELDS = ("torch", "triton", "cuda", "driver", "python")


def is_perf_row(kind) -> bool:
    """Whether a metrics row (by its ``kind``) is a timing or memory number (what hardware comparisons are about)."""
    return kind in PERF_KINDS


def convert(value: float, unit_from, unit_to) -> float | None:
    """``value`` in ``unit_from`` expressed in ``unit_to``; None when the units are not the same kind."""
    a, b = _unit_key(unit_from), _unit_key(unit_to)
    if a == b and a:
        return value
    for table in (TIME_UNITS, MEMORY_UNITS):
        if a in table and b in table:
            return value * table[a] / table[b]
    return None


def _number(v) -> float | None:
    """A finite float from a CSV cell, else None (lists such as "[1, 2]" and text are not numbers)."""
    if v is None or isinstance(v, bool):
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def software(fp: dict) -> dict:
    """torch, triton, CUDA, driver and python versions from a fingerprint.json (None where absent)."""
    sw = fp.get("software") or {}
    acc = (fp.get("hardware") or {}).get("accelerator") or {}
    return {"torch": sw.get("torch"), "triton": sw.get("triton"), "cuda": acc.get("cuda"),
            "driver": acc.get("driver"), "python": sw.get("python")}


def software_diff(a: dict, b: dict) -> list[str]:
    """Names of the software fields that differ between two :func:`software` dicts."""
    return [k for k in SOFTWARE_FIELDS if (a.get(k) or None) != (b.get(k) or None)]


@dataclass
class Results:
    """Everything found under ``results/*/<scale>/``: per (hardware, claim) metrics, fingerprint and verdict."""
    scale: str
    hardware: list[str] = field(default_factory=list)
    metrics: dict[tuple[str, str], pd.DataFrame] = field(default_factory=dict)
    fingerprints: dict[tuple[str, str], dict] = field(default_factory=dict)
    verdicts: dict[tuple[str, str], dict] = field(default_factory=dict)
    # per (hardware, claim): measured by code the checkout would measure anew (repro.provenance.stale_reasons)
    older_code: dict[tuple[str, str], bool] = field(default_factory=dict)

    def is_stale(self, hw: str, claim: str) -> bool:
        return bool(self.older_code.get((hw, claim)))

    def comparable(self, a: str, b: str, claim: str) -> bool:
        """Whether two machines' numbers of ``claim`` were measured by the same code (their recorded code keys
        agree), so a ratio of them is about the machines; older code beside fresh code would compare the code, and
        a result without keys cannot say which code measured it."""
        keys = [recorded_keys(self.verdicts.get((h, claim)) or {}) for h in (a, b)]
        return difference(*keys) != "code"

    def claims(self) -> list[str]:
        found = {c for _, c in self.metrics}
        known = [c for c in registry.claim_ids() if c in found]
        return known + sorted(found - set(known))


def discover(results_root: str | Path, scale: str, references_root: str | Path | None = None) -> Results:
    """Read every ``<results_root>/<hardware>/<scale>/<claim>/`` that holds a verdict.json (a complete folder) and,
    with ``references_root``, every committed reference's (``<references_root>/results/...``), whose machines are
    named ``<hardware> (reference)``: a reference never stands in for this checkout's run of the same machine.

    Folders whose name starts with ``_`` (``_models``, ``_work``, ``_gpu_check``) are not hardware or claims.
    A folder with a verdict but an unreadable metrics.csv or fingerprint.json raises naming the file."""
    res = Results(scale=scale)
    found = sources(results_root, None, references_root)
    for src in found:
        if src.results.is_dir():
            _discover_root(res, src, scale)
    if not res.hardware:
        log.warning("no results at scale %s under %s; nothing to compare", scale,
                    ", ".join(str(s.results) for s in found))
    return res


def _discover_root(res: Results, src: Source, scale: str) -> None:
    for hw_dir in sorted(p for p in src.results.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))):
        scale_dir = hw_dir / scale
        if not scale_dir.is_dir():
            continue
        claims = sorted(p for p in scale_dir.iterdir()
                        if p.is_dir() and not p.name.startswith(("_", ".")) and (p / "verdict.json").exists())
        if not claims:
            continue
        name = src.label(hw_dir.name)
        res.hardware.append(name)
        for cdir in claims:
            key = (name, cdir.name)
            for fname in ("metrics.csv", "fingerprint.json"):
                if not (cdir / fname).exists():
                    raise FileNotFoundError(f"{cdir / fname}: missing beside {cdir / 'verdict.json'}")
            try:
                res.metrics[key] = read_metrics(cdir)
                res.fingerprints[key] = json.loads((cdir / "fingerprint.json").read_text())
                res.verdicts[key] = json.loads((cdir / "verdict.json").read_text())
                res.older_code[key] = "code" in origin_of(res.verdicts[key], src.kind, cdir.name).stale_kinds
            except (ValueError, KeyError, pd.errors.ParserError) as exc:
                raise ValueError(f"{cdir}: unreadable results ({exc})") from exc


# sweep entries that record how a run went, not what was measured (a sequential test's stopping record, a skip's
# reason): rows are joined across machines without them, so one setting is one row whatever each run recorded
OUTCOME_KEYS = ("ci_below", "ci_above", "confidence", "looks", "planned_looks", "stop", "status", "reason")


def _sweep_key(sweep) -> str:
    sweep = {k: v for k, v in sweep.items() if k not in OUTCOME_KEYS} if isinstance(sweep, dict) else {}
    return json.dumps(sweep, sort_keys=True, default=str)


def _sweep_text(key: str) -> str:
    return ", ".join(f"{k}={v}" for k, v in json.loads(key).items())


def _paper_hardware(claim: str, published_key) -> str | None:
    if not isinstance(published_key, str) or not published_key:
        return None
    try:
        return registry.published(claim, published_key).get("hardware")
    except KeyError:
        return None


def _fmt(v: float | None) -> str:
    if v is None:
        return ""
    if v != 0 and (abs(v) >= 1e5 or abs(v) < 1e-3):
        return f"{v:.3e}"
    return f"{v:.4g}"


def _fmt_ratio(v: float | None) -> str:
    return "" if v is None else f"{v:.3g}x"


def long_frame(results: Results, claim: str) -> pd.DataFrame:
    """The claim's timing/memory rows of every machine, one row per (hardware, metric, sweep).

    Duplicate (metric, sweep) rows of one machine are reduced to their median (with a warning)."""
    parts = []
    for hw in results.hardware:
        m = results.metrics.get((hw, claim))
        if m is None or not len(m):
            continue
        m = m[m["kind"].map(is_perf_row)]
        if not len(m):
            continue
        part = pd.DataFrame({
            "hardware": hw, "metric": m["metric"].astype(str), "sweep": m["sweep"].map(_sweep_key),
            "unit": m["unit"].astype(str), "value": m["value"].map(_number),
            "spread": m["spread"].map(_number) if "spread" in m else None,
            "n": m["n"].map(_number) if "n" in m else None,
            "published_key": m.get("published_key", pd.Series([None] * len(m), index=m.index)),
            "published_value": m.get("published_value", pd.Series([None] * len(m), index=m.index)),
            "published_unit": m.get("published_unit", pd.Series([None] * len(m), index=m.index)),
        })
        dup = part.duplicated(["metric", "sweep"], keep=False)
        if dup.any():
            log.warning("%s/%s: %d rows share a (metric, sweep); their median is compared", hw, claim, int(dup.sum()))
            part = part.groupby(["hardware", "metric", "sweep", "unit"], as_index=False, dropna=False, sort=False).agg(
                value=("value", lambda s: None if s.dropna().empty else float(s.dropna().median())),
                spread=("spread", "first"), n=("n", "first"),
                published_key=("published_key", "first"), published_value=("published_value", "first"),
                published_unit=("published_unit", "first"))
        parts.append(part)
    if not parts:
        return pd.DataFrame(columns=["hardware", "metric", "sweep", "unit", "value", "spread", "n", "published_key",
                                     "published_value", "published_unit"])
    return pd.concat(parts, ignore_index=True)


def _with_noise(v: float | None, spread: float | None, n: float | None) -> str:
    """'1.234 +- 0.05 (n 7)' as asv / pytest-benchmark show a measurement; the bare value without a spread."""
    if v is None:
        return NOT_AVAILABLE
    text = _fmt(v)
    if spread is not None and spread > 0:
        text += f" +- {_fmt(spread)}"
    if n is not None and n > 1:
        text += f" (n {int(n)})"
    return text


def _headline_keys(results: Results, claim: str, frame: pd.DataFrame) -> dict[tuple[str, str], dict]:
    """The (metric, sweep) rows that report a machine's headline (repro.report.headline): its value is the
    headline's value (one row, or one metric); with the headline's numbers (for its paper value)."""
    found = {}
    for hw in results.hardware:
        nums = (headline_check(results.verdicts.get((hw, claim)) or {}) or {}).get("numbers") or {}
        v = _number(nums.get("value"))
        if v is None:
            continue
        sel = frame[(frame["hardware"] == hw) & frame["value"].map(
            lambda x: x is not None and not pd.isna(x) and math.isclose(x, v, rel_tol=1e-9, abs_tol=1e-12))]
        if len(sel) and sel["metric"].nunique() == 1:
            for key in zip(sel["metric"], sel["sweep"]):
                found.setdefault(key, nums)
    return found


def compare_table(results: Results, claim: str, reference: str | None = None) -> pd.DataFrame:
    """The wide comparison table of one claim (cells are display strings; see the module docstring).

    Columns: metric, setting, unit, paper, paper hardware, one column per hardware (value +- spread (n)),
    ``<hw> vs paper`` for each hardware and ``<hw> vs <reference>`` for every other hardware: a ratio of like
    quantities, a difference in points for percentages, marked ``~`` when within the spreads. Which software each
    machine ran is in the software table, once per machine."""
    return _build(results, claim, reference)[0]


def baseline(results: Results, claim: str, reference: str | None = None) -> str | None:
    """The machine a claim's other machines are divided by: ``reference`` when it measured the claim, else the first
    machine with fresh results for it (older code on the baseline would leave no ratio), else the first with any;
    None when no machine measured it."""
    have = [hw for hw in results.hardware if (hw, claim) in results.metrics]
    if reference in have:
        return reference
    fresh = [hw for hw in have if not results.is_stale(hw, claim)]
    return (fresh or have or [None])[0]


def _build(results: Results, claim: str, reference: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`compare_table` and, per row, what the page's choice of rows needs (:func:`key_rows`): whether it is a
    headline row, whether it has a paper value and a comparison with it, and the largest difference beyond noise."""
    hws = list(results.hardware)
    ref = baseline(results, claim, reference)
    machines = [hw for hw in hws if (hw, claim) in results.metrics]  # one alone: its rows beside the paper
    frame = long_frame(results, claim)
    heads = _headline_keys(results, claim, frame)
    keys = list(dict.fromkeys(zip(frame["metric"], frame["sweep"])))
    rows, meta = [], []
    for metric, sweep in keys:
        sel = frame[(frame["metric"] == metric) & (frame["sweep"] == sweep)]
        unit = sel["unit"].iloc[0]
        pub_rows = sel[sel["published_value"].notna()]
        pub_val = pub_unit = pub_hw = None
        pub_text = ""
        if len(pub_rows):
            p = pub_rows.iloc[0]
            pub_val, pub_unit = _number(p["published_value"]), p["published_unit"]
            pub_text = (_fmt(pub_val) if pub_val is not None else str(p["published_value"]))
            if isinstance(pub_unit, str) and pub_unit and _unit_key(pub_unit) != _unit_key(unit):
                pub_text += f" {pub_unit}"
            pub_hw = _paper_hardware(claim, p["published_key"])
        head = heads.get((metric, sweep))
        if not pub_text and head and _number(head.get("paper")) is not None:  # the headline's paper value
            pub_val, pub_unit = _number(head["paper"]), unit
            pub_text = _fmt(pub_val) + (f" ({head['paper_text']})" if head.get("paper_text") else "")
            pub_hw = "headline"
        row = {"metric": metric, "setting": _sweep_text(sweep), "unit": unit, "paper": pub_text,
               "paper hardware": pub_hw or ("" if not pub_text else "not stated")}
        values: dict[str, tuple] = {}
        for hw in hws:
            if (hw, claim) not in results.metrics:
                row[hw] = MISSING
                continue
            hit = sel[sel["hardware"] == hw]
            if not len(hit):
                row[hw] = NOT_MEASURED
                continue
            v, sp, n = _number(hit["value"].iloc[0]), _number(hit["spread"].iloc[0]), _number(hit["n"].iloc[0])
            hw_unit = hit["unit"].iloc[0]
            if v is not None and _unit_key(hw_unit) != _unit_key(unit):
                conv = convert(v, hw_unit, unit)
                if conv is None:
                    row[hw] = f"{_fmt(v)} {hw_unit}"
                    continue
                sp = None if sp is None else convert(sp, hw_unit, unit)
                v = conv
            values[hw] = (v, sp)
            row[hw] = _with_noise(v, sp, n)
        percent = is_percent(unit)
        scores = []
        for hw in hws:
            v, sp = values.get(hw, (None, None))
            cell = ""
            if v is not None and pub_val is not None and isinstance(pub_unit, str):
                in_pub_unit = convert(v, unit, pub_unit)
                if in_pub_unit is not None and (percent or pub_val != 0):
                    # the headline's row in the headline's words ('smaller speed-up', as its claim page reads)
                    cell = _versus(in_pub_unit, pub_val, percent, unit=(head or {}).get("unit") or pub_unit)
                    scores.append(_difference(in_pub_unit, pub_val, percent))
            row[f"{hw} vs paper"] = cell
        for hw in hws:
            if hw == ref:
                continue
            if not results.comparable(hw, ref, claim):  # older code beside fresh: no ratio of the machines
                row[f"{hw} vs {ref}"] = ""
                continue
            a, b = values.get(hw, (None, None))[0], values.get(ref, (None, None))[0]
            row[f"{hw} vs {ref}"] = _versus(a, b, percent, unit=str(unit or ""))
            scores.append(_difference(a, b, percent))
        measured = {h for h, (v, _) in values.items() if v is not None}
        if len(machines) > 1 and not (ref in measured and len(measured) > 1):
            continue  # a comparison page compares: the baseline and at least one other machine measured it
        rows.append(row)
        meta.append({"headline": head is not None, "paper": bool(pub_text),
                     "versus_paper": any(row[f"{hw} vs paper"] for hw in hws),
                     "measured": bool(values), "difference": max(scores, default=0.0)})
    columns = (["metric", "setting", "unit", "paper", "paper hardware", *hws, *[f"{hw} vs paper" for hw in hws],
                *[f"{hw} vs {ref}" for hw in hws if hw != ref]])
    table = pd.DataFrame(rows, columns=columns)
    # Drop comparison-with-paper columns that are empty in every row (claims without comparable published numbers).
    empty = [c for c in table.columns if c.endswith(" vs paper") and not table[c].astype(bool).any()]
    return table.drop(columns=empty), pd.DataFrame(meta, index=table.index,
                                                   columns=["headline", "paper", "versus_paper", "measured",
                                                            "difference"])


def _difference(a, b, percent: bool) -> float:
    """How far a is from b, so rows of different units rank together: |log ratio|, or points / 100 for
    percentages (0 where either is missing)."""
    if a is None or b is None:
        return 0.0
    if percent:
        return abs(a - b) / 100.0
    return abs(math.log(a / b)) if a > 0 and b > 0 else 0.0


MAX_ROWS = 25  # rows a compare page shows (a screenful); every row is in the CSV beside it


def key_rows(table: pd.DataFrame, meta: pd.DataFrame | None = None, limit: int = MAX_ROWS) -> pd.DataFrame:
    """The rows a compare page shows, by relevance: the headline's row(s), the rows compared with a paper value,
    the other rows with a paper value, then the largest differences beyond noise (between machines or with the
    paper); rows no machine measured last. At most ``limit``; without ``meta``, paper rows first."""
    if meta is None:
        meta = pd.DataFrame({"headline": False, "paper": table["paper"].astype(bool), "versus_paper": False,
                             "measured": True, "difference": 0.0}, index=table.index)
    order = sorted(table.index, key=lambda i: (not meta.at[i, "headline"], not meta.at[i, "versus_paper"],
                                               not meta.at[i, "paper"], not meta.at[i, "measured"],
                                               -meta.at[i, "difference"]))
    return table.loc[order[:limit]]


def software_table(results: Results, claim: str, reference: str | None = None) -> pd.DataFrame:
    """One row per hardware: the software behind its numbers, the fields differing from the reference machine."""
    hws = list(results.hardware)
    ref = reference if reference in hws else (hws[0] if hws else None)
    ref_sw = software(results.fingerprints[(ref, claim)]) if (ref, claim) in results.fingerprints else None
    rows = []
    for hw in hws:
        fp = results.fingerprints.get((hw, claim))
        if fp is None:
            rows.append({"hardware": hw, **{k: MISSING for k in SOFTWARE_FIELDS}, "commit": "", "measured": "",
                         "verdict": MISSING, f"differs from {ref}": ""})
            continue
        sw = software(fp)
        acc = (fp.get("hardware") or {}).get("accelerator")
        verdict = results.verdicts.get((hw, claim), {}).get("verdict", "")
        rows.append({"hardware": hw, **{k: sw[k] or ("none" if k in ("cuda", "driver") and not acc else "")
                                          for k in SOFTWARE_FIELDS},
                     "commit": ((fp.get("git") or {}).get("commit") or "")[:10], "measured": fp.get("timestamp", ""),
                     "verdict": verdict,
                     f"differs from {ref}": "" if hw == ref or ref_sw is None else ", ".join(software_diff(sw, ref_sw))})
    return pd.DataFrame(rows)


MAX_MACHINE_COLUMNS = 3  # a page table: metric, setting, paper, the machines, vs paper, vs the reference (<= 8)


def letters(hws: list[str]) -> dict[str, str]:
    """Short column names for machines (A, B, ...), explained in a legend under the table."""
    return {hw: chr(ord("A") + i) if i < 26 else f"M{i + 1}" for i, hw in enumerate(hws)}


def _joined(row, cols: dict[str, str], than: str = "") -> str:
    """One cell for several machines' comparisons: 'A 1.42 pp lower; B 3.3x faster than C' (empty ones left out;
    ``than``: who they were divided by, named after a direction word)."""
    def cell(text: str) -> str:
        return text if not than or text.startswith("~") or text.startswith("equal") else f"{text} than {than}"
    return "; ".join(f"{short} {cell(row[col])}" for col, short in cols.items() if col in row.index and row[col])


OLDER = " (older code)"  # a machine column whose numbers the checkout's code would measure anew


def page_table(shown: pd.DataFrame, hws: list[str], ref: str | None, heads: pd.Series | None = None,
               stale: frozenset = frozenset()) -> tuple[pd.DataFrame, list[str], list[str]]:
    """The markdown table of a compare page from :func:`compare_table`'s rows: at most 8 columns (metric with its
    unit, the setting's varying part, paper, up to three machines by letter, ``(older code)`` after the letter of a
    machine in ``stale``, vs paper, vs the reference), the setting parts common to every row (stated once above
    the table) and the machines left to the CSV."""
    short = letters(hws)
    machines = hws if len(hws) <= MAX_MACHINE_COLUMNS else (
        [ref] + [h for h in hws if h != ref][:MAX_MACHINE_COLUMNS - 1])
    left_out = [h for h in hws if h not in machines]
    parts = [str(x).split(", ") if x else [] for x in shown["setting"]]
    # a variable with one value wherever it appears says nothing about the rows: stated once above the table
    values: dict[str, set] = {}
    for item in (x for q in parts for x in q):
        values.setdefault(item.split("=", 1)[0], set()).add(item)
    common = [next(iter(v)) for v in values.values() if len(v) == 1] if len(parts) > 1 else []
    rows = []
    for (i, r), part in zip(shown.iterrows(), parts):
        unit = "%" if is_percent(r["unit"]) else r["unit"]
        name = f"{r['metric']} ({unit})" if unit else r["metric"]
        if heads is not None and heads.get(i):
            name = f"**{name}** (headline)"
        row = {"metric": name, "setting": ", ".join(x for x in part if x not in common) or "-",
               "paper": r["paper"]}
        row.update({short[h] + (OLDER if h in stale else ""): r[h] for h in machines})
        row["vs paper"] = _joined(r, {f"{h} vs paper": short[h] for h in machines})
        row[f"vs {short.get(ref, ref)}"] = _joined(r, {f"{h} vs {ref}": short[h] for h in machines if h != ref},
                                                   short.get(ref, ref))
        rows.append(row)
    table = pd.DataFrame(rows)
    empty = [c for c in table.columns if c.startswith("vs ") and not table[c].astype(bool).any()]
    return table.drop(columns=empty), common, left_out


def _wrap(text: str, width: int = 118) -> list[str]:
    """Prose as markdown lines of at most ``width`` characters (one paragraph)."""
    return textwrap.wrap(text, width, break_on_hyphens=False) or [""]


def _varying_keys(sweeps) -> list[str]:
    parsed = [json.loads(s) for s in sweeps]
    keys = list(dict.fromkeys(k for d in parsed for k in d))
    return [k for k in keys if len({json.dumps(d.get(k), default=str) for d in parsed}) > 1]


def _short_labels(sweeps: pd.Series) -> pd.Series:
    """Plot labels from sweep keys (JSON): the values of the variables that vary within the panel (their names go
    in the panel title, :func:`_varying_keys`), wrapped short."""
    varying = _varying_keys(sweeps)
    labels = [", ".join(str(d[k]) for k in varying if k in d) or "all" for d in map(json.loads, sweeps)]
    return pd.Series(["\n".join(textwrap.wrap(lab, 32)) for lab in labels], index=sweeps.index)


MAX_PANELS, MAX_BARS = 4, 12  # one figure per question: a few panels, a screenful of bars each


def _plot_points(results: Results, claim: str, frame: pd.DataFrame) -> pd.DataFrame:
    """The bars: every measured value (source: its machine) and every published value that converts to the row's
    unit (source: 'paper (<the hardware it was measured on>)')."""
    points = []
    for r in frame.itertuples():
        if _number(r.value) is not None:
            points.append({"metric": f"{r.metric} [{r.unit}]", "sweep": r.sweep, "source": r.hardware,
                           "value": r.value})
    pub = frame[frame["published_value"].notna()].drop_duplicates(["metric", "sweep"])
    for r in pub.itertuples():
        pv = _number(r.published_value)
        if pv is None or not isinstance(r.published_unit, str):
            continue
        v = convert(pv, r.published_unit, r.unit)
        if v is not None:
            hw = _paper_hardware(claim, r.published_key) or "hardware not stated"
            points.append({"metric": f"{r.metric} [{r.unit}]", "sweep": r.sweep, "source": f"paper ({hw})",
                           "value": v})
    return pd.DataFrame(points)


def _absent_notes(results: Results, claim: str, frame: pd.DataFrame, metrics: list[str]) -> dict[str, list[str]]:
    """Per panel, the machines without a value in it: named in its title, so an absent bar never reads as zero."""
    absent = {}
    for name in metrics:
        metric_name = name.rsplit(" [", 1)[0]
        notes = []
        for hw in results.hardware:
            if (hw, claim) not in results.metrics:
                notes.append(f"{hw}: {MISSING}")
            elif not ((frame["hardware"] == hw) & (frame["metric"] == metric_name) & frame["value"].notna()).any():
                notes.append(f"{hw}: {NOT_MEASURED}")
        absent[name] = notes
    return absent


def _panels(data: pd.DataFrame, metrics: list[str]) -> tuple[dict[str, tuple[pd.DataFrame, int]], list[float]]:
    """Per panel its bars (the first MAX_BARS settings) with its number of settings, and the panels' heights."""
    shown, heights = {}, []
    for name in metrics:
        d = data[data["metric"] == name]
        settings = list(dict.fromkeys(d["setting"]))
        if len(settings) > MAX_BARS:
            d = d[d["setting"].isin(settings[:MAX_BARS])]
        shown[name] = (d, len(settings))
        heights.append(1.3 + 0.26 * d["setting"].nunique() * max(1, d["source"].nunique()))
    return shown, heights


def _panel_title(name: str, d: pd.DataFrame, n_settings: int, absent: list[str]) -> str:
    """A panel's title: the metric, the settings left out, the varying sweep variables and the absent machines."""
    title = name + (f"\n(first {MAX_BARS} of {n_settings} settings; all are in the CSV)"
                    if n_settings > MAX_BARS else "")
    keys = _varying_keys(d["sweep"])
    if keys:
        title += "\nsetting: " + ", ".join(keys)
    if absent:
        title += "\nno value - " + "; ".join(absent)
    return title


def plot_claim(results: Results, claim: str, path: Path, keep: set | None = None) -> Path | None:
    """One seaborn figure per claim: each metric a panel (a grid of up to three columns, read at 100%), values per
    setting as horizontal bars, one colour per machine and the paper (where its unit matches), one legend for all
    panels. Log scale where a panel spans more than two decades."""
    import matplotlib  # lazy: matplotlib and seaborn are slow to import, and the Snakefile imports this module

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: as matplotlib
    import seaborn as sns  # lazy: as matplotlib

    from repro.report.plots import PUBLISHED_COLOR, theme  # lazy: repro.report.plots imports matplotlib

    theme()
    frame = long_frame(results, claim)
    if keep is not None:  # the rows the page shows
        frame = frame[[(m, _sweep_text(w)) in keep for m, w in zip(frame["metric"], frame["sweep"])]]
    if not len(frame):
        return None
    data = _plot_points(results, claim, frame)
    if not len(data):
        return None
    data["setting"] = data.groupby("metric")["sweep"].transform(_short_labels)
    metrics = list(dict.fromkeys(data["metric"]))[:MAX_PANELS]
    data = data[data["metric"].isin(metrics)]
    order = list(dict.fromkeys(data["source"]))
    machines = [s for s in order if not s.startswith("paper (")]
    palette = dict(zip(machines, sns.color_palette("colorblind", len(machines))))
    palette.update({s: PUBLISHED_COLOR for s in order if s.startswith("paper (")})  # the paper: as everywhere
    absent = _absent_notes(results, claim, frame, metrics)
    shown, heights = _panels(data, metrics)
    # a grid read row by row; each row as tall as its tallest panel
    ncols = 1 if len(metrics) == 1 else 2 if len(metrics) <= 4 else 3
    nrows = -(-len(metrics) // ncols)
    row_heights = [max(heights[r * ncols:(r + 1) * ncols]) for r in range(nrows)]
    fig = plt.figure(figsize=(5.6 * ncols, min(sum(row_heights) + 1.2, 150)), layout="constrained")
    grid = fig.add_gridspec(nrows, ncols, height_ratios=row_heights)
    for i, name in enumerate(metrics):
        ax = fig.add_subplot(grid[i // ncols, i % ncols])
        d, n_settings = shown[name]
        sns.barplot(data=d, y="setting", x="value", hue="source", orient="h", palette=palette, ax=ax, errorbar=None,
                    hue_order=[s for s in order if s in set(d["source"])], legend=False)
        positive = d["value"][d["value"] > 0]
        if len(positive) and (d["value"] > 0).all() and positive.max() / positive.min() > 100:
            ax.set_xscale("log")
        ax.set_title(_panel_title(name, d, n_settings, absent[name]), fontsize=10)
        ax.set_ylabel("")
        ax.set_xlabel(name.rsplit(" [", 1)[-1].rstrip("]"))
        ax.tick_params(axis="y", labelsize=9)
    handles = [matplotlib.patches.Patch(color=palette[s], label=s) for s in order]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(order), 4), fontsize=10, frameon=False)
    fig.suptitle(f"{claim} ({results.scale} scale): measured on each machine beside the paper", fontsize=12)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, bbox_inches="tight")  # the title and the legend whole, however wide
    plt.close(fig)
    return path


def _headline_lines(results: Results, claim: str) -> list[str]:
    """Each machine's headline (the claim page's: measured [interval], paper, vs paper, verdict), one table."""
    rows, name = [], None
    for hw, short in letters(results.hardware).items():
        verdict = results.verdicts.get((hw, claim))
        if verdict is None:
            continue
        c = headline_cells(verdict)
        name = name or c["name"]
        value = c["value"] if not c["unit"] or c["unit"] in c["value"] else f"{c['value']} {c['unit']}"
        rows.append({"machine": short, "measured": value, "paper": c["paper"],
                     "vs paper": c["compare"], "verdict": verdict.get("verdict", "")})
    if not rows or name in (None, "-"):
        return []
    return ["## Headline", "", *_wrap(f"{name} (each machine's verdict.json; the claim page explains it)."), "",
            _md(pd.DataFrame(rows)), ""]


def _page_lines(claim: str, table: pd.DataFrame, shown: pd.DataFrame, meta: pd.DataFrame, results: Results,
                ref: str | None) -> list[str]:
    """The comparison section of a compare page: which rows are shown and why, the table, its legend."""
    hws = results.hardware
    short = letters(hws)
    stale = frozenset(h for h in hws if results.is_stale(h, claim))
    small, common, left_out = page_table(shown, hws, ref, meta["headline"], stale)
    n_paper = int(meta["paper"].sum())
    lines = ["## Timing and memory", "",
             *_wrap((f"Showing {len(shown)} of {len(table)} rows, by relevance: the headline's row, the rows with a "
                     f"paper value ({n_paper} in all), then the largest differences. Every row: "
                     f"[`{claim}.csv`]({claim}.csv)." if len(shown) < len(table) else
                     f"Every row, also as [`{claim}.csv`]({claim}.csv).")
                    + (f" Settings with one value in every row shown that has them: {', '.join(common)}." if common
                       else "")
                    + f" A row is a setting that `{ref}` and at least one other machine measured."), "",
             _md(small), ""] if len(table) else [
             "## Timing and memory", "", *_wrap(f"No setting of this claim was measured by `{ref}` and another "
                                                "machine: nothing to compare."), ""]
    hw_of_paper = sorted({h for h in table["paper hardware"] if h and h != "headline"})
    legend = ("; ".join(f"**{short[h]}**: `{h}`" for h in hws if h not in left_out)
              + ". Values are `value +- spread (n)`. **paper**: the published number (its unit given where it "
              "differs; repro/registry/published.yaml)"
              + (f", measured on {', '.join(hw_of_paper)}" if hw_of_paper else "")
              + "; on the headline's row, the headline's paper value. **vs paper** and "
              f"**vs {short.get(ref, ref)}**: point values compared, a ratio of like quantities shown as the larger "
              "of the two ways with the word of the side that wins, a difference in points (pp) for percentages; no "
              "interval decides them, so none is marked within the noise (the headline's interval does, on the "
              "claim page); a value without `+-` has no recorded spread. "
              + (f"**{OLDER.strip(' ()')}**: measured by code the checkout would measure anew (stale); no ratio with "
                 "a machine measured by other code. " if stale else ""))
    legend += (f"`{MISSING}`: no results for this claim; `{NOT_MEASURED}`: not this row; `{NOT_AVAILABLE}`: no "
               "value (e.g. skipped on that device).")
    if left_out:
        legend += " Only in the CSV: " + ", ".join(f"`{h}`" for h in left_out) + "."
    return lines + _wrap(legend) + [""]


def _software_short(sw: pd.DataFrame, ref: str | None) -> pd.DataFrame:
    """The software table in at most 7 columns: machine (letter and id), software in one cell, commit, date,
    verdict, what differs from the reference machine."""
    short = letters(list(sw["hardware"]))
    diff = next((c for c in sw.columns if c.startswith("differs from")), None)
    return pd.DataFrame({
        "machine": [f"{short[h]} `{h}`" for h in sw["hardware"]],
        "software": [", ".join(f"{k} {r[k]}" for k in SOFTWARE_FIELDS if r[k] and r[k] != "none")
                     for _, r in sw.iterrows()],
        "commit": sw["commit"], "measured": sw["measured"].astype(str).str[:10], "verdict": sw["verdict"],
        f"differs from {short.get(ref, ref)}": sw[diff] if diff else ""})


def _md(frame: pd.DataFrame) -> str:
    """A markdown table without padding (a cell as wide as its text, so a line stays short); '|' in cells
    escaped."""
    frame = frame.astype(str).replace({"None": "", "nan": ""})
    if not len(frame.columns):
        return _table(frame)

    def line(cells) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |"

    return "\n".join([line(frame.columns), "|" + "|".join(":---" for _ in frame.columns) + "|",
                      *(line(r) for r in frame.itertuples(index=False))])


def perf_claims(results: Results) -> list[str]:
    """Claims that have at least one timing or memory row on some machine."""
    return [c for c in results.claims() if len(long_frame(results, c))]


def write_compare(results_root: str | Path, scale: str, out_dir: str | Path, reference: str | None = None,
                  claims: list[str] | None = None, references_root: str | Path | None = None) -> list[Path]:
    """Write ``<out_dir>/<claim>.md`` and ``<claim>.png`` per claim with timing/memory metrics, and
    ``<out_dir>/index.md``; returns the paths written. With ``references_root`` the committed references are
    compared too (named ``<hardware> (reference)``)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = discover(results_root, scale, references_root)
    if reference is not None and reference not in results.hardware:
        log.warning("reference hardware %r has no results at scale %s; using %r", reference, scale,
                    results.hardware[0] if results.hardware else None)
    ref = reference if reference in results.hardware else (results.hardware[0] if results.hardware else None)
    selected = [c for c in perf_claims(results) if claims is None or c in claims]
    written, index_rows = [], []
    for claim in selected:
        info = registry.claim(claim) if claim in registry.claim_ids() else {"code": "", "title": claim}
        base = baseline(results, claim, ref)
        table, meta = _build(results, claim, base)
        shown = key_rows(table, meta)
        atomic_write_text(out / f"{claim}.csv", table.to_csv(index=False))
        sw = software_table(results, claim, base)
        png = plot_claim(results, claim, out / f"{claim}.png", keep=set(zip(shown["metric"], shown["setting"])))
        lines = [f"# {info['code']} {claim}: timing and memory across hardware ({scale} scale)", "",
                 *_wrap(f"{info['title']}."), ""]
        lines += _headline_lines(results, claim) + _page_lines(claim, table, shown, meta, results, base)
        lines += ["## Software behind each machine's numbers", "", _md(_software_short(sw, base)), ""]
        if png is not None:
            lines += [f"![{claim} across hardware]({png.name})", "",
                      f"*{claim}: each machine's value per setting beside the paper's (black; same unit only).*", ""]
        page = out / f"{claim}.md"
        atomic_write_text(page, "\n".join(lines))
        written += [page, out / f"{claim}.csv"] + ([png] if png is not None else [])
        present = [hw for hw in results.hardware if (hw, claim) in results.metrics]
        index_rows.append({"claim": f"[{claim}]({claim}.md)", "title": info["title"], "rows": len(table),
                           "machines": ", ".join(present),
                           "missing on": ", ".join(hw for hw in results.hardware if hw not in present)})
    hw_rows = []
    for hw in results.hardware:
        fps = [fp for (h, _), fp in results.fingerprints.items() if h == hw]
        fp = max(fps, key=lambda f: f.get("timestamp") or "")
        h = fp.get("hardware") or {}
        acc = h.get("accelerator")
        hw_rows.append({"hardware": hw, "cpu": h.get("cpu"),
                        "clock": f"{h['cpu_mhz']:.0f} MHz" if h.get("cpu_mhz") else "not recorded",
                        "cores": h.get("cores"),
                        "accelerator": f"{acc['name']} x{acc.get('count', 1)}" if acc else "none",
                        "claims": sum(1 for (x, _) in results.metrics if x == hw),
                        "latest result": fp.get("timestamp", "")})
    index = [f"# Hardware comparison ({scale} scale)", "",
             (f"Machines with results under `{results_root}/*/{scale}/` (this checkout's runs)" if results_root
              is not None else "Machines of the committed references")
             + (f", and the committed references under `{references_root}/results/*/{scale}/` (named "
                f"'<hardware> (reference)')" if references_root is not None else "")
             + f"; machine the ratios divide by: `{ref}` (on a claim it did not measure, the first machine with "
               "fresh results for it).", "",
             _md(pd.DataFrame(hw_rows)), "", "## Claims with timing or memory metrics", "",
             _md(pd.DataFrame(index_rows)) if index_rows else
             "No claim has timing or memory metrics at this scale yet.", ""]
    index += runtime.compare_md(results_root, scale, references_root)  # each machine's run time (benchmark files)
    atomic_write_text(out / "index.md", "\n".join(index))
    written.append(out / "index.md")
    log.info("compare: %d machines, %d claims -> %s", len(results.hardware), len(selected), out)
    return written


def rule_inputs(results_dir: str, scale: str, hardware: str, own: list[str], references_dir: str | None = None) -> list[str]:
    """Input of the Snakemake rule (evaluated when the DAG is built): this run's own claims' verdicts ``own``
    plus every other machine's complete results folder of ``scale`` (``<results_dir>/*/<scale>/*/verdict.json``).

    This machine's existing verdicts enter only through ``own``, so the comparison target never reruns a claim
    the run did not select; folders starting with ``_`` (``_models``, ``_gpu_check``) are skipped."""
    found = []
    for path in glob.glob(os.path.join(results_dir, "*", scale, "*", "verdict.json")):
        parts = path.split(os.sep)
        hw, claim = parts[-4], parts[-2]
        if hw.startswith("_") or claim.startswith("_") or hw == hardware:
            continue
        found.append(path)
    if references_dir is not None:  # every committed reference of this scale (read-only inputs)
        found += glob.glob(os.path.join(references_dir, "results", "*", scale, "*", "verdict.json"))
    return sorted(set(own) | {p for p in found if not p.split(os.sep)[-2].startswith("_")})


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m repro.report.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", required=True, help="results root (holds <hardware>/<scale>/<claim>/)")
    parser.add_argument("--scale", required=True, choices=config.SCALES)
    parser.add_argument("--out", required=True, help="output folder, e.g. reports/compare/<scale>")
    parser.add_argument("--reference", default=None, help="hardware id the other machines are divided by")
    parser.add_argument("--claims", nargs="*", default=None, help="only these claims (default: all found)")
    parser.add_argument("--references", default=None, help="the committed references (holds results/), compared "
                                                           "beside this checkout's runs")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    write_compare(args.results, args.scale, args.out, args.reference, args.claims, args.references)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
