# The rules every claim shares: the one rule that runs a claim's experiment, its report page, the index and the
# matrix. Paths, parameters, inputs, threads and resources come from W (repro.workflow.Run, built from the validated
# config): a claim is its module (repro/claims/<id>.py), its config (config/claims/<id>.yaml, whose `workflow`
# section gives threads, resources and the shared artefacts it needs), its schema and its registry entry.


import json


localrules:
    claim_report,
    index,
    matrix,


wildcard_constraints:
    claim="|".join(W.claims_with_workflow) or "none",
    part=r"[0-9]+-of-[0-9]+",


rule claim:
    """Measure one claim: ``python -m repro.claims.<id> --measure-only`` writes metrics.csv, config.json,
    fingerprint.json and measured.json (what measured it: commit, time, keys, input hashes) into
    results/<hardware>/<scale>/<id>/. The shared artefacts the claim needs (config/claims/<id>.yaml: workflow.needs)
    are its inputs and reach it on the command line (--input).

    Freshness by content, not by a checkout's mtimes: the input ``stamp`` (.snakemake/repro/keys/.../<id>.measure)
    holds the key of the claim's measurement code, resolved parameters and software (repro.provenance). The
    workflow rewrites it before the DAG is built only when the checkout's key differs, so a changed measurement
    module, imported repro module, config or torch makes it newer than the results and this job reruns; the same
    key is a param (Snakemake's params trigger) and is recorded in measured.json."""
    input:
        unpack(lambda wildcards: W.claim_inputs(wildcards.claim)),
    output:
        **W.measured("{claim}"),
    params:
        cfg=lambda wildcards: W.params(wildcards.claim),
        inputs=lambda wildcards, input: W.input_args(wildcards.claim, input),
        prov=lambda wildcards: W.measure_keys(wildcards.claim),
        mode="--measure-only",
    log:
        f"{W.logs}/{{claim}}.log",
    benchmark:
        W.bench("{claim}")
    conda:
        "../environment.yml"
    priority: lambda wildcards: W.spec(wildcards.claim)["priority"]
    threads: lambda wildcards: W.spec(wildcards.claim)["threads"]
    resources:
        runtime=lambda wildcards: W.spec(wildcards.claim)["resources"]["runtime"],
        mem_mb=lambda wildcards: W.spec(wildcards.claim)["resources"]["mem_mb"],
        gpu=lambda wildcards: W.spec(wildcards.claim)["resources"]["gpu"],
    shell:
        W.shell()


rule claim_verdict:
    """Judge one claim's stored measurement: ``python -m repro.judging --claim <id>`` applies the checkout's
    judge (repro/judges/<id>.py), published numbers and thresholds (the ``judge:`` part of config/claims/<id>.yaml)
    to metrics.csv (and the versions and threads its fingerprint.json recorded; neither torch nor the measurement
    code is imported) and writes verdict.json with the thresholds used, who measured and who judged. Its stamp
    (<id>.judge under .snakemake/repro/keys) changes only with the judge side (the judge's files, repro/verdicts.py,
    the registry, the thresholds), so a changed judge or threshold re-judges here without measuring again."""
    input:
        **W.measured("{claim}"),
        stamp=W.stamp("{claim}", "judge"),
    output:
        verdict=f"{W.res}/{{claim}}/verdict.json",
    params:
        prov=lambda wildcards: json.dumps({"judge": W.keys(wildcards.claim)["judge"]}),
        thresholds=lambda wildcards: W.thresholds_arg(wildcards.claim),
    log:
        f"{W.logs}/{{claim}}.verdict.log",
    benchmark:
        W.bench("{claim}.verdict")
    conda:
        "../environment.yml"
    priority: 0  # seconds of work: never ahead of a timing benchmark that needs the idle machine alone
    threads: 1
    resources:
        runtime=10,
        mem_mb=2000,
    shell:
        W.judge_shell()


# One part of a claim whose training runs are split into jobs (config/claims/<id>.yaml: workflow.parts): the claim
# rule's body with ``--part <i>-of-<n>`` instead of ``--measure-only``: it trains its share of the runs (the finished
# ones kept on a rerun with the same parameters and code) and writes parts/<i>-of-<n>.done; the claim job measures
# the rest and writes the rows once every part is done. Small runs of one thread each fill whatever cores the other
# jobs leave free.
use rule claim as claim_part with:
    input:
        unpack(lambda wildcards: W.claim_inputs(wildcards.claim, parts=False)),
    output:
        done=f"{W.res}/{{claim}}/parts/{{part}}.done",
    params:
        cfg=lambda wildcards: W.params(wildcards.claim),
        inputs=lambda wildcards, input: W.input_args(wildcards.claim, input),
        prov=lambda wildcards: W.measure_keys(wildcards.claim),
        mode=lambda wildcards: f"--part {wildcards.part}",
    log:
        f"{W.logs}/{{claim}}.part{{part}}.log",
    benchmark:
        W.bench("{claim}.part{part}")


# `snakemake claim_<id>`: one claim and its page
for _claim in W.claims_with_workflow:

    rule:
        name:
            f"claim_{_claim}"
        input:
            f"{W.rep}/{_claim}.md",


rule claim_report:
    """A claim's page, markdown and self-contained HTML (what `snakemake -s workflows/report.smk --report` shows): verdict, checks, gates,
    setup beside the paper, measured beside published, figures with captions (from results files only)."""
    input:
        verdict=f"{W.res}/{{claim}}/verdict.json",
        metrics=f"{W.res}/{{claim}}/metrics.csv",
        stamp=W.stamp("{claim}", "remeasure"),  # changed when the measurement's outputs are gone (repro.workflow.Run)
    output:
        page=f"{W.rep}/{{claim}}.md",
        html=f"{W.rep}/{{claim}}.html",
        figures=directory(f"{W.rep}/{{claim}}"),
    log:
        f"{W.logs}/{{claim}}.report.log",
    benchmark:
        W.bench("{claim}.report")
    conda:
        "../environment.yml"
    resources:
        runtime=10,
        mem_mb=2000,
    shell:
        f"{W.py} -m repro.report claim --claim {{wildcards.claim}} --results {W.q(W.res)}/{{wildcards.claim}} "
        f"--page {{output.page:q}} --figures {{output.figures:q}} > {{log:q}} 2>&1"


rule index:
    """Every registered claim with its verdict on this hardware and scale; unbuilt claims show not_implemented."""
    input:
        W.index_inputs(),
    output:
        f"{W.rep}/index.md",
    log:
        f"{W.logs}/index.log",
    benchmark:
        W.bench("index")
    conda:
        "../environment.yml"
    shell:
        f"{W.py} -m repro.report index --results-root {W.q(W.cfg['results_dir'])} "
        f"--reports-root {W.q(W.cfg['reports_dir'])} --hardware {W.hw} --scale {W.scale} --out {{output:q}} "
        f"> {{log:q}} 2>&1"


rule matrix:
    """The verdict matrix, the first page of the reports: every claim on every machine and scale of this checkout's
    runs (results/) beside the committed references (references/results/, read-only), each cell saying where it
    came from and whether it is stale, flagging verdicts that differ between columns or from the previous
    committed reference run (repro/report/matrix.py)."""
    input:
        W.matrix_inputs(),
    output:
        md=W.matrix(),
        csv=W.matrix().removesuffix(".md") + ".csv",
    log:
        f"{W.logs}/matrix.log",
    benchmark:
        W.bench("matrix")
    conda:
        "../environment.yml"
    resources:
        runtime=10,
        mem_mb=2000,
    shell:
        f"{W.py} -m repro.report.matrix --results {W.q(W.cfg['results_dir'])} --reports {W.q(W.cfg['reports_dir'])} "
        f"--references {W.q(W.refs)} --out {{output.md:q}} > {{log:q}} 2>&1"
