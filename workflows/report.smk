# The report view: `snakemake -s workflows/report.smk --report report.html` (repro/report/site.py) builds one
# self-contained HTML file: a landing page with the verdict matrix of every machine and scale under results/ and
# references/results/, and one category per claim holding the claim's HTML page (verdict, reason, checks, gates,
# setup beside the paper, figures) and its figures with captions made from the results. A workflow of its own
# (chosen by the --snakefile flag, not by reading the command line): its one rule takes the pages and figures that
# exist as input and makes nothing, so the report needs no job metadata (no "missing metadata" warnings), runs
# nothing, and works on a fresh checkout from the committed results.
from pathlib import Path

from snakemake.utils import min_version

from repro.report.site import landing_html, report_inputs
from repro.workflow import Run

min_version("9.0")

ROOT = Path(workflow.basedir).parent


configfile: f"{ROOT}/config/config.yaml"


W = Run(config, ROOT, main_process=False, configfiles=workflow.configfiles)  # reads results only: no stamps written
# the landing page's HTML, rendered into report/workflow.rst (its Jinja template sees only the config)
config["_report_landing"] = landing_html(W.cfg["results_dir"], W.cfg["reports_dir"], W.hw, W.scale, W.refs)


report: "../report/workflow.rst"


localrules:
    report_view,


rule report_view:
    """Nothing to run: the report's items are the claim pages and figures found under the reports folder."""
    default_target: True
    input:
        report_inputs(W.cfg["reports_dir"], W.refs),
