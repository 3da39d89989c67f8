# Shared rules: a claim's report page and the index. Each workflows/<claim>.smk adds the rule that runs its
# experiment; paths and parameters come from W (repro.workflow.Run, built from the validated config).


localrules:
    claim_report,
    index,


wildcard_constraints:
    claim="|".join(W.claims_with_workflow) or "none",


rule claim_report:
    """A claim's page: verdict, checks, measured beside published, figures (from results files only)."""
    input:
        verdict=f"{W.res}/{{claim}}/verdict.json",
        metrics=f"{W.res}/{{claim}}/metrics.csv",
    output:
        page=report(f"{W.rep}/{{claim}}.md", caption="../report/claim_page.rst", category="{claim}",
                    labels={"claim": "{claim}", "item": "page"}),
        figures=report(directory(f"{W.rep}/{{claim}}"), patterns=["{name}.png"], caption="../report/figure.rst",
                       category="{claim}", labels={"claim": "{claim}", "figure": "{name}"}),
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
        report(f"{W.rep}/index.md", caption="../report/index.rst", category="index"),
    log:
        f"{W.logs}/index.log",
    conda:
        "../environment.yml"
    shell:
        f"{W.py} -m repro.report index --results-root {W.cfg['results_dir']} --reports-root {W.cfg['reports_dir']} "
        f"--hardware {W.hw} --scale {W.scale} --out {{output}} > {{log}} 2>&1"
