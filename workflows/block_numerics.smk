# block_numerics: repro/claims/block_numerics.py names the paper, table and verdict rule; parameters: config/claims/block_numerics.yaml.


rule block_numerics:
    output:
        **W.outputs("block_numerics"),
    params:
        cfg=W.params("block_numerics"),
    log:
        f"{W.logs}/block_numerics.log",
    conda:
        "../environment.yml"
    threads: 1  # tiny tensors: one thread is many times faster than two on a shared 2-core machine
    resources:
        runtime=30,
        mem_mb=4000,
    shell:
        W.shell("block_numerics")


rule claim_block_numerics:
    input:
        f"{W.rep}/block_numerics.md",
