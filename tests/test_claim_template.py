"""Issue 14: a claim is a module, a config, a schema, a registry entry and a test. A throwaway claim scaffolded from
docs/claim_template/ in a temporary copy of the repository runs through Snakemake's one claim rule, gets its page
and an index row, with no .smk file of its own."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _copy_repo(dest: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split("\n")
    for f in files:
        if not f or f.startswith(("results/", "reports/", "tests/fixtures/")):
            continue
        src = ROOT / f
        if src.is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f)


@pytest.mark.slow  # over 20 s: the second stage (scripts/test_slow.sh, run by .ci/run)
@pytest.mark.timeout(600)
def test_a_claim_from_the_template_runs_through_snakemake(tmp_path):
    repo = tmp_path / "repo"
    _copy_repo(repo)
    before = set(p.name for p in (repo / "workflows").iterdir())
    r = subprocess.run([sys.executable, "-m", "repro.claims._new", "example_rms", "--code", "C99", "--title",
                        "RMSNorm output has RMS 1", "--root", str(repo)], cwd=repo, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    changed = [l for l in r.stderr.splitlines() if l.startswith("wrote ")]
    assert len(changed) == 8  # measurement, judge, vocabulary, config, schema, test, controls, registry: nothing else
    assert set(p.name for p in (repo / "workflows").iterdir()) == before
    env = {"PYTHONPATH": str(repo), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path)}
    t = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_claim_example_rms.py"],
                       cwd=repo, capture_output=True, text=True, env=env, timeout=300)
    assert t.returncode == 0, t.stdout[-3000:] + t.stderr[-3000:]
    for scale in ("tiny", "default"):
        s = subprocess.run([sys.executable, "-m", "snakemake", "claim_example_rms", "--cores", "1", "--config",
                            f"scale={scale}", "hardware=test-hw"], cwd=repo, capture_output=True, text=True,
                           env=env, timeout=300)
        assert s.returncode == 0, s.stdout[-3000:] + s.stderr[-3000:]
        v = json.loads((repo / f"results/test-hw/{scale}/example_rms/verdict.json").read_text())
        assert v["hardware"] == "test-hw"
        assert v["verdict"] == ("not_applicable" if scale == "tiny" else "reproduced"), v["reason"]
        assert v["thresholds"] == {"tolerance": 0.01}
        assert (repo / f"reports/test-hw/{scale}/example_rms.md").is_file()
    # its negative control, on the default run's own rows, is not reproduced (what test_judge_contract requires)
    probe = ("import sys, json, math; sys.path.insert(0, 'tests'); from controls import example_rms as c; "
             "from repro.io import read_metrics; from repro import config; "
             "from repro.claims._cli import judge_rows; "
             "rows = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()} "
             "for r in read_metrics('results/test-hw/default/example_rms').to_dict('records')]; "
             "print(judge_rows('example_rms', c.paper_false(rows))['verdict'])")
    p = subprocess.run([sys.executable, "-c", probe], cwd=repo, capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0 and p.stdout.split()[-1] == "not_reproduced", p.stdout[-2000:] + p.stderr[-2000:]
    # a threshold changed in the config re-judges without measuring again (issue 36)
    cfg = repo / "config/claims/example_rms.yaml"
    cfg.write_text(cfg.read_text().replace("judge: {tolerance: 0.01}", "judge: {tolerance: 1.0e-9}"))
    dry = subprocess.run([sys.executable, "-m", "snakemake", "-n", "claim_example_rms", "--cores", "1", "--config",
                          "hardware=test-hw"], cwd=repo, capture_output=True, text=True, env=env, timeout=300)
    assert dry.returncode == 0, dry.stderr[-3000:]
    planned = dry.stdout + dry.stderr
    assert "claim_verdict" in planned and "\nclaim " not in planned and "rule claim:" not in planned, planned[-3000:]
    s = subprocess.run([sys.executable, "-m", "snakemake", "claim_example_rms", "--cores", "1", "--config",
                        "hardware=test-hw"], cwd=repo, capture_output=True, text=True, env=env, timeout=300)
    assert s.returncode == 0, s.stdout[-3000:] + s.stderr[-3000:]
    v = json.loads((repo / "results/test-hw/default/example_rms/verdict.json").read_text())
    assert v["thresholds"] == {"tolerance": 1e-9} and v["verdict"] != "reproduced", v["reason"]
