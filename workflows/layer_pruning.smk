# layer_pruning: repro/claims/layer_pruning.py names the papers, figures and verdict rules; parameters:
# config/claims/layer_pruning.yaml. Prunes the shared trained models of the translation artefact
# (workflows/translation.smk: the encoder-decoder and the target-side LM; never retrains them), unless
# layer_pruning.translation_model / lm_model name other model folders or fairseq_checkpoint (paper scale) points
# to a fairseq checkpoint, which the claim imports itself; hf_model (a Hugging Face folder, e.g. Llama-2) with
# text_path replaces the shared LM as the lm stack.
import json as _lp_json
import os as _lp_os

_LP = _lp_json.loads(W.params("layer_pruning"))
_LP_TR = [] if (_LP.get("fairseq_checkpoint") or _LP.get("translation_model")
                or not {"encoder", "decoder"} & set(_LP["stacks"])) else f"{W.models}/translation/checkpoint_last.pt"
_LP_LM = [] if (_LP.get("lm_model") or _LP.get("hf_model") or "lm" not in _LP["stacks"]) else f"{W.models}/lm/checkpoint_last.pt"


rule layer_pruning:
    input:
        translation=_LP_TR,
        lm=_LP_LM,
    output:
        **W.outputs("layer_pruning"),
    params:
        # the shared model folders come from the inputs (the same paths the claim would derive itself)
        cfg=lambda wildcards, input: _lp_json.dumps(
            {**_LP, **({"translation_model": _lp_os.path.dirname(str(input.translation))} if input.translation else {}),
             **({"lm_model": _lp_os.path.dirname(str(input.lm))} if input.lm else {})}, sort_keys=True),
    log:
        f"{W.logs}/layer_pruning.log",
    conda:
        "../environment.yml"
    threads: 2
    resources:
        runtime=240 if W.scale == "paper" else 30,
        mem_mb=32000 if W.scale == "paper" else 6000,
        gpu=1 if W.scale == "paper" else 0,
    shell:
        W.shell("layer_pruning")


rule claim_layer_pruning:
    input:
        f"{W.rep}/layer_pruning.md",
