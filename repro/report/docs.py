"""The result facts of README.md and docs/, generated instead of typed: the claims list (docs/claims.md, from the
registry, repro/registry/published.yaml) and the marked blocks of README.md (the committed references: machine,
scale, claims, stale cells, commits, run time) and docs/running.md (where the newest default reference run's time
went), read from references/reports/matrix.csv and each reference's run.json and benchmark files.

``python -m repro.report docs`` rewrites them; ``publish`` does after writing a reference; tests/test_docs.py fails
when a committed file differs from what these functions make of the committed references, so no number in them goes
stale by hand.
"""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from repro import registry
from repro.io import atomic_write_text
from repro.report.runtime import read_benchmarks, read_run_record

ROOT = Path(__file__).resolve().parents[2]
CLAIMS_DOC = "docs/claims.md"
BEGIN = "<!-- generated: {name} (python -m repro.report docs; do not edit by hand) -->"
END = "<!-- end generated: {name} -->"


def _cell(x) -> str:
    """A markdown table cell: pipes escaped, lists joined, no line breaks."""
    text = ", ".join(map(str, x)) if isinstance(x, list) else "" if x is None else str(x)
    return text.replace("|", "\\|").replace("\n", " ")


def claims_md() -> str:
    """docs/claims.md: every registered claim with its statement, sources and published numbers (the registry's)."""
    lines = ["# The claims", "",
             "Generated from the registry (`repro/registry/published.yaml`) by `python -m repro.report docs`; "
             "tests/test_docs.py fails when it is out of date. Each claim's page shows its verdict on a machine; the "
             "matrix ([references/reports/matrix.md](../references/reports/matrix.md)) every machine side by side.", "",
             "| id | claim | title | sources |", "|---|---|---|---|"]
    for cid in registry.claim_ids():
        c = registry.claim(cid)
        names = "; ".join(registry.citation(s).split(",")[0] for s in c.get("sources") or [])
        lines.append(f"| {c['code']} | [{cid}](#{cid}) | {_cell(c['title'])} | {_cell(names)} |")
    for cid in registry.claim_ids():
        c = registry.claim(cid)
        lines += ["", f"## {cid}", "", f"**{c['code']}: {c['title']}**", "", f"> {c['statement'].strip()}", "",
                  "Sources: " + ("; ".join(registry.citation(s) for s in c.get("sources") or []) or "none"), ""]
        values = c.get("values") or []
        if values:
            lines += ["| published key | value | unit | where |", "|---|---|---|---|"]
            lines += [f"| `{v['key']}` | {_cell(v.get('value'))} | {_cell(v.get('unit'))} | "
                      f"{_cell(registry.citation(v['source'], v.get('where')))} |" for v in values]
    return "\n".join(lines) + "\n"


def references_md(references_root: str | Path) -> str:
    """The README's block on the committed references: one row per machine and scale with its claims, how many of
    them the checkout's code marks stale, the commits that measured them and the run's wall time (run.json)."""
    root = Path(references_root)
    matrix = root / "reports" / "matrix.csv"
    if not matrix.is_file():
        return "No committed references.\n"
    frame = pd.read_csv(matrix)
    frame = frame[frame["source"] == "reference"]
    rows = ["| hardware | scale | claims | stale at this commit | measured by | run wall time (run.json) |",
            "|---|---|---:|---:|---|---|"]
    for (hw, scale), g in frame.groupby(["hardware", "scale"], sort=True):
        commits = ", ".join(sorted({str(c)[:7] for c in g["commit"].dropna()}))
        rec = read_run_record(root / "results", hw, scale)
        wall = (f"{rec['wall_minutes']:.1f} min, {rec['jobs']} jobs, {rec['core_minutes']:.1f} core-minutes"
                if rec else "not recorded")
        rows.append(f"| `{hw}` | {scale} | {len(g)} | {int(g['stale'].astype(bool).sum())} | {commits} | {wall} |")
    return ("The committed references (`references/`), as the verdict matrix "
            "([references/reports/matrix.md](references/reports/matrix.md)) reads them at this commit: a stale cell "
            "was measured by code the checkout no longer runs (struck through there, naming why) and is shown "
            "re-judged by this commit's judges.\n\n" + "\n".join(rows) + "\n")


def run_time_md(references_root: str | Path, hardware: str = "cpu-intel-xeon-2c", scale: str = "default") -> str:
    """docs/running.md's block: the newest default reference run of ``hardware``: its wall time, core-minutes and
    jobs (run.json), the slowest jobs and how the split claims' parts were spread (benchmark files)."""
    root = Path(references_root) / "results"
    rec, frame = read_run_record(root, hardware, scale), read_benchmarks(root, hardware, scale)
    if not rec or frame.empty:
        return f"No run.json and benchmark files for `{hardware}` at `{scale}` in the references.\n"
    slow = frame.sort_values("wall_s", ascending=False).head(5)
    parts = frame[frame["job"].str.contains(r"\.part\d+-of-\d+$")]
    split = {}
    for job in parts["job"]:
        claim, n = re.match(r"(\w+)\.part\d+-of-(\d+)$", job).groups()
        split[claim] = int(n)
    busy = rec["core_minutes"] / (rec["wall_minutes"] * (rec.get("cores") or 1)) if rec["wall_minutes"] else 0
    return (f"The `{hardware}` reference at `{scale}` (commit {str((rec.get('git') or {}).get('commit'))[:7]}, "
            f"started {rec['started']}): {rec['wall_minutes']:.1f} min for the command, {rec['jobs']} jobs, "
            f"{rec['core_minutes']:.1f} core-minutes on {rec.get('cores') or '?'} cores (busy {100 * busy:.0f}% of "
            "the time). Slowest jobs: " + ", ".join(f"{r.job} {r.wall_s / 60:.1f} min" for r in slow.itertuples())
            + ". Claims split into part jobs: " + (", ".join(f"{c} {n} parts" for c, n in sorted(split.items()))
                                                    or "none") + ".\n")


def _replace_block(text: str, name: str, body: str) -> str:
    """``text`` with the generated block ``name`` (between its BEGIN and END markers) holding ``body``."""
    begin, end = BEGIN.format(name=name), END.format(name=name)
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        raise ValueError(f"no generated block {name!r} (markers {begin!r} ... {end!r})")
    return pattern.sub(lambda _: f"{begin}\n{body}{end}", text)


def generated(root: str | Path = ROOT, references_root: str | Path | None = None) -> dict[str, str]:
    """{path relative to ``root``: its full text with every generated part as the committed references make it}."""
    root = Path(root)
    refs = Path(references_root) if references_root is not None else root / "references"
    readme = _replace_block((root / "README.md").read_text(), "references", references_md(refs))
    running = _replace_block((root / "docs" / "running.md").read_text(), "run time", run_time_md(refs))
    return {CLAIMS_DOC: claims_md(), "README.md": readme, "docs/running.md": running}


def write_docs(root: str | Path = ROOT, references_root: str | Path | None = None) -> list[str]:
    """Rewrite the generated files and blocks that differ; returns the paths rewritten."""
    changed = []
    for rel, text in generated(root, references_root).items():
        path = Path(root) / rel
        if not path.is_file() or path.read_text() != text:
            atomic_write_text(path, text)
            changed.append(rel)
    return changed
