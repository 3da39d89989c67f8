"""The shared trained artefacts, and the one place claims resolve and load them.

workflows/translation.smk builds them from config/claims/translation.yaml under
``<results>/<hardware>/<scale>/_models/``:

=================  =======================================  =====================================================
artefact           file the workflow builds                 what it is
=================  =======================================  =====================================================
tokenizer          ``_models/translation/tokenizer.json``   the joint sentencepiece vocabulary (or fairseq dicts)
translation_model  ``_models/translation/checkpoint_last.pt``  the shared 6+3-layer encoder-decoder
lm                 ``_models/lm/checkpoint_last.pt``         the target-side decoder-only LM
=================  =======================================  =====================================================

A claim declares what it needs in its config file (``workflow.needs`` in config/claims/<id>.yaml): each need
names an artefact and the claim parameter that receives its path (a model's folder, the tokenizer's file). The
workflow builds the artefact and passes the path on the claim's command line (``--input model_dir=...``), so
the dependency is declared once. A claim run by hand with that parameter null falls back to the same layout beside
its results folder (:func:`default_path`). A model may instead come from a path the user gives: a folder trained by
the suite, a fairseq checkpoint (imported with its data-bin) or a Hugging Face folder (repro.model.hf_import).

Every problem with an artefact raises :class:`ArtefactError`, whose message names the claim's config key.
"""
from __future__ import annotations

import copy
import logging
from pathlib import Path

from repro import config
from repro.errors import ArtefactError  # a shared artefact or a model path is missing or wrong
# the shared models' file names and folders, spelled once in repro.layout (re-exported for the workflow, the peers
# and publishing)
from repro.layout import ARTEFACTS, CKPT_NAME, MODELS_DIR, TOKENIZER_NAME  # noqa: F401

# The workflow (repro/workflow.py) imports this module while Snakemake builds the DAG, for the artefacts' paths; the
# loaders below import torch-heavy modules (repro.train, repro.model.hf_import) when they are called, not here.

log = logging.getLogger("repro.artefacts")


def _spec(name: str) -> tuple[str, str, str]:
    if name not in ARTEFACTS:
        raise ArtefactError(f"unknown artefact {name!r} (known: {', '.join(ARTEFACTS)})")
    return ARTEFACTS[name]


def artefact_dir(models_dir: str | Path, name: str) -> Path:
    """The folder artefact ``name`` lives in (``<results>/<hw>/<scale>/_models/<translation|lm>``)."""
    return Path(models_dir) / _spec(name)[0]


def artefact_file(models_dir: str | Path, name: str) -> Path:
    """The file the workflow builds for artefact ``name`` (its rule's output, the claim rule's input)."""
    return artefact_dir(models_dir, name) / _spec(name)[1]


def param_value(path: str | Path, name: str) -> str:
    """What the claim's parameter receives for the built file ``path``: the model's folder, or the tokenizer file."""
    return str(Path(path).parent if _spec(name)[2] == "folder" else Path(path))


def default_path(out: str | Path, name: str) -> Path:
    """Where artefact ``name`` is for a claim whose results folder is ``out`` (a hand run with the parameter null):
    ``<out>/../_models/...``, the folder or file :func:`param_value` would pass."""
    built = artefact_file(Path(out).resolve().parent / MODELS_DIR, name)
    return Path(param_value(built, name))


def checkpoint_file(path: str | Path) -> Path:
    """``checkpoint_last.pt`` of a model folder (a checkpoint file is returned as is)."""
    p = Path(path)
    return p / CKPT_NAME if p.is_dir() else p


def trained_model_path(params: dict, key: str, claim: str, out: str | Path, artefact: str) -> Path:
    """The folder of a model trained by the suite: ``params[key]``, or the shared ``artefact`` beside ``out``.
    Fails naming ``<claim>.<key>`` when it holds no checkpoint."""
    p = Path(params[key]) if params.get(key) else default_path(out, artefact)
    if not checkpoint_file(p).is_file():
        raise ArtefactError(f"{claim}.{key}: no trained model at {p} (build the shared artefact with "
                            f"`snakemake {'lm_model' if artefact == 'lm' else 'translation_model'}`, or set {key})")
    return p


def translation_params(params: dict, scale: str) -> dict:
    """The translation section (corpus, tokenizer, model) a claim builds on: the one the workflow passed in
    ``params["translation"]``, else config/claims/translation.yaml at ``scale`` (a hand run)."""
    if params.get("translation"):
        return params["translation"]
    return config.section("translation", scale)


def load_trained_model(path: str | Path, device="cpu", tokenizer_path: str | Path | None = None):
    """A ``repro.train.pipeline.Trained`` (model in eval mode, tokenizer, kind, its training params) from a folder
    or checkpoint written by the suite's training or by the fairseq import."""
    from repro.train.pipeline import load_trained  # lazy: torch (not at DAG build)

    p = checkpoint_file(path)
    if not p.is_file():
        raise ArtefactError(f"{p}: no such checkpoint")
    try:
        return load_trained(p, device=device, tokenizer_path=tokenizer_path)
    except (KeyError, ValueError) as exc:
        raise ArtefactError(f"{p}: not a checkpoint of this suite ({exc})") from None


def import_fairseq(checkpoint: str | Path, tparams: dict, dest: str | Path, claim: str,
                   key: str = "fairseq_checkpoint") -> Path:
    """Import a fairseq checkpoint (0.12 layout) with the data-bin named in ``tparams["corpus"]`` into ``dest``
    once (kept for a rerun); returns the folder, loadable with :func:`load_trained_model`."""
    from repro.train.fairseq_import import import_to_checkpoint  # lazy: torch (not at DAG build)

    ck = Path(checkpoint)
    if not ck.exists():
        raise ArtefactError(f"{claim}.{key}: {ck} does not exist")
    corpus = tparams.get("corpus") or {}
    if corpus.get("format") == "data_bin" and not (corpus.get("path") and Path(corpus["path"]).is_dir()):
        raise ArtefactError(f"{claim}: the fairseq data-bin {corpus.get('path')!r} is not an existing folder "
                            f"(needed with {key})")
    dest = Path(dest)
    if not (dest / CKPT_NAME).is_file():
        dest.mkdir(parents=True, exist_ok=True)
        log.info("importing fairseq checkpoint %s into %s", ck, dest)
        import_to_checkpoint({**copy.deepcopy(tparams), "fairseq_checkpoint": str(ck)}, dest)
    return dest


def hf_folder(params: dict, claim: str, key: str = "hf_model", text_key: str | None = "text_path") -> Path:
    """A Hugging Face model folder (config.json + safetensors) and, when ``text_key`` is given, the text file the
    claim scores it on; fails naming the key."""
    p = Path(params[key])
    if not (p / "config.json").is_file():
        raise ArtefactError(f"{claim}.{key}: {p} is not a Hugging Face checkpoint folder (no config.json)")
    if text_key and not (params.get(text_key) and Path(params[text_key]).is_file()):
        raise ArtefactError(f"{claim}.{text_key}: {params.get(text_key)!r} is not an existing text file (needed "
                            f"with {key})")
    return p


def load_hf_model(path: str | Path, device="cpu", dtype=None):
    """A ``Trained`` (kind ``lm``) for a Hugging Face folder: the suite's model with the folder's weights
    (repro.model.hf_import.load_pretrained) and its tokenizer; ``meta`` names the family, kind (decoder_lm,
    encoder...) and parameter count."""
    from repro.model.hf_import import load_pretrained, load_tokenizer  # lazy: torch (not at DAG build)
    from repro.train.pipeline import Trained  # lazy: torch (not at DAG build)

    kwargs = {"device": device, **({"dtype": dtype} if dtype is not None else {})}
    model, info = load_pretrained(path, **kwargs)
    tok = load_tokenizer(path, info.hf_config)
    meta = {"hf_model": str(path), "family": info.family, "kind": info.kind, "architecture": info.architecture,
            "params": info.params["total"], "checkpoint_params": info.checkpoint_params, "notes": info.notes}
    return Trained(model, tok, tok.bos_id, "lm", {}, meta)


def tokenizer_file(path: str | Path, claim: str, key: str = "tokenizer_path") -> str:
    """The tokenizer a ``tokenizer.json`` (the artefact) names, or a .model / dict file given directly."""
    from repro.train.pipeline import resolve_tokenizer  # lazy: torch (not at DAG build)

    if not Path(path).exists():
        raise ArtefactError(f"{claim}.{key}: {path} does not exist")
    return str(resolve_tokenizer(path))
