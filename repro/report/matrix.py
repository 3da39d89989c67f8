"""The verdict matrix: every claim x hardware x scale of this checkout's runs (``results/``) and of the committed
references (``references/results/``), the first page of the reports.

Reads every ``<root>/<hardware>/<scale>/<claim>/verdict.json`` with its ``fingerprint.json`` of both sources (one
function, :func:`read_cells`, is the only reader) and writes ``reports/matrix.md`` (and the same table as HTML for
the Snakemake report's landing page, :func:`matrix_html`). A column is one source, hardware and scale: a reference
is labelled ``<hardware> (reference)`` and never stands in for this checkout's run. Each cell shows the verdict,
where it came from (this run or a reference, the commit that measured it and when; **stale** when the checkout's
measurement code differs from the code that measured it: repro.report.origin), and the software behind it.

A cell is **flagged** when its verdict differs

- from another column's verdict for the same claim at the same scale (``kind="machine"``) measured by the same
  code, labelled by what separates the two measurements (repro.report.origin.difference): *config*, *software*,
  and a *machine* difference only when code, config and software are the same. Cells measured by different code
  (their measurement code keys differ, or either predates the keys) are another experiment, not another machine:
  they are not flagged (a stale cell is struck through, and the matrix counts the verdicts that differ by code); or
- from the previous run of the same claim on the same machine and scale (``kind="history"``). Earlier runs are
  read from git: the newest committed version of the same ``verdict.json`` whose timestamp differs from the
  current one (the file as committed before the run that wrote the current one). The flag says what changed
  between the two runs (software versions, commit). Outside a git work tree, or for a file never committed,
  there is no history and no history flag.

Each flag names the checks that flipped: checks present in both verdicts whose outcome (holds / fails /
undecided) differs, and checks present on one side only.

    python -m repro.report.matrix --results results --out reports/matrix.md [--html reports/matrix.html]
"""
from __future__ import annotations

import argparse
import csv
import glob
import html
import io
import json
import logging
import os
import subprocess
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from repro import config, registry
from repro.io import atomic_write_text
from repro.report.compare import SOFTWARE_FIELDS, software
from repro.report.origin import RUN, Origin, Source, difference, origin_of, recorded_keys, sources
from repro.report import headline
from repro.report.pages import inline_html, md_cell

log = logging.getLogger("repro.matrix")

SCALES = config.SCALES
SOFTWARE = SOFTWARE_FIELDS  # torch, triton, CUDA, driver, python (as in the hardware comparison)
OUTCOME = {True: "holds", False: "fails", None: "undecided"}


@dataclass
class Flag:
    """Why a cell is flagged: the other verdict it differs from and the checks that flipped."""
    kind: str            # "machine" (another hardware, same scale) or "history" (earlier run, same machine)
    against: str         # the other hardware id, or "the run of <timestamp> (commit <sha>)"
    verdict: str         # this cell's verdict
    other_verdict: str
    flipped: list[str] = field(default_factory=list)
    changed: str = ""    # software / commit differences between the two runs
    difference: str = ""  # machine flags: "code", "config", "software" or "machine" (repro.report.origin)
    here: str = ""       # the flagged cell's column label

    def headline_text(self) -> str:
        """'**reproduced** on `a`, **inconclusive** on `b` (a code difference: the measurement code differs)'."""
        what = (f"**{self.verdict}** here (`{self.here}`), **{self.other_verdict}** on `{self.against}`"
                if self.kind == "machine" else f"**{self.verdict}** now on `{self.here}`, **{self.other_verdict}** "
                f"in {self.against}")
        if self.difference:
            what += f" (a {self.difference} difference" + (": the measurement code differs" if
                                                            self.difference == "code" else "") + ")"
        return what


@dataclass
class Cell:
    hardware: str
    scale: str
    claim: str
    verdict: dict
    fingerprint: dict
    path: Path                                  # the verdict.json
    flags: list[Flag] = field(default_factory=list)
    source: Source | None = None                # this checkout's runs or the committed references
    origin: Origin | None = None

    @property
    def status(self) -> str:
        return str(self.verdict.get("verdict", "?"))

    @property
    def kind(self) -> str:
        return self.source.kind if self.source else RUN

    @property
    def name(self) -> str:
        """The column's label: the hardware id, with ' (reference)' for a committed reference."""
        return self.source.label(self.hardware) if self.source else self.hardware

    @property
    def column(self) -> tuple[str, str, str]:
        return self.kind, self.hardware, self.scale

    def page(self) -> Path | None:
        """The claim page rendered from this cell's results (None when there is none)."""
        if self.source is None:
            return None
        page = self.source.reports / self.hardware / self.scale / f"{self.claim}.md"
        return page if page.exists() else None

    def software(self) -> dict:
        return software(self.fingerprint)

    def commit(self) -> str:
        return str(self.verdict.get("commit") or (self.fingerprint.get("git") or {}).get("commit") or "")

    def commit_text(self) -> str:
        """'abc1234' (measured and judged there) or 'abc1234, re-judged at def5678'."""
        text = self.commit()[:7]
        rejudged = self.verdict.get("rejudged")
        if isinstance(rejudged, dict) and rejudged.get("commit"):
            text += f", re-judged at {str(rejudged['commit'])[:7]}"
        return text


def judgement(verdict: dict) -> tuple:
    """What identifies one judgement of one run: the measurement's timestamp and, when re-judged, the re-judging's."""
    rejudged = verdict.get("rejudged") if isinstance(verdict.get("rejudged"), dict) else {}
    return verdict.get("timestamp"), rejudged.get("timestamp")


def read_cells(results_root: str | Path, references_root: str | Path | None = None,
               reports_root: str | Path | None = None) -> list[Cell]:
    """Every complete ``<root>/<hardware>/<scale>/<claim>/`` (verdict.json and fingerprint.json present) of this
    checkout's runs (``results_root``) and, with ``references_root``, of the committed references.

    Folders starting with ``_`` or ``.`` (``_models``, ``_work``, ``_gpu_check``) are skipped; a verdict.json that
    is not valid JSON raises naming the file. This is the one place the matrix reads results."""
    cells = []
    for src in sources(results_root, reports_root, references_root):
        cells += _read_source(src)
    return cells


def _read_source(src: Source) -> list[Cell]:
    cells = []
    for path in sorted(glob.glob(os.path.join(str(src.results), "*", "*", "*", "verdict.json"))):
        vpath = Path(path)
        claim_dir = vpath.parent
        hw, scale, claim = claim_dir.parent.parent.name, claim_dir.parent.name, claim_dir.name
        if any(p.startswith(("_", ".")) for p in (hw, scale, claim)):
            continue
        try:
            verdict = json.loads(vpath.read_text())
            fp_path = claim_dir / "fingerprint.json"
            fp = json.loads(fp_path.read_text()) if fp_path.exists() else {}
        except json.JSONDecodeError as exc:
            raise ValueError(f"{claim_dir}: unreadable verdict.json or fingerprint.json ({exc})") from exc
        cells.append(Cell(hw, scale, claim, verdict, fp, vpath, source=src,
                          origin=origin_of(verdict, src.kind, claim, fp)))
    return cells


def _outcomes(verdict: dict) -> dict[str, bool | None]:
    return {c.get("name", "?"): c.get("passed") for c in verdict.get("checks") or []}


def _tally(outcomes: list) -> str:
    counts = {OUTCOME[k]: sum(1 for o in outcomes if o is k) for k in (True, False, None)}
    return ", ".join(f"{n} {word}" for word, n in counts.items() if n)


def flipped_checks(mine: dict, other: dict, other_name: str, here: str = "here") -> list[str]:
    """The checks whose outcome differs between two verdicts, e.g. ``'X: holds here, fails on gpu-h100'``; checks
    present on one side only (the rule changed between the runs) are counted, not listed."""
    a, b = _outcomes(mine), _outcomes(other)
    out = [f"{name}: {OUTCOME.get(a[name], a[name])} {here}, {OUTCOME.get(b[name], b[name])} {other_name}"
           for name in a if name in b and a[name] != b[name]]
    only_a, only_b = [a[n] for n in a if n not in b], [b[n] for n in b if n not in a]
    if only_a:
        out.append(f"{len(only_a)} checks only {here} ({_tally(only_a)})")
    if only_b:
        out.append(f"{len(only_b)} checks only {other_name} ({_tally(only_b)})")
    return out


def software_changes(fp_now: dict, fp_then: dict, commit_now: str, commit_then: str, other: str | None = None) -> str:
    """What differs between two runs: 'torch 2.12.0 -> 2.13.0; commit 1a2b3c4 -> 5d6e7f8' (earlier -> now), or with
    ``other`` (another machine) 'torch 2.13.0 here, 2.5.1 on gpu-h200; ...'."""
    now, then = software(fp_now), software(fp_then)

    def pair(key: str, a, b) -> str:
        return f"{key} {b} -> {a}" if other is None else f"{key} {a} here, {b} on {other}"

    parts = [pair(k, now.get(k) or "none", then.get(k) or "none") for k in SOFTWARE
             if (now.get(k) or None) != (then.get(k) or None)]
    if commit_now and commit_then and commit_now != commit_then:
        parts.append(pair("commit", commit_now[:7], commit_then[:7]))
    return "; ".join(parts)


def _git(cwd: Path, *args: str) -> str | None:
    try:
        r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout if r.returncode == 0 else None


def previous_run(cell: Cell) -> tuple[dict, dict] | None:
    """(verdict, fingerprint) of the judgement before the current one, from the git history of its verdict.json: the
    newest committed version from another run or another re-judging (:func:`judgement`). None without history."""
    folder = cell.path.parent
    shas = _git(folder, "log", "--format=%H", "--", "verdict.json")
    if not shas:
        return None
    now = judgement(cell.verdict)
    for sha in shas.split():
        text = _git(folder, "show", f"{sha}:./verdict.json")
        if text is None:
            continue
        try:
            then = json.loads(text)
        except json.JSONDecodeError:
            continue
        if judgement(then) != now:
            fp_text = _git(folder, "show", f"{sha}:./fingerprint.json")
            try:
                fp = json.loads(fp_text) if fp_text else {}
            except json.JSONDecodeError:
                fp = {}
            return then, fp
    return None


def flag_cells(cells: list[Cell], history: bool = True) -> list[Cell]:
    """Attach the machine flags (same claim and scale, another hardware, another verdict) and, with ``history``,
    the history flags (the previous run of the same cell in git had another verdict)."""
    by_key: dict[tuple[str, str], list[Cell]] = {}
    for c in cells:
        c.flags = []
        by_key.setdefault((c.scale, c.claim), []).append(c)
    for group in by_key.values():
        for c in group:
            for o in group:
                if o is not c and o.status != c.status:
                    why = difference(recorded_keys(c.verdict), recorded_keys(o.verdict))
                    if why == "code":  # another experiment, not another machine: the stale marks say so
                        continue
                    c.flags.append(Flag("machine", o.name, c.status, o.status,
                                        flipped_checks(c.verdict, o.verdict, f"on {o.name}"),
                                        software_changes(c.fingerprint, o.fingerprint, c.commit(), o.commit(), o.name),
                                        why, c.name))
    if history:
        for c in cells:
            prev = previous_run(c)
            if prev is None:
                continue
            then, fp = prev
            status = str(then.get("verdict", "?"))
            if status != c.status:
                commit = str(then.get("commit") or (fp.get("git") or {}).get("commit") or "")
                when = f"the run of {then.get('timestamp', '?')}" + (f" (commit {commit[:7]})" if commit else "")
                changed = software_changes(c.fingerprint, fp, c.commit(), commit)
                rejudged = c.verdict.get("rejudged") if isinstance(c.verdict.get("rejudged"), dict) else None
                if rejudged and judgement(then)[0] == judgement(c.verdict)[0]:
                    changed = "; ".join(x for x in (changed, f"same measurements, re-judged at "
                                                              f"{str(rejudged.get('commit'))[:7]}") if x)
                c.flags.append(Flag("history", when, c.status, status,
                                    flipped_checks(c.verdict, then, "then", here="now"), changed, here=c.name))
    return cells


def _columns(cells: list[Cell]) -> list[tuple[str, str, str]]:
    """(source kind, hardware, scale): by scale (the default first, smoke-test scales last: headline.scale_key),
    this checkout's runs before the references."""
    cols = {c.column for c in cells}
    return sorted(cols, key=lambda k: (headline.scale_key(k[2]), k[0] != RUN, k[1]))


def _rows(cells: list[Cell]) -> list[str]:
    found = {c.claim for c in cells}
    known = registry.claim_ids()
    return known + sorted(found - set(known))


def _software_text(c: Cell) -> str:
    sw = c.software()
    parts = [f"{k} {sw[k]}" for k in SOFTWARE if sw.get(k)]
    return ", ".join(parts)


def build(results_root: str | Path, history: bool = True, references_root: str | Path | None = None,
          reports_root: str | Path | None = None) -> tuple[list[Cell], list[tuple[str, str, str]], list[str]]:
    """Cells (flagged), columns (source kind, hardware, scale) and rows (claim ids: registered first, then others
    found)."""
    cells = flag_cells(read_cells(results_root, references_root, reports_root), history=history)
    return cells, _columns(cells), _rows(cells)


LEGEND = ("Verdicts: reproduced (every decided check holds), partially (the headline holds, a secondary check "
          "fails), not_reproduced (a decided headline fails), inconclusive (the headline could not be decided: "
          "the control did not learn, the spread is too wide, a CPU stood in for a GPU), not_applicable (tiny "
          "scale). The contract: docs/verdicts.md.")
WIDTH = 200  # no line of matrix.md is longer


def _wrap(text: str, indent: str = "") -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=" " * len(indent),
                         break_long_words=False, break_on_hyphens=False) or [""]


def _letters(n: int) -> list[str]:
    return [chr(ord("A") + i) if i < 26 else f"Z{i - 25}" for i in range(n)]


def code_differences(cells: list[Cell]) -> list[tuple[str, str]]:
    """(scale, claim) where two columns' verdicts differ and their measurement code differs (never flagged)."""
    out = []
    by: dict[tuple[str, str], list[Cell]] = {}
    for c in cells:
        by.setdefault((c.scale, c.claim), []).append(c)
    for key, group in sorted(by.items()):
        if any(a.status != b.status and difference(recorded_keys(a.verdict), recorded_keys(b.verdict)) == "code"
               for i, a in enumerate(group) for b in group[i + 1:]):
            out.append(key)
    return out


def _column_cells(cells: list[Cell], col) -> list[Cell]:
    return [c for c in cells if c.column == col]


def _common(values: list[str]) -> str:
    return max(set(values), key=values.count) if values else ""


def column_info(cells: list[Cell], col) -> dict:
    """One column's machine, source, commit (the most common of its cells) and software, stated once."""
    mine = _column_cells(cells, col)
    kind, hw, scale = col
    sw = _common([_software_text(c) for c in mine])
    commit = _common([c.commit()[:7] for c in mine])
    when = max((str(c.verdict.get("timestamp") or "")[:10] for c in mine), default="")
    cpu = _common([str((c.fingerprint.get("hardware") or {}).get("cpu") or "") for c in mine])
    acc = (mine[0].fingerprint.get("hardware") or {}).get("accelerator") if mine else None
    return {"kind": kind, "hardware": hw, "scale": scale, "commit": commit, "date": when, "software": sw,
            "device": (acc or {}).get("name") if isinstance(acc, dict) else None, "cpu": cpu,
            "source": "reference" if kind != RUN else "this checkout"}


def _flag_list(cells: list[Cell]) -> list[tuple[int, Cell, Flag]]:
    """Every flag once: a machine flag and its mirror (the other column's flag against this one) are one flag."""
    out, seen, n = [], set(), 0
    for c in cells:
        for f in c.flags:
            if f.kind == "machine":
                key = (c.scale, c.claim, frozenset((c.name, f.against)))
                if key in seen:
                    continue
                seen.add(key)
            n += 1
            out.append((n, c, f))
    return out


def _flag_numbers(cells: list[Cell]) -> dict[int, list[int]]:
    """id(cell) -> the numbers of the flags that concern it (both cells of a machine flag)."""
    by_name = {(c.scale, c.claim, c.name): c for c in cells}
    out: dict[int, list[int]] = {}
    for n, c, f in _flag_list(cells):
        out.setdefault(id(c), []).append(n)
        other = by_name.get((c.scale, c.claim, f.against)) if f.kind == "machine" else None
        if other is not None:
            out.setdefault(id(other), []).append(n)
    return out


def _verdict_cell(c: Cell, col_commit: str, flags: list[int], link: str | None) -> str:
    stale = bool(c.origin and c.origin.stale)
    shown = f"~~{c.status}~~" if stale else f"**{c.status}**"
    parts = [f"[{shown}][{link}]" if link else shown]
    if stale:
        parts.append(f"stale ({c.origin.stale_label()})")
    if c.commit()[:7] and c.commit()[:7] != col_commit:
        parts.append(f"@{c.commit()[:7]}")
    parts += [f"[flag {n}](#flag-{n})" for n in flags]
    return md_cell(" ".join(parts))


def _headline_of_row(cells: list[Cell]) -> dict:
    """The row's headline name and paper value, from its freshest cell (this checkout's run first)."""
    best = sorted(cells, key=lambda c: (bool(c.origin and c.origin.stale), c.kind != RUN,
                                        "numbers" not in (headline.headline_check(c.verdict) or {})))
    return headline.cells(best[0].verdict, 64) if best else headline.cells({}, 64)


def _measured(c: Cell) -> tuple[str, str]:
    """(value [interval] unit, its difference from the paper's number) of a cell's headline; ('-', '') without
    numbers. The criterion is stated once, on the claim's first row."""
    h = headline.cells(c.verdict, 64)
    if h["check"] is None or not h["check"].get("numbers"):
        return "-", ""
    return h["value"], h["mark"]


MATRIX_INTRO = ("One table per scale (the default first, the smoke test last), in the columns of every index and "
                "claim page: per claim a first row with its headline in the paper's words, the paper's number and "
                "where the paper states it, and the criterion that decides it ('paper: > 1x' when it is the "
                "paper's, 'suite: > 0.1' when it is a threshold of the suite's own, never the paper's number); then "
                "one row per column (a machine: this checkout's runs, `results/`, or a committed reference, "
                "`references/results/`) with the measured value and the interval that decided it, how it stands "
                "against the paper's number ('2.24x smaller speed-up': a ratio of like quantities "
                "shown as the larger of the two ways with the word of the side that wins, never below 1; '2.4 pp "
                "slower': a difference in the unit's points; '~': the paper's value lies inside the "
                "interval that decided the value, within the noise; '(no interval)': a value no interval decided) "
                "and the verdict, linked to the claim's "
                "page. ~~struck~~ stale: the checkout's measurement code differs from the code that measured it; "
                "@commit: measured at another commit than the rest of its column; flag n: the verdict differs from "
                "another column's (see Flags).")
MATRIX_FOOTER = ("The same table as CSV, one row per machine x scale x claim: `matrix.csv` (docs/results.md). "
                 "Timing and memory of every machine side by side: `compare/<scale>/`. Made by "
                 "`python -m repro.report.matrix` (rule `matrix`, part of `reproduce_all`).")


def _page_link(c: Cell, links: list[str], base: Path) -> str | None:
    """The label of a reference-style link to the cell's claim page, its target appended to ``links`` (the page's
    link list, numbered in order); None when the cell has no page."""
    page = c.page()
    if page is None:
        return None
    link = str(len(links) + 1)
    links.append(f"[{link}]: {os.path.relpath(page, base)}")
    return link


def _claim_lines(claim: str, scols: list, index: dict, letters: dict, info: dict, fnum: dict, links: list[str],
                 base: Path) -> list[str]:
    """One claim's rows of a scale's table (headline.COLUMNS, then the column letter): a first row with its
    headline in the paper's words, the paper's number and where, and the criterion that decides it (under 'vs
    paper': 'suite: > 0.1' or 'paper: > 1x'), then one row per column with a result (measured [interval], its
    difference from the paper, verdict); 'not run' when no column has one."""
    row_cells = [index[(claim, *col)] for col in scols if (claim, *col) in index]
    code = registry.claim(claim)["code"] + " " if claim in registry.claim_ids() else ""
    if not row_cells:  # registered, no results in any column at this scale
        return [f"| {code}{claim} | - | - | | not run | |"]
    h = _headline_of_row(row_cells)
    name = f"{code}{claim}: " + h["name"] if h["check"] is not None else f"{code}{claim}"
    lines = ["| " + " | ".join([md_cell(headline.clip(name, 80)), md_cell(headline.clip(h["paper"], 64)), "",
                                md_cell(headline.clip(h["rule"], 48)), "", ""]) + " |"]
    for col in scols:
        c = index.get((claim, *col))
        if c is None:
            continue
        link = _page_link(c, links, base)
        value, diff = _measured(c)
        lines.append("| " + " | ".join(["", "", md_cell(headline.clip(value, 72)), md_cell(diff),
                                        _verdict_cell(c, info[col]["commit"], fnum.get(id(c), []), link),
                                        letters[col]]) + " |")
    return lines


def _column_lines(scols: list, letters: dict, info: dict) -> list[str]:
    """The table of a scale's columns: machine, source, commit and software, stated once per column."""
    lines = ["", "| column | machine | source | commit | software |", "|---|---|---|---|---|"]
    for col in scols:
        i = info[col]
        machine = f"`{i['hardware']}`" + (f" ({i['device']})" if i["device"] else "")
        lines.append("| " + " | ".join(md_cell(x) for x in (letters[col], machine, i["source"],
                                                             f"{i['commit']} {i['date']}", i["software"])) + " |")
    return lines + [""]


def _scale_lines(scale: str, cols: list, rows: list[str], cells: list[Cell], index: dict, fnum: dict,
                 links: list[str], base: Path) -> list[str]:
    """One scale's section: the headline table (a row per claim and column) and its columns' table."""
    scols = [col for col in cols if col[2] == scale]
    letters = dict(zip(scols, _letters(len(scols))))
    info = {col: column_info(cells, col) for col in scols}
    lines = [f"## Scale `{scale}`", "", "| " + " | ".join(headline.COLUMNS) + " | column |", "|---|---|---:|---|---|---|"]
    for claim in rows:
        lines += _claim_lines(claim, scols, index, letters, info, fnum, links, base)
    return lines + _column_lines(scols, letters, info)


def _difference_lines(cells: list[Cell]) -> list[str]:
    """The notes under the tables: how many cells are stale, and the claims whose verdicts differ by code."""
    lines = []
    stale = [c for c in cells if c.origin and c.origin.stale]
    if stale:
        kinds = {k: sum(k in c.origin.stale_kinds for c in stale) for k in ("code", "config", "software")}
        why = ", ".join(f"{n} by their {k}" for k, n in kinds.items() if n)
        lines += _wrap(f"Stale cells (struck through): {len(stale)}, measured by what the checkout would no longer "
                       f"measure with ({why}: code, config or software differ; rerun them, or publish a new "
                       "reference).") + [""]
    by_code = code_differences(cells)
    if by_code:
        lines += _wrap(f"{len(by_code)} claim{'s' if len(by_code) > 1 else ''} whose verdicts differ between columns "
                       "measured by different code (another experiment, not another machine: not flagged): "
                       + ", ".join(f"{claim} ({scale})" for scale, claim in by_code) + ".") + [""]
    return lines


def _flag_lines(cells: list[Cell]) -> list[str]:
    """The Flags section: each flag once, with its anchor, the checks that flipped and what changed."""
    flags = _flag_list(cells)
    lines = ["## Flags", ""]
    if not flags:
        return lines + _wrap("None: no two columns measured by the same code give a claim different verdicts at a "
                             "scale, and no reference changed verdict since its previous committed run.") + [""]
    for n, c, f in flags:
        lines += [f'<a id="flag-{n}"></a>'] + _wrap(f"{n}. {c.claim}, {c.scale}: {f.headline_text()}")
        lines += _wrap("checks flipped: " + ("; ".join(f.flipped[:3]) + (f"; and {len(f.flipped) - 3} more"
                                                                          if len(f.flipped) > 3 else "")
                                             if f.flipped else "none (the verdict rule changed)"), "   - ")
        if f.changed:
            lines += _wrap(("software differs: " if f.kind == "machine" else "changed: ") + f.changed, "   - ")
    return lines + [""]


def matrix_markdown(results_root: str | Path, reports_root: str | Path, history: bool = True,
                    references_root: str | Path | None = None, out_dir: str | Path | None = None) -> str:
    """The matrix as markdown: per scale one headline table (per claim its headline and the paper's number, then
    one line per machine column: the measured value with its interval, the difference from the paper and the
    verdict), the columns' machines and software stated once, and each flag once with its own anchor. Page links
    are relative to ``out_dir`` (default: ``reports_root``)."""
    cells, cols, rows = build(results_root, history, references_root, reports_root)
    index = {(c.claim, *c.column): c for c in cells}
    base = Path(out_dir if out_dir is not None else reports_root)
    lines = ["# Verdict matrix: every claim on every machine and scale", ""]
    lines += _wrap(MATRIX_INTRO) + [""] + _wrap(LEGEND) + [""]
    if not cells:
        lines += ["_No results yet: run `snakemake reproduce_all --cores all`._", ""]
        return "\n".join(lines)
    fnum = _flag_numbers(cells)
    links: list[str] = []
    for scale in dict.fromkeys(col[2] for col in cols):
        lines += _scale_lines(scale, cols, rows, cells, index, fnum, links, base)
    lines += _difference_lines(cells) + _flag_lines(cells)
    lines += _wrap(MATRIX_FOOTER) + [""]
    return "\n".join(lines + links + [""])


def matrix_records(results_root: str | Path, history: bool = False, references_root: str | Path | None = None,
                   reports_root: str | Path | None = None) -> list[dict]:
    """One record per machine x scale x claim (reports/matrix.csv): verdict, headline value, interval, paper value,
    commit, measurement hash, stale."""
    cells, _, _ = build(results_root, history, references_root, reports_root)
    fnum = _flag_numbers(cells)  # the flags matrix.md shows beside each cell (both cells of a machine flag)
    out = []
    for c in sorted(cells, key=lambda c: (headline.scale_key(c.scale), c.kind, c.hardware, c.claim)):
        keys = recorded_keys(c.verdict)
        out.append({"hardware": c.hardware, "scale": c.scale, "source": "reference" if c.kind != RUN else "run",
                    "claim": c.claim, "verdict": c.status, **headline.record(c.verdict), "commit": c.commit(),
                    "measured_at": c.verdict.get("timestamp"), "measure_key": keys.get("measure"),
                    "stale": bool(c.origin and c.origin.stale), "flags": len(fnum.get(id(c), [])),
                    "software": _software_text(c)})
    return out


def matrix_csv(results_root: str | Path, history: bool = False, references_root: str | Path | None = None,
               reports_root: str | Path | None = None) -> str:
    recs = matrix_records(results_root, history, references_root, reports_root)
    buf = io.StringIO()
    fields = list(recs[0]) if recs else ["hardware", "scale", "source", "claim", "verdict"]
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    w.writerows(recs)
    return buf.getvalue()


def matrix_html(results_root: str | Path, history: bool = True, link=None, references_root: str | Path | None = None,
                reports_root: str | Path | None = None) -> str:
    """The same headline tables as an HTML fragment (per scale a table, its columns and the flag list), for the
    Snakemake report's landing page. ``link(cell)`` gives the href a cell's verdict opens (None: no link); with
    ``link``, claim names open the claim's category of the Snakemake report."""
    cells, cols, rows = build(results_root, history, references_root, reports_root)
    index = {(c.claim, *c.column): c for c in cells}
    esc = html.escape
    if not cells:
        return "<p><em>No results yet: run <code>snakemake reproduce_all --cores all</code>.</em></p>"
    fnum = _flag_numbers(cells)
    out = []
    for scale in dict.fromkeys(col[2] for col in cols):
        scols = [col for col in cols if col[2] == scale]
        letters = dict(zip(scols, _letters(len(scols))))
        info = {col: column_info(cells, col) for col in scols}
        out.append(f'<h3>Scale {esc(scale)}</h3><table class="repro-matrix"><thead><tr><th>claim</th>'
                   '<th>paper</th>')
        out += [f'<th title="{esc(info[col]["hardware"])}">{letters[col]}<br><code>{esc(info[col]["hardware"])}'
                f'</code><br>{esc(info[col]["source"])}</th>' for col in scols]
        out.append("</tr></thead><tbody>")
        for claim in rows:
            row_cells = [index[(claim, *col)] for col in scols if (claim, *col) in index]
            if not row_cells:
                continue
            code = registry.claim(claim)["code"] + " " if claim in registry.claim_ids() else ""
            name = esc(code + claim)
            if link is not None and any(link(c) for c in row_cells):
                name = f"<a href=\"javascript:app.showCategory('{esc(claim)}')\">{name}</a>"
            h = _headline_of_row(row_cells)
            out.append(f'<tr><th>{name}<br><span class="headline">{esc(h["name"])}</span></th>'
                       f'<td class="paper">{esc(h["paper"])}'
                       + (f'<br><small>{esc(h["rule"])}</small>' if h["rule"] else "") + "</td>")
            for col in scols:
                c = index.get((claim, *col))
                if c is None:
                    out.append('<td class="none">-</td>')
                    continue
                value, versus = _measured(c)
                value = "" if value == "-" else value
                flags = "".join(f' <span class="flag">flag {n}</span>' for n in fnum.get(id(c), []))
                verdict = f'<span class="verdict">{esc(c.status)}</span>'
                href = link(c) if link is not None else None
                if href:
                    verdict = f'<a href="{href}">{verdict}</a>'
                stale = " stale" if c.origin and c.origin.stale else ""
                title = f' title="{esc(c.origin.stale)}"' if stale else ""
                out.append(f'<td class="v-{esc(c.status)}{stale}"{title}><span class="measured">{esc(value)}</span> '
                           f'{esc(versus)} {verdict}{flags}</td>')
            out.append("</tr>")
        out.append("</tbody></table><p><small>")
        out.append("; ".join(f'{letters[col]}: <code>{esc(info[col]["hardware"])}</code> {esc(info[col]["source"])}, '
                             f'commit {esc(info[col]["commit"])} {esc(info[col]["date"])}, {esc(info[col]["software"])}'
                             for col in scols))
        out.append("</small></p>")
    flags = _flag_list(cells)
    if flags:
        out.append('<ol class="flags">')
        out += [f"<li value=\"{n}\">{inline_html(f'{c.claim}, {c.scale}: {f.headline_text()}; checks flipped: ' + ('; '.join(f.flipped[:3]) or 'none'))}</li>"
                for n, c, f in flags]
        out.append("</ol>")
    else:
        out.append("<p>No flags: every claim has the same verdict in every column at each scale.</p>")
    return "".join(out)


def rule_inputs(results_dir: str, hardware: str, scale: str, own: list[str],
                references_dir: str | None = None) -> list[str]:
    """Input of the Snakemake rule: this run's own verdicts plus every complete results folder of every machine
    and scale found when the DAG is built (this checkout's other runs and the committed references), except this
    machine's at this scale (those enter through ``own`` so the matrix never reruns a claim the run did not
    select)."""
    here = os.path.normpath(os.path.join(results_dir, hardware, scale))
    found = [c.path.as_posix() for c in read_cells(results_dir, references_dir)
             if os.path.normpath(c.path.parent.parent) != here]
    return sorted(set(own) | set(found))


def write(results_root: str | Path, reports_root: str | Path, out: str | Path, html_out: str | Path | None = None,
          history: bool = True, references_root: str | Path | None = None) -> Path:
    out = Path(out)
    atomic_write_text(out, matrix_markdown(results_root, reports_root, history, references_root, out.parent))
    atomic_write_text(out.with_suffix(".csv"), matrix_csv(results_root, history, references_root, reports_root))
    if html_out:
        atomic_write_text(Path(html_out), matrix_html(results_root, history, references_root=references_root,
                                                      reports_root=reports_root))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m repro.report.matrix", description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", required=True, help="results root of this checkout's runs (holds "
                                                          "<hardware>/<scale>/<claim>/)")
    parser.add_argument("--reports", default=None, help="reports root the claim pages are under (default: "
                                                        "the folder of --out)")
    parser.add_argument("--references", default=None, help="the committed references (holds results/ and "
                                                           "reports/), shown beside this checkout's runs")
    parser.add_argument("--out", required=True, help="the markdown matrix, e.g. reports/matrix.md")
    parser.add_argument("--html", default=None, help="also write the matrix as an HTML fragment here")
    parser.add_argument("--no-history", action="store_true", help="do not compare with earlier runs in git")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    write(args.results, args.reports or Path(args.out).parent, args.out, args.html, not args.no_history,
          args.references)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
