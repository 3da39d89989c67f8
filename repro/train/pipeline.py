"""The shared translation artefact from config: data, model construction, training, loading a trained model.

Parameters are one scale section of config/claims/translation.yaml (``repro.config.section("translation", s)``).
The trained encoder-decoder (and the target-side LM) are shared by head pruning (Michel et al. 2019), warm-up
stability (Xiong et al. 2020) and layer pruning (Fan et al. 2020).  Public helpers for those claims:

* ``load_data(params) -> Corpus`` (tsv/raw corpora, or a fairseq data-bin detokenised by BPE);
* ``load_tokenizer(path)`` (sentencepiece ``.model`` or fairseq ``dict.*.txt``);
* ``build_model(model_params, vocab_size, pad_id, kind="encdec"|"lm")``;
* ``encode_splits(params, tokenizer, corpus)``, ``batches_fn(encoded, max_tokens, seed)``;
* ``train_from_params(params, tokenizer_path, out_dir, kind=...) -> TrainResult``;
* ``load_trained(checkpoint_path) -> Trained`` (model in eval mode, tokenizer, decoder start id, params).
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch

from repro.io import remove_stale_temps
from repro.data.batching import encode_corpus, token_batches
from repro.data.corpus import Corpus, load_corpus
from repro.data.fairseq_io import load_data_bin, read_fairseq_dictionary
from repro.data.tokenizer import Tokenizer
from repro.errors import ConfigError
from repro.model import ModelConfig
from repro.model.init import init_fairseq_qkv_gain1
from repro.model.models import DecoderLM, EncoderDecoder
from repro.train.decode import DecodeConfig, decode_ids, translate
from repro.train.loop import CKPT_NAME, configs_from_params, load_checkpoint, train, write_summary

log = logging.getLogger("repro.train")


def require_path(value, key: str, kind: str = "path") -> Path:
    if value in (None, ""):
        raise ConfigError(f"translation.{key}: not set; this scale needs a {kind} here (config/claims/translation.yaml)")
    p = Path(value)
    if not p.exists():
        raise ConfigError(f"translation.{key}: {p} does not exist")
    return p


def load_data(params: Mapping):
    """The corpus in the configured direction, truncated to ``max_train_pairs`` / ``max_eval_pairs``."""
    c = params["corpus"]
    if c["format"] == "data_bin":
        db = load_data_bin(require_path(c["path"], "corpus.path", "fairseq data-bin directory"), c["direction"])
        src, tgt = c["direction"].split("-")
        corpus = Corpus(name=Path(c["path"]).name, src_lang=src, tgt_lang=tgt)
        for s in ("train", "valid", "test"):
            pairs = db.text_pairs(s, c.get("bpe_symbol"))
            setattr(corpus, s, pairs)
            corpus.clean_masks[s] = [True] * len(pairs)
            corpus.meta[s] = [{} for _ in pairs]
        corpus.data_bin = db
        corpus.bpe_symbol = c.get("bpe_symbol")
    else:
        path = c["path"]
        if path in (None, ""):
            raise ConfigError("translation.corpus.path: not set")
        corpus = load_corpus(path, c["direction"])
    for split, key in (("train", "max_train_pairs"), ("valid", "max_eval_pairs"), ("test", "max_eval_pairs")):
        n = c.get(key)
        if n:
            setattr(corpus, split, getattr(corpus, split)[:n])
            corpus.clean_masks[split] = corpus.clean_masks[split][:n]
            corpus.meta[split] = corpus.meta[split][:n]
    return corpus


def load_tokenizer(path: str | Path, bpe_symbol: str | None = "@@ "):
    """A sentencepiece model (``.model``) or a fairseq dictionary (``dict.<lang>.txt``)."""
    p = Path(path)
    if p.suffix == ".txt":
        d = read_fairseq_dictionary(p)
        d.bpe_symbol = bpe_symbol
        return d
    return Tokenizer.load(p)


def resolve_tokenizer(path: str | Path) -> str:
    """A tokenizer path given directly (.model/.txt) or through a tokenizer.json written by repro.train.prepare."""
    p = Path(path)
    if p.suffix == ".json":
        return json.loads(p.read_text())["path"]
    return str(p)


def build_model(model_params: Mapping, vocab_size: int, pad_id: int, kind: str = "encdec"):
    """EncoderDecoder (``kind="encdec"``) or DecoderLM (``"lm"``) from a ``model`` section of the config."""
    cfg = ModelConfig.from_dict({**dict(model_params), "vocab_size": int(vocab_size), "pad_id": int(pad_id)})
    if kind not in ("encdec", "lm"):
        raise ValueError(f"kind must be encdec or lm, got {kind!r}")
    model = EncoderDecoder(cfg) if kind == "encdec" else DecoderLM(cfg)
    init_fairseq_qkv_gain1(model)  # the reference results were trained this way
    return model


def encode_splits(params: Mapping, tokenizer, corpus, max_len: int) -> dict:
    """EncodedCorpus per split: training pairs over ``max_len`` dropped, valid pairs truncated."""
    db = getattr(corpus, "data_bin", None)
    if db is not None:
        return {"train": db.encoded("train", max_len, "drop"), "valid": db.encoded("valid", max_len, "truncate")}
    return {"train": encode_corpus(corpus.train, tokenizer, max_len, on_long="drop"),
            "valid": encode_corpus(corpus.valid, tokenizer, max_len, on_long="truncate")}


def batches_fn(encoded, max_tokens: int, seed: int):
    """``epoch -> batches``: a new deterministic order per epoch (seed + epoch), as ``train`` expects."""
    return lambda epoch: token_batches(encoded, max_tokens, shuffle=True, seed=seed + epoch)


def valid_batches(encoded, max_tokens: int) -> list:
    return list(token_batches(encoded, max_tokens, shuffle=False))


def train_from_params(params: Mapping, tokenizer_path: str | Path, out_dir: str | Path, kind: str = "encdec",
                      resume: bool = True, stop_after_steps: int | None = None, work_dir: str | Path | None = None):
    """Train the configured model (``params["model"]``/``params["training"]``; ``kind="lm"`` uses
    ``params["lm"]``) and write ``checkpoint_last.pt``, ``curve.csv`` and ``summary.json`` into ``out_dir``.

    Resumable state lives in ``work_dir`` (default ``out_dir``); with a separate ``work_dir`` the final
    checkpoint is copied to ``out_dir`` only when training ends, so a workflow manager that deletes the
    outputs of an interrupted job does not delete the state to resume from."""
    tokenizer_path = resolve_tokenizer(tokenizer_path)
    out = Path(out_dir)
    work = Path(work_dir) if work_dir else out
    out.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(out)  # a killed run's half-written copies (the state folder is tidied by train())
    sec = params["lm"] if kind == "lm" else params
    tr = sec["training"]
    device = params.get("device", "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("translation.device: cuda requested but no GPU is available")
    torch.set_num_threads(int(params.get("threads", torch.get_num_threads())))
    t0 = time.time()
    corpus = load_data(params)
    tok = load_tokenizer(tokenizer_path, params["corpus"].get("bpe_symbol"))
    enc = encode_splits(params, tok, corpus, tr["max_len"])
    log.info("data: %d train pairs (%d kept <= %d tokens), %d valid; vocab %d; %.1f s", len(corpus.train),
             len(enc["train"]), tr["max_len"], len(enc["valid"]), tok.vocab_size, time.time() - t0)
    torch.manual_seed(tr["seed"])
    model = build_model(sec["model"], tok.vocab_size, tok.pad_id, kind)
    n_params = sum(p.numel() for p in model.parameters())
    log.info("%s model: %.2fM parameters, config %s", kind, n_params / 1e6, json.dumps(sec["model"]))
    opt, sched, run = configs_from_params(tr)
    extra = {"kind": kind, "model_cfg": model.cfg.to_dict(), "tokenizer": str(Path(tokenizer_path).resolve()),
             "bos_id": tok.bos_id, "eos_id": tok.eos_id, "pad_id": tok.pad_id, "params": json.dumps(params),
             # what the batches depend on beyond the optimizer/run settings (compared before resuming a state)
             "data": json.dumps({"corpus": params["corpus"], "max_tokens": tr["max_tokens"], "max_len": tr["max_len"],
                                 "seed": tr["seed"], "train_pairs": len(enc["train"])}, sort_keys=True)}
    res = train(model, batches_fn(enc["train"], tr["max_tokens"], tr["seed"]),
                valid_batches(enc["valid"], tr["max_tokens"]), opt, sched, run, ckpt_dir=work,
                curve_path=out / "curve.csv", resume=resume, device=device, stop_after_steps=stop_after_steps,
                ckpt_extra=extra)
    if work != out and res.stop_reason != "interrupted":
        tmp = out / f".{CKPT_NAME}.tmp"
        shutil.copyfile(work / CKPT_NAME, tmp)
        os.replace(tmp, out / CKPT_NAME)
    write_summary(out / "summary.json", res, kind=kind, parameters=n_params, train_pairs=len(enc["train"]),
                  model=sec["model"], threads=torch.get_num_threads(), device=device)
    return res


@dataclass
class Trained:
    """A trained model ready for decoding: ``translate(t.model, t.tokenizer, sources, cfg, bos_id=t.bos_id)``."""

    model: torch.nn.Module
    tokenizer: Any
    bos_id: int  # decoder start token (eos for imported fairseq models)
    kind: str
    params: dict
    checkpoint: dict  # the rest of the checkpoint (step, curve, ...), without model/optimizer weights
    src_tokenizer: Any = None  # a separate source vocabulary (imported fairseq models), else None
    vocab_limit: int | None = None  # target ids at or above this are never produced (imported models)

    def translate(self, sources: list[str], cfg=None, device="cpu"):
        """Hypotheses (text) and decoding stats for ``sources``; ``cfg`` a DecodeConfig (default greedy)."""
        return translate(self.model, self.tokenizer, sources, cfg, device=device, bos_id=self.bos_id,
                         src_tokenizer=self.src_tokenizer, vocab_limit=self.vocab_limit)

    def translate_split(self, corpus, split: str = "test", cfg=None, device="cpu"):
        """Hypotheses for a corpus split.  For a fairseq data-bin corpus the stored (BPE) source ids are decoded
        and the output has BPE removed (``corpus.bpe_symbol``), so references and hypotheses are both plain text."""
        db = getattr(corpus, "data_bin", None)
        if db is None:
            return self.translate(corpus.sources(split), cfg, device)
        cfg = cfg or DecodeConfig()
        src_ids = [list(s) if len(s) and s[-1] == db.src_dict.eos_index else list(s) + [db.src_dict.eos_index]
                   for s in db.splits[split][0][: len(getattr(corpus, split))]]
        td = db.tgt_dict
        hyps, stats = decode_ids(self.model, src_ids, self.bos_id, td.eos_index, td.pad_index, cfg, device,
                                 self.vocab_limit)
        return [td.string(h, getattr(corpus, "bpe_symbol", "@@ ")) for h in hyps], stats


def load_trained(path: str | Path, device="cpu", tokenizer_path: str | Path | None = None) -> Trained:
    """Load ``checkpoint_last.pt`` (or a folder holding it) written by training or by the fairseq import."""
    p = Path(path)
    if p.is_dir():
        p = p / CKPT_NAME
    st = load_checkpoint(p, map_location=device)
    for key in ("model", "model_cfg", "kind", "tokenizer"):
        if key not in st:
            raise ValueError(f"{p}: not a translation checkpoint (no {key!r} entry)")
    cfg = ModelConfig.from_dict(st["model_cfg"])
    model = (EncoderDecoder if st["kind"] in ("encdec", "fairseq") else DecoderLM)(cfg)
    model.load_state_dict(st["model"])
    model.to(device).eval()
    params = json.loads(st.get("params") or "{}")
    tok = load_tokenizer(tokenizer_path or st["tokenizer"], (params.get("corpus") or {}).get("bpe_symbol", "@@ "))
    src_tok = None
    if st.get("src_tokenizer") and st["src_tokenizer"] != st["tokenizer"]:
        src_tok = load_tokenizer(st["src_tokenizer"], (params.get("corpus") or {}).get("bpe_symbol", "@@ "))
    rest = {k: v for k, v in st.items() if k not in ("model", "optimizer")}
    return Trained(model, tok, int(st.get("bos_id", tok.bos_id)), st["kind"], params, rest, src_tok,
                   st.get("tgt_vocab"))
