"""The verdict matrix: every claim x hardware x scale of this checkout's runs (``results/``) and of the committed
references (``references/results/``), the first page of the reports.

Reads every ``<root>/<hardware>/<scale>/<claim>/verdict.json`` with its ``fingerprint.json`` of both sources (one
function, :func:`read_cells`, is the only reader) and writes ``reports/matrix.md`` (and the same table as HTML for
the Snakemake report's landing page, :func:`matrix_html`). A column is one source, hardware and scale: a reference
is labelled ``<hardware> (reference)`` and never stands in for this checkout's run. Each cell shows the verdict,
where it came from (this run or a reference, the commit that measured it and when; **stale** when the checkout's
measurement code differs from the code that measured it: repro.report.origin), and the software behind it.

A cell is **flagged** when its verdict differs

- from another column's verdict for the same claim at the same scale (``kind="machine"``), labelled by what
  separates the two measurements (repro.report.origin.difference): a *code* difference when their measurement
  code keys differ (or either predates the keys), else *config*, *software*, and a *machine* difference only when
  code, config and software are the same; or
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
import glob
import html
import json
import logging
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from repro import registry
from repro.bench.records import atomic_write_text
from repro.report.compare import SOFTWARE_FIELDS, software
from repro.report.origin import RUN, Origin, Source, difference, origin_of, recorded_keys, sources
from repro.report.pages import inline_html

log = logging.getLogger("repro.matrix")

SCALES = ("tiny", "default", "paper")
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

    def text(self) -> str:
        what = (f"**{self.verdict}** here, **{self.other_verdict}** on `{self.against}`" if self.kind == "machine"
                else f"**{self.verdict}** now, **{self.other_verdict}** in {self.against}")
        if self.difference:
            what += f" (a {self.difference} difference" + (": the measurement code differs" if
                                                            self.difference == "code" else "") + ")"
        parts = [what, "checks flipped: " + ("; ".join(self.flipped) if self.flipped else "none (the verdict rule "
                                                                                              "changed)")]
        if self.changed:
            parts.append(("software differs: " if self.kind == "machine" else "changed: ") + self.changed)
        return "; ".join(parts)


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
                    c.flags.append(Flag("machine", o.name, c.status, o.status,
                                        flipped_checks(c.verdict, o.verdict, f"on {o.name}"),
                                        software_changes(c.fingerprint, o.fingerprint, c.commit(), o.commit(), o.name),
                                        difference(recorded_keys(c.verdict), recorded_keys(o.verdict))))
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
                                    flipped_checks(c.verdict, then, "then", here="now"), changed))
    return cells


def _columns(cells: list[Cell]) -> list[tuple[str, str, str]]:
    """(source kind, hardware, scale): by scale, this checkout's runs before the references."""
    cols = {c.column for c in cells}
    return sorted(cols, key=lambda k: (SCALES.index(k[2]) if k[2] in SCALES else 9, k[2], k[0] != RUN, k[1]))


def _column_label(col: tuple[str, str, str]) -> str:
    kind, hw, scale = col
    return f"`{hw}` {scale}" + (" (reference)" if kind != RUN else " (this checkout)")


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


def _flag_list(cells: list[Cell]) -> list[tuple[int, Cell, Flag]]:
    out, n = [], 0
    for c in cells:
        for f in c.flags:
            n += 1
            out.append((n, c, f))
    return out


LEGEND = ("Verdicts are computed by each claim's rule from its measured numbers (`repro/claims/<id>.py`, "
          "`judge`): reproduced (every decided check holds), partially (the headline holds, a secondary check "
          "fails), not_reproduced (a decided headline check fails), inconclusive (a headline could not be decided: "
          "the control did not learn, the spread is too wide, or a CPU stood in for a GPU measurement), "
          "not_applicable (the tiny smoke scale claims nothing).")


def _cell_note(c: Cell) -> str:
    """Where a cell came from and the software behind it, short."""
    sw = _software_text(c)
    return f"{c.origin.short() if c.origin else 'commit ' + c.commit_text()}" + (f"; {sw}" if sw else "")


def matrix_markdown(results_root: str | Path, reports_root: str | Path, history: bool = True,
                    references_root: str | Path | None = None, out_dir: str | Path | None = None) -> str:
    """The matrix as markdown; page links are relative to ``out_dir`` (default: ``reports_root``)."""
    cells, cols, rows = build(results_root, history, references_root, reports_root)
    index = {(c.claim, *c.column): c for c in cells}
    numbers = {id(f): n for n, _, f in _flag_list(cells)}
    base = Path(out_dir if out_dir is not None else reports_root)
    lines = ["# Verdict matrix: every claim on every machine and scale", "",
             "The first page of the reports. One column per source, machine (hardware id) and scale: this "
             "checkout's runs (`results/`) and the committed reference runs (`references/results/`, labelled "
             "*reference*), one row per claim. Each cell links to the claim's page and says where it came from: "
             "`run` (this checkout's) or `ref` (a reference), the commit that measured it and when, and **stale** "
             "when the checkout's measurement code differs from the code that measured it (the verdict is then "
             "not what this checkout would measure; repro/provenance.py). **FLAG [n]** marks a verdict that "
             "differs from another column's at the same scale (labelled a code, config, software or machine "
             "difference) or from the previous committed run of the same reference; the flags below name the "
             "checks that flipped.", "", LEGEND, ""]
    if not cells:
        lines += ["_No results yet: run `snakemake reproduce_all --cores all`._", ""]
        return "\n".join(lines)
    header = ["claim"] + [_column_label(col) for col in cols]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for claim in rows:
        code = registry.claim(claim)["code"] + " " if claim in registry.claim_ids() else ""
        row = [f"{code}{claim}"]
        for col in cols:
            c = index.get((claim, *col))
            if c is None:
                row.append("-")
                continue
            page = c.page()
            shown = f"~~{c.status}~~" if c.origin and c.origin.stale else f"**{c.status}**"
            verdict = f"[{shown}]({os.path.relpath(page, base)})" if page is not None else shown
            flags = " ".join(f"**FLAG [{numbers[id(f)]}](#flags)**" for f in c.flags)
            row.append(" ".join(x for x in (verdict, flags) if x) + f"<br><sub>{_cell_note(c)}</sub>")
        lines.append("| " + " | ".join(row) + " |")
    stale = [c for c in cells if c.origin and c.origin.stale]
    if stale:
        lines += ["", f"Stale cells (struck through): {len(stale)}. " + "; ".join(
            f"{c.claim} on `{c.name}` {c.scale}: {c.origin.stale}" for c in stale[:12])
            + ("; ..." if len(stale) > 12 else "")]
    flags = _flag_list(cells)
    lines += ["", "## Flags", ""]
    if flags:
        lines += [f"{n}. {c.claim} on `{c.name}` {c.scale}: {f.text()}" for n, c, f in flags]
    else:
        lines += ["None: every claim has the same verdict in every column at each scale, and no reference changed "
                  "verdict since its previous committed run."]
    lines += ["", "Timing and memory numbers of every machine side by side: `reports/compare/<scale>/`. "
              "Made by `python -m repro.report.matrix` (rule `matrix`, part of `reproduce_all`).", ""]
    return "\n".join(lines)


def matrix_html(results_root: str | Path, history: bool = True, link=None, references_root: str | Path | None = None,
                reports_root: str | Path | None = None) -> str:
    """The same matrix as an HTML fragment (a table and the flag list), for the Snakemake report's landing page.
    ``link(cell)`` gives the href a cell's verdict opens (None: no link); with ``link``, claim names open the
    claim's category of the Snakemake report."""
    cells, cols, rows = build(results_root, history, references_root, reports_root)
    index = {(c.claim, *c.column): c for c in cells}
    numbers = {id(f): n for n, _, f in _flag_list(cells)}
    esc = html.escape
    if not cells:
        return "<p><em>No results yet: run <code>snakemake reproduce_all --cores all</code>.</em></p>"
    out = ['<table class="repro-matrix"><thead><tr><th>claim</th>']
    out += [f"<th><code>{esc(hw)}</code><br>{esc(scale)}{'<br>reference' if kind != RUN else '<br>this checkout'}</th>"
            for kind, hw, scale in cols]
    out.append("</tr></thead><tbody>")
    for claim in rows:
        code = registry.claim(claim)["code"] + " " if claim in registry.claim_ids() else ""
        name = esc(code + claim)
        if link is not None and any(link(c) for c in cells if c.claim == claim):
            name = f"<a href=\"javascript:app.showCategory('{esc(claim)}')\">{name}</a>"
        out.append(f"<tr><th>{name}</th>")
        for col in cols:
            c = index.get((claim, *col))
            if c is None:
                out.append('<td class="none">-</td>')
                continue
            flags = "".join(f' <span class="flag">FLAG [{numbers[id(f)]}]</span>' for f in c.flags)
            verdict = f'<span class="verdict">{esc(c.status)}</span>'
            href = link(c) if link is not None else None
            if href:
                verdict = f'<a href="{href}">{verdict}</a>'
            stale = " stale" if c.origin and c.origin.stale else ""
            title = f' title="{esc(c.origin.stale)}"' if stale else ""
            note = esc(_cell_note(c).replace("**", ""))
            out.append(f'<td class="v-{esc(c.status)}{stale}"{title}>{verdict}{flags}<br><small>{note}</small></td>')
        out.append("</tr>")
    out.append("</tbody></table>")
    flags = _flag_list(cells)
    if flags:
        out.append('<ol class="flags">')
        out += [f"<li value=\"{n}\">{inline_html(f'{c.claim} on `{c.name}` {c.scale}: {f.text()}')}</li>"
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
