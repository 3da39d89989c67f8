# flash_attention: repro/claims/flash_attention.py names the papers, tables and verdict rule; parameters: config/claims/flash_attention.yaml.
# Timing claim: threads 2 so it runs alone on the 2-core default machine; paper scale asks for one GPU.


rule flash_attention:
    output:
        **W.outputs("flash_attention"),
    params:
        cfg=W.params("flash_attention"),
    log:
        f"{W.logs}/flash_attention.log",
    conda:
        "../environment.yml"
    threads: 2
    resources:
        runtime=30,
        mem_mb=6000,
        gpu=1 if W.scale == "paper" else 0,
    shell:
        W.shell("flash_attention")


rule claim_flash_attention:
    input:
        f"{W.rep}/flash_attention.md",
