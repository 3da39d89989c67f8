"""The shared trained artefacts' file names and folders, spelled once (floor 0 of docs/architecture.md).

Training (repro.train) writes them, repro.artefacts resolves and loads them, repro.io hashes a model folder's
checkpoint for a measurement's input record, and the workflow, the peers and publishing find them by these names.
Only names live here, so every floor may import them without importing the code that builds or loads the artefacts
(which would run back up the floors: repro.artefacts imports repro.train, which writes with repro.io).
"""

CKPT_NAME = "checkpoint_last.pt"  # a trained model's folder holds it (fairseq-train's name for its last one, too)
TOKENIZER_NAME = "tokenizer.json"  # repro.train.prepare's pointer to the vocabulary
MODELS_DIR = "_models"  # under <results>/<hardware>/<scale>/
# artefact -> (folder under _models, the file the workflow builds, what a claim receives: the folder or the file)
ARTEFACTS = {
    "tokenizer": ("translation", TOKENIZER_NAME, "file"),
    "translation_model": ("translation", CKPT_NAME, "folder"),
    "lm": ("lm", CKPT_NAME, "folder"),
}
# artefact -> the workflow's jobs that build it, its own inputs' jobs first (their benchmark files' names:
# workflows/translation.smk), so a claim's run time can count the shared models it needs
ARTEFACT_JOBS = {
    "tokenizer": ("translation_tokenizer",),
    "translation_model": ("translation_tokenizer", "translation_train"),
    "lm": ("translation_tokenizer", "lm_train"),
}
# the claims measured by a job not named after them (the translation benchmark's BLEU: rule translation_evaluate)
MEASURING_JOB = {"translation": "translation_evaluate"}
