# Shared rules: a claim's report page and the index. Each workflows/<claim>.smk adds the rule that runs its
# experiment; paths and parameters come from W (repro.workflow.Run, built from the validated config).


localrules:
    claim_report,
    index,
    matrix,


wildcard_constraints:
    claim="|".join(W.claims_with_workflow) or "none",


rule claim_report:
    """A claim's page, markdown and self-contained HTML (what `snakemake --report` shows): verdict, checks, gates,
    setup beside the paper, measured beside published, figures with captions (from results files only)."""
    input:
        verdict=f"{W.res}/{{claim}}/verdict.json",
        metrics=f"{W.res}/{{claim}}/metrics.csv",
    output:
        page=f"{W.rep}/{{claim}}.md",
        html=f"{W.rep}/{{claim}}.html",
        figures=directory(f"{W.rep}/{{claim}}"),
    log:
        f"{W.logs}/{{claim}}.report.log",
    conda:
        "../environment.yml"
    resources:
        runtime=10,
        mem_mb=2000,
    shell:
        f"{W.py} -m repro.report claim --claim {{wildcards.claim}} --results {W.res}/{{wildcards.claim}} "
        f"--page {{output.page}} --figures {{output.figures}} > {{log}} 2>&1"


rule index:
    """Every registered claim with its verdict on this hardware and scale; unbuilt claims show not_implemented."""
    input:
        W.pages(),
    output:
        f"{W.rep}/index.md",
    log:
        f"{W.logs}/index.log",
    conda:
        "../environment.yml"
    shell:
        f"{W.py} -m repro.report index --results-root {W.cfg['results_dir']} --reports-root {W.cfg['reports_dir']} "
        f"--hardware {W.hw} --scale {W.scale} --out {{output}} > {{log}} 2>&1"


rule matrix:
    """The verdict matrix, the first page of the reports: every claim on every machine and scale found under
    results/ (committed reference results included), flagging verdicts that differ between machines or from the
    previous committed run (repro/report/matrix.py)."""
    input:
        W.matrix_inputs(),
    output:
        W.matrix(),
    log:
        f"{W.logs}/matrix.log",
    conda:
        "../environment.yml"
    resources:
        runtime=10,
        mem_mb=2000,
    shell:
        f"{W.py} -m repro.report.matrix --results {W.cfg['results_dir']} --reports {W.cfg['reports_dir']} "
        f"--out {{output}} > {{log}} 2>&1"
