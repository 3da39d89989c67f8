"""What the report may read: the ``kind`` of a metrics row (repro.kinds, records.metric) and the declared
result files of a claim (write_results ``artifacts`` -> verdict.json -> repro.report.plots.ResultFiles). Every plot
module runs on a copy of a committed results folder that holds only the declared files, while every file it opens
is recorded: nothing undeclared may be read."""
from __future__ import annotations

import builtins
import io
import json
import shutil
from pathlib import Path

import pytest

from repro import registry
from repro import kinds
from repro.io import CORE_FILES, ResultsError, declared_files, metric, read_metrics, read_verdict, write_results
from repro.verdicts import verdict
from repro.config import ROOT
from repro.report.pages import claim_page
from repro.report.plots import ResultFiles

FP = {"hardware_id": "hw-test", "git": {"commit": "abc"}, "timestamp": "t", "hardware": {}, "software": {}}


@pytest.mark.parametrize("unit,kind", [("s", "time"), ("ms", "time"), ("s/1k steps", "time"), ("min", "time"),
                                       ("bytes", "memory"), ("MiB", "memory"), ("GB", "memory"),
                                       ("tokens/s", "rate"), ("GB/s", "rate"), ("TFLOP/s", "rate"),
                                       ("BLEU", "quality"), ("perplexity", "quality"), ("nats/token", "quality"),
                                       ("params", "count"), ("heads", "count"),
                                       ("frobenius", "statistic"), ("cosine", "statistic"), ("", "statistic")])
def test_kind_inferred_from_the_unit(unit, kind):
    assert metric("rmsnorm_speed", "m", 1.0, unit)["kind"] == kind


@pytest.mark.parametrize("unit", ["ratio", "x", "percent", "%", "fraction", "percent of layers"])
def test_dimensionless_rows_need_an_explicit_kind(unit):
    with pytest.raises(kinds.KindError, match="'speedup'.*needs kind="):
        metric("rmsnorm_speed", "speedup", 1.2, unit)
    assert metric("rmsnorm_speed", "speedup", 1.2, unit, kind="ratio_time")["kind"] == "ratio_time"
    assert metric("rmsnorm_speed", "gain", 1.2, unit, kind="statistic")["kind"] == "statistic"


def test_explicit_kind_checked_and_sweep_named_kind():
    with pytest.raises(kinds.KindError, match="not one of"):
        metric("rmsnorm_speed", "m", 1.0, "ratio", kind="speed")
    with pytest.raises(kinds.KindError, match="contradicts its unit"):
        metric("rmsnorm_speed", "m", 1.0, "s", kind="memory")
    # a computed size in a memory unit may say it is not a measured memory number
    assert metric("param_accounting", "weights_gb", 13.5, "GB", kind="count")["kind"] == "count"
    # a sweep variable called "kind" (head_pruning's attention kind) goes through sweep=
    row = metric("head_pruning", "heads_total", 8, "heads", sweep={"kind": "encoder_self"}, layer=1)
    assert row["kind"] == "count" and row["sweep"] == {"kind": "encoder_self", "layer": 1}


def test_kind_column_written_and_old_files_fall_back(tmp_path):
    rows = [metric("flash_attention", "attn_time", 0.1, "s"),
            metric("flash_attention", "fig2_speedup_over_math", 2.0, "x", kind="ratio_time"),
            metric("flash_attention", "memory_ratio", 3.0, "x", kind="ratio_memory")]
    write_results(tmp_path, claim="flash_attention", scale="default", metrics=rows,
                  verdict=verdict("flash_attention", "not_applicable", "t"), config={}, fingerprint=FP)
    assert "kind" in (tmp_path / "metrics.csv").read_text().splitlines()[0].split(",")
    assert list(read_metrics(tmp_path)["kind"]) == ["time", "ratio_time", "ratio_memory"]
    # a metrics.csv from before the column: the name patterns the comparison used to guess by (one fallback)
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "metrics.csv").write_text(
        "claim,metric,unit,value,sweep\nx,fig2_speedup_over_math,x,2.0,{}\nx,peak_reduction,x,3.0,{}\n"
        "x,gain,ratio,1.0,{}\nx,weights_gb,GB,1.0,{}\nx,peak_memory,MiB,1.0,{}\nx,bleu,BLEU,30,{}\n")
    assert list(read_metrics(tmp_path / "old", verify=False)["kind"]) == [
        "ratio_time", "ratio_memory", "statistic", "statistic", "memory", "quality"]


def test_declared_files_recorded_checked_and_refused_otherwise(tmp_path):
    (tmp_path / "curves").mkdir()
    (tmp_path / "curves" / "a.csv").write_text("step,loss\n1,2.0\n")
    (tmp_path / "runs.json").write_text(json.dumps({"runs": []}))
    (tmp_path / "scratch.json").write_text("{}")  # written by the claim, not declared
    write_results(tmp_path, claim="warmup_stability", scale="default", metrics=[metric("warmup_stability", "m", 1.0)],
                  verdict=verdict("warmup_stability", "not_applicable", "t"), config={}, fingerprint=FP,
                  artifacts=("runs.json", "curves/*.csv"))
    v = read_verdict(tmp_path)
    assert declared_files(v) == ["runs.json", "curves/a.csv"]
    files = ResultFiles(tmp_path, v)
    assert files.names("curves/*.csv") == ["curves/a.csv"] and files.read_json("runs.json") == {"runs": []}
    assert list(files.read_csv("curves/a.csv")["loss"]) == [2.0]
    with pytest.raises(ResultsError, match="scratch.json: not a declared result file"):
        files.path("scratch.json")
    (tmp_path / "curves" / "a.csv").write_text("step,loss\n1,9.0\n")
    with pytest.raises(ResultsError, match="a.csv: damaged or changed"):
        files.read_csv("curves/a.csv")
    with pytest.raises(ResultsError, match="missing.json: declared .* but no such file"):
        write_results(tmp_path / "b", claim="warmup_stability", scale="default", metrics=[],
                      verdict=verdict("warmup_stability", "not_applicable", "t"), config={}, fingerprint=FP,
                      artifacts=("missing.json",))


def _param_accounting_results(folder: Path) -> Path:
    write_results(folder, claim="param_accounting", scale="tiny", fingerprint=FP, config={"x": 1},
                  metrics=[metric("param_accounting", "m", float(i), row=i) for i in range(3)],
                  verdict=verdict("param_accounting", "not_applicable", "tiny"))
    return folder


def test_every_result_file_is_recorded_and_checked_by_the_page(tmp_path):
    """verdict.json records metrics.csv, config.json, fingerprint.json and measured.json; the page checks each one
    (a changed config.json stops it, naming the file) and says how many it checked."""
    from repro.io import check_results

    res = _param_accounting_results(tmp_path / "res")
    rec = read_verdict(res)["integrity"]
    assert set(rec) == {"metrics.csv", "config.json", "fingerprint.json", "measured.json"}
    page = claim_page("param_accounting", res, tmp_path / "p.md", tmp_path / "fig")
    assert "Integrity: 4 files checked" in page.read_text() and "unverified" not in page.read_text()
    for name in ("config.json", "fingerprint.json", "measured.json"):
        good = (res / name).read_bytes()
        (res / name).write_bytes(good.replace(b"{", b"{ ", 1))
        with pytest.raises(ResultsError, match=rf"{name}: damaged or changed since the run"):
            claim_page("param_accounting", res, tmp_path / "p.md", tmp_path / "fig")
        with pytest.raises(ResultsError, match=rf"{name}: damaged or changed"):
            check_results(res)
        (res / name).write_bytes(good)
    (res / "measured.json").unlink()
    assert check_results(res) is None  # an interrupted re-measurement, not damage


def test_a_verdict_without_a_record_is_unverified_and_sealing_records_it(tmp_path):
    from repro.report.publish import seal_reference

    res = _param_accounting_results(tmp_path / "references/results/hw-test/tiny/param_accounting")
    v = read_verdict(res)
    v.pop("integrity")
    (res / "verdict.json").write_text(json.dumps(v))
    page = claim_page("param_accounting", res, tmp_path / "p.md", tmp_path / "fig").read_text()
    assert "**Integrity: unverified**" in page
    sealed = seal_reference(tmp_path / "references", check_tree=False)
    assert sealed == [res / "verdict.json"]
    v = read_verdict(res)
    assert set(v["integrity"]) == {"metrics.csv", "config.json", "fingerprint.json", "measured.json"}
    assert v["integrity_sealed"]["files"] == sorted(v["integrity"]) and v["verdict"] == "not_applicable"
    page = (tmp_path / "references/reports/hw-test/tiny/param_accounting.md").read_text()
    assert "unverified" not in page and "recorded after the measurement" in page
    assert seal_reference(tmp_path / "references", check_tree=False) == []  # nothing left to record


def _committed_results() -> dict[str, Path]:
    """One committed results folder per claim that has a plot module (default scale, first machine found)."""
    found: dict[str, Path] = {}
    for v in sorted((ROOT / "references" / "results").glob("*/default/*/verdict.json")):
        claim = v.parent.name
        if claim in registry.claim_ids() and (ROOT / "repro" / "report" / "plots" / f"{claim}.py").exists():
            found.setdefault(claim, v.parent)
    return found


COMMITTED = _committed_results()


@pytest.mark.parametrize("claim", sorted(COMMITTED))
def test_plots_read_only_declared_files(claim, tmp_path, monkeypatch):
    src = COMMITTED[claim]
    dst = tmp_path / "results" / claim
    names = [*CORE_FILES, *declared_files(read_verdict(src))]
    for name in names:
        if (src / name).exists():
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src / name, dst / name)
    opened: list[Path] = []
    real_open = builtins.open

    def recording_open(file, *args, **kwargs):
        if isinstance(file, (str, Path)):
            opened.append(Path(file).resolve())
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", recording_open)
    monkeypatch.setattr(io, "open", recording_open)
    page = claim_page(claim, dst, tmp_path / "pages" / f"{claim}.md", tmp_path / "pages" / claim)
    monkeypatch.undo()
    read = {p.relative_to(dst.resolve()).as_posix() for p in opened if p.is_relative_to(dst.resolve())}
    assert read <= set(names), f"{claim}: read undeclared files {sorted(read - set(names))}"
    figures = sorted(p.name for p in (tmp_path / "pages" / claim).glob("*.png"))
    assert figures, f"{claim}: no figure from its declared files"
    assert page.read_text().count("![") == len(figures)
    if claim == "warmup_stability":  # the curves come from the declared runs.json and curves/*.csv
        assert "loss_curves.png" in figures and "curves/" in " ".join(read)


def test_run_time_comes_from_run_json_never_from_file_times(tmp_path):
    """The index's and the comparison's run time is the run.json record's (written by the workflow's onsuccess
    handler), not the benchmark files' mtimes, which a checkout or a copy resets."""
    import os
    import time

    from repro.report.runtime import compare_md, read_run_record, time_per_rule_md, write_run_record

    res = tmp_path / "results" / "hw" / "default"
    bench = res / "_benchmarks"
    bench.mkdir(parents=True)
    start = time.time()
    for job, wall, cpu in (("a", 600.0, 1100.0), ("b", 300.0, 290.0)):
        (bench / f"{job}.tsv").write_text(f"s\th:m:s\tmax_rss\tcpu_time\n{wall}\t0:10:00\t100\t{cpu}\n")
    rec = write_run_record(res, started=start - 1800, finished=start, status="success", hardware="hw",
                           scale="default", cores=2, targets=["reproduce_all"])
    assert rec["wall_minutes"] == 30.0 and rec["jobs"] == 2 and rec["core_minutes"] == round(1390 / 60, 2)
    # the clock the kernel reported (a VM's CPU name may carry none: one hardware id, hosts of different speeds)
    from repro.bench.fingerprint import cpu_mhz
    from repro.report.runtime import run_time_text

    assert rec["cpu_mhz"] == cpu_mhz() and (rec["cpu_mhz"] is None or rec["cpu_mhz"] > 0)
    assert "MHz" in run_time_text({**rec, "cpu_mhz": 2599.998}) and "MHz" not in run_time_text({**rec, "cpu_mhz": None})
    if rec["cpu_mhz"]:  # the comparison names each run's clock beside its wall time
        assert f"{rec['cpu_mhz']:.0f} MHz)" in "\n".join(compare_md(tmp_path / "results", "default"))
    for f in bench.iterdir():  # a checkout resets file times: the record must not care
        os.utime(f, (start - 10 * 86400, start - 10 * 86400))
    assert read_run_record(tmp_path / "results", "hw", "default")["wall_minutes"] == 30.0
    text = "\n".join(time_per_rule_md(tmp_path / "results", "hw", "default"))
    assert "30.0 min wall for 2 jobs" in text and "first start to last end" not in text
    table = "\n".join(compare_md(tmp_path / "results", "default"))
    assert "30.0 min" in table
    # a later invocation that only re-judged does not hide the run that measured
    write_run_record(res, started=time.time(), finished=time.time() + 6, status="success", hardware="hw",
                     scale="default", cores=2, targets=["reproduce_all"])
    assert read_run_record(tmp_path / "results", "hw", "default")["wall_minutes"] == 30.0


def test_claim_run_time_sums_its_jobs_and_the_shared_models_it_read(tmp_path):
    """A claim page's run time is the sum over its jobs' benchmark files (parts, measuring, judging, page) and,
    named apart, over the jobs that built the shared models its measured.json read (a claim split into 7 parts
    of 18 min once read "Runtime: 1.0 s", its last job's)."""
    import json

    from repro.report.runtime import claim_time, claim_time_text

    res = tmp_path / "results" / "hw" / "default"
    bench = res / "_benchmarks"
    bench.mkdir(parents=True)
    jobs = {"c.part0-of-2": (540.0, 530.0), "c.part1-of-2": (600.0, 590.0), "c": (1.0, 1.0), "c.verdict": (2.0, 1.0),
            "c.report": (7.0, 6.0), "cc": (999.0, 999.0), "other.part0-of-2": (999.0, 999.0),
            "translation_tokenizer": (6.0, 6.0), "translation_train": (858.0, 1700.0), "lm_train": (250.0, 240.0)}
    for job, (wall, cpu) in jobs.items():
        (bench / f"{job}.tsv").write_text(f"s\th:m:s\tmax_rss\tcpu_time\n{wall}\t0:10:00\t100\t{cpu}\n")
    (res / "c").mkdir()
    model = {"path": "results/hw/default/_models/translation", "file": "checkpoint_last.pt"}
    (res / "c" / "measured.json").write_text(json.dumps({"inputs": {"model_dir": model}}))
    t = claim_time(res / "c")
    assert sorted(t["own"]["job"]) == ["c", "c.part0-of-2", "c.part1-of-2", "c.report", "c.verdict"]
    assert sorted(t["shared"]["job"]) == ["translation_tokenizer", "translation_train"]  # not the LM: not read
    text = claim_time_text(res / "c")
    assert "19.2 min of job wall time" in text and "5 jobs (2 parts, measuring, judging, page)" in text
    assert "translation_train 14.3 min" in text and "33.6 min" in text and "lm_train" not in text
    # the translation benchmark is measured by translation_evaluate, not a job named after it
    (res / "translation").mkdir()
    (bench / "translation_evaluate.tsv").write_text("s\th:m:s\tmax_rss\tcpu_time\n30.0\t0:00:30\t100\t29.0\n")
    assert "translation_evaluate" in set(claim_time(res / "translation")["own"]["job"])
    assert claim_time_text(tmp_path / "nothing" / "hw" / "default" / "c").startswith("Run time: unknown")


def test_index_is_rewritten_with_the_run_time_when_the_run_ends(tmp_path, monkeypatch):
    """The index job runs before the run ends, so a complete run's own index said "run time unknown"; the
    workflow's end-of-run handler writes run.json and then the index again, which then shows the run's time."""
    import time

    from repro.workflow import Run

    w = Run({"scale": "tiny", "hardware": "test-hw", "results_dir": str(tmp_path / "results"),
             "reports_dir": str(tmp_path / "reports")}, ROOT, main_process=False, cores=2)
    monkeypatch.chdir(tmp_path)
    bench = tmp_path / w.res / "_benchmarks"
    bench.mkdir(parents=True)
    (tmp_path / w.rep).mkdir(parents=True)
    (tmp_path / w.rep / "index.md").write_text("run time unknown (no run.json)")
    w._started = time.time() - 1
    (bench / "index.tsv").write_text("s\th:m:s\tmax_rss\tcpu_time\n1.0\t0:00:01\t100\t1.0\n")
    w.record_run("success", ["reproduce_all"])
    index = (tmp_path / w.rep / "index.md").read_text()
    assert "run time unknown" not in index and "min wall for 1 jobs" in index


def test_run_core_minutes_are_the_jobs_exact_cpu_time(tmp_path):
    """Issue 38: Snakemake's benchmark samples a job's CPU every 30 s after its first 15 s and never counts what
    the job spends after its last sample (jobs of 132 s wall recorded 103 CPU-s), so run.json's core-minutes come
    from getrusage of the Snakemake process's children (exact), with the sampled sum beside them; a cluster run,
    whose jobs are not its children, keeps the sampled sum. The workflow also samples every second."""
    import inspect
    import subprocess
    import sys

    from snakemake import benchmark

    from repro.report.runtime import write_run_record
    from repro.workflow import BENCHMARK_SECONDS, _cpu_seconds, finer_benchmarks

    assert finer_benchmarks(), "this Snakemake's benchmarked() has no interval argument: its CPU times undercount"
    assert inspect.signature(benchmark.benchmarked).parameters["interval"].default == BENCHMARK_SECONDS == 1
    before = _cpu_seconds()
    subprocess.run([sys.executable, "-c", "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass"],
                   check=True)
    after = _cpu_seconds()
    assert 0.45 < after[0] - before[0] < 5, (before, after)  # the child's CPU time, counted once it was waited for
    res = tmp_path / "results" / "hw" / "default"
    (res / "_benchmarks").mkdir(parents=True)
    (res / "_benchmarks" / "a.tsv").write_text("s\th:m:s\tmax_rss\tcpu_time\n132\t0:02:12\t100\t103\n")
    kw = dict(started=0.0, finished=600.0, status="success", hardware="hw", scale="default", cores=2,
              targets=["reproduce_all"])
    rec = write_run_record(res, **kw, cpu={"jobs_cpu_s": 131.0, "snakemake_cpu_s": 6.0})
    assert (rec["core_minutes"], rec["core_minutes_source"]) == (round(131 / 60, 2), "rusage")
    assert rec["benchmark_core_minutes"] == round(103 / 60, 2) and rec["snakemake_core_minutes"] == 0.1
    rec = write_run_record(res, **kw, cpu={"jobs_cpu_s": 3.0, "snakemake_cpu_s": 6.0})  # jobs ran elsewhere
    assert (rec["core_minutes"], rec["core_minutes_source"]) == (round(103 / 60, 2), "benchmark")
    rec = write_run_record(res, **kw)
    assert (rec["core_minutes"], rec["core_minutes_source"]) == (round(103 / 60, 2), "benchmark")


def test_host_speed_probe_is_recorded_and_shown(tmp_path):
    """Issue 38: one hardware id runs on hosts of different speeds at the same reported clock, so run.json records
    the host's one-thread fp32 matmul speed before the first job and after the last, and the pages show it. The
    probe is a real measurement in a fresh process (positive, finite); a run without it shows no speed."""
    import math

    from repro.report import hostspeed
    from repro.report.runtime import compare_md, read_run_record, run_time_text, write_run_record

    small = hostspeed.matmul_gflops(n=64, reps=2, warmup=1)
    assert small > 0 and math.isfinite(small)
    g = hostspeed.probe()
    assert g is not None and 1 < g < 1e5, g
    res = tmp_path / "results" / "hw" / "default"
    (res / "_benchmarks").mkdir(parents=True)
    (res / "_benchmarks" / "a.tsv").write_text("s\th:m:s\tmax_rss\tcpu_time\n60\t0:01:00\t100\t59\n")
    rec = write_run_record(res, started=0.0, finished=600.0, status="success", hardware="hw", scale="default",
                           cores=2, targets=["reproduce_all"], host_speed=hostspeed.record(g, 97.4))
    assert rec["host_speed"]["start_gflops"] == g and rec["host_speed"]["end_gflops"] == 97.4
    assert rec["host_speed"]["probe"] == hostspeed.PROBE and rec["host_speed"]["node"]
    line = run_time_text(read_run_record(tmp_path / "results", "hw", "default"))
    assert f"host {g:.0f}/97 GFLOP/s" in line, line
    assert f"{g:.0f} GFLOP/s)" in "\n".join(compare_md(tmp_path / "results", "default"))
    assert "GFLOP/s" not in run_time_text({**rec, "host_speed": None})
    assert hostspeed.record(None, None) is None and "?/90" in hostspeed.text({"host_speed": hostspeed.record(None, 90)})


def test_committed_index_pages_state_the_run_time_of_their_run_json():
    """Issue 39: a reference's index page gives the wall time, jobs and core-minutes its run.json recorded (never a
    time from file dates); a page that disagrees with its run.json fails here."""
    checked = 0
    for rec_path in sorted((ROOT / "references" / "results").glob("*/*/run.json")):
        hw, scale = rec_path.parent.parent.name, rec_path.parent.name
        index = ROOT / "references" / "reports" / hw / scale / "index.md"
        if not index.exists():
            continue
        rec = json.loads(rec_path.read_text())
        text = index.read_text()
        assert f"{rec['wall_minutes']:.1f} min wall" in text, (hw, scale)
        assert f"{rec['core_minutes']:.1f} core-minutes" in text, (hw, scale)
        checked += 1
    assert checked, "no reference with a run.json"
