"""Where the time of a run goes: the per-job files of Snakemake's ``benchmark:`` directive.

Every rule of the workflow writes ``results/<hardware>/<scale>/_benchmarks/<job>.tsv`` (Snakemake's columns:
``s`` wall seconds, ``cpu_time`` CPU seconds, ``max_rss`` MB, ``mean_load`` percent of one core, ...). This module
reads them into one table per hardware and scale: the index page shows it ("Time per rule"), and the hardware
comparison puts every machine's totals side by side.

Totals: ``sum of jobs`` adds the jobs' wall times (what one core would take running them one after the other).
The wall time of a run is never read from files' times (a checkout or a copy resets them): each ``snakemake``
invocation that runs jobs records itself in ``results/<hardware>/<scale>/run.json`` (:func:`write_run_record`: start,
end, the jobs it ran, their core-minutes, commit, machine), publishing copies it into the reference, and the pages
read it (:func:`read_run_record`).
"""
from __future__ import annotations

import math
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from repro.bench.fingerprint import cpu_mhz, fingerprint
from repro.io import atomic_write_json, read_json
from repro.layout import ARTEFACT_JOBS, ARTEFACTS, MEASURING_JOB
from repro.provenance import git_commit
from repro.report import hostspeed
from repro.report.origin import sources

BENCH_DIR = "_benchmarks"
RUN_RECORD = "run.json"
HISTORY = 20  # earlier invocations kept in run.json's ``earlier``


def read_benchmarks(results_root: str | Path, hardware: str, scale: str) -> pd.DataFrame:
    """One row per job: job, wall_s, cpu_s, max_rss_mb, mean_load, end (file time, s since the epoch). Empty when
    the folder holds none."""
    folder = Path(results_root) / hardware / scale / BENCH_DIR
    rows = []
    for f in sorted(folder.glob("*.tsv")) if folder.is_dir() else []:
        try:
            t = pd.read_csv(f, sep="\t")
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError):
            continue  # a damaged benchmark file is not worth stopping a report for; the job shows as missing
        if t.empty or "s" not in t:
            continue
        last = t.iloc[-1]  # one row per run of the job (``repeat`` gives several; the last is the newest)

        def num(col):
            v = pd.to_numeric(last.get(col), errors="coerce")
            return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)

        rows.append({"job": f.stem, "wall_s": num("s"), "cpu_s": num("cpu_time"), "max_rss_mb": num("max_rss"),
                     "mean_load": num("mean_load"), "end": f.stat().st_mtime})
    return pd.DataFrame(rows, columns=["job", "wall_s", "cpu_s", "max_rss_mb", "mean_load", "end"])


def write_run_record(results_dir: str | Path, *, started: float, finished: float, status: str, hardware: str,
                     scale: str, cores: int | None, targets: list[str], host_speed: dict | None = None,
                     cpu: dict | None = None) -> dict:
    """Record one ``snakemake`` invocation in ``results_dir/run.json`` (the workflow's onsuccess / onerror handler):
    when it started and ended, its wall minutes, the jobs it ran (benchmark files written since it started) with
    their core-minutes (CPU time) and summed wall minutes, the commit, the machine (with the CPU clock the kernel
    reports at the end: :func:`cpu_mhz`; ``host_speed``: the probe of repro.report.hostspeed before the first job and
    after the last, where measured) and the cores it was given. ``core_minutes`` is the CPU time of the run's jobs:
    exact where the workflow measured it (``cpu``: ``jobs_cpu_s``, the Snakemake process's waited-for children, and
    ``snakemake_cpu_s``, its own), else the sum of the benchmark files' sampled CPU times (``benchmark_core_minutes``,
    always recorded; it misses what a job spends after its last sample, and a cluster's jobs are not the Snakemake
    process's children, so their sampled sum is used there). An earlier record of the same folder moves to
    ``earlier`` (the newest first)."""
    folder = Path(results_dir)
    frame = read_benchmarks(folder.parent.parent, hardware, scale)
    ran = frame[frame["end"] >= started - 1] if not frame.empty else frame
    fp = fingerprint(hardware)

    def iso(t: float) -> str:
        return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="seconds")

    sampled = round(float(ran["cpu_s"].fillna(0).sum()) / 60, 2) if len(ran) else 0.0
    exact = None if not cpu or cpu.get("jobs_cpu_s") is None else round(cpu["jobs_cpu_s"] / 60, 2)
    # the children's CPU below half the sampled sum: the jobs ran elsewhere (a cluster), not as our children
    use_exact = exact is not None and exact >= 0.5 * sampled
    record = {"status": status, "started": iso(started), "finished": iso(finished),
              "wall_minutes": round((finished - started) / 60, 2), "jobs": int(len(ran)),
              "core_minutes": exact if use_exact else sampled,
              "core_minutes_source": "rusage" if use_exact else "benchmark",
              "benchmark_core_minutes": sampled,
              "snakemake_core_minutes": (round(cpu["snakemake_cpu_s"] / 60, 2)
                                         if cpu and cpu.get("snakemake_cpu_s") is not None else None),
              "sum_job_wall_minutes": round(float(ran["wall_s"].fillna(0).sum()) / 60, 2) if len(ran) else 0.0,
              "jobs_run": sorted(ran["job"].tolist()) if len(ran) else [], "cores": cores, "targets": targets,
              "hardware": hardware, "scale": scale, "git": git_commit(),
              "machine": fp.get("hardware"), "cpu_mhz": cpu_mhz(), "host_speed": host_speed,
              "software": fp.get("software")}
    old = read_json(folder / RUN_RECORD) if (folder / RUN_RECORD).is_file() else None
    if old:
        record["earlier"] = ([{k: v for k, v in old.items() if k != "earlier"}] + list(old.get("earlier") or []))[:HISTORY]
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_json(folder / RUN_RECORD, record)
    return record


def read_run_record(results_root: str | Path, hardware: str, scale: str) -> dict | None:
    """The newest run.json record of a results (or reference) folder that ran the most jobs among its recent
    invocations (a later invocation that only re-judged does not hide the run that measured), or None."""
    path = Path(results_root) / hardware / scale / RUN_RECORD
    if not path.is_file():
        return None
    try:
        rec = read_json(path)
    except Exception:  # a damaged record is no reason to fail a page: the time is then unknown
        return None
    runs = [rec] + list(rec.get("earlier") or [])
    ok = [r for r in runs if r.get("status") == "success"] or runs
    return max(ok, key=lambda r: (r.get("jobs") or 0, r.get("finished") or ""))


def _commit_and_clock(rec: dict) -> tuple[str, str]:
    """A run record's short commit and its CPU clock ("2600 MHz", or "" where not recorded)."""
    return (str((rec.get("git") or {}).get("commit") or "")[:7],
            f"{rec['cpu_mhz']:.0f} MHz" if rec.get("cpu_mhz") else "")


def run_time_text(rec: dict | None) -> str:
    """One line: the run's wall time and work from its run.json record, saying which run it was."""
    if not rec:
        return "run time unknown (no run.json: the run predates it, or is still running)"
    commit, mhz = _commit_and_clock(rec)
    clock = f", CPU clock {mhz} as the kernel reported it" if mhz else ""
    exact = " of the jobs, exact" if rec.get("core_minutes_source") == "rusage" else ""
    speed = f", {hostspeed.text(rec)}" if hostspeed.text(rec) else ""
    return (f"{rec['wall_minutes']:.1f} min wall for {rec['jobs']} jobs ({rec['core_minutes']:.1f} core-minutes{exact}, "
            f"{rec.get('cores') or '?'} cores{clock}{speed}), run of commit {commit or '?'} started {rec['started']} "
            "(run.json)")


def totals(frame: pd.DataFrame) -> dict:
    """``{"jobs", "sum_wall_s", "sum_cpu_s", "elapsed_s"}`` of a :func:`read_benchmarks` frame."""
    if frame.empty:
        return {"jobs": 0, "sum_wall_s": 0.0, "sum_cpu_s": 0.0, "elapsed_s": 0.0}
    start = (frame["end"] - frame["wall_s"].fillna(0)).min()
    return {"jobs": int(len(frame)), "sum_wall_s": float(frame["wall_s"].sum()),
            "sum_cpu_s": float(frame["cpu_s"].fillna(0).sum()), "elapsed_s": float(frame["end"].max() - start)}


def _artefacts_used(results_dir: Path) -> list[str]:
    """The shared artefacts a claim's measurement read: its measured.json's input records (folder and file under
    the models folder) matched to repro.layout.ARTEFACTS."""
    path = results_dir / "measured.json"
    try:
        inputs = (read_json(path).get("inputs") or {}) if path.is_file() else {}
    except Exception:  # a damaged record: the shared models are then not counted, the claim's own jobs still are
        return []
    by_place = {(folder, file): name for name, (folder, file, _) in ARTEFACTS.items()}
    used = {by_place.get((Path(str(rec.get("path", ""))).name, rec.get("file"))) for rec in inputs.values()
            if isinstance(rec, dict)}
    return sorted(used - {None})


def claim_time(results_dir: str | Path) -> dict:
    """A claim's run time from the benchmark files beside its results (results/<hw>/<scale>/_benchmarks/): its own
    jobs (the measurement and its parts, judging, the page) and the jobs that built the shared models it read.
    ``{"own": frame, "shared": frame}`` (rows of :func:`read_benchmarks`)."""
    results_dir = Path(results_dir)
    claim, scale_dir = results_dir.name, results_dir.parent
    frame = read_benchmarks(scale_dir.parent.parent, scale_dir.parent.name, scale_dir.name)
    if frame.empty:
        return {"own": frame, "shared": frame}
    own = frame["job"].eq(MEASURING_JOB.get(claim, claim)) | frame["job"].str.startswith(f"{claim}.")
    shared_jobs = {job for name in _artefacts_used(results_dir) for job in ARTEFACT_JOBS[name]}
    return {"own": frame[own], "shared": frame[frame["job"].isin(shared_jobs) & ~own]}


def claim_time_text(results_dir: str | Path) -> str:
    """One line for a claim's page: the wall time and core-minutes summed over its jobs, and over the shared models
    it needs (named, since other claims share them), from Snakemake's benchmark files."""
    t = claim_time(results_dir)
    own, shared = t["own"], t["shared"]
    if own.empty:
        return f"Run time: unknown (no benchmark file of its jobs under {BENCH_DIR}/ beside these results)"

    def minutes(frame: pd.DataFrame) -> tuple[float, float]:
        return float(frame["wall_s"].fillna(0).sum()) / 60, float(frame["cpu_s"].fillna(0).sum()) / 60

    claim = Path(results_dir).name
    roles = {MEASURING_JOB.get(claim, claim): "measuring", f"{claim}.verdict": "judging", f"{claim}.report": "page"}
    parts = int(own["job"].str.startswith(f"{claim}.part").sum())
    kinds = ([f"{parts} parts"] if parts else []) + [roles[j] for j in roles if j in set(own["job"])]
    wall, cpu = minutes(own)
    text = (f"Run time: {wall:.1f} min of job wall time summed over the claim's {len(own)} jobs "
            f"({', '.join(kinds)}), {cpu:.1f} core-minutes")
    if not shared.empty:
        s_wall, s_cpu = minutes(shared)
        names = ", ".join(f"{r.job} {(r.wall_s or 0) / 60:.1f} min" for r in shared.itertuples())
        text += (f"; with the shared models it reads ({names}; their time counts for every claim that reads them) "
                 f"{wall + s_wall:.1f} min and {cpu + s_cpu:.1f} core-minutes in all")
    return text + f" (Snakemake's benchmark files, {BENCH_DIR}/; the jobs may have run side by side)"


def _fmt_s(s) -> str:
    if s is None or (isinstance(s, float) and math.isnan(s)):
        return "-"
    return f"{s:,.1f} s" if s < 120 else f"{s / 60:,.1f} min"


def time_per_rule_md(results_root: str | Path, hardware: str, scale: str) -> list[str]:
    """Markdown lines: the "Time per rule" section of the index (slowest job first), or a line saying there are
    no benchmark files yet."""
    frame = read_benchmarks(results_root, hardware, scale)
    head = ["## Time per rule", ""]
    if frame.empty:
        return head + [f"No benchmark files under results/{hardware}/{scale}/{BENCH_DIR}/ yet (every rule writes "
                       "one when it runs).", ""]
    tot = totals(frame)
    frame = frame.sort_values("wall_s", ascending=False)
    lines = head + [f"The run: {run_time_text(read_run_record(results_root, hardware, scale))}.", "",
                    f"From Snakemake's `benchmark:` files (results/{hardware}/{scale}/{BENCH_DIR}/). {tot['jobs']} "
                    f"jobs; sum of their wall times **{_fmt_s(tot['sum_wall_s'])}**, CPU time "
                    f"{_fmt_s(tot['sum_cpu_s'])} as Snakemake sampled it (what a job spends after its last sample is "
                    "not counted: up to 30 s per job in runs before the workflow sampled every second; run.json's "
                    "core-minutes are exact where it says so).", "",
                    "| job | wall | CPU | CPU / wall | max RSS |", "|---|---:|---:|---:|---:|"]
    for r in frame.itertuples():
        ratio = (f"{r.cpu_s / r.wall_s:.2f}" if r.cpu_s is not None and not math.isnan(r.cpu_s) and r.wall_s
                 else "-")
        rss = "-" if r.max_rss_mb is None or math.isnan(r.max_rss_mb) else f"{r.max_rss_mb:,.0f} MB"
        lines.append(f"| {r.job} | {_fmt_s(r.wall_s)} | {_fmt_s(r.cpu_s)} | {ratio} | {rss} |")
    return lines + [""]


def compare_md(results_root: str | Path, scale: str, references_root: str | Path | None = None) -> list[str]:
    """Markdown lines for the hardware comparison: every machine's run time at this scale (totals and the slowest
    jobs), one row per hardware that has benchmark files: this checkout's runs, then the references
    (``references_root/results``, labelled ``(reference)``)."""
    rows = []
    for src in sources(results_root, None, references_root):
        root = src.results
        for hw_dir in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
            frame = read_benchmarks(root, hw_dir.name, scale)
            if frame.empty:
                continue
            tot = totals(frame)
            slow = frame.sort_values("wall_s", ascending=False).head(3)
            rec = read_run_record(root, hw_dir.name, scale)
            wall = "unknown (no run.json)"
            cores = f"{tot['sum_cpu_s'] / 60:,.1f} (benchmark samples)"
            if rec and rec.get("core_minutes") is not None:
                cores = f"{rec['core_minutes']:,.1f}" + (" (exact)" if rec.get("core_minutes_source") == "rusage" else "")
            if rec:
                commit, mhz = _commit_and_clock(rec)
                start = ((rec.get("host_speed") or {}).get("start_gflops"))
                extra = "".join(f", {x}" for x in (mhz, f"{start:.0f} GFLOP/s" if start is not None else "") if x)
                wall = f"{rec['wall_minutes']:.1f} min ({commit}{extra})"
            rows.append(f"| {src.label(hw_dir.name)} | {tot['jobs']} | {_fmt_s(tot['sum_wall_s'])} | {cores} | {wall} | "
                        + ", ".join(f"{r.job} {_fmt_s(r.wall_s)}" for r in slow.itertuples()) + " |")
    if not rows:
        return []
    return ["## Run time per machine", "",
            f"From each machine's Snakemake benchmark files (results/<hardware>/{scale}/{BENCH_DIR}/). The CPU clock is "
            "the kernel's (run.json's cpu_mhz, where recorded): one hardware id can run on hosts of different speeds "
            "when the CPU's name carries no clock, and the reported clock need not change with the host: the host's "
            "speed is the probe run.json records before the first job (one-thread fp32 matmul GFLOP/s, "
            "repro/report/hostspeed.py), where recorded. Core-minutes: the CPU time of the run's jobs from run.json "
            "(exact: the workflow's waited-for children), else the benchmark files' sampled CPU times.", "",
            "| hardware | jobs | sum of job wall times | core-minutes | run wall time (run.json: commit, CPU clock, "
            "host speed) | slowest jobs |",
            "|---|---:|---:|---:|---:|---|", *rows, ""]
