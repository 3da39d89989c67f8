"""One verdict on every machine: two committed default references measured by the same code and config on different
machines agree wherever both decide. Speed is a property of the machine (a CPU's RMSNorm saving, a GPU's attention
speed-up), so checks that read times or rates are left out; everything else the suite measures (gradients, BLEU,
perplexity, parameter counts, pruning curves) must come out the same, or the verdict is not evidence about the paper.

The test runs for every pair of machines whose references of a claim share the code and config keys
(``repro.report.origin.difference`` says 'machine' or 'software'); it skips, saying so, where no such pair exists
(references measured by different code are compared by the matrix's flags instead, labelled a code difference)."""
from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest

from repro.report.origin import difference, recorded_keys

ROOT = Path(__file__).resolve().parents[1]
REFERENCES = ROOT / "references" / "results"
# a check about time on the machine: its outcome may differ between machines by design
MACHINE_SPEED = re.compile(r"time|speed|latency|throughput|faster|slower|overhead|tokens/s|step", re.IGNORECASE)


def _verdicts(scale: str = "default") -> dict[str, dict[str, dict]]:
    """claim -> hardware -> verdict.json, for the committed references at ``scale`` (CPU and GPU alike)."""
    out: dict[str, dict[str, dict]] = {}
    for path in sorted(REFERENCES.glob(f"*/{scale}/*/verdict.json")):
        hardware, claim = path.parts[-4], path.parts[-2]
        out.setdefault(claim, {})[hardware] = json.loads(path.read_text())
    return out


def comparable_pairs(verdicts: dict[str, dict[str, dict]]) -> list[tuple[str, str, str]]:
    """(claim, hardware a, hardware b) for every pair measured by the same code and config."""
    pairs = []
    for claim, by_hw in sorted(verdicts.items()):
        for a, b in itertools.combinations(sorted(by_hw), 2):
            ka, kb = recorded_keys(by_hw[a]), recorded_keys(by_hw[b])
            if ka and kb and difference(ka, kb) in ("machine", "software"):
                pairs.append((claim, a, b))
    return pairs


def disagreements(va: dict, vb: dict) -> list[str]:
    """The checks both verdicts decided (held or failed) and decided differently, speed checks aside; and the
    verdicts themselves when both are decided and no speed check explains the difference."""
    checks_a = {c["name"]: c for c in va.get("checks") or []}
    checks_b = {c["name"]: c for c in vb.get("checks") or []}
    out = []
    for name in sorted(set(checks_a) & set(checks_b)):
        pa, pb = checks_a[name].get("passed"), checks_b[name].get("passed")
        if pa is None or pb is None or MACHINE_SPEED.search(name):
            continue
        if pa != pb:
            out.append(f"check {name!r}: {pa} vs {pb}")
    speed_differs = any(MACHINE_SPEED.search(n) and checks_a[n].get("passed") != checks_b[n].get("passed")
                        for n in set(checks_a) & set(checks_b))
    decided = {"reproduced", "partially", "not_reproduced"}
    if (va.get("verdict") in decided and vb.get("verdict") in decided and va["verdict"] != vb["verdict"]
            and not speed_differs):
        out.append(f"verdict: {va['verdict']} vs {vb['verdict']}")
    return out


def test_disagreement_is_found_and_speed_is_left_out():
    a = {"verdict": "reproduced", "checks": [{"name": "gap above 0.5", "passed": True},
                                             {"name": "step time lower", "passed": True}]}
    flipped = {"verdict": "not_reproduced", "checks": [{"name": "gap above 0.5", "passed": False},
                                                       {"name": "step time lower", "passed": True}]}
    undecided = {"verdict": "inconclusive", "checks": [{"name": "gap above 0.5", "passed": None}]}
    slower = {"verdict": "partially", "checks": [{"name": "gap above 0.5", "passed": True},
                                                 {"name": "step time lower", "passed": False}]}
    assert disagreements(a, flipped) == ["check 'gap above 0.5': True vs False",
                                         "verdict: reproduced vs not_reproduced"]
    assert disagreements(a, undecided) == []  # one side decided nothing: nothing to disagree about
    assert disagreements(a, slower) == []  # the machine's speed explains the verdict's difference
    assert disagreements(a, a) == []


def test_pairs_need_the_same_code_and_config():
    same = {"code": "c", "config": "k", "software": ["python"]}
    v = {"provenance": {"measured": {"keys": same}}}
    other = {"provenance": {"measured": {"keys": {**same, "code": "d"}}}}
    assert comparable_pairs({"x": {"cpu-a": v, "cpu-b": v}}) == [("x", "cpu-a", "cpu-b")]
    assert comparable_pairs({"x": {"cpu-a": v, "cpu-b": other}}) == []


def test_references_of_the_same_code_agree_wherever_both_decide():
    verdicts = _verdicts("default")
    pairs = comparable_pairs(verdicts)
    if not pairs:
        pytest.skip("no two default references measured by the same code and config (regenerate a second "
                    "machine's reference at this commit to compare them)")
    found = [f"{claim} {a} vs {b}: {d}" for claim, a, b in pairs
             for d in disagreements(verdicts[claim][a], verdicts[claim][b])]
    assert not found, "\n".join(found)
