"""What the Snakefile needs from Python: the validated run, the hardware id, paths, per-claim parameters, the
one claim rule's inputs, threads and resources (from each claim's ``workflow`` section), and the target list (a
pure function of the config). Kept out of the .smk files so those hold rules only."""
from __future__ import annotations

import ast
import copy
import inspect
import json
import resource
import shlex
import sys
import time
from pathlib import Path

from filelock import FileLock, Timeout
from snakemake import benchmark
from snakemake.exceptions import WorkflowError

from repro import artefacts, plan, provenance, registry
from repro.bench.fingerprint import hardware_id
from repro.config import (ConfigError, check_config_files, load_run_config, needed, section, thresholds,
                          workflow_spec)
from repro.io import ResultsError, check_results, remeasuring

# Snakemake's ``benchmark:`` samples a job's process tree every 0.5 s for its first 15 s, then every 30 s
# (snakemake.benchmark.BENCHMARK_INTERVAL), and the CPU time a job spends after its last sample is never counted: up
# to 30 s per job, about 10% of a default run's core-minutes (jobs of 132 s wall recorded 103 CPU-s). The
# workflow samples every BENCHMARK_SECONDS instead (:func:`finer_benchmarks`; Snakemake's timer then takes that
# many + 1 half-second samples first): at most about a second per job is lost, for a few milliseconds of psutil per
# sample. run.json's total is exact regardless (getrusage, :func:`_cpu_seconds`).
BENCHMARK_SECONDS = 1


def finer_benchmarks(seconds: float = BENCHMARK_SECONDS) -> bool:
    """Make Snakemake's benchmark sample every ``seconds`` after its first 15 s (the default of the ``interval``
    argument of ``snakemake.benchmark.benchmarked``, which snakemake.shell calls without one). Returns whether it was
    set: a Snakemake whose function has no such argument keeps its own interval (tests/test_report_files.py says
    so), and nothing else changes."""
    fn = getattr(benchmark, "benchmarked", None)
    fn = getattr(fn, "__wrapped__", fn)  # a contextlib.contextmanager: its generator function holds the defaults
    try:
        names = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return False
    if not names or names[-1] != "interval" or fn.__defaults__ is None or len(fn.__defaults__) != len(names):
        return False
    fn.__defaults__ = (*fn.__defaults__[:-1], seconds)
    return True


def _cpu_seconds() -> tuple[float, float]:
    """(CPU seconds of this process's waited-for children, of this process): user + system, from getrusage. The
    local executor runs every job as a child of the Snakemake process, so the difference over a run is its jobs'
    CPU time, exactly (no sampling)."""
    ch, me = resource.getrusage(resource.RUSAGE_CHILDREN), resource.getrusage(resource.RUSAGE_SELF)
    return ch.ru_utime + ch.ru_stime, me.ru_utime + me.ru_stime


def _defines(module_file: Path, name: str) -> bool:
    """Whether a module's source defines the top-level function ``name`` (read, not imported: no torch here)."""
    try:
        tree = ast.parse(module_file.read_text())
    except (OSError, SyntaxError):
        return False
    return any(isinstance(n, ast.FunctionDef) and n.name == name for n in tree.body)


def q(path) -> str:
    """A path (or value) as one shell word: every path the workflow formats into a command goes through this (or
    Snakemake's ``{x:q}``), so a space or a ``$(...)`` in a folder name stays part of the name."""
    return shlex.quote(str(path))


class Run:
    q = staticmethod(q)  # for the .smk files' commands: W.q(path)

    def __init__(self, config: dict, basedir: str | Path, main_process: bool = True, cores: int | None = None,
                 configfiles=()):
        try:
            check_config_files(configfiles)  # Snakemake's reading keeps the last of a key given twice
            self.cfg = load_run_config(config)  # the hardware id's form and the folders are checked there
        except ConfigError as exc:
            raise WorkflowError(f"invalid configuration: {exc}") from None
        self.py = q(sys.executable)  # the interpreter as a shell word (its path may hold a space)
        self.scale = self.cfg["scale"]
        # the hardware id is decided here, once, and passed to every job that records it (--hardware), so the
        # folder a result is filed under and the id inside its files are the same string
        given = self.cfg["hardware"]
        self.hw = hardware_id() if given == "auto" else given
        self.res = f"{self.cfg['results_dir']}/{self.hw}/{self.scale}"
        self.rep = f"{self.cfg['reports_dir']}/{self.hw}/{self.scale}"
        self.logs = f"logs/{self.hw}/{self.scale}"
        self.models = f"{self.res}/{artefacts.MODELS_DIR}"
        self.basedir = Path(basedir)
        self.cores = cores
        self._sections: dict = {}
        self._thresholds: dict = {}
        self._specs: dict = {}
        self.claims_with_workflow = registry.implemented_claims(self.basedir)
        self.refs = self.cfg["references_dir"]
        finer_benchmarks()
        if main_process:  # not again inside each job (cluster jobs re-read the Snakefile while others write)
            self.clear_stale_locks()
            self.check_results()
            self.write_stamps()

    def clear_stale_locks(self) -> None:
        """Hold .snakemake/repro/run.lock (an OS lock: released when this Snakemake exits, however it dies) for as
        long as this process runs; when no other Snakemake of this directory holds it, the locks Snakemake left in
        .snakemake/locks/ are a killed run's (kill -9, a lost terminal) and are removed, so the same command runs
        again without ``--unlock``. With another run holding it, its locks are live and stay."""
        Path(".snakemake", "repro").mkdir(parents=True, exist_ok=True)
        lock = FileLock(Path(".snakemake", "repro", "run.lock"), blocking=False)
        try:
            lock.acquire()
        except Timeout:
            return
        self._run_lock = lock  # kept: released with the process (the descriptor is not inherited by the jobs)
        stale = sorted(Path(".snakemake", "locks").glob("*.lock"))
        for f in stale:
            f.unlink(missing_ok=True)
        if stale:
            print(f"repro: removed {len(stale)} Snakemake locks left by a run that was killed (no Snakemake of this "
                  f"directory is running)", file=sys.stderr)

    def check_results(self) -> None:
        """Before the DAG is built: damaged results (unreadable verdict.json, a file whose bytes do not match the
        sha256 its verdict.json records, a recorded file missing) stop the run here, naming the file, before any job
        removes the page built from them. A folder whose measuring job's outputs are gone (an interrupted
        re-measurement: Snakemake removed them, or the claim's command line did before measuring) is not damaged:
        Snakemake measures and judges it again. Reads only: parsing the workflow (a dry run too) writes and deletes
        nothing under results/ or reports/. (A page whose results are gone is rebuilt by Snakemake itself: its input
        is missing, so the jobs that make it run, and the page after them.)"""
        for claim in self.cfg["claims"]:
            if claim not in self.claims_with_workflow:
                continue
            res, page = Path(self.res) / claim, Path(self.rep) / f"{claim}.md"
            if not (res / "verdict.json").exists():
                continue
            gone = remeasuring(res)
            if gone:
                self._remeasure(claim, gone)
                continue
            try:
                check_results(res)  # every recorded file matching its sha256, unless it is being re-measured
            except ResultsError as exc:
                raise WorkflowError(f"damaged results: {exc}. The page {page} is kept; move {res} aside to rerun "
                                  f"{claim}.") from None

    def _remeasure(self, claim: str, gone: list[str]) -> None:
        """A claim whose measuring job's outputs are gone while its page is still there: Snakemake leaves missing
        intermediate files alone while the page looks up to date, so the claim's ``remeasure`` stamp, an input of
        its page, gets new content (under .snakemake/, which a dry run may write; Snakemake compares an input's
        checksum, not only its time): the page, and so the measuring and judging jobs it needs, run again."""
        provenance.write_stamp(self.stamp(claim, "remeasure"), f"{claim}: {', '.join(gone)} gone at {time.time()}")
        print(f"repro: {claim}: {', '.join(gone)} gone (an interrupted re-measurement): measured and judged again",
              file=sys.stderr)

    # ---- freshness by content (repro.provenance): the stamp files the measuring and judging jobs take as input
    def needs(self, claim: str) -> tuple[str, ...]:
        """The shared artefacts (names) this claim uses with these parameters."""
        return tuple(n["artefact"] for n in needed(self.spec(claim), self.section(claim)))

    def keys(self, claim: str) -> dict:
        """The provenance keys of this claim's measurement with this run's parameters and judge thresholds
        (repro.provenance)."""
        return provenance.claim_keys(claim, self.params(claim), self.needs(claim), self.thresholds(claim),
                                     plan.block(claim, self.scale))

    def thresholds(self, name: str) -> dict:
        """The judge's thresholds of one claim (or the translation benchmark) at this scale: the ``judge:`` part of
        its section, overrides applied (validated once per run; a copy per call)."""
        return self._validated(self._thresholds, thresholds, name)

    def thresholds_arg(self, name: str) -> str:
        """The thresholds as the JSON of ``--thresholds``."""
        return json.dumps(self.thresholds(name), sort_keys=True)

    def measure_keys(self, claim: str) -> str:
        """The keys a measuring job records, as JSON: without the judge's, so that a changed judge never reruns
        the measurement through Snakemake's params trigger."""
        return json.dumps({k: v for k, v in self.keys(claim).items() if k != "judge"}, sort_keys=True)

    def artefact_keys(self, job: str) -> dict:
        """The keys of a shared artefact's job (tokenizer, translation_model, lm, translation_evaluate)."""
        evaluate = job == "translation_evaluate"  # the benchmark's measurement is planned; the trainings are its inputs
        return provenance.artefact_keys(job, self.params("translation"), self.thresholds("translation") if evaluate
                                        else None, plan.block("translation", self.scale) if evaluate else None)

    def stamp(self, name: str, kind: str = "measure") -> str:
        """.snakemake/repro/keys/<results_dir>/<hw>/<scale>/<name>.<kind> (in the working directory, beside
        Snakemake's own records): holds the key the results of ``name`` must have been made with (kind ``measure``:
        code, config, software; ``judge``: the judge's code, the published numbers and the thresholds). Under
        .snakemake/, so that parsing the workflow (a dry run too) writes nothing under results/ or reports/."""
        results = Path(self.cfg["results_dir"])
        where = Path("_abs", *results.parts[1:]) if results.is_absolute() else results
        return str(Path(".snakemake", "repro", "keys", where, self.hw, self.scale, f"{name}.{kind}"))

    def write_stamps(self) -> None:
        """Before the DAG is built: each stamp is rewritten only when the checkout's key differs from the one it
        holds, so it becomes newer than the results made before and Snakemake reruns exactly what depends on it
        (the measuring job for a measure key, the judging job only for a judge key). Unchanged keys leave the
        stamps, and so the results, alone."""
        stamps = []
        for claim in self.cfg["claims"]:
            if claim in self.claims_with_workflow:
                keys = self.keys(claim)
                stamps += [(f"{claim}.{kind}", self.stamp(claim, kind), keys[kind]) for kind in ("measure", "judge")]
        if (self.basedir / "workflows" / "translation.smk").exists() and self.uses_translation():
            stamps += [(f"{job}.measure", self.stamp(job), self.artefact_keys(job)["measure"])
                       for job in provenance.ARTEFACT_CODE]
            stamps.append(("translation_evaluate.judge", self.stamp("translation_evaluate", "judge"),
                           self.artefact_keys("translation_evaluate")["judge"]))
        for claim in self.cfg["claims"]:  # changed only by _remeasure; the first one is new (pages rebuilt once)
            if claim in self.claims_with_workflow and not Path(self.stamp(claim, "remeasure")).exists():
                provenance.write_stamp(self.stamp(claim, "remeasure"), f"{claim}: measured")
        changed = [name for name, path, key in stamps if Path(path).exists() and provenance.write_stamp(path, key)]
        new = [name for name, path, key in stamps if not Path(path).exists() and provenance.write_stamp(path, key)]
        if changed:
            print(f"repro: changed keys (code, config or software) for {', '.join(changed)}: what depends on them "
                  f"reruns", file=sys.stderr)
        if new:
            print(f"repro: first keys for {len(new)} jobs of {self.hw}/{self.scale}", file=sys.stderr)

    # ---- the run's own record (results/<hw>/<scale>/run.json)
    def run_started(self) -> None:
        """Snakefile's onstart: the run's start, and the host's speed before its first job (repro.report.hostspeed)."""
        from repro.report import hostspeed  # no torch here: the probe runs in a subprocess

        self._started = time.time()
        self._speed_start = hostspeed.probe()
        self._cpu_start = _cpu_seconds()  # after the probe: its process is not the run's work

    def record_run(self, status: str, targets=None) -> None:
        """Write run.json for this invocation (Snakefile's onsuccess / onerror); never fails the run."""
        from repro.report import hostspeed  # lazy: with runtime, for the handlers only
        from repro.report.runtime import write_run_record  # lazy: pandas, for the handlers only

        started = getattr(self, "_started", None)
        if started is None:
            return
        finished, cpu = time.time(), _cpu_seconds()  # before the end probe: the run's time and work are its jobs'
        c0 = getattr(self, "_cpu_start", None)
        work = None if c0 is None else {"jobs_cpu_s": cpu[0] - c0[0], "snakemake_cpu_s": cpu[1] - c0[1]}
        try:
            record = write_run_record(self.res, started=started, finished=finished, status=status, hardware=self.hw,
                                      scale=self.scale, cores=self.cores, targets=sorted(map(str, targets or [])),
                                      host_speed=hostspeed.record(getattr(self, "_speed_start", None),
                                                                  hostspeed.probe()),
                                      cpu=work)
        except Exception as exc:  # the record is a report: a failure to write it must not turn a run into an error
            print(f"repro: run.json not written: {exc}", file=sys.stderr)
            return
        if "index" in record["jobs_run"] and Path(self.rep, "index.md").is_file():
            self._rewrite_index()

    def _rewrite_index(self) -> None:
        """The index again once run.json exists: its job ran before the run ended, so it could not show the run's
        time; the same page with the run's wall time and core-minutes (the index rule's command, in process)."""
        from repro.report.pages import index_page  # lazy: pandas and the pages, for the end-of-run handler only

        try:
            index_page(self.cfg["results_dir"], self.cfg["reports_dir"], self.hw, self.scale,
                       Path(self.rep, "index.md"))
        except Exception as exc:  # the index of the job stays; a report failure must not fail the run
            print(f"repro: index not rewritten with the run's time: {exc}", file=sys.stderr)

    def workflow_files(self) -> list[str]:
        """The shared-artefact and hardware-comparison rules (workflows/<name>.smk); claims need none of their own."""
        names = ["translation", "compare_hardware"]
        return [f"workflows/{n}.smk" for n in names if (self.basedir / "workflows" / f"{n}.smk").exists()]

    def section(self, name: str) -> dict:
        """Validated parameters of one claim (or shared artefact) at this scale, overrides applied (validated once
        per run; a copy per call)."""
        return self._validated(self._sections, section, name)

    def _validated(self, cache: dict, read, name: str) -> dict:
        """``read(name, scale, overrides)`` once per run (a ConfigError stops the workflow naming the key); a copy
        per call."""
        if name not in cache:
            try:
                cache[name] = read(name, self.scale, self.cfg["overrides"])
            except ConfigError as exc:
                raise WorkflowError(f"invalid configuration: {exc}") from None
        return copy.deepcopy(cache[name])

    def spec(self, claim: str) -> dict:
        """The claim's ``workflow`` section at this scale (threads, resources, sections, needs); read and validated
        once per run (the rule's threads and resources ask for it per job)."""
        if claim not in self._specs:
            try:
                self._specs[claim] = workflow_spec(claim, self.scale)
            except ConfigError as exc:
                raise WorkflowError(f"invalid configuration: {exc}") from None
        return self._specs[claim]

    def params(self, name: str) -> str:
        """Validated parameters of one claim (or shared artefact) at this scale as JSON for --params, with the
        config sections its ``workflow.sections`` lists (e.g. the translation section) under their names."""
        params = self.section(name)
        if name in self.claims_with_workflow:
            params.update({s: self.section(s) for s in self.spec(name)["sections"]})
        return json.dumps(params, sort_keys=True)

    def artefact(self, name: str) -> str:
        """The file the workflow builds for shared artefact ``name`` (repro.artefacts)."""
        return str(artefacts.artefact_file(self.models, name))

    def artefact_dir(self, name: str) -> str:
        return str(artefacts.artefact_dir(self.models, name))

    def claim_inputs(self, claim: str, parts: bool = True) -> dict:
        """{claim parameter: artefact file} for the shared artefacts this claim needs with these parameters, and
        (``parts``) under ``parts`` the done-files of the claim's part jobs when its runs are split (:meth:`parts`)."""
        inputs = {n["param"]: self.artefact(n["artefact"]) for n in needed(self.spec(claim), self.section(claim))}
        inputs["stamp"] = self.stamp(claim)
        if parts and self.parts(claim):
            inputs["parts"] = [self.part_done(claim, p) for p in self.parts(claim)]
        return inputs

    def input_args(self, claim: str, inputs) -> str:
        """``--input param=path`` for each declared artefact input (the folder of a model, the tokenizer file)."""
        kinds = {n["param"]: n["artefact"] for n in self.spec(claim)["needs"]}
        return " ".join(f"--input {q(f'{k}={artefacts.param_value(v, kinds[k])}')}" for k, v in inputs.items()
                        if k in kinds)

    def parts(self, claim: str) -> list[str]:
        """The part ids (``"<i>-of-<n>"``) of a claim whose ``workflow.parts`` splits its training runs into n jobs
        (rule ``claim_part``); empty when it is 1. Such a claim's module must define ``run_part``."""
        n = self.spec(claim)["parts"]
        if n <= 1:
            return []
        if not _defines(self.basedir / "repro" / "claims" / f"{claim}.py", "run_part"):
            raise WorkflowError(f"invalid configuration: config/claims/{claim}.yaml [workflow]: parts: {n}, but "
                              f"repro/claims/{claim}.py has no run_part (set parts to 1)")
        return [f"{i}-of-{n}" for i in range(n)]

    def part_done(self, claim: str, part: str) -> str:
        """The file a part job writes when its runs are trained (the claim job's input)."""
        return f"{self.res}/{claim}/parts/{part}.done"

    def outputs(self, claim: str) -> dict:
        return {"metrics": f"{self.res}/{claim}/metrics.csv", "verdict": f"{self.res}/{claim}/verdict.json"}

    def measured(self, claim: str) -> dict:
        """The measuring job's outputs (rule ``claim``): the rows and the record of what measured them."""
        return {"metrics": f"{self.res}/{claim}/metrics.csv", "measured": f"{self.res}/{claim}/measured.json"}

    def shell(self) -> str:
        """The command of the measuring rules: ``{params.mode}`` is ``--measure-only`` (rule ``claim``) or ``--part
        <i>-of-<n>`` (rule ``claim_part``, which reuses claim's body); progress goes to the terminal and the log."""
        return (f"{self.py} -m repro.claims.{{wildcards.claim}} --scale {self.scale} --params {{params.cfg:q}} "
                f"{{params.inputs}} --out {q(self.res)}/{{wildcards.claim}} --threads {{threads}} --hardware {self.hw} "
                "--keys {params.prov:q} {params.mode} 2>&1 | tee {log:q}")

    def judge_shell(self) -> str:
        """The command of the judging rule: the current judge on the stored measurement (repro.judging's command
        line: it imports neither torch nor the claim's measurement module)."""
        return (f"{self.py} -m repro.judging --claim {{wildcards.claim}} --scale {self.scale} "
                f"--out {q(self.res)}/{{wildcards.claim}} --thresholds {{params.thresholds:q}} "
                f"--keys {{params.prov:q}} > {{log:q}} 2>&1")

    def pages(self) -> list[str]:
        """The claim pages of this run, and the shared translation model's page when the run builds it."""
        own = [f"{self.rep}/{c}.md" for c in self.cfg["claims"] if c in self.claims_with_workflow]
        return own + ([f"{self.rep}/translation.md"] if self.uses_translation() else [])

    def bench(self, job: str) -> str:
        """Snakemake's benchmark file of a job (wall s, CPU s, max RSS), filed beside this hardware and scale's
        results: results/<hw>/<scale>/_benchmarks/<job>.tsv (repro/report/runtime.py tabulates them)."""
        return f"{self.res}/_benchmarks/{job}.tsv"

    def compare_dir(self) -> str:
        """reports/compare/<scale>: every hardware under results/ beside the paper (workflows/compare_hardware.smk)."""
        return f"{self.cfg['reports_dir']}/compare/{self.scale}"

    def uses_translation(self) -> bool:
        """Whether this run builds the shared translation artefact's BLEU benchmark: with the whole suite or a claim
        built on the translation task, not when the run is narrowed to other claims (at paper scale it needs the
        data-bin / checkpoint paths)."""
        if not (self.basedir / "workflows" / "translation.smk").exists():
            return False
        return set(self.cfg["claims"]) == set(registry.claim_ids()) or any(
            self.spec(c)["needs"] or self.spec(c)["sections"] for c in self.cfg["claims"] if c in self.claims_with_workflow)

    def index_inputs(self) -> list[str]:
        """The index's inputs: the pages, and the translation benchmark when the run builds it (so the index's
        "Time per rule" table comes after every job of the run)."""
        return self.pages() + ([self.outputs("translation")["verdict"]] if self.uses_translation() else [])

    def targets(self) -> list[str]:
        extra = [self.compare_dir()] if (self.basedir / "workflows" / "compare_hardware.smk").exists() else []
        if self.uses_translation():
            extra.append(self.outputs("translation")["verdict"])
        return self.pages() + [f"{self.rep}/index.md", self.matrix()] + extra

    def matrix(self) -> str:
        """reports/matrix.md: the verdict matrix of every machine and scale (rule matrix, repro/report/matrix.py)."""
        return f"{self.cfg['reports_dir']}/matrix.md"

    def matrix_inputs(self) -> list[str]:
        """This run's pages (the matrix links them) and verdicts, plus every other complete results folder found."""
        from repro.report.matrix import rule_inputs  # lazy: pandas (half a second) for the matrix rule only

        own = [self.outputs(c)["verdict"] for c in self.cfg["claims"] if c in self.claims_with_workflow]
        return sorted(set(self.pages()) | set(rule_inputs(self.cfg["results_dir"], self.hw, self.scale, own,
                                                          self.refs)))
