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
        assert re.search(rf"^\| (C\d+ )?{claim}( \||: )", text, re.M), claim


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
        # the headline row of issue 39 (headline.COLUMNS): every committed page is rendered by the current report
        assert header[:5] == list(headline.COLUMNS), (page, header)


def test_matrix_csv_loads_one_row_per_machine_scale_claim():
    frame = pd.read_csv(REPORTS / "matrix.csv")
    expected = {(v.parts[-4], v.parts[-3], v.parts[-2]) for v in RESULTS.glob("*/*/*/verdict.json")
                if not any(p.startswith("_") for p in v.parts[-4:-1])}
    got = list(zip(frame["hardware"], frame["scale"], frame["claim"]))
    assert len(got) == len(set(got)) and set(got) == expected
    for col in ("verdict", "headline", "value", "lo", "hi", "unit", "paper", "commit", "measure_key", "stale"):
        assert col in frame.columns, col


@pytest.mark.parametrize("compare,value,paper,lo,hi,unit,expected", [
    ("ratio", 34.06, 34.0, None, None, "sbh", "1.00176x larger"),
    ("ratio", 34.0, 34.0, None, None, "params", "equal"),
    ("difference", 4.5, 7.0, None, None, "u", "2.5 lower"),
    ("difference", 5.5, 6.9, 1.0, 9.9, "% less time", "~-1.4 pp"),  # the paper's value inside: within the noise
    ("difference", 4.5, 6.9, 3.0, 6.0, "% less time", "2.4 pp slower"),  # less saving is slower
    ("ratio", 2.555, 5.712, 2.5, 2.7, "x speed-up", "2.24x smaller speed-up"),  # never 0.447x slower
    ("ratio", 1.44, 1.0, 1.4, 1.5, "ms", "1.44x slower"),  # time: higher is slower
    ("ratio", 0.697, 1.0, 0.6, 0.8, "tokens/s", "1.43x slower"),  # throughput: lower is slower
    ("ratio", 0.5, 1.0, 0.4, 0.6, "GiB", "2x smaller"),
    ("ratio", 1.05, 1.0, 0.9, 1.1, "s", "~1.05x"),  # the interval that decided it holds the paper's value
    ("ratio", 0.95, 1.0, 0.9, 1.1, "s", "~1.05x"),  # within: the larger way round too, and no direction word
    ("ratio", -0.1888, -0.189, None, None, "u", "0.0002 higher"),  # not both positive: a difference
    (None, 1.0, None, None, None, "u", "")])
def test_headline_comparison(compare, value, paper, lo, hi, unit, expected):
    from repro.verdicts import numbers

    n = numbers(value, unit, paper=paper, compare=compare, lo=lo, hi=hi)
    assert headline.compare_text(n) == expected
    with pytest.raises(ValueError):
        numbers(1.0, "u", compare="ratio")  # a comparison needs the paper's number


def test_versus_compares_point_values_without_a_noise_rule_of_its_own():
    """The compare pages' and the claim pages' rule for two point values: the larger way round with the winner's
    word, a difference in points for percentages; never '~', which only a deciding interval gives."""
    assert headline.versus(1.44, 1.0, False, unit="s") == "1.44x slower"
    assert headline.versus(0.697, 1.0, False, unit="tokens/s") == "1.43x slower"
    assert headline.versus(1.73, 5.717, False, unit="s", than="C") == "3.3x faster than C"
    assert headline.versus(1.05, 1.0, False, unit="s") == "1.05x slower"
    assert headline.versus(7.78, 1.9, True, unit="%") == "5.88 pp higher"
    assert headline.versus(1.0, 0.0, False, unit="s") == "" and headline.versus(None, 1.0, False, unit="s") == ""


def test_a_suite_criterion_is_never_shown_as_the_papers_number():
    from repro.verdicts import numbers

    n = numbers(0.23, "d ln|grad| / layer", lo=0.2, hi=0.26, paper_text="grows with the layer", criterion="suite",
                rule="> 0.1", source="fig3_per_layer_grad_trend")
    v = {"claim": "prepost_gradients", "verdict": "reproduced", "reason": "ok",
         "checks": [{"name": "c", "passed": True, "measured": "m", "expected": "e", "headline": True, "numbers": n}]}
    row = headline.row(v, "prepost_gradients", "**reproduced**")
    assert list(row) == list(headline.COLUMNS)
    assert row["vs paper"] == "suite: > 0.1" and "0.1" not in row["paper"]
    assert row["paper"].startswith("grows with the layer (Xiong et al. 2020")  # what and where, from the registry
    assert row["measured [interval]"] == "0.23 [0.2, 0.26] d ln|grad| / layer"
    with pytest.raises(ValueError):
        numbers(1.0, "u", criterion="suite")  # a suite criterion states its rule
    with pytest.raises(ValueError):
        numbers(1.0, "u", criterion="the paper's")
    # a point value decided on the suite's rule: its comparison is the rule, its measured cell says it has no interval
    point = numbers(29.0, "BLEU", criterion="suite", rule=">= 20")
    assert headline.compare_text(point) == "suite: >= 20"
    assert headline.measured_text(point) == "29 BLEU (no interval)"


def test_a_decided_headline_carries_the_interval_that_decided_it():
    from repro.verdicts import check, numbers

    with pytest.raises(ValueError, match="interval"):
        check("h", False, "m", "e", headline=True, interval="99% interval of each level's drop",
              numbers=numbers(0.0, "% of heads prunable", paper=20.0, compare="difference"))
    # undecided, or decided on a point value (no interval text): allowed
    check("h", None, "m", "e", headline=True, interval="t", numbers=numbers(1.0, "u"))
    check("h", True, "m", "e", headline=True, numbers=numbers(1.0, "u"))
    # a verdict judged before the rule (no lo/hi) is flagged where it is shown, never passed off as a point value
    old = {"claim": "head_pruning", "verdict": "not_reproduced", "reason": "r", "checks": [
        {"name": "h", "passed": False, "measured": "m", "expected": "e", "headline": True, "interval": "99% drop",
         "numbers": {"value": 0.0, "unit": "% of heads prunable", "lo": None, "hi": None, "paper": 20.0,
                     "paper_text": None, "compare": "difference"}}]}
    cells = headline.cells(old)
    assert "deciding interval not recorded" in cells["value"] and cells["compare"] == "20 pp lower"


def test_scales_list_the_default_first_and_the_smoke_test_last():
    assert sorted(["tiny", "paper", "default", "other"], key=headline.scale_key) == ["default", "paper", "other",
                                                                                    "tiny"]


def test_index_pages_rendered_from_the_references_are_short_and_in_the_headline_order(tmp_path):
    """Every reference's index (old verdict.json files included): the headline columns first and in the matrix's
    order, no 'nan', why cells of one short clause, no line over 400 characters."""
    from repro.report.publish import REFERENCE

    for folder in sorted(p for p in RESULTS.glob("*/*") if p.is_dir()):
        hw, scale = folder.parent.name, folder.name
        out = tmp_path / hw / scale / "index.md"
        pages.index_page(RESULTS, tmp_path, hw, scale, out, kind=REFERENCE)
        text = out.read_text()
        assert not re.search(r"\bnan\b", text), (hw, scale)
        assert max(len(line) for line in text.splitlines()) <= 400, (hw, scale)
        table = _tables(text)[0]
        header = _cells(table[0])
        assert header == ["id", *headline.COLUMNS, "why", "measured by"], header
        assert all(len(_cells(r)[header.index("why")]) <= pages.WHY for r in table[2:]), (hw, scale)


def test_every_inconclusive_reference_page_says_what_would_decide_it():
    """Issue 37: each inconclusive verdict's page has a "What would decide this" table: the sample that would decide
    an interval check, or, where no sample size does (a CPU standing in for a GPU), the reason that says what would."""
    import json

    seen = 0
    for v_path in sorted(RESULTS.glob("*/default/*/verdict.json")):
        v = json.loads(v_path.read_text())
        if v.get("verdict") != "inconclusive":
            continue
        blocks = pages.power_blocks(v["claim"], v, v_path.parents[1])
        assert blocks and blocks[0] == ("h2", "What would decide this"), v_path
        table = blocks[-1][1]
        assert len(table) >= 1 and (table["would decide at"] != "-").all(), v_path
        seen += 1
    assert seen, "no inconclusive reference verdict to check"
