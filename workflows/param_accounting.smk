# param_accounting: repro/claims/param_accounting.py names the paper, table and verdict rule; parameters: config/claims/param_accounting.yaml.


rule param_accounting:
    output:
        **W.outputs("param_accounting"),
    params:
        cfg=W.params("param_accounting"),
    log:
        f"{W.logs}/param_accounting.log",
    conda:
        "../environment.yml"
    threads: 1  # tiny tensors: one thread is many times faster than two on a shared 2-core machine
    resources:
        runtime=30,
        mem_mb=4000,
    shell:
        W.shell("param_accounting")


rule claim_param_accounting:
    input:
        f"{W.rep}/param_accounting.md",
