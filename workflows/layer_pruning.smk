# layer_pruning: repro/claims/layer_pruning.py names the papers, figures and verdict rules; parameters:
# config/claims/layer_pruning.yaml. Prunes the shared trained models of the translation artefact (never retrains them).


rule layer_pruning:
    input:
        translation=f"{W.models}/translation/checkpoint_last.pt",
        lm=f"{W.models}/lm/checkpoint_last.pt",
    output:
        **W.outputs("layer_pruning"),
    params:
        cfg=W.params("layer_pruning"),
    log:
        f"{W.logs}/layer_pruning.log",
    conda:
        "../environment.yml"
    threads: 2
    resources:
        runtime=30 if W.scale != "paper" else 240,
        mem_mb=6000 if W.scale != "paper" else 32000,
        gpus=1 if W.scale == "paper" else 0,
    shell:
        W.shell("layer_pruning")


rule claim_layer_pruning:
    input:
        f"{W.rep}/layer_pruning.md",
