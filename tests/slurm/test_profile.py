"""The SLURM profile (profiles/slurm/config.yaml) and the rules' resources as the SLURM executor reads them.

No cluster needed: a dry run with the profile at paper scale shows each job's resources. The real single-node
SLURM run is tests/slurm/test_slurm_executor.py (scripts/test_slurm.sh)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "profiles" / "slurm" / "config.yaml"


def test_profile_selects_slurm_with_defaults():
    cfg = yaml.safe_load(PROFILE.read_text())
    assert cfg["executor"] == "slurm"
    assert cfg["jobs"] >= 1 and cfg["latency-wait"] >= 30
    assert {"runtime", "mem_mb"} <= set(cfg["default-resources"])


@pytest.fixture(scope="module")
def paper_dry_run(tmp_path_factory):
    pytest.importorskip("snakemake_executor_plugin_slurm", reason="pip install -e .[slurm]")
    tmp = tmp_path_factory.mktemp("dry")
    cmd = [sys.executable, "-m", "snakemake", "-n", "reproduce_all", "compare_hardware", "--profile", "profiles/slurm",
           "--config", "scale=paper", f"results_dir={tmp}/results", f"reports_dir={tmp}/reports"]
    for _ in range(5):
        r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
        # Inputs no rule makes yet (e.g. a shared checkpoint whose workflow is not written) would stop the dry run;
        # stand-in files under tmp let it list every job's resources, which is all this test reads.
        missing = re.search(r"MissingInputException.*?affected files:\n((?:\s+\S+\n?)+)", r.stdout + r.stderr, re.DOTALL)
        if r.returncode == 0 or not missing:
            break
        for f in missing.group(1).split():
            assert f.startswith(str(tmp)), f"missing input outside the test folder: {f}"
            Path(f).parent.mkdir(parents=True, exist_ok=True)
            Path(f).touch()
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    jobs = re.findall(r"^(?:local)?rule (\w+):\n(?:    .*\n)*?    resources: (.*)$", r.stdout, re.MULTILINE)
    assert jobs, r.stdout[-2000:]
    return {name: dict(kv.split("=", 1) for kv in res.split(", ")) for name, res in jobs}


def test_gpu_requests_use_the_resource_the_plugin_reads(paper_dry_run):
    """snakemake-executor-plugin-slurm puts `gpu=N` (or `gres="gpu:N"`) on sbatch as --gpus=N; a `gpus=`
    resource reaches only the job step's srun, so the allocation (and the job) would have no GPU."""
    wrong = sorted(name for name, res in paper_dry_run.items() if "gpus" in res)
    assert not wrong, f"rules {wrong} declare resources gpus=...; the SLURM executor reads gpu=... (rename it)"


def test_claim_rules_declare_runtime_and_memory(paper_dry_run):
    """Every job the profile submits gets a runtime (minutes) and memory; claim rules set their own."""
    for name, res in paper_dry_run.items():
        assert "runtime" in res and "mem_mb" in res, (name, res)
