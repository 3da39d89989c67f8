# head_pruning: repro/claims/head_pruning.py names the papers, tables and verdict rules; parameters: config/claims/head_pruning.yaml.
# Input: the shared trained translation model (workflows/translation.smk), unless head_pruning.fairseq_checkpoint
# points to a fairseq checkpoint (paper scale: required, the claim imports it itself and fails naming the key when
# it is not set) or model_dir to another trained model.
import json as _hp_json

_HP = _hp_json.loads(W.params("head_pruning"))


rule head_pruning:
    input:
        model=[] if (_HP.get("fairseq_checkpoint") or _HP.get("model_dir") or _HP.get("require_fairseq_checkpoint"))
        else f"{W.models}/translation/checkpoint_last.pt",
    output:
        **W.outputs("head_pruning"),
    params:
        cfg=W.params("head_pruning"),
    log:
        f"{W.logs}/head_pruning.log",
    conda:
        "../environment.yml"
    threads: 1  # measured: decoding on 2 busy cores is 4x slower with 2 threads than 1; leaves a core to a parallel job
    resources:
        runtime=480 if W.scale == "paper" else 20,
        mem_mb=32000 if W.scale == "paper" else 4000,
        gpu=1 if W.scale == "paper" else 0,
    shell:
        W.shell("head_pruning")


rule claim_head_pruning:
    input:
        f"{W.rep}/head_pruning.md",
