# Reproduction suite for published claims about the Transformer block.
#   snakemake reproduce_all --cores all                 every claim at the default scale
#   snakemake claim_<id> --cores all                    one claim (e.g. claim_param_accounting)
#   snakemake reproduce_all --config scale=tiny         the seconds-long smoke scale
#   snakemake -s workflows/report.smk --report report.html   the HTML report (verdict matrix first): results/, references/
#   snakemake --report report.html                     Snakemake's own report of this run (needs no --cores)
# Parameters: config/config.yaml (the run) and config/claims/<id>.yaml (per claim, per scale).
from snakemake.utils import min_version

from repro.workflow import Run

min_version("9.0")


configfile: f"{workflow.basedir}/config/config.yaml"


# the cores as given (None for `snakemake --report report.html`, which needs none; workflow.cores would refuse)
W = Run(config, workflow.basedir, main_process=workflow.is_main_process, cores=workflow.resource_settings.cores,
        configfiles=workflow.configfiles)


include: "workflows/common.smk"

# The shared artefacts (workflows/translation.smk) and the hardware comparison; every claim runs through the
# one rule `claim` of workflows/common.smk. A registered claim without a module and config yet is listed as
# not_implemented in the index.
for _smk in W.workflow_files():

    include: _smk


rule reproduce_all:
    """Every selected claim at the configured scale, its report page, the index and the verdict matrix."""
    default_target: True
    input:
        W.targets(),


# Each invocation that runs jobs records itself: results/<hw>/<scale>/run.json (start, end, jobs run, core-minutes,
# commit, machine, and the host's speed before the first job and after the last: repro/report/runtime.py and
# hostspeed.py, ~2 s each). A dry run runs no handler and writes nothing.
onstart:
    W.run_started()


onsuccess:
    W.record_run("success", getattr(workflow.dag_settings, "targets", None))


onerror:
    W.record_run("error", getattr(workflow.dag_settings, "targets", None))
