# rmsnorm_speed: repro/claims/rmsnorm_speed.py names the papers, tables and verdict rule; parameters: config/claims/rmsnorm_speed.yaml.
# Timing claim: threads 2 so it runs alone on the 2-core default machine; paper scale asks for one GPU.


rule rmsnorm_speed:
    output:
        **W.outputs("rmsnorm_speed"),
    params:
        cfg=W.params("rmsnorm_speed"),
    log:
        f"{W.logs}/rmsnorm_speed.log",
    conda:
        "../environment.yml"
    threads: 2
    resources:
        runtime=30,
        mem_mb=6000,
        gpu=1 if W.scale == "paper" else 0,
    shell:
        W.shell("rmsnorm_speed")


rule claim_rmsnorm_speed:
    input:
        f"{W.rep}/rmsnorm_speed.md",
