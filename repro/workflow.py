"""What the Snakefile needs from Python: the validated run, the hardware id, paths, per-claim parameters and
the target list (a pure function of the config). Kept out of the .smk files so those hold rules only."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from repro import registry
from repro.bench.fingerprint import hardware_id
from repro.config import ConfigError, load_run_config, section

# claims that train on, prune or tokenize with the shared translation artefact (workflows/translation.smk)
TRANSLATION_CLAIMS = {"head_pruning", "layer_pruning", "quantization", "warmup_stability"}


class Run:
    def __init__(self, config: dict, basedir: str | Path, main_process: bool = True):
        from snakemake.exceptions import WorkflowError

        self._error = WorkflowError
        try:
            self.cfg = load_run_config(config)
        except ConfigError as exc:
            raise WorkflowError(f"invalid configuration: {exc}") from None
        self.py = sys.executable
        self.scale = self.cfg["scale"]
        self.hw = hardware_id() if self.cfg["hardware"] == "auto" else self.cfg["hardware"]
        if self.cfg["hardware"] != "auto":
            # jobs inherit the environment: every results file then names the id its folder is filed under
            os.environ["REPRO_HARDWARE_ID"] = self.hw
        self.res = f"{self.cfg['results_dir']}/{self.hw}/{self.scale}"
        self.rep = f"{self.cfg['reports_dir']}/{self.hw}/{self.scale}"
        self.logs = f"logs/{self.hw}/{self.scale}"
        self.models = f"{self.res}/_models"
        self.basedir = Path(basedir)
        self.claims_with_workflow = [c for c in registry.claim_ids()
                                     if (self.basedir / "workflows" / f"{c}.smk").exists()]
        if main_process:  # not again inside each job (cluster jobs re-read the Snakefile while others write)
            self.check_results()

    def check_results(self) -> None:
        """Before the DAG is built (issue 15): a page whose results are gone (an interrupted --forcerun, where
        Snakemake removed the results but not the page downstream of them) is stale and is removed, so the claim
        reruns instead of "Nothing to be done"; damaged results (unreadable verdict.json, a metrics.csv that
        does not match its integrity record) stop the run here, naming the file, before any job removes the
        page built from them."""
        from repro.bench.records import ResultsError, check_results

        for claim in self.cfg["claims"]:
            if claim not in self.claims_with_workflow:
                continue
            res, page = Path(self.res) / claim, Path(self.rep) / f"{claim}.md"
            if not (res / "verdict.json").exists():
                if page.exists():
                    page.unlink()
                    print(f"repro: removed the stale page {page}: its results {res}/verdict.json are missing "
                          f"(interrupted run?); claim_{claim} will rerun", file=sys.stderr)
                continue
            try:
                check_results(res)  # verdict readable, metrics.csv matching its integrity record
            except ResultsError as exc:
                raise self._error(f"damaged results: {exc}. The page {page} is kept; move {res} aside to rerun "
                                  f"{claim}.") from None

    def workflow_files(self) -> list[str]:
        names = ["translation", *registry.claim_ids(), "compare_hardware"]
        return [f"workflows/{n}.smk" for n in names if (self.basedir / "workflows" / f"{n}.smk").exists()]

    def params(self, name: str) -> str:
        """Validated parameters of one claim (or shared artefact) at this scale, as JSON for --params."""
        try:
            return json.dumps(section(name, self.scale, self.cfg["overrides"]), sort_keys=True)
        except ConfigError as exc:
            raise self._error(f"invalid configuration: {exc}") from None

    def outputs(self, claim: str) -> dict:
        return {"metrics": f"{self.res}/{claim}/metrics.csv", "verdict": f"{self.res}/{claim}/verdict.json"}

    def shell(self, claim: str) -> str:
        """The command every claim rule runs; progress goes to the terminal and to the rule's log."""
        return (f"{self.py} -m repro.claims.{claim} --scale {self.scale} --params {{params.cfg:q}} "
                f"--out {self.res}/{claim} --threads {{threads}} 2>&1 | tee {{log}}")

    def pages(self) -> list[str]:
        return [f"{self.rep}/{c}.md" for c in self.cfg["claims"] if c in self.claims_with_workflow]

    def compare_dir(self) -> str:
        """reports/compare/<scale>: every hardware under results/ beside the paper (workflows/compare_hardware.smk)."""
        return f"{self.cfg['reports_dir']}/compare/{self.scale}"

    def targets(self) -> list[str]:
        extra = [self.compare_dir()] if (self.basedir / "workflows" / "compare_hardware.smk").exists() else []
        # the shared model's BLEU benchmark (issue 4): with the whole suite or a claim built on the translation task,
        # not when the run is narrowed to other claims (at paper scale it needs the data-bin / checkpoint paths)
        uses_translation = set(self.cfg["claims"]) == set(registry.claim_ids()) or TRANSLATION_CLAIMS & set(
            self.cfg["claims"])
        if (self.basedir / "workflows" / "translation.smk").exists() and uses_translation:
            extra.append(self.outputs("translation")["verdict"])
        return self.pages() + [f"{self.rep}/index.md", self.matrix()] + extra

    def matrix(self) -> str:
        """reports/matrix.md: the verdict matrix of every machine and scale (rule matrix, repro/report/matrix.py)."""
        return f"{self.cfg['reports_dir']}/matrix.md"

    def matrix_inputs(self) -> list[str]:
        """This run's pages (the matrix links them) and verdicts, plus every other complete results folder found."""
        from repro.report.matrix import rule_inputs

        own = [self.outputs(c)["verdict"] for c in self.cfg["claims"] if c in self.claims_with_workflow]
        return sorted(set(self.pages()) | set(rule_inputs(self.cfg["results_dir"], self.hw, self.scale, own)))
