"""Judges meet measurements only in result files (docs/architecture.md): importing every judge and the judging
machinery, and the workflow's judging job (``python -m repro.judging``) on stored results, load neither torch nor any
measurement package, in a clean interpreter. What a verdict says of the measuring process (the torch version, its
threads) therefore comes from the result's fingerprint.json, never from the judging process."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from repro import registry

ROOT = Path(__file__).resolve().parents[1]
REFS = ROOT / "references" / "results"
MEASUREMENT = ("torch", "repro.claims", "repro.bench", "repro.model", "repro.train", "repro.kernels", "repro.data",
               "repro.quant", "repro.artefacts", "repro.peers")
CLAIMS = sorted(registry.implemented_claims())
# run in a fresh interpreter: prints the measurement modules loaded, one per line
LOADED = ("import sys\nbad = {m.split('.')[0] if m.split('.')[0] != 'repro' else '.'.join(m.split('.')[:2]) "
          f"for m in sys.modules}} & set({MEASUREMENT!r})\nprint(json.dumps(sorted(bad)))\n")


def _python(code: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(ROOT), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(cwd)}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, env=env, timeout=300)


def _loaded(result: subprocess.CompletedProcess) -> list[str]:
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_importing_every_judge_and_the_judging_loads_no_measurement():
    modules = ["repro.judging", "repro.verdicts", "repro.intervals", "repro.judges.translation",
               *(f"repro.judges.{c}" for c in CLAIMS)]
    code = "import importlib, json\n" + "".join(f"importlib.import_module({m!r})\n" for m in modules) + LOADED
    assert _loaded(_python(code)) == []


def test_the_check_sees_a_measurement_import():
    """The probe above can fail: a claim's measurement module loads torch and the claims package."""
    loaded = _loaded(_python("import json\nimport repro.claims.block_numerics\n" + LOADED))
    assert {"torch", "repro.claims", "repro.model"} <= set(loaded), loaded


def _newest_reference(claim: str) -> Path | None:
    found = sorted((json.loads(v.read_text()).get("timestamp") or "", str(v.parent))
                   for v in REFS.glob(f"*/*/{claim}/verdict.json"))
    return Path(found[-1][1]) if found else None


@pytest.mark.timeout(600)
def test_judging_stored_results_loads_no_measurement(tmp_path):
    """``repro.judging.main`` (the claim_verdict job's command line) on a copy of each claim's newest committed
    reference: the verdict is the one committed beside the rows, and no measurement module was ever loaded."""
    runs = []
    for claim in CLAIMS:
        ref = _newest_reference(claim)
        if ref is None:
            continue
        dest = tmp_path / ref.parent.name / claim
        shutil.copytree(ref, dest)
        runs.append((claim, ref.parent.name, str(dest), json.loads((ref / "verdict.json").read_text())["verdict"]))
    assert runs
    code = ("import json\nfrom repro import judging\n"
            f"for claim, scale, out, _ in {runs!r}:\n"
            "    assert judging.main(['--claim', claim, '--scale', scale, '--out', out]) == 0\n" + LOADED)
    assert _loaded(_python(code, tmp_path)) == []
    for claim, _, out, committed in runs:
        assert json.loads((Path(out) / "verdict.json").read_text())["verdict"] == committed, claim


def test_the_verdict_jobs_command_imports_no_torch(tmp_path):
    """The workflow's command itself (repro.workflow.Run.judge_shell: ``python -m repro.judging``), with Python's
    import log: no torch, no measurement package."""
    ref = _newest_reference("block_numerics")
    out = tmp_path / "block_numerics"
    shutil.copytree(ref, out)
    env = {"PYTHONPATH": str(ROOT), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path)}
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "repro.judging", "--claim", "block_numerics",
                        "--scale", ref.parent.name, "--out", str(out), "--keys", '{"judge": "k"}'],
                       cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    imported = {line.rsplit("|", 1)[1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    # the log is read right (the judge itself comes through importlib, which the log does not show; its imports do)
    assert {"repro.verdicts", "repro.vocabulary.block_numerics"} <= imported
    loaded = sorted(m for m in imported if m.split(".")[0] == "torch" or m.startswith(MEASUREMENT[1:]))
    assert not loaded, loaded
    assert json.loads((out / "verdict.json").read_text())["provenance"]["judged"]["judge_key"] == "k"


def test_a_judge_names_the_recorded_torch_not_its_own(tmp_path):
    """The versions and threads in a verdict's setup are the ones the result's fingerprint.json recorded (via
    judge_context), with a fallback for a result that recorded none; the judging process's own are never used."""
    from repro.judging import judge_stored

    ref = _newest_reference("rmsnorm_speed")
    setups = {}
    for version in ("9.9.9-recorded", None):
        out = tmp_path / str(version) / ref.parent.name / "rmsnorm_speed"
        shutil.copytree(ref, out)
        fp = json.loads((out / "fingerprint.json").read_text())
        fp["software"] = {"torch": version} if version else {}
        (out / "fingerprint.json").write_text(json.dumps(fp))
        verdict, _, _ = judge_stored("rmsnorm_speed", out, ref.parent.name)
        setups[version] = next(r["this_run"] for r in verdict["setup"] if r["aspect"] == "implementations")
    assert setups["9.9.9-recorded"].startswith("PyTorch 9.9.9-recorded: "), setups
    assert setups[None].startswith("PyTorch (version not recorded): "), setups


def test_a_judges_files_hold_no_measurement_code():
    """What a judge's key hashes (its module and what it imports) is judge-side code and the claim's shared names
    only, so editing measurement code never re-judges and editing a judge-only name never re-measures; the shared
    names are in both (honestly: a change there measures again and re-judges)."""
    from repro import provenance

    measurement = tuple(f"repro/{m.split('.')[1]}" for m in MEASUREMENT[1:]) + ("repro/stats.py",)
    for claim in [*CLAIMS, "translation"]:
        judge = {p.relative_to(ROOT).as_posix()
                 for p in provenance.module_closure((provenance.judge_module(claim),), stop=provenance.NOT_CODE)}
        assert not sorted(f for f in judge if f.startswith(measurement)), claim
        if claim == "translation":
            continue
        measure = {p.relative_to(ROOT).as_posix() for p in provenance.module_closure((f"repro.claims.{claim}",))}
        assert f"repro/vocabulary/{claim}.py" in judge & measure, claim
        assert not {"repro/intervals.py", "repro/verdicts.py", f"repro/judges/{claim}.py"} & measure, claim
