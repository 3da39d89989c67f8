# prepost_gradients: repro/claims/prepost_gradients.py names the paper, table and verdict rule; parameters: config/claims/prepost_gradients.yaml.


rule prepost_gradients:
    output:
        **W.outputs("prepost_gradients"),
    params:
        cfg=W.params("prepost_gradients"),
    log:
        f"{W.logs}/prepost_gradients.log",
    conda:
        "../environment.yml"
    threads: 1  # small matrices: one thread is fastest and leaves the other core to a parallel job
    resources:
        runtime=60 if W.scale == "paper" else 20,
        mem_mb=16000 if W.scale == "paper" else 4000,
        gpu=1 if W.scale == "paper" else 0,
    shell:
        W.shell("prepost_gradients")


rule claim_prepost_gradients:
    input:
        f"{W.rep}/prepost_gradients.md",
