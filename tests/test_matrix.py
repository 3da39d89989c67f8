"""The verdict matrix (repro.report.matrix) and the claim pages' rendering of the verdict contract (repro.report.pages).

- two machines with different verdicts for one claim: both cells flagged, naming the checks that flipped;
- an earlier committed run with another verdict (a git repository in the temp folder): the history flag;
- a page renders meaning, gates, setup, headline/interval/undecided_because and the inconclusive verdict;
- the index cuts long reasons at a clause boundary only;
- the workflow: tiny claims under two hardware ids, one verdict.json edited to differ, and the matrix rule flags it.
"""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from repro.io import metric, write_results
from repro.verdicts import verdict
from repro.judging import judge_stored
from repro.report import headline, matrix, pages
from test_workflow import planned_jobs

ROOT = Path(__file__).resolve().parents[1]


def _fp(hw: str, torch_version: str = "2.13.0+cpu", commit: str = "0123456789abcdef", when: str = "2026-11-29T10:00:00+00:00") -> dict:
    return {"hardware_id": hw, "hardware": {"cpu": "Test CPU", "cores": 2, "memory_gib": 24.0, "accelerator": None},
            "software": {"python": "3.11.7", "torch": torch_version, "triton": "3.7.1"},
            "git": {"commit": commit, "dirty": False}, "timestamp": when}


def _checks(first_holds: bool) -> list[dict]:
    return [{"name": "headline holds", "passed": first_holds, "measured": "1.0", "expected": "1", "headline": True},
            {"name": "secondary holds", "passed": True, "measured": "2.0", "expected": "2", "headline": False}]


def _keys(code="c0de", software=None):
    return {"code": code, "config": "c0nf", "software": software or "s0ft", "measure": f"{code}-m"}


def _write(root, hw, status, first_holds, fp, claim="rank_collapse", scale="default", keys=None):
    write_results(root / hw / scale / claim, claim=claim, scale=scale,
                  metrics=[metric(claim, "x", 1.0, "ratio", kind="statistic")],
                  verdict=verdict(claim, status, "test reason", checks=_checks(first_holds)), config={}, fingerprint=fp,
                  keys=keys if keys is not None else _keys(software=fp["software"]["torch"]))


def test_machine_flag_names_the_flipped_checks(tmp_path):
    root = tmp_path / "results"
    _write(root, "cpu-a", "reproduced", True, _fp("cpu-a"))
    _write(root, "gpu-b", "not_reproduced", False, _fp("gpu-b", torch_version="2.5.1", commit="fedcba9876543210"))
    _write(root, "gpu-b", "partially", True, _fp("gpu-b"), claim="block_numerics")  # alone at its scale: no flag
    cells = {(c.hardware, c.claim): c for c in matrix.flag_cells(matrix.read_cells(root), history=False)}
    a, b = cells["cpu-a", "rank_collapse"], cells["gpu-b", "rank_collapse"]
    assert [f.kind for f in a.flags] == ["machine"] and a.flags[0].against == "gpu-b"
    assert a.flags[0].flipped == ["headline holds: holds here, fails on gpu-b"]
    assert "torch 2.13.0+cpu here, 2.5.1 on gpu-b" in a.flags[0].changed
    assert "commit 0123456 here, fedcba9 on gpu-b" in a.flags[0].changed
    assert b.flags[0].flipped == ["headline holds: fails here, holds on cpu-a"]
    assert not cells["gpu-b", "block_numerics"].flags
    assert a.flags[0].difference == "software"  # same measurement code, another torch
    md = matrix.matrix_markdown(root, tmp_path / "reports", history=False)
    assert "## Scale `default`" in md and "| A | `cpu-a` | this checkout |" in md and "| B | `gpu-b` |" in md
    # one flag for the pair (not one per side), anchored, linked from both cells
    assert md.count('<a id="flag-1"></a>') == 1 and "flag-2" not in md and md.count("[flag 1](#flag-1)") == 2
    assert "**reproduced** here (`cpu-a`), **not_reproduced** on `gpu-b`" in md and "torch 2.13.0+cpu" in md
    assert max(len(line) for line in md.splitlines()) <= matrix.WIDTH
    assert "quantization" in md  # every registered claim has a row, with or without results
    html = matrix.matrix_html(root, history=False)
    assert html.count('class="flag"') == 2 and "headline holds: holds here, fails on gpu-b" in html


def test_verdicts_of_different_code_are_counted_not_flagged(tmp_path):
    """Two cells measured by different code are two experiments: no machine flag, a count under the matrix."""
    root = tmp_path / "results"
    _write(root, "cpu-a", "reproduced", True, _fp("cpu-a"), keys=_keys("old"))
    _write(root, "gpu-b", "not_reproduced", False, _fp("gpu-b"), keys=_keys("new"))
    assert not any(c.flags for c in matrix.flag_cells(matrix.read_cells(root), history=False))
    md = matrix.matrix_markdown(root, tmp_path, history=False)
    assert "## Flags\n\nNone" in md and "1 claim whose verdicts differ between columns measured by different code" in md


def test_same_verdicts_are_not_flagged(tmp_path):
    root = tmp_path / "results"
    _write(root, "cpu-a", "reproduced", True, _fp("cpu-a"))
    _write(root, "gpu-b", "reproduced", True, _fp("gpu-b"))
    assert not any(c.flags for c in matrix.flag_cells(matrix.read_cells(root), history=False))
    assert "## Flags\n\nNone" in matrix.matrix_markdown(root, tmp_path, history=False)


def _git(cwd, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                   capture_output=True)


def test_history_flag_from_git(tmp_path):
    """The previous committed run of the same cell had another verdict (and another torch): flagged."""
    root = tmp_path / "results"
    _git(tmp_path, "init", "-q")
    _write(root, "cpu-a", "reproduced", True, _fp("cpu-a", torch_version="2.12.0", commit="1111111aaaa"))
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "first run")
    _write(root, "cpu-a", "not_reproduced", False,
           _fp("cpu-a", commit="2222222bbbb", when="2026-11-30T10:00:00+00:00"))
    (cell,) = matrix.flag_cells(matrix.read_cells(root))
    (flag,) = cell.flags
    assert flag.kind == "history" and flag.other_verdict == "reproduced" and "commit 1111111" in flag.against
    assert flag.flipped == ["headline holds: fails now, holds then"]
    assert "torch 2.12.0 -> 2.13.0+cpu" in flag.changed and "commit 1111111 -> 2222222" in flag.changed
    _git(tmp_path, "commit", "-qam", "second run")  # committed: still compared with the run before it
    (cell,) = matrix.flag_cells(matrix.read_cells(root))
    assert [f.kind for f in cell.flags] == ["history"]
    assert matrix.flag_cells(matrix.read_cells(root), history=False)[0].flags == []
    # re-judged (python -m repro.claims.<id> --rejudge): same measurements, another rule, another verdict
    vpath = root / "cpu-a" / "default" / "rank_collapse" / "verdict.json"
    v = json.loads(vpath.read_text())
    v["checks"][0]["passed"] = True
    v.update(verdict="partially", rejudged={"commit": "3333333cccc", "timestamp": "2026-12-01T00:00:00+00:00",
                                            "previous_verdict": "not_reproduced"})
    vpath.write_text(json.dumps(v))
    (cell,) = matrix.flag_cells(matrix.read_cells(root))
    (flag,) = cell.flags
    assert flag.other_verdict == "not_reproduced" and "commit 2222222" in flag.against
    assert flag.flipped == ["headline holds: holds now, fails then"] and "re-judged at 3333333" in flag.changed
    assert cell.commit_text() == "2222222, re-judged at 3333333"


def test_page_renders_the_verdict_contract(tmp_path):
    claim = "rank_collapse"
    res = tmp_path / "results" / "hw" / "default" / claim
    checks = [{"name": "collapse is doubly exponential", "passed": None, "measured": "slope 1.9", "expected": "2",
               "headline": True, "interval": "[1.2, 2.6] (95% CI)", "undecided_because": "spread too wide"},
              {"name": "MLP slows it", "passed": False, "measured": "2.5", "expected": "> 2.9", "headline": False,
               "interval": None, "undecided_because": None}]
    # written as a plain dict: the verdict contract's newest keys and values, whatever records.verdict accepts today
    v = dict(claim=claim, verdict="inconclusive", reason="the headline could not be decided", checks=checks,
                meaning="Cannot say whether attention collapses at this scale.",
                gates=[{"name": "control model learned", "passed": True, "measured": "BLEU 20", "required": "> 5"}],
                setup=[{"aspect": "depth", "paper": "48 layers", "this_run": "12 layers"}],
                load={"loadavg_before": 0.5, "loadavg_after": 1.25},
                rejudged={"commit": "abcdef123456", "timestamp": "2026-12-01T00:00:00+00:00",
                          "previous_verdict": "partially"})
    write_results(res, claim=claim, scale="default", metrics=[metric(claim, "x", 1.0, "ratio", kind="statistic")],
                  verdict=verdict(claim, "not_applicable", "placeholder"), config={}, fingerprint=_fp("hw"))
    (res / "verdict.json").write_text(json.dumps({**v, "scale": "default", "hardware": "hw"}))
    page = tmp_path / "reports" / "hw" / "default" / f"{claim}.md"
    pages.claim_page(claim, res, page, page.with_suffix(""))
    md, html = page.read_text(), page.with_suffix(".html").read_text()
    for text in ("Verdict: **inconclusive**", "## What this verdict means", "Cannot say whether attention collapses",
                 "## Gates", "control model learned", "## Setup beside the paper", "48 layers", "12 layers",
                 "[1.2, 2.6] (95% CI)", "spread too wide", "**headline**", "undecided", "loadavg_after 1.25",
                 "Re-judged: this verdict was computed by the rule at commit `abcdef1234`", "was **partially**"):
        assert text in md, text
    assert '<h2 class="verdict">Verdict: <strong>inconclusive</strong>' in html and "Setup beside the paper" in html
    assert "spread too wide" in html
    # each fact once, in the page's order: the headline row, the reason, the checks (their details collapsed), then
    # the paper's claim and the setup
    assert md.count("the headline could not be decided") == 1 and "Why:" not in md
    order = [md.index(t) for t in ("| claim", "## Verdict: ", "## Checks", "<details>", "spread too wide",
                                   "</details>", "## The paper's claim", "## Setup beside the paper")]
    assert order == sorted(order), order
    assert html.index("<details><summary>") < html.index("spread too wide") < html.index("</details>")
    # figures are embedded (the report shows the page from a data URI), captions escape reST and Jinja
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(1, 1))
    fig.savefig(tmp_path / "f.png")
    plt.close(fig)
    assert '<img src="data:image/png;base64,iVBOR' in pages.render_html([("figure", tmp_path / "f.png", "cap")], "t")
    rst = pages.caption_rst("a *b* {{ c }} <d>")
    assert "{% raw %}" in rst and "raw:: html" in rst and "&lt;d&gt;" in rst
    # an old verdict.json without the new keys still renders, without their sections
    old = {"claim": claim, "verdict": "reproduced", "reason": "ok",
           "checks": [{"name": "c", "passed": True, "measured": "1", "expected": "1"}]}
    (res / "verdict.json").write_text(json.dumps(old))
    pages.claim_page(claim, res, page, page.with_suffix(""))
    md = page.read_text()
    assert "Verdict: **reproduced**" in md and "Setup beside" not in md and "none marked" in md
    # with numbers, the headline table comes first: measured beside the paper, the difference, the verdict
    nums = {"value": 2.9, "unit": "per-layer exponent", "lo": 2.7, "hi": 3.1, "paper": 3.0, "paper_text": None,
            "compare": "difference"}
    new = {**v, "scale": "default", "hardware": "hw", "checks": [{**checks[0], "numbers": nums}, checks[1]]}
    (res / "verdict.json").write_text(json.dumps(new))
    pages.claim_page(claim, res, page, page.with_suffix(""))
    head = page.read_text().splitlines()[:15]
    table = [line for line in head if line.startswith("|")]
    assert [c.strip() for c in table[0].strip("|").split("|")][:5] == list(headline.COLUMNS)  # the matrix's order
    assert "2.9 [2.7, 3.1] per-layer exponent" in table[2] and "| 3 " in table[2] and "inconclusive" in table[2]
    assert "~-0.1 " in table[2]  # the paper's 3 lies inside [2.7, 3.1]: within the noise, no direction word
    # a 'vs published' column with nothing comparable in it is dropped, not shown as a column of empty cells
    frame = pd.DataFrame({"metric": ["m"], "measured": ["1"], "vs published": [""], "unit": [float("nan")]})
    assert list(pages.drop_empty(frame, keep=("metric",)).columns) == ["metric", "measured"]


def test_markdown_table_of_one_row():
    frame = pd.DataFrame([{"a": 1}])
    assert "a" in pages._table(frame)


def smk(*args, cwd=ROOT, timeout=900):
    return subprocess.run([sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.mark.slow  # over 20 s: the second stage (scripts/test_slow.sh, run by .ci/run)
def test_two_machines_in_the_workflow_flag_the_flipped_checks(tmp_path):
    """reproduce_all at scale tiny under two hardware ids; one machine's verdict.json is edited to differ; the
    matrix rule (part of reproduce_all) then flags both cells with the flipped check."""
    claims = "claims=[block_numerics]"
    for hw in ("test-hw-a", "test-hw-b"):
        r = smk("reproduce_all", "--cores", "2", "--directory", str(tmp_path), "--config", "scale=tiny",
                f"hardware={hw}", claims)
        assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    md = (tmp_path / "reports/matrix.md").read_text()
    assert "## Scale `tiny`" in md and "`test-hw-a`" in md and "`test-hw-b`" in md and "flag-1" not in md
    vpath = tmp_path / "results/test-hw-b/tiny/block_numerics/verdict.json"
    v = json.loads(vpath.read_text())
    flipped = v["checks"][0]["name"]
    v["checks"][0]["passed"] = not v["checks"][0]["passed"]
    v["verdict"] = "not_reproduced"
    vpath.write_text(json.dumps(v))
    r = smk("reproduce_all", "--cores", "2", "--directory", str(tmp_path), "--config", "scale=tiny",
            "hardware=test-hw-b", claims)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert "block_numerics" not in planned_jobs(r.stdout)  # the experiment is not rerun, only its page and the matrix
    md = (tmp_path / "reports/matrix.md").read_text()
    assert md.count('<a id="flag-1"></a>') == 1 and "flag-2" not in md, md  # the pair is one flag
    assert "**not_applicable** here (`test-hw-a`), **not_reproduced** on `test-hw-b`" in md
    assert f"{flipped}: " in md and "on test-hw-b" in md
    page = (tmp_path / "reports/test-hw-b/tiny/block_numerics.md").read_text()
    assert "Verdict: **not_reproduced**" in page


def test_matrix_csv_counts_the_flags_matrix_md_shows(tmp_path):
    """matrix.csv's ``flags`` is the number of flags matrix.md shows beside the cell (both cells of a machine flag):
    the table rows' flag links and the CSV's counts agree, cell by cell in total."""
    import re

    root = tmp_path / "results"
    _write(root, "cpu-a", "reproduced", True, _fp("cpu-a"))
    _write(root, "gpu-b", "not_reproduced", False, _fp("gpu-b", torch_version="2.5.1", commit="fedcba9876543210"))
    out = matrix.write(root, tmp_path / "reports", tmp_path / "reports" / "matrix.md", history=False)
    shown = sum(len(re.findall(r"\[flag \d+\]\(#flag-\d+\)", line)) for line in out.read_text().splitlines()
                if line.startswith("|"))
    csv = pd.read_csv(out.with_suffix(".csv"))
    assert csv[csv["claim"] == "rank_collapse"].set_index("hardware")["flags"].to_dict() == {"cpu-a": 1, "gpu-b": 1}
    assert shown == int(csv["flags"].sum()) == 2


def test_the_default_scale_comes_first_and_the_smoke_test_last(tmp_path):
    """Wherever scales are listed (matrix.md, the HTML landing page's matrix, matrix.csv): default, then paper,
    then tiny, whatever order the folders sort in."""
    root = tmp_path / "results"
    for scale in ("tiny", "paper", "default"):
        _write(root, "cpu-a", "reproduced", True, _fp("cpu-a"), scale=scale)
    md = matrix.matrix_markdown(root, tmp_path / "reports", history=False)
    found = [md.index(f"## Scale `{s}`") for s in ("default", "paper", "tiny")]
    assert found == sorted(found), found
    html = matrix.matrix_html(root, history=False)
    found = [html.index(f"<h3>Scale {s}</h3>") for s in ("default", "paper", "tiny")]
    assert found == sorted(found), found
    assert [r["scale"] for r in matrix.matrix_records(root)][:1] == ["default"]


def test_matrix_csv_names_the_headline_its_comparison_and_its_interval(tmp_path):
    """matrix.csv carries what the headline row shows: the title the pages name the headline by
    (repro/registry/headlines.yaml), the comparison with the paper's number with its mark ('~' inside the interval,
    else the direction word), where the paper states it, and the method of the interval that decided it."""
    root = tmp_path / "results"
    _write(root, "cpu-a", "reproduced", True, _fp("cpu-a"))
    res = root / "cpu-a" / "default" / "rank_collapse"
    v = json.loads((res / "verdict.json").read_text())
    v["checks"][0].update(interval="95% t-interval over 5 seeds", numbers={
        "value": 2.9, "unit": "per-layer exponent", "lo": 2.85, "hi": 2.95, "paper": 3.0, "paper_text": None,
        "compare": "difference", "criterion": "suite", "rule": "3 +- 0.5", "source": "dong_rate_exponent_base"})
    (res / "verdict.json").write_text(json.dumps(v))
    rec = matrix.matrix_records(root)[0]
    assert rec["title"] == "Pure attention loses rank doubly exponentially"
    assert rec["vs_paper"] == "0.1 lower" and rec["interval_method"] == "95% t-interval over 5 seeds"
    assert rec["paper_where"].startswith("Dong et al. 2021") and rec["paper_derived"] is None
    v["checks"][0]["numbers"].update(lo=2.8, hi=3.2)  # the paper's 3 inside the interval: within the noise
    (res / "verdict.json").write_text(json.dumps(v))
    frame = pd.read_csv(io.StringIO(matrix.matrix_csv(root)))
    assert frame.loc[0, "vs_paper"] == "~-0.1" and frame.loc[0, "interval_method"] == "95% t-interval over 5 seeds"


def test_headlines_yaml_names_the_check_in_the_papers_unit_among_equals():
    """repro/registry/headlines.yaml names, for a claim with several headline checks, the one in the paper's unit
    (prepost_gradients: the Pre/Post depth exponent beside Theorem 1's -0.5): the pages show it among the headline
    checks that stand as the verdict does, and a failing headline still shows before it (it decided the verdict).
    Every title fits the tables (60 characters) and every named check is a headline of its claim's judge."""
    slope = {"name": "Fig 3(a,b) layernorm decoder ffn.fc2: Post grows with layer, Pre flat", "passed": True,
             "headline": True, "numbers": {"value": 0.23}}
    expo = {"name": "Fig 3(c,d) full model: depth exponent of the Pre/Post ratio", "passed": True, "headline": True,
            "numbers": {"value": -0.47}}
    v = {"claim": "prepost_gradients", "checks": [slope, expo]}
    assert headline.headline_check(v) is expo
    assert headline.headline_check({**v, "checks": [{**slope, "passed": False}, expo]})["name"] == slope["name"]
    assert headline.headline_check({**v, "checks": [{**slope, "passed": None}, {**expo, "passed": None}]}) \
        ["name"] == expo["name"]
    assert headline.headline_check({**v, "claim": "rank_collapse"}) is slope  # no name given: the first
    entries = {c: headline.headline_entry(c) for c in headline._headlines()}
    assert all(0 < len(e["title"]) <= 60 for e in entries.values()), entries
    named = {c: e["check"] for c, e in entries.items() if e.get("check")}
    assert {"prepost_gradients", "activation_checkpointing"} <= set(named)
    for claim, start in named.items():
        verdicts = sorted(ROOT.glob(f"references/results/cpu-intel-xeon-2c/default/{claim}/verdict.json"))
        judged, _, _ = judge_stored(claim, verdicts[0].parent, "default")
        assert any(c["headline"] and c["name"].startswith(start) for c in judged["checks"]), (claim, start)
