# compare_hardware: every machine's timing and memory numbers beside the paper's, one table and one plot per
# claim, in reports/compare/<scale>/ (repro/report/compare.py says what is in them).
#   snakemake compare_hardware --cores all
# Input: every other machine's complete results folder of this scale found when the DAG is built
# (results/*/<scale>/*/verdict.json, and the committed references' references/results/*/<scale>/*/verdict.json) plus this run's own claims' verdicts,
# so the tables are remade whenever a claim is (re)built here or another machine's results appear or change.
from repro.report.compare import rule_inputs as _compare_inputs

COMPARE_DIR = f"{W.cfg['reports_dir']}/compare/{W.scale}"


localrules:
    compare_hardware_tables,
    compare_hardware,


rule compare_hardware_tables:
    """Per claim with timing/memory metrics: a markdown table and a seaborn plot, every machine beside the paper."""
    input:
        _compare_inputs(W.cfg["results_dir"], W.scale, W.hw,
                        [W.outputs(c)["verdict"] for c in W.cfg["claims"] if c in W.claims_with_workflow], W.refs),
    output:
        directory(COMPARE_DIR),
    log:
        f"{W.logs}/compare_hardware.log",
    benchmark:
        W.bench("compare_hardware")
    conda:
        "../environment.yml"
    threads: 1
    resources:
        runtime=10,
        mem_mb=2000,
    shell:
        f"{W.py} -m repro.report.compare --results {W.q(W.cfg['results_dir'])} --scale {W.scale} --out {{output:q}} "
        f"--reference {W.hw} --references {W.q(W.refs)} > {{log:q}} 2>&1"


rule compare_hardware:
    """Target: the hardware comparison of this scale (reports/compare/<scale>/index.md and one page per claim)."""
    input:
        COMPARE_DIR,
