# quantization: repro/claims/quantization.py names the papers, tables and verdict rules; parameters:
# config/claims/quantization.yaml. Quantizes the shared trained models of the translation artefact
# (workflows/translation.smk: the target-side LM and, when models lists it, the encoder-decoder; never retrains
# them), unless quantization.lm_model / translation_model name other folders or hf_model (paper scale) names a
# Hugging Face folder.
import json as _q_json
import os as _q_os

_Q = _q_json.loads(W.params("quantization"))
_Q_OWN = bool(_Q.get("hf_model"))
_Q_LM = [] if (_Q_OWN or _Q.get("lm_model") or "lm" not in _Q["models"]) else f"{W.models}/lm/checkpoint_last.pt"
_Q_TR = [] if (_Q_OWN or _Q.get("translation_model") or "translation" not in _Q["models"]) \
    else f"{W.models}/translation/checkpoint_last.pt"


rule quantization:
    input:
        lm=_Q_LM,
        translation=_Q_TR,
    output:
        **W.outputs("quantization"),
    params:
        # the shared model folders come from the inputs (the same paths the claim would derive itself)
        cfg=lambda wildcards, input: _q_json.dumps(
            {**_Q, **({"lm_model": _q_os.path.dirname(str(input.lm))} if input.lm else {}),
             **({"translation_model": _q_os.path.dirname(str(input.translation))} if input.translation else {})},
            sort_keys=True),
    log:
        f"{W.logs}/quantization.log",
    conda:
        "../environment.yml"
    threads: 1  # small matrices and per-column GPTQ updates: one thread is fastest on a shared CPU
    resources:
        runtime=240 if W.scale == "paper" else 30,
        mem_mb=64000 if W.scale == "paper" else 6000,
        gpu=1 if W.scale == "paper" else 0,
    shell:
        W.shell("quantization")


rule claim_quantization:
    input:
        f"{W.rep}/quantization.md",
