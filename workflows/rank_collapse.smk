# rank_collapse: repro/claims/rank_collapse.py names the paper, table and verdict rule; parameters: config/claims/rank_collapse.yaml.


rule rank_collapse:
    output:
        **W.outputs("rank_collapse"),
    params:
        cfg=W.params("rank_collapse"),
    log:
        f"{W.logs}/rank_collapse.log",
    conda:
        "../environment.yml"
    threads: 1  # small matrices: one thread is fastest and leaves the other core to a parallel job
    resources:
        runtime=60 if W.scale == "paper" else 15,
        mem_mb=16000 if W.scale == "paper" else 4000,
        gpu=1 if W.scale == "paper" else 0,
    shell:
        W.shell("rank_collapse")


rule claim_rank_collapse:
    input:
        f"{W.rep}/rank_collapse.md",
