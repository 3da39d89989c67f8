"""Issue 15: nothing lost, nothing stale. One regression test per numbered item (resume at an epoch boundary,
config change restarts, typed --config overrides, file modes follow the umask, stale pages after an interrupted
forced rerun, model keys checked at DAG time, damaged inputs named, strided norm weights, visible progress).
Each test failed before its fix."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_workflow import planned_jobs
from repro.bench.fingerprint import fingerprint

ROOT = Path(__file__).resolve().parents[1]


# --- item 8: Triton norms with strided weight / bias views ---------------------------------------------------

@pytest.mark.parametrize("kind", ["rms", "layer"])
def test_norm_kernels_strided_weight_and_bias(kind):
    import repro.kernels as K

    if not K.interpreter_enabled():
        pytest.skip("CPU kernels need the Triton interpreter (TRITON_INTERPRET=1)")
    torch.manual_seed(0)
    n = 16
    x = torch.randn(3, 5, n, requires_grad=True)
    wbig = torch.randn(2 * n, requires_grad=True)
    bbig = torch.randn(3 * n, requires_grad=True)
    w, b = wbig[::2], bbig[1::3]
    assert not w.is_contiguous() and not b.is_contiguous()
    if kind == "rms":
        y = K.rms_norm(x, w, 1e-6)
        ref = torch.nn.functional.rms_norm(x, (n,), w, 1e-6)
    else:
        y = K.layer_norm(x, w, b, 1e-5)
        ref = torch.nn.functional.layer_norm(x, (n,), w, b, 1e-5)
    torch.testing.assert_close(y, ref, atol=1e-5, rtol=1e-5)
    g = torch.randn_like(y)
    inputs = (x, wbig) if kind == "rms" else (x, wbig, bbig)
    got = torch.autograd.grad(y, inputs, g)
    want = torch.autograd.grad(ref, inputs, g)
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e, atol=1e-4, rtol=1e-4)


# --- items 1 and 2: resume at an epoch boundary; a changed config restarts -----------------------------------

@pytest.fixture
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _task():
    from test_train import _fn, _reverse_task
    from repro.train.loop import OptimConfig, ScheduleConfig

    enc = _reverse_task(48, 1)
    return _fn(enc, 128), OptimConfig(lr=3e-3, clip_norm=1.0), ScheduleConfig("inverse_sqrt", warmup_steps=4)


def _same_weights(a, b):
    for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        torch.testing.assert_close(p, q, msg=n, rtol=1e-4, atol=1e-5)


def test_resume_from_a_checkpoint_on_an_epoch_s_last_batch(tmp_path, one_thread):
    """Item 1: the last checkpoint was written on the final batch of epoch 0; resume must start epoch 1 (it raised
    "train_batches_fn returned no batches" on every rerun)."""
    from test_train import _model
    from repro.train.loop import RunConfig, train

    fn, opt, sch = _task()
    per_epoch = sum(1 for _ in fn(0))
    run = RunConfig(seed=0, max_steps=per_epoch + 3, ckpt_every_steps=1000, progress=False)
    full = train(_model(seed=1), fn, None, opt, sch, run, ckpt_dir=tmp_path / "full")
    part = train(_model(seed=1), fn, None, opt, sch, run, ckpt_dir=tmp_path / "int", stop_after_steps=per_epoch)
    assert part.stop_reason == "interrupted" and part.steps == per_epoch
    m = _model(seed=7)
    res = train(m, fn, None, opt, sch, run, ckpt_dir=tmp_path / "int")
    assert res.resumed_from == per_epoch and res.steps == per_epoch + 3 and res.epochs == full.epochs
    assert [r["loss"] for r in res.curve] == pytest.approx([r["loss"] for r in full.curve], rel=1e-5)


def test_changed_training_config_restarts_and_keeps_the_old_state(tmp_path, one_thread, caplog):
    """Item 2: raising max_steps after a finished run, or changing the lr of an unfinished one, must not reuse the
    old weights; the old state is kept aside as checkpoint_last.stale.pt and named in the log."""
    from test_train import _model
    from repro.train.loop import OptimConfig, RunConfig, train

    fn, opt, sch = _task()
    ck = tmp_path / "state"
    train(_model(seed=1), fn, None, opt, sch, RunConfig(seed=0, max_steps=4, progress=False), ckpt_dir=ck)
    m_more = _model(seed=1)
    with caplog.at_level("WARNING", logger="repro.train"):
        more = train(m_more, fn, None, opt, sch, RunConfig(seed=0, max_steps=7, progress=False), ckpt_dir=ck)
    assert more.steps == 7 and more.resumed_from is None  # retrained, not "finished run, nothing to do" at 4
    assert (ck / "checkpoint_last.stale.pt").exists() and "run.max_steps" in caplog.text
    assert "checkpoint_last.stale.pt" in caplog.text
    m_fresh = _model(seed=1)
    train(m_fresh, fn, None, opt, sch, RunConfig(seed=0, max_steps=7, progress=False), ckpt_dir=tmp_path / "fresh")
    _same_weights(m_more, m_fresh)
    # an unfinished run with another learning rate starts afresh too
    ck2 = tmp_path / "state2"
    run = RunConfig(seed=0, max_steps=6, progress=False)
    train(_model(seed=1), fn, None, opt, sch, run, ckpt_dir=ck2, stop_after_steps=3)
    r = train(_model(seed=1), fn, None, OptimConfig(lr=1e-3, clip_norm=1.0), sch, run, ckpt_dir=ck2)
    assert r.resumed_from is None and r.steps == 6
    # a logging-only change still resumes
    ck3 = tmp_path / "state3"
    train(_model(seed=1), fn, None, opt, sch, run, ckpt_dir=ck3, stop_after_steps=3)
    r = train(_model(seed=1), fn, None, opt, sch, RunConfig(seed=0, max_steps=6, log_every=2, progress=False),
              ckpt_dir=ck3, ckpt_extra=None)
    assert r.resumed_from == 3
    # a different model / data record (ckpt_extra, as repro.train.pipeline passes it) restarts
    train(_model(seed=1), fn, None, opt, sch, run, ckpt_dir=ck3, stop_after_steps=1, ckpt_extra={"data": "a"})
    r = train(_model(seed=1), fn, None, opt, sch, run, ckpt_dir=ck3, ckpt_extra={"data": "b"})
    assert r.resumed_from is None


# --- item 3: typed --config overrides --------------------------------------------------------------------------

def test_overrides_given_as_strings_are_typed_by_the_schema():
    """Item 3: Snakemake hands nested --config values over as strings; they are coerced through the JSON schema."""
    from repro import config

    p = config.section("rank_collapse", "tiny", {"rank_collapse": {"seeds": ["0", "1"]}})
    assert p["seeds"] == [0, 1]
    p = config.section("head_pruning", "tiny",
                       {"head_pruning": {"model_dir": "null", "require_fairseq_checkpoint": "true"}})
    assert p["model_dir"] is None and p["require_fairseq_checkpoint"] is True
    p = config.section("head_pruning", "tiny", {"head_pruning": {"model_dir": "some/dir"}})
    assert p["model_dir"] == "some/dir"
    with pytest.raises(config.ConfigError, match="seeds"):
        config.section("rank_collapse", "tiny", {"rank_collapse": {"seeds": ["zero", "1"]}})


def smk(*args, cwd, timeout=600):
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def test_readme_typed_override_dry_runs(tmp_path):
    """Item 3, as the README shows it (failed with "'0' is not of type 'integer'")."""
    r = smk("reproduce_all", "-n", "--directory", str(tmp_path), "--cores", "1", "--config",
            "overrides={rank_collapse: {seeds: [0, 1]}, head_pruning: {model_dir: null}}", cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


# --- item 6: model-shape keys at DAG time ----------------------------------------------------------------------

def test_bad_model_key_fails_the_dry_run(tmp_path):
    """Item 6: a negative d_model passed the dry run and failed only after the tokenizer was trained."""
    r = smk("translation", "-n", "--directory", str(tmp_path), "--cores", "1", "--config", "scale=tiny",
            "overrides={translation: {model: {block: {d_model: -4}}}}", cwd=tmp_path)
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "invalid configuration" in out and "model.block.d_model" in out, out[-3000:]
    r = smk("translation", "-n", "--directory", str(tmp_path), "--cores", "1", "--config", "scale=tiny",
            "overrides={translation: {lm: {model: {n_decoder_layers: -1}}}}", cwd=tmp_path)
    assert r.returncode != 0 and "lm.model.n_decoder_layers" in r.stdout + r.stderr
    # the same sizes as typed numbers are fine
    r = smk("translation", "-n", "--directory", str(tmp_path), "--cores", "1", "--config", "scale=tiny",
            "overrides={translation: {model: {block: {d_model: 32, n_heads: 2}}}}", cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


# --- item 4: file modes follow the umask -----------------------------------------------------------------------

@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_results_pages_and_checkpoints_follow_the_umask(tmp_path, umask_022):
    """Item 4: atomic writes went through mkstemp and came out 0600 whatever the umask."""
    from repro.io import atomic_write_text, metric, write_results
    from repro.verdicts import verdict
    from repro.train.loop import save_checkpoint

    atomic_write_text(tmp_path / "page.md", "x")
    save_checkpoint(tmp_path / "ck.pt", {"w": torch.zeros(2)})
    write_results(tmp_path / "res", fingerprint=fingerprint(), claim="param_accounting", scale="tiny",
                  metrics=[metric("param_accounting", "m", 1.0)],
                  verdict=verdict("param_accounting", "not_applicable", "t"), config={})
    files = [tmp_path / "page.md", tmp_path / "ck.pt", *sorted((tmp_path / "res").iterdir())]
    assert {f.name: _mode(f) for f in files} == {f.name: 0o644 for f in files}
    os.umask(0o077)
    atomic_write_text(tmp_path / "private.md", "x")
    assert _mode(tmp_path / "private.md") == 0o600


# --- item 5: an interrupted forced rerun must not look complete --------------------------------------------------

def _tiny_results(tmp_path, claim="param_accounting"):
    """Results and page of one claim in a scratch project directory, as a finished tiny run leaves them."""
    from repro.io import metric, write_results
    from repro.verdicts import verdict

    res = tmp_path / "results/test-hw/tiny" / claim
    write_results(res, fingerprint=fingerprint(), claim=claim, scale="tiny", metrics=[metric(claim, "m", float(i), row=i) for i in range(5)],
                  verdict=verdict(claim, "not_applicable", "tiny"), config={})
    page = tmp_path / "reports/test-hw/tiny" / f"{claim}.md"
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text("# old page\n")
    return res, page


CFG = ["--config", "scale=tiny", "hardware=test-hw", "claims=[param_accounting]"]


def test_page_without_results_is_stale_and_the_claim_reruns(tmp_path):
    """Item 5: after an interrupted --forcerun Snakemake had removed the results but not the page, and
    `snakemake claim_<id>` said "Nothing to be done"."""
    res, page = _tiny_results(tmp_path)
    for f in ("verdict.json", "metrics.csv"):
        (res / f).unlink()
    r = smk("claim_param_accounting", "-n", "--directory", str(tmp_path), "--cores", "1", *CFG, cwd=tmp_path)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert "param_accounting" in planned_jobs(out) and "Nothing to be done" not in out, out[-3000:]
    assert page.exists(), "a dry run deletes nothing: the page is rebuilt by the jobs it plans"


BN = ["--config", "scale=tiny", "hardware=test-hw", "claims=[block_numerics]"]


@pytest.mark.slow  # two tiny runs of a claim through Snakemake (~40 s): the second stage
def test_interrupted_remeasurement_resumes(tmp_path):
    """An interrupted re-measurement: Snakemake removed the measuring job's outputs (metrics.csv, measured.json) and
    was stopped; verdict.json, another job's output, survived. The next run refused it as "damaged results"; now it
    measures and judges again, and finishes. Bytes that fail their record are still refused, naming the file."""
    r = smk("claim_block_numerics", "--directory", str(tmp_path), "--cores", "2", *BN, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = tmp_path / "results/test-hw/tiny/block_numerics"
    first = json.loads((res / "measured.json").read_text())
    assert {"metrics.csv", "config.json", "fingerprint.json", "measured.json"} <= set(
        json.loads((res / "verdict.json").read_text())["integrity"])
    for name in ("metrics.csv", "measured.json"):  # what Snakemake removes before re-measuring; verdict.json stays
        (res / name).unlink()
    r = smk("claim_block_numerics", "-n", "--directory", str(tmp_path), "--cores", "2", *BN, cwd=tmp_path)
    assert r.returncode == 0 and "block_numerics" in planned_jobs(r.stdout + r.stderr), r.stdout[-3000:] + r.stderr[-3000:]
    r = smk("claim_block_numerics", "--directory", str(tmp_path), "--cores", "2", *BN, cwd=tmp_path)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert {"block_numerics", "block_numerics.verdict", "claim_report"} <= set(planned_jobs(out)), out[-3000:]
    again = json.loads((res / "measured.json").read_text())
    verdict = json.loads((res / "verdict.json").read_text())
    assert again["started"] >= first["finished"] and verdict["timestamp"] == again["started"]
    from repro.io import check_results
    assert check_results(res)["integrity"]["metrics.csv"]["sha256"] == again["integrity"]["metrics.csv"]["sha256"]
    # real damage: a recorded file whose bytes changed is refused, naming it, before anything runs
    cfg = res / "config.json"
    cfg.write_text(cfg.read_text().replace('"tiny"', '"tinY"', 1))
    r = smk("claim_block_numerics", "-n", "--directory", str(tmp_path), "--cores", "2", *BN, cwd=tmp_path)
    assert r.returncode != 0 and "damaged results" in r.stdout + r.stderr and \
        "results/test-hw/tiny/block_numerics/config.json: damaged or changed" in r.stdout + r.stderr, \
        r.stdout[-3000:] + r.stderr[-3000:]


# --- item 7: damaged inputs named; old page kept ----------------------------------------------------------------

def test_truncated_metrics_csv_is_caught_by_the_integrity_record(tmp_path):
    from repro.io import ResultsError, read_json, read_metrics

    res, _ = _tiny_results(tmp_path)
    rec = read_json(res / "verdict.json")["integrity"]["metrics.csv"]
    assert rec["rows"] == 5 and len(rec["sha256"]) == 64
    assert len(read_metrics(res)) == 5
    lines = (res / "metrics.csv").read_text().splitlines(keepends=True)
    (res / "metrics.csv").write_text("".join(lines[:-2]))  # cut at a row boundary: still a valid CSV
    with pytest.raises(ResultsError, match=r"metrics.csv.*sha256"):
        read_metrics(res)


@pytest.mark.parametrize("name, content, message", [
    ("verdict.json", "", "verdict.json: damaged, not valid JSON"),
    ("verdict.json", '{"verdict": "reproduced"', "verdict.json: damaged"),
    ("verdict.json", '{"claim": "x"}', "verdict.json: damaged, no 'verdict'"),
    ("metrics.csv", "", "metrics.csv: damaged"),
    ("metrics.csv", "a,b\n1,2\n", "metrics.csv: damaged"),
])
def test_damaged_results_named_and_old_page_kept(tmp_path, name, content, message):
    """Item 7: JSONDecodeError / EmptyDataError / KeyError 'sweep' without a file name before; and the report
    rebuild deleted the old page. Now the error names the file, and the page is untouched."""
    res, page = _tiny_results(tmp_path)
    if name == "metrics.csv":  # a damaged file without its integrity record (older results) is still named
        v = json.loads((res / "verdict.json").read_text())
        v.pop("integrity")
        (res / "verdict.json").write_text(json.dumps(v))
    (res / name).write_text(content)
    r = subprocess.run([sys.executable, "-m", "repro.report", "claim", "--claim", "param_accounting", "--results",
                        str(res), "--page", str(page), "--figures", str(tmp_path / "fig")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and message in r.stderr and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert page.read_text() == "# old page\n"
    # under Snakemake the damage stops the run before any job removes the page
    r = smk("claim_param_accounting", "-n", "--directory", str(tmp_path), "--cores", "1", *CFG, cwd=tmp_path)
    assert r.returncode != 0 and message.split(":")[0] in r.stdout + r.stderr and page.exists()


def test_damaged_checkpoint_named(tmp_path):
    from repro.train.loop import CheckpointError, load_checkpoint

    empty = tmp_path / "checkpoint_last.pt"
    empty.write_bytes(b"")
    with pytest.raises(CheckpointError, match="checkpoint_last.pt: damaged checkpoint: the file is empty"):
        load_checkpoint(empty)
    trunc = tmp_path / "trunc.pt"
    torch.save({"w": torch.zeros(1000)}, trunc)
    trunc.write_bytes(trunc.read_bytes()[:300])
    with pytest.raises(CheckpointError, match=r"trunc.pt: damaged or unsafe checkpoint, not loadable with "
                                              r"weights_only=True \(RuntimeError: \S"):
        load_checkpoint(trunc)


@pytest.mark.parametrize("args, message", [
    (["--params", "{}"], "seeds"),
    (["--params", "[1]"], "expected a mapping"),
    (["--threads", "-3"], "--threads: must be >= 1, got -3"),
])
def test_claim_command_line_validates_params_and_threads(tmp_path, args, message):
    """Item 7: --params '{}' skipped validation (KeyError later); --threads -3 gave a raw RuntimeError."""
    r = subprocess.run([sys.executable, "-m", "repro.claims.rank_collapse", "--scale", "tiny", "--out",
                        str(tmp_path / "o"), *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert not (tmp_path / "o").exists()  # nothing ran


# --- item 9: progress lines with an ETA in the job log -----------------------------------------------------------

def test_training_logs_progress_with_eta_without_a_terminal(one_thread, caplog):
    """Item 9: under Snakemake (stderr piped into tee) only every log_every-th step was logged, without an ETA."""
    from test_train import _model
    from repro.train.loop import RunConfig, train

    fn, opt, sch = _task()
    with caplog.at_level("INFO", logger="repro.train"):
        train(_model(seed=1), fn, None, opt, sch,
              RunConfig(seed=0, max_steps=5, log_every=1000, progress_every_s=0.0, progress=True))
    lines = [r.getMessage() for r in caplog.records if "ETA" in r.getMessage()]
    assert len(lines) == 5 and lines[0].startswith("training: 1/5 steps (20%)") and "ETA done" in lines[-1], lines


def test_claim_sub_experiments_log_progress(caplog):
    from repro import config
    from repro.claims import block_numerics

    p = config.section("block_numerics", "tiny")
    with caplog.at_level("INFO", logger="repro"):
        block_numerics.deep_stack(p)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("deep stack experiments:")]
    assert len(lines) == 3 * len(p["deep_stack"]["seeds"]) and all("ETA" in l for l in lines), lines


# --- the README's snakemake commands run as written (dry run) ----------------------------------------------------

def _user_docs() -> str:
    """The documents a user follows: the README and docs/*.md (the README links the longer ones)."""
    return "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])


def _readme_snakemake_commands() -> list[list[str]]:
    import re
    import shlex

    text = _user_docs()
    cmds = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():  # a continued line is one command
            line = re.sub(r"<[^>]+>", "test-hw", line)  # placeholders such as <compute-node id>
            words = shlex.split(line, comments=True)
            if "&&" in words:
                words = words[words.index("&&") + 1:]
            if words and words[0] == ".venv/bin/snakemake" and "claim_my_claim" not in words  \
                    and words[1:] not in cmds:  # (the new claim of docs/adding_a_claim.md does not exist yet)
                cmds.append(words[1:])
    return cmds


@pytest.mark.slow  # over 20 s: the second stage (scripts/test_slow.sh, run by .ci/run)
def test_readme_snakemake_examples_dry_run(tmp_path):
    cmds = _readme_snakemake_commands()
    assert len(cmds) >= 8 and any("overrides=" in " ".join(c) for c in cmds)
    for args in cmds:
        if "--report" in args:  # builds the report (seconds to minutes): tests/test_report_browser.py runs it
            assert args[:2] == ["-s", "workflows/report.smk"], args  # the report view is its own workflow
            continue
        r = smk(*args, "-n", "--directory", str(tmp_path), cwd=ROOT, timeout=300)  # profiles/ is relative
        assert r.returncode == 0, f"README: snakemake {' '.join(args)}\n" + r.stdout[-2000:] + r.stderr[-2000:]


def test_readme_python_module_commands_exist_and_parse():
    """The README's ``.venv/bin/python -m repro...`` commands name modules that exist, and each answers --help (the
    benchmarks need a trained model or a fairseq venv to run for real; their runs are what the README reports)."""
    import re
    import shlex

    text = _user_docs()
    mods = set()
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(re.sub(r"<[^>]+>", "x", line), comments=True)
            if len(words) > 2 and words[0] == ".venv/bin/python" and words[1] == "-m" and words[2].startswith("repro"):
                mods.add(words[2])
    assert {"repro.peers.throughput", "repro.peers.fairseq"} <= mods
    for mod in sorted(mods):
        r = subprocess.run([sys.executable, "-m", mod, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and "usage:" in r.stdout, f"README: python -m {mod} --help\n{r.stderr[-2000:]}"


# --- one writer per results folder -------------------------------------------------------------------------------

def test_second_writer_of_a_results_folder_fails_at_once_and_a_killed_one_blocks_nothing(tmp_path):
    """Two runs of a claim's command line into one folder: the second stops at once, naming the folder and the
    first one's pid; a writer killed with SIGKILL leaves no lock behind (the OS lock dies with it)."""
    import signal
    import time

    from repro.io import writer_lock

    out = tmp_path / "param_accounting"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom repro.io import writer_lock\n"
                               f"with writer_lock({str(out)!r}):\n    print('held', flush=True)\n    time.sleep(120)"],
                              stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout.readline().strip() == "held"
        t0 = time.time()
        r = subprocess.run([sys.executable, "-m", "repro.claims.param_accounting", "--scale", "tiny", "--out",
                            str(out)], capture_output=True, text=True, timeout=300)
        assert r.returncode == 1 and f"{out}: another process is writing" in r.stderr, r.stderr[-2000:]
        assert f"pid {holder.pid}" in r.stderr and "Traceback" not in r.stderr and time.time() - t0 < 60
        assert not (out / "metrics.csv").exists()  # it wrote nothing
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with writer_lock(out):  # the killed holder's lock went with it
        pass
