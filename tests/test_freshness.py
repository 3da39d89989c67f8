"""Freshness by content (repro.provenance): a result is kept only while the checkout would measure the same.

The workflow runs in a copy of the source tree, so the test can edit a claim's code: a change to its measurement
code (or its config) reruns the measuring job; a change to its judge only re-judges (the claim_verdict job), the
measurement's files untouched; nothing changed, nothing runs."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from repro import config, provenance

ROOT = Path(__file__).resolve().parents[1]
CLAIM = "block_numerics"


def _copy_tree(dst: Path) -> Path:
    for name in ("Snakefile", "pyproject.toml", "environment.yml"):
        shutil.copy2(ROOT / name, dst / name)
    for name in ("repro", "workflows", "config", "report"):
        shutil.copytree(ROOT / name, dst / name, ignore=shutil.ignore_patterns("__pycache__"))
    return dst


def _smk(src: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(src)}  # the copy's repro, not the installed checkout's
    return subprocess.run([sys.executable, "-m", "snakemake", "-s", str(src / "Snakefile"), f"claim_{CLAIM}",
                           "--cores", "1", "--config", "scale=tiny", "hardware=fresh-hw",
                           f"references_dir={src / 'references'}", *args],
                          cwd=src, env=env, capture_output=True, text=True, timeout=600)


def _jobs(text: str) -> list[str]:
    return re.findall(r"^(?:local)?rule (\w+):", text, flags=re.M)


def _edit_function(path: Path, name: str, line: str) -> None:
    """Insert ``line`` (a statement with no effect) as the first statement of top-level function ``name``."""
    text = path.read_text()
    m = re.search(rf"^def {name}\(.*?\).*?:\n(    \"\"\".*?\"\"\"\n)?", text, flags=re.M | re.S)
    assert m, name
    path.write_text(text[:m.end()] + f"    {line}\n" + text[m.end():])


@pytest.mark.slow  # over 20 s: the second stage (scripts/test_slow.sh, run by .ci/run)
def test_measure_and_judge_keys_follow_the_code(tmp_path):
    src = _copy_tree(tmp_path)
    res = src / "results/fresh-hw/tiny" / CLAIM
    r = _smk(src)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert {"claim", "claim_verdict"} <= set(_jobs(r.stdout + r.stderr))
    measured = json.loads((res / "measured.json").read_text())
    judged = json.loads((res / "verdict.json").read_text())["provenance"]["judged"]
    metrics_mtime = (res / "metrics.csv").stat().st_mtime_ns

    r = _smk(src)  # nothing changed: nothing to do
    assert r.returncode == 0 and not {"claim", "claim_verdict"} & set(_jobs(r.stdout + r.stderr)), r.stdout

    # the judge only: re-judged, not measured again
    _edit_function(src / f"repro/judges/{CLAIM}.py", "judge", "_judge_edited = True")
    r = _smk(src)
    jobs = set(_jobs(r.stdout + r.stderr))
    assert r.returncode == 0 and "claim_verdict" in jobs and "claim" not in jobs, r.stdout[-3000:]
    assert (res / "metrics.csv").stat().st_mtime_ns == metrics_mtime
    assert json.loads((res / "measured.json").read_text()) == measured
    verdict = json.loads((res / "verdict.json").read_text())
    assert verdict["provenance"]["judged"]["judge_key"] != judged["judge_key"]
    assert verdict["provenance"]["judged"]["timestamp"] >= judged["timestamp"]

    # a threshold only (the judge: section, here by an override): re-judged with it, not measured again
    key, value = next(iter(config.thresholds(CLAIM, "tiny").items()))
    moved = value * 2 if isinstance(value, (int, float)) and not isinstance(value, bool) else value
    r = _smk(src, f"overrides={{{CLAIM}: {{judge: {{{key}: {moved}}}}}}}")
    jobs = set(_jobs(r.stdout + r.stderr))
    assert r.returncode == 0 and "claim_verdict" in jobs and "claim" not in jobs, r.stdout[-3000:] + r.stderr[-2000:]
    assert (res / "metrics.csv").stat().st_mtime_ns == metrics_mtime
    assert json.loads((res / "verdict.json").read_text())["thresholds"][key] == moved

    # the measurement code: measured again
    _edit_function(src / f"repro/claims/{CLAIM}.py", "run", "_run_edited = True")
    r = _smk(src)
    jobs = set(_jobs(r.stdout + r.stderr))
    assert r.returncode == 0 and {"claim", "claim_verdict"} <= jobs, r.stdout[-3000:]
    again = json.loads((res / "measured.json").read_text())
    assert again["keys"]["code"] != measured["keys"]["code"] and again["started"] >= measured["started"]

    # a module the claim imports (the shared block) is measurement code too
    with open(src / "repro/model/norms.py", "a") as fh:
        fh.write("\n_edited = True\n")
    r = _smk(src)
    assert r.returncode == 0 and "claim" in _jobs(r.stdout + r.stderr), r.stdout[-3000:]

    # its config: measured again
    r = _smk(src, "overrides={block_numerics: {chain_depth: 12}}")
    assert r.returncode == 0 and "claim" in _jobs(r.stdout + r.stderr), r.stdout[-3000:]
    assert json.loads((res / "config.json").read_text())["config"]["chain_depth"] == 12


@pytest.mark.slow  # over 20 s: the second stage (scripts/test_slow.sh, run by .ci/run)
def test_a_data_module_edit_retrains_the_model_and_a_rewrapped_docstring_plans_nothing(tmp_path):
    """After a complete (narrowed) tiny run: a statement added to the batching code plans the shared models again
    and the claim built on them; comments and a rewrapped docstring plan nothing."""
    src = _copy_tree(tmp_path)
    (src / "data").symlink_to(ROOT / "data")  # the committed corpus, read only
    env = {**os.environ, "PYTHONPATH": str(src)}

    def smk(*args):
        return subprocess.run([sys.executable, "-m", "snakemake", "-s", str(src / "Snakefile"), "reproduce_all",
                               "--cores", "2", "--config", "scale=tiny", "hardware=fresh-hw", "claims=[layer_pruning]",
                               f"references_dir={src / 'references'}", *args],
                              cwd=src, env=env, capture_output=True, text=True, timeout=900)

    r = smk()
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    r = smk("-n")
    assert r.returncode == 0 and not _jobs(r.stdout), r.stdout[-2000:]
    judge = src / "repro/judges/layer_pruning.py"
    judge.write_text(judge.read_text().replace('"""', '"""(Rewrapped by the test.)\n', 1) + "\n# a comment\n")
    batching = src / "repro/data/batching.py"
    batching.write_text("# a comment the test added\n" + batching.read_text())
    r = smk("-n")
    assert r.returncode == 0 and not _jobs(r.stdout), r.stdout[-2000:]
    batching.write_text(batching.read_text() + "\n_edited_by_the_test = True\n")
    r = smk("-n")
    jobs = set(_jobs(r.stdout))
    assert r.returncode == 0 and {"translation_train", "lm_train", "claim", "claim_verdict"} <= jobs, r.stdout[-3000:]


def test_closure_follows_imports_and_stops_at_the_judge_side():
    files = {p.relative_to(ROOT).as_posix() for p in provenance.module_closure(("repro.claims.block_numerics",))}
    assert {"repro/claims/block_numerics.py", "repro/model/block.py", "repro/io.py",
            "repro/model/__init__.py"} <= files
    assert not {"repro/verdicts.py", "repro/registry/__init__.py", "repro/provenance.py",
                f"repro/judges/{CLAIM}.py", "repro/judging.py"} & files
    keys = provenance.claim_keys(CLAIM, {"a": 1})
    assert keys["code"] == provenance.claim_keys(CLAIM, {"a": 2})["code"]
    assert keys["config"] != provenance.claim_keys(CLAIM, {"a": 2})["config"]
    assert keys["measure"] != provenance.claim_keys(CLAIM, {"a": 2})["measure"]
    # thresholds enter the judge key only
    moved = provenance.claim_keys(CLAIM, {"a": 1}, thresholds={"t": 1.0})
    assert moved["measure"] == keys["measure"] and moved["judge"] != keys["judge"]


def test_stale_because_names_what_changed():
    now = provenance.claim_keys(CLAIM, {})
    assert provenance.stale_because(now, CLAIM) is None
    assert "before provenance keys" in provenance.stale_because({}, CLAIM)
    old = {**now, "code": "0" * 64, "code_files": {**now["code_files"], "repro/model/block.py": "x"}}
    assert provenance.stale_because(old, CLAIM) == "measurement code changed since: model/block.py"


def test_write_stamp_keeps_an_unchanged_key(tmp_path):
    stamp = tmp_path / "_keys" / "c.measure"
    assert provenance.write_stamp(stamp, "k1")
    before = stamp.stat().st_mtime_ns
    assert not provenance.write_stamp(stamp, "k1") and stamp.stat().st_mtime_ns == before
    assert provenance.write_stamp(stamp, "k2") and stamp.read_text().strip() == "k2"


def test_dirty_means_code_not_outputs_or_references(tmp_path):
    """A checkout whose only changes are outputs or the committed references measures the same code: a GPU node's copy
    travels without references/ (index entries removed), and that must not mark its measurements dirty."""
    def git(*args):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                       capture_output=True)

    for rel in ("repro/m.py", "references/results/hw/default/c/verdict.json", "results/x", "reports/y"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("1\n")
    git("init", "-q")
    git("add", "-A")
    git("commit", "-q", "-m", "init")
    assert provenance.git_commit(tmp_path)["dirty"] is False
    git("rm", "-r", "--cached", "-q", "references")
    shutil.rmtree(tmp_path / "references")
    (tmp_path / "results" / "x").write_text("2\n")
    assert provenance.git_commit(tmp_path)["dirty"] is False
    (tmp_path / "repro" / "m.py").write_text("2\n")
    assert provenance.git_commit(tmp_path)["dirty"] is True
