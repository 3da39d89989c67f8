"""The committed reports read at a glance and cannot break: every markdown table row has its header's cell count
(pipes in cells escaped), reports/matrix.md lines <= 200 characters, compare pages <= 60 table rows (every row in
the CSV beside them), each claim page's headline table (measured beside the paper) within its first 15 lines, and
reports/matrix.csv loads in pandas with one row per machine x scale x claim."""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from repro.report import headline, matrix, pages

ROOT = Path(__file__).resolve().parents[1]
REPORTS = ROOT / "references" / "reports"
RESULTS = ROOT / "references" / "results"


def _cells(line: str) -> list[str]:
    """The cells of one markdown table row (a pipe escaped as \\| stays inside its cell)."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def _tables(text: str) -> list[list[str]]:
    out, cur = [], []
    for line in text.splitlines():
        if line.startswith("|"):
            cur.append(line)
        elif cur:
            out.append(cur)
            cur = []
    return out + ([cur] if cur else [])


def _pages() -> list[Path]:
    return sorted(REPORTS.rglob("*.md"))


def test_every_committed_table_row_has_its_header_cell_count():
    assert _pages(), "no committed reports"
    bad = []
    for page in _pages():
        for table in _tables(page.read_text()):
            n = len(_cells(table[0]))
            bad += [(page.relative_to(REPORTS).as_posix(), i) for i, row in enumerate(table) if len(_cells(row)) != n]
    assert not bad, bad[:10]


def test_a_pipe_in_a_cell_does_not_break_the_row():
    frame = pd.DataFrame([{"check": "E||x||^2 grows", "measured": "|pre| < 0.5 x |post|", "holds": "yes"}])
    rows = pages._table(frame).splitlines()
    assert [len(_cells(r)) for r in rows] == [3, 3, 3]
    assert "E\\|\\|x\\|\\|^2" in rows[2] and pages.inline_html("E\\|\\|x") == "E||x"


def test_the_matrix_has_short_lines_and_a_headline_line_per_claim():
    text = (REPORTS / "matrix.md").read_text()
    assert max(len(line) for line in text.splitlines()) <= matrix.WIDTH
    claims = {c.claim for c in matrix.read_cells(None, ROOT / "references")}
    for claim in claims:
        assert re.search(rf"^\| (C\d+ )?{claim} \|", text, re.M), claim


def test_compare_pages_fit_a_screen_and_keep_every_row_in_csv():
    found = sorted((REPORTS / "compare").glob("*/*.md"))
    assert found
    for page in found:
        if page.name == "index.md":
            continue
        rows = sum(len(t) - 2 for t in _tables(page.read_text()))
        assert rows <= 60, (page, rows)
        assert page.with_suffix(".csv").exists(), page


def test_each_claim_page_shows_its_headline_beside_the_paper_first():
    for verdict in sorted(RESULTS.glob("*/*/*/verdict.json")):
        hw, scale, claim = verdict.parts[-4:-1]
        if claim.startswith("_"):
            continue
        page = REPORTS / hw / scale / f"{claim}.md"
        assert page.exists(), page
        head = page.read_text().splitlines()[:15]
        tables = _tables("\n".join(head))
        assert tables, (page, "no table in the first 15 lines")
        header = _cells(tables[0][0])
        assert {"headline", "measured", "paper", "verdict"} <= set(header), (page, header)


def test_matrix_csv_loads_one_row_per_machine_scale_claim():
    frame = pd.read_csv(REPORTS / "matrix.csv")
    expected = {(v.parts[-4], v.parts[-3], v.parts[-2]) for v in RESULTS.glob("*/*/*/verdict.json")
                if not any(p.startswith("_") for p in v.parts[-4:-1])}
    got = list(zip(frame["hardware"], frame["scale"], frame["claim"]))
    assert len(got) == len(set(got)) and set(got) == expected
    for col in ("verdict", "headline", "value", "lo", "hi", "unit", "paper", "commit", "measure_key", "stale"):
        assert col in frame.columns, col


@pytest.mark.parametrize("compare,value,paper,lo,hi,expected", [
    ("ratio", 34.06, 34.0, None, None, "x1 (no spread)"), ("ratio", 34.0, 34.0, None, None, "x1"),
    ("difference", 4.5, 7.0, None, None, "-2.5 (no spread)"),
    ("difference", 5.5, 6.9, 1.0, 9.9, "~-1.4"),  # the paper's value inside the interval: within the noise
    ("difference", 4.5, 6.9, 3.0, 6.0, "-2.4"),  # beyond it
    (None, 1.0, None, None, None, "")])
def test_headline_comparison(compare, value, paper, lo, hi, expected):
    from repro.verdicts import numbers

    n = numbers(value, "u", paper=paper, compare=compare, lo=lo, hi=hi)
    assert headline.compare_text(n) == expected
    with pytest.raises(ValueError):
        numbers(1.0, "u", compare="ratio")  # a comparison needs the paper's number
