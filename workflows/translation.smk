# Shared artefacts (repro/artefacts.py): tokenizer -> trained encoder-decoder (+ target-side LM) -> BLEU results.
# A claim that needs one names it in its config (workflow.needs) and the claim rule takes it as input.
# Parameters: config/claims/translation.yaml; code: repro/train/ (prepare, train, evaluate).
import json as _json

_TR = _json.loads(W.params("translation"))
TRANSLATION_DIR = W.artefact_dir("translation_model")
TRANSLATION_MODEL = W.artefact("translation_model")
LM_DIR = W.artefact_dir("lm")
LM_MODEL = W.artefact("lm")
TRANSLATION_TOKENIZER = W.artefact("tokenizer")
# sentencepiece files exist only when the tokenizer is trained here (not for a data-bin or an imported checkpoint)
_SPM = ({"spm": f"{TRANSLATION_DIR}/spm.model", "spm_vocab": f"{TRANSLATION_DIR}/spm.vocab"}
        if _TR["corpus"]["format"] != "data_bin" and not _TR.get("fairseq_checkpoint") else {})

# scheduler minutes: the training budget (x2 for a loaded machine) plus data and evaluation
_TR_RUNTIME = int((_TR["training"].get("max_minutes") or 60) * 2) + 15
_LM_RUNTIME = int((_TR["lm"]["training"].get("max_minutes") or 60) * 2) + 15


# Each rule takes its stamp (.snakemake/repro/keys/.../<job>.measure, repro.provenance) as input: rewritten only when
# the key of its code (repro/train and what it imports), the translation section or the software changes, so a
# changed training module retrains the model, and the claims built on it rerun.


rule translation_tokenizer:
    """Joint sentencepiece vocabulary on the training split (or the fairseq dictionaries at paper scale)."""
    input:
        stamp=W.stamp("tokenizer"),
    output:
        tokenizer=TRANSLATION_TOKENIZER,
        **_SPM,
    params:
        cfg=W.params("translation"),
    log:
        f"{W.logs}/translation_tokenizer.log",
    benchmark:
        W.bench("translation_tokenizer")
    conda:
        "../environment.yml"
    priority: 12  # the head of the longest chain (tokenizer -> translation model -> head_pruning -> pages)
    # both cores for its seconds: a fill-in job started beside it would hold a core the translation model needs next
    threads: 2
    resources:
        runtime=30,
        mem_mb=4000,
    shell:
        f"{W.py} -m repro.train.prepare --params {{params.cfg:q}} --out {W.q(TRANSLATION_DIR)} 2>&1 | tee {{log:q}}"


rule translation_train:
    """Train the encoder-decoder (resumes from {TRANSLATION_DIR}/state after an interruption), or import the
    fairseq checkpoint named by fairseq_checkpoint."""
    input:
        tokenizer=TRANSLATION_TOKENIZER,
        stamp=W.stamp("translation_model"),
    output:
        model=TRANSLATION_MODEL,
        summary=f"{TRANSLATION_DIR}/summary.json",
    params:
        cfg=W.params("translation"),
    log:
        f"{W.logs}/translation_train.log",
    benchmark:
        W.bench("translation_train")
    conda:
        "../environment.yml"
    priority: 12  # ahead of the LM and the fill-in parts: the head of the longest chain (head_pruning waits on it)
    threads: _TR["threads"]
    resources:
        runtime=_TR_RUNTIME,
        mem_mb=8000,
    shell:
        f"{W.py} -m repro.train.train --params {{params.cfg:q}} --tokenizer {{input.tokenizer:q}} "
        f"--out {W.q(TRANSLATION_DIR)} --work {W.q(TRANSLATION_DIR)}/state 2>&1 | tee {{log:q}}"


rule lm_train:
    """Decoder-only LM on the target side of the training split (layer_pruning)."""
    input:
        tokenizer=TRANSLATION_TOKENIZER,
        stamp=W.stamp("lm"),
    output:
        model=LM_MODEL,
        summary=f"{LM_DIR}/summary.json",
    params:
        cfg=W.params("translation"),
    log:
        f"{W.logs}/lm_train.log",
    benchmark:
        W.bench("lm_train")
    conda:
        "../environment.yml"
    priority: 10  # the shared artefacts first: the claims that need them wait on them, the others fill in
    threads: _TR["threads"]
    resources:
        runtime=_LM_RUNTIME,
        mem_mb=8000,
    shell:
        f"{W.py} -m repro.train.train --lm --params {{params.cfg:q}} --tokenizer {{input.tokenizer:q}} "
        f"--out {W.q(LM_DIR)} --work {W.q(LM_DIR)}/state 2>&1 | tee {{log:q}}"


rule translation_evaluate:
    """The benchmark: test BLEU (sacrebleu signature; full, placeholder-free, copy baseline), tokens/s, minutes."""
    input:
        model=TRANSLATION_MODEL,
        lm=LM_MODEL,
        stamp=W.stamp("translation_evaluate"),
    output:
        **W.measured("translation"),
    params:
        cfg=W.params("translation"),
        prov=_json.dumps({k: v for k, v in W.artefact_keys("translation_evaluate").items() if k != "judge"},
                         sort_keys=True),
    log:
        f"{W.logs}/translation_evaluate.log",
    benchmark:
        W.bench("translation_evaluate")
    conda:
        "../environment.yml"
    priority: 5  # on the critical path after the translation model, with head_pruning and layer_pruning
    threads: _TR["threads"]
    resources:
        runtime=60,
        mem_mb=8000,
    shell:
        f"{W.py} -m repro.train.evaluate --params {{params.cfg:q}} --scale {W.scale} --hardware {W.hw} "
        f"--model {W.q(TRANSLATION_DIR)} --lm {W.q(LM_DIR)} --out {W.q(W.res)}/translation --keys {{params.prov:q}} "
        f"--measure-only 2>&1 | tee {{log:q}}"


rule translation_verdict:
    """The benchmark's verdict: repro/judges/translation.py with the judge: part of config/claims/translation.yaml
    on the stored measurement (a changed judge or threshold re-judges here; nothing is decoded again)."""
    input:
        **W.measured("translation"),
        stamp=W.stamp("translation_evaluate", "judge"),
    output:
        verdict=W.outputs("translation")["verdict"],
    params:
        prov=_json.dumps({"judge": W.artefact_keys("translation_evaluate")["judge"]}),
        thresholds=W.thresholds_arg("translation"),
    log:
        f"{W.logs}/translation.verdict.log",
    benchmark:
        W.bench("translation.verdict")
    conda:
        "../environment.yml"
    threads: 1
    resources:
        runtime=10,
        mem_mb=2000,
    shell:
        f"{W.py} -m repro.train.evaluate --scale {W.scale} --out {W.q(W.res)}/translation --rejudge "
        f"--thresholds {{params.thresholds:q}} --keys {{params.prov:q}} > {{log:q}} 2>&1"


rule translation_model:
    """Target: the trained (or imported) translation model of this scale."""
    input:
        TRANSLATION_MODEL,


rule lm_model:
    """Target: the target-side LM of this scale."""
    input:
        LM_MODEL,


rule translation:
    """Target: the translation benchmark results (BLEU reached, minutes trained)."""
    input:
        W.outputs("translation")["verdict"],


rule translation_report:
    """The translation benchmark's page (markdown and self-contained HTML), as a claim's page: its headline (test
    BLEU beside its target and the copy baseline), checks and provenance."""
    input:
        **W.outputs("translation"),
    output:
        page=f"{W.rep}/translation.md",
        html=f"{W.rep}/translation.html",
        figures=directory(f"{W.rep}/translation"),
    log:
        f"{W.logs}/translation.report.log",
    benchmark:
        W.bench("translation.report")
    conda:
        "../environment.yml"
    resources:
        runtime=10,
        mem_mb=2000,
    shell:
        f"{W.py} -m repro.report claim --claim translation --results {W.q(W.res)}/translation "
        f"--page {{output.page:q}} --figures {{output.figures:q}} > {{log:q}} 2>&1"
