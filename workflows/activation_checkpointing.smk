# activation_checkpointing: repro/claims/activation_checkpointing.py names the papers, tables and verdict rule; parameters: config/claims/activation_checkpointing.yaml.
# Timing claim: threads 2 so it runs alone on the 2-core default machine; paper scale asks for one GPU.


rule activation_checkpointing:
    output:
        **W.outputs("activation_checkpointing"),
    params:
        cfg=W.params("activation_checkpointing"),
    log:
        f"{W.logs}/activation_checkpointing.log",
    conda:
        "../environment.yml"
    threads: 2
    resources:
        runtime=30,
        mem_mb=6000,
        gpu=1 if W.scale == "paper" else 0,
    shell:
        W.shell("activation_checkpointing")


rule claim_activation_checkpointing:
    input:
        f"{W.rep}/activation_checkpointing.md",
