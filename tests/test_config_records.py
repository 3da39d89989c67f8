"""Config validation, results records and the report pages."""
import json

import pandas as pd
import pytest

from repro import config, registry
from repro import intervals, io as records, verdicts
from repro.bench.fingerprint import fingerprint, hardware_id, slug


def test_every_claim_config_validates_at_every_scale():
    for name in config.available_sections():
        for scale in config.SCALES:
            params = config.section(name, scale)
            assert isinstance(params, dict) and params


def test_unknown_and_bad_keys_are_named():
    with pytest.raises(config.ConfigError, match="scale"):
        config.section("block_numerics", "huge")
    with pytest.raises(config.ConfigError, match=r"deep_stack\.bogus"):
        config.section("block_numerics", "tiny", {"block_numerics": {"deep_stack": {"bogus": 1}}})
    with pytest.raises(config.ConfigError, match=r"deep_stack\.steps"):
        config.section("block_numerics", "tiny", {"block_numerics": {"deep_stack": {"steps": -1}}})
    with pytest.raises(config.ConfigError, match="no such claim"):
        config.section("not_a_claim", "tiny")
    with pytest.raises(config.ConfigError, match="unknown claim id"):
        config.load_run_config({"claims": ["nope"]})


def test_defaults_filled():
    params = config.section("param_accounting", "tiny")
    assert "judge" not in params and config.thresholds("param_accounting", "tiny")["rounded_rel_tolerance"] > 0
    run = config.load_run_config({})
    assert run["scale"] == "default" and run["claims"] == registry.claim_ids()


def test_write_results_atomic_and_complete(tmp_path):
    rows = [records.metric("param_accounting", "total", 123, "params", published_key="llama7b_total_params", model="m"),
            records.metric("param_accounting", "share_ffn", 64.0, "percent", kind="statistic", model="m", seed=1)]
    v = verdicts.verdict_from_checks("param_accounting", [verdicts.check("a", True, "1", "1", headline=True),
                                                         verdicts.check("b", False, "2", "3")], "default")
    assert v["verdict"] == "partially" and "Failing: b" in v["reason"]
    fp = {"hardware_id": "hw-a", "git": {"commit": "abc"}, "timestamp": "t", "hardware": {}, "software": {}}
    records.write_results(tmp_path, claim="param_accounting", scale="default", metrics=rows, verdict=v,
                          config={"x": 1}, fingerprint=fp)
    assert not list(tmp_path.glob(".*tmp"))
    frame = records.read_metrics(tmp_path)
    assert frame.loc[0, "published_value"] == 6738415616 and "Touvron" in frame.loc[0, "source"]
    assert frame.loc[1, "sweep"] == {"model": "m", "seed": 1} and frame.loc[1, "sweep.seed"] == 1
    saved = json.loads((tmp_path / "verdict.json").read_text())
    assert saved["hardware"] == "hw-a" and saved["commit"] == "abc" and saved["verdict"] == "partially"
    assert json.loads((tmp_path / "fingerprint.json").read_text())["config_hash"]


def test_verdict_rules():
    """The contract (docs/verdicts.md): headline checks decide; an undecided headline is inconclusive."""
    ok_h = verdicts.check("x", True, "1", "1", headline=True)
    bad_h = verdicts.check("y", False, "0", "1", headline=True)
    und_h = verdicts.check("u", None, "?", "1", headline=True, undecided_because="spread too wide")
    ok, bad = verdicts.check("s", True, "1", "1"), verdicts.check("t", False, "0", "1")
    v = lambda *cs, scale="default": verdicts.verdict_from_checks("c", list(cs), scale)["verdict"]
    assert v(ok_h) == "reproduced" and v(ok_h, ok) == "reproduced"
    assert v(ok_h, bad) == "partially"
    assert v(bad_h, ok) == "not_reproduced" and v(bad_h, ok_h) == "not_reproduced"
    assert v(und_h, ok, ok_h) == "inconclusive" and v(und_h, bad_h) == "not_reproduced"
    assert v(ok_h, bad, scale="tiny") == "not_applicable"
    only_na = verdicts.check("gpu", None, "", "", headline=True, undecided_because="not applicable: no GPU")
    assert v(only_na) == "not_applicable"
    inc = verdicts.verdict_from_checks("c", [und_h, ok], "default")
    assert "spread too wide" in inc["reason"] and inc["meaning"] and inc["gates"] == [] and inc["setup"] == []
    # a run too small to make the headline check at all decides nothing
    assert v(ok, bad) == "inconclusive" and v(ok, scale="tiny") == "not_applicable"
    with pytest.raises(ValueError):
        verdicts.verdict("c", "maybe", "")


def test_gates_and_intervals():
    g_bad = verdicts.gate("control learned", False, "BLEU 1.0 vs copy 16.8", ">= copy + 3")
    c = verdicts.gated(verdicts.check("h", True, "m", "e", headline=True), [g_bad])
    assert c["passed"] is None and "control learned" in c["undecided_because"]
    assert verdicts.verdict_from_checks("c", [c], "default", gates=[g_bad])["verdict"] == "inconclusive"
    g_ok = verdicts.gate("control learned", True, "", "")
    assert verdicts.gated(verdicts.check("h", False, "m", "e"), [g_ok])["passed"] is False
    assert verdicts.decide_interval(1.2, 1.5, above=1.0) is True
    assert verdicts.decide_interval(0.5, 0.9, above=1.0) is False
    assert verdicts.decide_interval(0.9, 1.1, above=1.0) is None
    assert verdicts.decide_within(-0.6, -0.4, -0.65, -0.35) is True and verdicts.decide_within(-1, -0.8, -0.65, -0.35) is False
    assert verdicts.decide_within(-0.7, -0.5, -0.65, -0.35) is None
    lo, hi = intervals.t_interval(1.0, 0.5, 5)
    assert abs((hi - lo) / 2 - 2.776 * 0.5 / 5 ** 0.5) < 1e-9
    assert intervals.t_interval(1.0, 0.5, 1) == (float("-inf"), float("inf"))
    assert verdicts.both(True, None) is None and verdicts.both(True, False, None) is False and verdicts.both(True, True)


def test_setup_table_from_registry():
    rows = verdicts.setup_table("prepost_gradients", {"model": "6+6 d 64", "device": "cpu"})
    by = {r["aspect"]: r for r in rows}
    assert "IWSLT14" in by["data"]["paper"] and by["data"]["this_run"] == "not stated"
    assert by["model"]["this_run"] == "6+6 d 64" and by["device"]["paper"] == "not stated"


def test_hardware_id(monkeypatch):
    assert hardware_id({"name": "NVIDIA H200", "count": 1}) == "gpu-nvidia-h200"
    assert hardware_id({"name": "NVIDIA H100 80GB HBM3", "count": 8}) == "gpu-nvidia-h100-80gb-hbm3x8"
    assert slug("Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz") == "intel-xeon-platinum-8481c"
    assert hardware_id(None).startswith("cpu-")


def test_claim_page_and_index(tmp_path):
    from repro.claims import param_accounting
    from repro.report.pages import claim_page, index_page

    params = config.section("param_accounting", "tiny")
    res = tmp_path / "results/hw/tiny/param_accounting"
    from repro.claims._cli import run_and_judge

    rows, v = run_and_judge("param_accounting", param_accounting.run, params, "tiny", res)
    records.write_results(res, fingerprint=fingerprint(), claim="param_accounting", scale="tiny", metrics=rows, verdict=v, config=params)
    page = claim_page("param_accounting", res, tmp_path / "reports/hw/tiny/param_accounting.md",
                      tmp_path / "reports/hw/tiny/param_accounting")
    text = page.read_text()
    assert "6,738,415,616" in text and "not_applicable" in text
    idx = index_page(tmp_path / "results", tmp_path / "reports", "hw", "tiny", tmp_path / "index.md").read_text()
    built = registry.implemented_claims()
    unbuilt = len(registry.claim_ids()) - len(built)
    assert "param_accounting" in idx and f"not run: {len(built) - 1}" in idx  # every other claim with a workflow
    assert (f"not_implemented: {unbuilt}" in idx) == (unbuilt > 0) and "snakemake claim_block_numerics" in idx


def test_rejudge_applies_the_current_rule_to_stored_measurements(tmp_path):
    """--rejudge re-applies judge() to a stored run: metrics and fingerprint untouched, verdict.json records both
    the measurement's commit and the judging commit."""
    import shutil
    import subprocess
    import sys

    from repro.config import ROOT

    src = ROOT / "references" / "results" / "cpu-amd-epyc-2c" / "default" / "param_accounting"
    out = tmp_path / "param_accounting"
    shutil.copytree(src, out)
    before = (out / "metrics.csv").read_bytes(), (out / "fingerprint.json").read_bytes()
    old = json.loads((out / "verdict.json").read_text())
    subprocess.run([sys.executable, "-m", "repro.claims.param_accounting", "--scale", "default", "--out", str(out),
                    "--rejudge"], check=True, cwd=ROOT)
    new = json.loads((out / "verdict.json").read_text())
    assert ((out / "metrics.csv").read_bytes(), (out / "fingerprint.json").read_bytes()) == before
    assert new["commit"] == old["commit"] and new["rejudged"]["previous_verdict"] == old["verdict"]
    assert new["verdict"] == "reproduced" and any(c["headline"] for c in new["checks"]) and new["setup"]
    wrong = subprocess.run([sys.executable, "-m", "repro.claims.prepost_gradients", "--scale", "default", "--out",
                            str(out), "--rejudge"], cwd=ROOT, capture_output=True, text=True)
    assert wrong.returncode != 0 and "param_accounting" in wrong.stderr


def test_openmp_threads_spin_only_briefly():
    """Issue 18: importing the suite sets GOMP_SPINCOUNT=1000 before torch loads libgomp (libgomp's default spin-wait
    made 2-thread jobs on tiny tensors 4x slower when another job shared the 2 cores; OMP_WAIT_POLICY=PASSIVE cost
    a fifth of a 2-thread training step on the idle machine); a user's setting of either variable wins."""
    import os
    import subprocess
    import sys

    code = ("import os, repro.claims.block_numerics, torch; "
            "print(os.environ.get('GOMP_SPINCOUNT'), os.environ.get('OMP_WAIT_POLICY'))")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    run = lambda **kw: subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                      env={**env, **kw}).stdout.strip()
    assert run() == "1000 None"
    assert run(OMP_WAIT_POLICY="PASSIVE") == "None PASSIVE"
    assert run(GOMP_SPINCOUNT="50") == "50 None"
