# warmup_stability: repro/claims/warmup_stability.py names the papers, figures and verdict rules; parameters:
# config/claims/warmup_stability.yaml. Trains its OWN small models (Post-LN / Pre-LN / ScaleNorm+FixNorm, with and
# without warm-up, several depths) on the translation artefact's corpus, with the artefact's tokenizer as input
# (never the shared trained model): TRANSLATION_TOKENIZER of workflows/translation.smk, a tokenizer.json naming the
# sentencepiece model, or the data-bin's dictionary at paper scale; or, with vocab_size set, its own smaller one.
import json as _ws_json

# the claim's validated parameters plus the translation section it trains on (the tokenizer path is added per job)
_WS_BASE = {**_ws_json.loads(W.params("warmup_stability")), "translation": _ws_json.loads(W.params("translation"))}


# with its own vocabulary (vocab_size set) the claim trains its tokenizer itself and needs no translation artefact
_WS_INPUT = {} if _WS_BASE.get("vocab_size") else {"tokenizer": TRANSLATION_TOKENIZER}


rule warmup_stability:
    input:
        **_WS_INPUT,
    output:
        **W.outputs("warmup_stability"),
    params:
        cfg=lambda wildcards, input: _ws_json.dumps(
            {**_WS_BASE, **({"tokenizer_path": str(input.tokenizer)} if "tokenizer" in _WS_INPUT else {})},
            sort_keys=True),
    log:
        f"{W.logs}/warmup_stability.log",
    conda:
        "../environment.yml"
    threads: 2
    resources:
        runtime=900 if W.scale == "paper" else 60,
        mem_mb=32000 if W.scale == "paper" else 6000,
        gpu=1 if W.scale == "paper" else 0,
    shell:
        W.shell("warmup_stability")


rule claim_warmup_stability:
    input:
        f"{W.rep}/warmup_stability.md",
