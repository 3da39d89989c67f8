"""The Snakemake workflow: lint, dry run at the default scale, bad input, and a tiny end-to-end run."""
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile")]


def smk(*args, cwd=ROOT, timeout=600, env=None):
    return subprocess.run([*SNAKEMAKE, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=None if env is None else {**os.environ, **env})


def unkeyed_files(records: Path, results: Path) -> list[str]:
    """Every repro file a measuring or judging job loaded (the records of REPRO_RECORD_MODULES, repro/__init__.py)
    that its key does not cover: a claim's measurement (``--measure-only`` / ``--part``) and a shared artefact's
    build against their code key (the judge side and the keys' own module may load: they cannot change a
    measurement), a judging job against its judge key. Empty when every key covers what ran."""
    from repro import provenance

    artefact_of = {"repro.train.prepare": "tokenizer", "repro.train.train": "translation_model",
                   "repro.train.evaluate": "translation_evaluate"}
    judge_side = {p for p in provenance.ROOT.joinpath("repro").rglob("*.py")
                  if provenance._stopped(p.relative_to(provenance.ROOT).as_posix(), provenance.JUDGE_SIDE)}
    judge_side = {p.relative_to(provenance.ROOT).as_posix() for p in judge_side} | set(provenance.NOT_CODE)
    missing, checked = [], 0
    for path in sorted(records.glob("*.json")):
        rec = json.loads(path.read_text())
        argv = rec["argv"]
        module = argv[argv.index("-m") + 1] if "-m" in argv else ""
        claim = module.removeprefix("repro.claims.") if module.startswith("repro.claims.") else None
        if claim and ("--measure-only" in argv or "--part" in argv):
            keys = json.loads((results / claim / "measured.json").read_text())["keys"]
            covered = set(provenance.current_code(claim, keys.get("needs"))["code_files"]) | judge_side
        elif (claim and "--rejudge" in argv) or module == "repro.judging":
            claim = claim or argv[argv.index("--claim") + 1]
            covered = set(provenance.current_code(claim)["judge_files"]) | set(provenance.NOT_CODE)
        elif module in artefact_of:
            code = provenance._artefact_code(artefact_of[module])
            covered = set(code["code_files"]) | set(code.get("judge_files") or {}) | judge_side
        else:
            continue
        checked += 1
        missing += [f"{module} {' '.join(argv[argv.index(module) + 1:][:1])}: {f}" for f in rec["files"]
                    if f not in covered]
    assert checked, f"no measuring job recorded its modules under {records}"
    return sorted(set(missing))


def planned_jobs(text: str) -> list[str]:
    """The jobs Snakemake printed (dry run or run): rule names, with a job of the one claim rule named by its claim
    id (``rule claim:`` ... ``wildcards: claim=<id>``)."""
    jobs = []
    for line in text.splitlines():
        m = re.match(r"^(?:local)?rule (\w+):", line)
        if m:
            jobs.append(m.group(1))
        w = re.match(r"^\s+wildcards: .*\bclaim=(\w+)", line)
        if w and jobs and jobs[-1] == "claim":
            jobs[-1] = w.group(1)
        elif w and jobs and jobs[-1] == "claim_verdict":
            jobs[-1] = f"{w.group(1)}.verdict"
    return jobs


def test_lint_clean():
    r = smk("--lint")
    assert r.returncode == 0 and "Congratulations" in r.stdout + r.stderr, r.stdout + r.stderr


def test_dry_run_reproduce_all_default(tmp_path):
    r = smk("reproduce_all", "-n", "--directory", str(tmp_path), "--cores", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout + r.stderr
    for claim in ("param_accounting", "block_numerics"):
        assert claim in out
    assert "index" in out and "translation_evaluate" in out  # the whole suite includes the BLEU benchmark


def test_snakemake_report_needs_no_cores(tmp_path):
    """Snakemake's own idiom after a run, ``snakemake --report report.html``, builds the report without --cores (the
    Snakefile reads the cores it was given, None here, instead of ``workflow.cores``, which refuses to answer)."""
    (tmp_path / "results/test-hw/tiny/param_accounting").mkdir(parents=True)  # a tiny results folder: one claim
    r = smk("--report", str(tmp_path / "report.html"), "--directory", str(tmp_path), "--config", "hardware=test-hw",
            "scale=tiny", "claims=[param_accounting]")
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "total number of cores" not in out, out[-3000:]
    assert (tmp_path / "report.html").stat().st_size > 10_000


def _fresh_copy(repo: Path) -> Path:
    """The checkout's files (tracked and untracked, not ignored; no test fixtures) committed in a new repository."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split("\n")
    for f in filter(None, files):
        if (ROOT / f).is_file() and not f.startswith("tests/fixtures/"):
            (repo / f).parent.mkdir(parents=True, exist_ok=True)
            (repo / f).write_bytes((ROOT / f).read_bytes())
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "fresh"], cwd=repo, check=True)
    return repo


@pytest.mark.slow  # a real run of one claim (about a minute)
def test_a_clone_and_folders_with_spaces_run_a_claim(tmp_path):
    """A clone whose path holds a space, with results and reports folders holding one: one claim measured,
    judged and paged, every file where the folders say."""
    repo = _fresh_copy(tmp_path / "my clone")
    r = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(repo / "Snakefile"), "claim_block_numerics",
                        "--cores", "2", "--config", "scale=tiny", "hardware=test-hw", "results_dir=my results",
                        "reports_dir=my reports"], cwd=repo, capture_output=True, text=True, timeout=900,
                       env={**os.environ, "PYTHONPATH": str(repo)})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    verdict = json.loads((repo / "my results/test-hw/tiny/block_numerics/verdict.json").read_text())
    assert verdict["verdict"] == "not_applicable" and verdict["hardware"] == "test-hw"
    assert "Verdict" in (repo / "my reports/test-hw/tiny/block_numerics.md").read_text()
    assert not (repo / "my").exists()  # no path split at its space


def test_a_dry_run_writes_nothing_outside_snakemakes_folder(tmp_path):
    """Parsing the workflow and a dry run of reproduce_all in a fresh copy of the checkout write and delete nothing
    (git status --ignored unchanged, apart from Snakemake's own .snakemake/, where the freshness keys live)."""
    repo = _fresh_copy(tmp_path / "repo")
    before = subprocess.run(["git", "status", "--ignored", "--porcelain"], cwd=repo, capture_output=True,
                            text=True).stdout
    r = subprocess.run([sys.executable, "-m", "snakemake", "-n", "reproduce_all", "--cores", "2"], cwd=repo,
                       capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(repo)})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    after = subprocess.run(["git", "status", "--ignored", "--porcelain"], cwd=repo, capture_output=True,
                           text=True).stdout
    new = [line for line in after.splitlines() if line not in before.splitlines() and line != "!! .snakemake/"]
    assert not new, new


def test_narrowed_run_skips_the_translation_benchmark(tmp_path):
    """A run narrowed to claims that do not use the translation task does not train or import a translation model."""
    r = smk("reproduce_all", "-n", "--directory", str(tmp_path), "--cores", "2", "--config", "scale=paper",
            "claims=[prepost_gradients, rank_collapse]")
    assert r.returncode == 0, r.stdout + r.stderr
    rules = set(planned_jobs(r.stdout))
    assert {"prepost_gradients", "rank_collapse", "index"} <= rules and not {"translation_train", "lm_train"} & rules
    r = smk("reproduce_all", "-n", "--directory", str(tmp_path), "--cores", "2", "--config", "claims=[head_pruning]")
    assert r.returncode == 0 and "translation_evaluate" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("config, message", [
    (["scale=huge"], "scale"),
    (["claims=[bogus]"], "unknown claim id 'bogus'"),
    (["hardware=Bad Id!"], "hardware"),
    (["overrides={block_numerics: {deep_stack: {steps: 0}}}"], "deep_stack.steps"),
    (["overrides={nonexistent: {a: 1}}"], "overrides.nonexistent"),
    (["results_dir=references/results"], "results_dir: 'references/results' is inside references_dir"),
    (["reports_dir=results/pages"], "reports_dir: 'results/pages' and results_dir 'results' overlap"),
    (["claims=3"], "claims: 3 is not a list of claim ids, e.g. claims=[rank_collapse]"),
])
def test_bad_config_names_the_key(tmp_path, config, message):
    r = smk("-n", "--directory", str(tmp_path), "--config", *config)
    assert r.returncode != 0
    assert "invalid configuration" in r.stdout + r.stderr and message in r.stdout + r.stderr, r.stdout + r.stderr


def test_a_configfile_naming_a_key_twice_is_refused(tmp_path):
    """Snakemake's own reading of --configfile keeps the last of a key given twice; the workflow reads the file
    again and refuses it, naming the file and the key."""
    (tmp_path / "mine.yaml").write_text("scale: tiny\nclaims: [block_numerics]\nscale: paper\n")
    r = smk("-n", "--directory", str(tmp_path), "--cores", "1", "--configfile", str(tmp_path / "mine.yaml"))
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "mine.yaml: not valid YAML" in out and "duplicate key 'scale'" in out, out[-3000:]


def _shell_commands(text: str) -> list[list[str]]:
    """The shell commands of a ``snakemake -n -p`` run, each split as the shell splits it into words."""
    return [shlex.split(line.removeprefix("Shell command: ")) for line in text.splitlines()
            if line.startswith("Shell command: ") and line != "Shell command: None"]  # None: a target rule


def test_folders_with_spaces_and_shell_syntax_reach_the_jobs_as_one_word(tmp_path):
    """Output folders are quoted in every command: a space stays inside the path and a ``$(...)`` is a name, not
    a command (the dry run prints the commands; the shell splits them as the jobs would run)."""
    r = smk("claim_block_numerics", "-n", "-p", "--directory", str(tmp_path), "--cores", "1", "--config",
            "scale=tiny", "hardware=test-hw", "results_dir=my results", "reports_dir=r$(touch INJECTED)")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    commands = _shell_commands(r.stdout)
    assert len(commands) == 3, r.stdout[-3000:]  # measure, judge, page
    res, page = "my results/test-hw/tiny/block_numerics", "r$(touch INJECTED)/test-hw/tiny/block_numerics.md"
    words = [w for c in commands for w in c]
    assert words.count(res) == 3 and page in words, commands  # --out twice, --results once; the page one word
    assert all(c[0] == sys.executable for c in commands), commands  # the interpreter, one word too
    assert not list(tmp_path.rglob("INJECTED")) and not (ROOT / "INJECTED").exists()
    assert not (tmp_path / "my results").exists()  # a dry run writes no results


def _git_status() -> str:
    return subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout


def _reference_for(refs: Path, hw: str, claims: list[str]) -> dict[Path, bytes]:
    """A committed-looking reference of ``hw`` at the tiny scale (measured by another commit, long before this run), made by
    the claim modules themselves; returns every file with its bytes."""
    for claim in claims:
        out = refs / "results" / hw / "tiny" / claim
        subprocess.run([sys.executable, "-m", f"repro.claims.{claim}", "--scale", "tiny", "--out", str(out),
                        "--hardware", hw],
                       cwd=ROOT, check=True, capture_output=True)
        v = json.loads((out / "verdict.json").read_text())
        v["commit"] = v["provenance"]["measured"]["commit"] = "0" * 40
        v["provenance"]["measured"]["dirty"] = False
        v["timestamp"] = v["provenance"]["measured"]["started"] = "2026-01-01T00:00:00+00:00"
        (out / "verdict.json").write_text(json.dumps(v))
    return {p: p.read_bytes() for p in refs.rglob("*") if p.is_file()}


@pytest.mark.slow  # over 20 s: the second stage (scripts/test_slow.sh, run by .ci/run)
def test_tiny_end_to_end(tmp_path):
    """reproduce_all at scale tiny in a scratch directory, then rerun one claim alone.

    A committed reference of the same hardware id exists (references/results/test-hw/tiny/): the run measures
    every claim itself (each verdict carries the checkout's commit and a time after the start), the reference
    files are byte-identical afterwards, the matrix shows both, and no tracked file of the checkout changed."""
    from datetime import datetime, timezone

    refs = tmp_path / "references"
    reference = _reference_for(refs, "test-hw", ["param_accounting", "block_numerics"])
    status_before = _git_status()
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    start = datetime.now(timezone.utc).replace(microsecond=0)
    cfg = ["scale=tiny", "hardware=test-hw", f"references_dir={refs}"]
    records = tmp_path / "loaded-modules"
    r = smk("reproduce_all", "--cores", "2", "--directory", str(tmp_path), "--config", *cfg, timeout=1500,
            env={"REPRO_RECORD_MODULES": str(records)})
    assert r.returncode == 0, r.stdout[-5000:] + r.stderr[-5000:]
    res = tmp_path / "results/test-hw/tiny"
    # every repro file a measurement or a judgement loaded is in its key (else editing it would change a result
    # that stays "fresh")
    assert not unkeyed_files(records, res), unkeyed_files(records, res)
    index = (tmp_path / "reports/test-hw/tiny/index.md").read_text()
    from repro import registry
    for claim in registry.claim_ids():
        assert claim in index  # every registered claim is listed, built or not
    # the user's run is their own: every verdict measured and judged by this checkout, now
    verdicts = sorted(res.glob("*/verdict.json"))
    assert {v.parent.name for v in verdicts} == set(registry.implemented_claims()) | {"translation"}
    for path in verdicts:
        prov = json.loads(path.read_text())["provenance"]
        assert prov["source"] == "run" and prov["measured"]["commit"] == head == prov["judged"]["commit"], path
        assert datetime.fromisoformat(prov["measured"]["started"]) >= start, path
        assert prov["measured"]["keys"]["code"] and prov["measured"]["keys"]["measure"], path
    assert {p: p.read_bytes() for p in refs.rglob("*") if p.is_file()} == reference  # references untouched
    assert _git_status() == status_before  # nothing tracked changed (results/ and reports/ are ignored)
    matrix_md = (tmp_path / "reports/matrix.md").read_text()
    assert "| A | `test-hw` | this checkout |" in matrix_md and "| B | `test-hw` | reference | 0000000 2026-01-01" \
        in matrix_md
    csv = pd.read_csv(tmp_path / "reports/matrix.csv")  # the same cells as data: one row per machine x claim
    assert set(csv["source"]) == {"run", "reference"} and not csv.duplicated(["source", "hardware", "claim"]).any()
    assert (tmp_path / "reports/test-hw/tiny/translation.md").exists()  # the shared model's benchmark has a page
    # issue 18: every job of the run wrote Snakemake's benchmark file beside the results, and the index tabulates
    # them (the index itself, the matrix and the comparison run after it and have theirs too)
    from repro.report.runtime import read_benchmarks
    jobs = [j for j in planned_jobs(r.stdout + r.stderr) if j != "reproduce_all"]
    bench = read_benchmarks(tmp_path / "results", "test-hw", "tiny")
    names = set(bench["job"])
    assert set(registry.implemented_claims()) <= names and {"translation_train", "lm_train", "index", "matrix",
                                                            "compare_hardware"} <= names, sorted(names)
    # each claim was measured (its `claim` job) and judged (its `claim_verdict` job) by this run
    assert {f"{c}.verdict" for c in registry.implemented_claims()} <= names
    assert len(names) == len(jobs), (sorted(names), jobs)  # one file per job, nothing missing or left over
    assert (bench["wall_s"] > 0).all() and (bench["max_rss_mb"] > 0).all()
    # workflow.parts (tiny: 2): warmup_stability's runs trained by two part jobs, then judged with every run kept
    assert {"warmup_stability.part0-of-2", "warmup_stability.part1-of-2"} <= names
    done = [json.loads((res / "warmup_stability/parts" / f"{i}-of-2.done").read_text())["runs"] for i in range(2)]
    runs = json.loads((res / "warmup_stability/runs.json").read_text())["runs"]
    assert sorted(done[0] + done[1]) == sorted(r["name"] for r in runs) and done[0] and done[1]
    assert "0 to train" in (tmp_path / "logs/test-hw/tiny/warmup_stability.log").read_text()
    # head_pruning's stage groups measured by its two part jobs and kept by the claim job (the rows of one job)
    assert {"head_pruning.part0-of-2", "head_pruning.part1-of-2"} <= names
    measured = [json.loads((res / "head_pruning/parts" / f"{i}-of-2.done").read_text())["measured"] for i in range(2)]
    assert sorted(measured[0] + measured[1]) == ["ablation", "l0", "pruning", "random_orders"]
    decodes = pd.read_csv(res / "head_pruning/metrics.csv").query("metric == 'decode_calls'")["sweep"]
    assert json.loads(decodes.iloc[0])["groups_kept"] == 4
    assert "## Time per rule" in index and "| translation_train |" in index
    assert "run time unknown" not in index and "min wall for" in index  # rewritten once run.json was written
    assert "Run time: " in (tmp_path / "reports/test-hw/tiny/warmup_stability.md").read_text()  # summed over its jobs
    assert "Run time per machine" in (tmp_path / "reports/compare/tiny/index.md").read_text()
    for claim in ("param_accounting", "block_numerics"):
        verdict = json.loads((res / claim / "verdict.json").read_text())
        assert verdict["verdict"] == "not_applicable"  # tiny never claims a verdict
        fp = json.loads((res / claim / "fingerprint.json").read_text())
        assert fp["hardware_id"] == "test-hw" and fp["hardware"]["cpu"]  # the configured id, the detected machine
        assert fp["software"]["torch"] and "commit" in fp["git"] and fp["config_hash"]
        frame = pd.read_csv(res / claim / "metrics.csv")
        assert {"claim", "metric", "unit", "value", "sweep", "published_key"} <= set(frame.columns)
        assert not {"published_value", "source"} & set(frame.columns)  # the registry's, read when rows are read
        assert set(frame["hardware"]) == {"test-hw"} and verdict["hardware"] == "test-hw"
        page = (tmp_path / f"reports/test-hw/tiny/{claim}.md").read_text()
        assert "Verdict" in page and "Measured beside published" in page
        assert list((tmp_path / f"reports/test-hw/tiny/{claim}").glob("*.png"))
    r = smk("-s", str(ROOT / "workflows" / "report.smk"), "--directory", str(tmp_path), "--config", *cfg,
            "--report", str(tmp_path / "report.zip"))
    assert r.returncode == 0 and (tmp_path / "report.zip").stat().st_size > 10_000, r.stdout[-3000:] + r.stderr[-3000:]
    # rerun exactly one claim: only its experiment and page are redone
    before = (res / "block_numerics/verdict.json").stat().st_mtime_ns
    r = smk("claim_param_accounting", "--cores", "2", "--directory", str(tmp_path), "--config", *cfg,
            "--forcerun", "claim")  # forces the claim rule's jobs in this target's DAG: param_accounting's only
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "param_accounting" in planned_jobs(r.stdout + r.stderr)
    assert "block_numerics" not in planned_jobs(r.stdout + r.stderr)
    assert (res / "block_numerics/verdict.json").stat().st_mtime_ns == before


def test_hardware_id_is_decided_once_and_passed_to_every_job(tmp_path):
    """Issue 14: `hardware=gpu_h200.node` filed results under results/gpu_h200.node/ while the files inside said
    gpu-h200-node. An id that is not a slug is refused naming the key and the id to use; a valid one reaches every
    claim job on its command line (--hardware), so folder and files agree."""
    r = smk("claim_param_accounting", "-n", "--directory", str(tmp_path), "--cores", "1", "--config",
            "hardware=gpu_h200.node")
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "hardware: 'gpu_h200.node'" in out and "'gpu-h200-node'" in out, out
    r = smk("claim_param_accounting", "-n", "-p", "--directory", str(tmp_path), "--cores", "1", "--config",
            "hardware=gpu-h200-node")
    assert r.returncode == 0, r.stderr
    assert "--hardware gpu-h200-node" in r.stdout and "results/gpu-h200-node/default/param_accounting" in r.stdout


def test_parts_need_a_claim_that_can_split_its_runs(tmp_path):
    """workflow.parts > 1 on a claim without run_part stops the workflow with the file and key named."""
    from snakemake.exceptions import WorkflowError

    from repro.workflow import Run, _defines

    assert _defines(ROOT / "repro/claims/warmup_stability.py", "run_part")
    assert not _defines(ROOT / "repro/claims/param_accounting.py", "run_part")
    w = Run({"scale": "tiny", "hardware": "test-hw", "results_dir": str(tmp_path / "results"),
             "reports_dir": str(tmp_path / "reports")}, ROOT, main_process=False)
    assert w.parts("warmup_stability") == ["0-of-2", "1-of-2"]
    assert w.parts("param_accounting") == []
    w._specs["param_accounting"] = {**w.spec("param_accounting"), "parts": 3}
    with pytest.raises(WorkflowError, match=r"param_accounting.yaml \[workflow\]: parts: 3.*no run_part"):
        w.parts("param_accounting")
