"""C3 warmup_stability: training with and without learning-rate warm-up, Post-LN vs Pre-LN (vs ScaleNorm+FixNorm).

Reproduces, on the suite's translation task (the corpus and tokenizer of the shared "translation" artefact; this
claim trains its OWN small models, never the shared one):

- Xiong et al., ICML 2020, arXiv 2002.04745, Section 3.2 and Fig. 2: Post-LN Transformers with Adam need warm-up
  (IWSLT14 De-En, 6+6 layers: 8.45 BLEU without warm-up vs about 34 with it; warm-up 500 steps: 31.16 at lr 5e-4
  and 2.77 at lr 1e-3), while Pre-LN trains without warm-up (Fig. 3: Pre-LN without warm-up against the Post-LN
  baseline with it).  Grid: {Post-LN, Pre-LN} x {warm-up, none} x the configured learning rates (paper: 5e-4 and
  1e-3, Adam betas (0.9, 0.98)); ``warmup_positions`` limits the warm-up arm to some positions (default scale:
  Post-LN only, the paper's baseline).
- Nguyen & Salazar, "Transformers without Tears", IWSLT 2019, arXiv 1910.05895: PreNorm + ScaleNorm
  (g * x / ||x||, g initialised to sqrt(d); repro.model norm "scalenorm") + FixNorm (word embeddings l2-normalised
  to a fixed length g; implemented HERE as a parametrisation of the shared token embedding, see ``apply_fixnorm``),
  trained without warm-up; and their Table 5 analogue: no-warm-up stability vs depth (PostNorm fails at 5-6 layers
  where PreNorm trains: 18.31 / fails / fails vs 28.33 / 28.13 / 28.32 at 4 / 5 / 6 layers).

Schedules: one inverse-sqrt decay for both arms (fairseq's, as both papers), lr * sqrt(W / step) after W, the
longest warm-up; the warm-up arm ramps linearly to the peak over its warm-up, the no-warm-up arm holds the peak
until W (``schedule_of``), so the paired gap is the warm-up alone.
Initialisation: ``repro.model.init.init_fairseq_qkv_gain1`` (fairseq: Xavier-uniform linear weights, zero biases,
embeddings N(0, d^-1/2)); norms keep their own init (LayerNorm (1, 0), ScaleNorm g = sqrt(d)).
Divergence (NaN/inf, or a training loss above ``explode_loss``) is an outcome recorded by ``repro.train.train``;
a run that stays finite but plateaus (Post-LN without warm-up typically plateaus rather than producing NaN) is
recorded with its NLL, and the judge compares it with the other configurations.

Per run (every configuration once per seed of ``seeds``, Post-LN without warm-up at the main depth and the highest
lr also per seed of ``post_no_warmup_extra_seeds``, the lower lrs (at the positions of ``secondary_lr_positions``)
per seed of ``secondary_seeds``; a seed fixes init, batch order and dropout, so configurations with the same seeds are
compared PAIRED within a seed, the others by Welch's interval of their means): train/validation curves
(``curves/<run>.csv``), final and best validation NLL,
training loss, divergence, BLEU of greedy decoding on the first ``eval.test_sentences`` test sentences (full,
placeholder-free subset, and the copy baseline on the same sentences: copying the German source already scores BLEU
here).  Per data set: the unigram entropy of the training targets (the NLL of a model that learned only token
frequencies), the training pairs kept and the vocabulary size.

The verdict (gates, headline and secondary checks, and their thresholds: the judge: section of
config/claims/warmup_stability.yaml) is repro/judges/warmup_stability.py's; this module only measures.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import multiprocessing
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np
import torch
from filelock import FileLock
from torch import nn
from torch.nn.utils import parametrize

from repro import artefacts
from repro.cli import setup_logging
from repro.data.tokenizer import train_sentencepiece
from repro.io import atomic_write_json, metric
from repro.model import block, models
from repro.progress import Progress
from repro.train import loop
from repro.train.bleu import bleu_report
from repro.train.decode import DecodeConfig, decode_ids
from repro.train.loop import OptimConfig, RunConfig, ScheduleConfig, train
from repro.train.pipeline import batches_fn, build_model, encode_splits, load_data, load_tokenizer, valid_batches
from repro.vocabulary.warmup_stability import CLAIM, warmup_lengths

ARTIFACTS = ("runs.json", "curves/*.csv")  # result files beside metrics.csv (declared in verdict.json; the plots read them)
log = logging.getLogger("repro.warmup_stability")


# ----------------------------------------------------------------------------------------------------------- FixNorm
class FixNormWeight(nn.Module):
    """Parametrisation W -> g * W / ||W_row||: every word embedding has length ``g`` (Nguyen & Chiang 2018, used by
    Nguyen & Salazar 2019).  The pad row (all zeros) stays zero."""

    def __init__(self, g: float, eps: float = 1e-6):
        super().__init__()
        self.g, self.eps = float(g), eps

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return self.g * w / w.norm(dim=-1, keepdim=True).clamp_min(self.eps)


def apply_fixnorm(model, g: float) -> None:
    """FixNorm on the shared (and tied) token embedding of an EncoderDecoder: both the input lookup and the tied
    output projection (``Decoder.logits`` reads ``embed.token.weight``) see the normalised rows.  Uses
    torch.nn.utils.parametrize, so repro.model is not changed."""
    tokens = {id(m.embed.token): m.embed.token for m in (model.encoder, model.decoder)}
    for emb in tokens.values():
        parametrize.register_parametrization(emb, "weight", FixNormWeight(g))


# -------------------------------------------------------------------------------------------------------- the plan
def _lr_tag(lr: float) -> str:
    return f"{lr:.0e}".replace("e-0", "e-")


def seeds_for(params: dict, position: str, warmup: int, layers: int, fixnorm: bool = False,
              lr: float | None = None) -> list[int]:
    """The seeds one configuration is trained with (each fixes init, batch order and dropout): ``seeds``, with
    ``post_no_warmup_extra_seeds`` added for Post-LN without warm-up at the main depth and the highest learning
    rate (the headline's configuration whose outcome varies by seed); ``secondary_seeds`` (when set) for every run
    at a lower learning rate (a reported-only secondary: no counted check reads them); and ``depth.seeds`` (when
    set) for the depth sweep's runs at the other depths (they train alike on every seed)."""
    seeds, extra = [int(s) for s in params["seeds"]], [int(s) for s in params.get("post_no_warmup_extra_seeds") or []]
    if set(seeds) & set(extra):
        raise ValueError(f"warmup_stability.post_no_warmup_extra_seeds: {sorted(set(seeds) & set(extra))} already in "
                         f"seeds {seeds}")
    if layers != params["model"]["n_encoder_layers"]:
        return [int(s) for s in params["depth"].get("seeds") or seeds]
    if lr is not None and not math.isclose(lr, max(params["lrs"])):
        return [int(s) for s in params.get("secondary_seeds") or seeds]
    return seeds + (extra if position == "post" and not warmup and not fixnorm else [])


def positions_at(params: dict, lr: float) -> list[str]:
    """The positions trained at learning rate ``lr``: every one of ``positions`` at the highest, those of
    ``secondary_lr_positions`` (null: every one) at the lower learning rates (a pre-stated secondary)."""
    if math.isclose(lr, max(params["lrs"])):
        return list(params["positions"])
    chosen = params.get("secondary_lr_positions") or params["positions"]
    if not set(chosen) <= set(params["positions"]):
        raise ValueError(f"warmup_stability.secondary_lr_positions: {chosen} must be among positions "
                         f"{params['positions']}")
    return [p for p in params["positions"] if p in chosen]


def plan_runs(params: dict) -> list[dict]:
    """Every training run of the experiment: each configuration (deduplicated: the depth sweep reuses the main
    grid's runs) once per seed; the headline configurations first, each with all its seeds, so a run cut short has
    the headline decided first."""
    m = params["model"]
    main_layers = m["n_encoder_layers"]
    warmups = warmup_lengths(params)
    runs: dict[tuple, dict] = {}

    def add(group, norm, position, fixnorm, layers, lr, warmup):
        key = (norm, position, fixnorm, layers, lr, warmup)
        if key in runs:
            runs[key]["groups"].append(group)
            return
        name = (f"{position}_{'scalenorm_fixnorm' if fixnorm else norm}_L{layers}_lr{_lr_tag(lr)}_"
                f"{'warmup' + str(warmup) if warmup else 'nowarmup'}")
        runs[key] = dict(name=name, groups=[group], norm=norm, position=position, fixnorm=fixnorm, layers=layers,
                         lr=lr, warmup=warmup)

    with_warmup = params.get("warmup_positions") or params["positions"]
    if not set(with_warmup) <= set(params["positions"]):
        raise ValueError(f"warmup_stability.warmup_positions: {with_warmup} must be among positions "
                         f"{params['positions']}")
    for lr in params["lrs"]:
        for position in positions_at(params, lr):
            for warmup in (*(warmups if position in with_warmup else ()), 0):
                add("xiong", "layernorm", position, False, main_layers, lr, warmup)
    sn = params["scalenorm_fixnorm"]
    if sn["enabled"]:
        for lr in sn["lrs"]:
            add("nguyen", "scalenorm", "pre", True, main_layers, lr, 0)
    dp = params["depth"]
    # the main depth's runs are reused from the grid; no extra depth: no sweep (nothing labelled "depth")
    for layers in sorted(set(dp["layers"]) | {main_layers}) if dp["layers"] else ():
        for position in params["positions"]:
            add("depth", "layernorm", position, False, layers, dp["lr"], 0)
    # most informative first (a run cut short still shows the headline): the LayerNorm grid at the main depth and the
    # highest lr, then ScaleNorm+FixNorm, the depth sweep, the other learning rates
    hi = max(params["lrs"])

    def rank(r):
        main = r["layers"] == main_layers and r["lr"] == hi
        return 0 if main and not r["fixnorm"] else 1 if main else 2 if r["layers"] != main_layers else 3

    configs = sorted(runs.values(), key=rank)
    return [{**r, "groups": list(r["groups"]), "name": f"{r['name']}_s{seed}", "seed": seed}
            for r in configs
            for seed in seeds_for(params, r["position"], r["warmup"], r["layers"], r["fixnorm"], r["lr"])]


def _training_code_hash() -> str:
    """sha256 (12 hex) of the code a training run executes: this module, the training loop, the model and its
    blocks. Part of runs.json's resume key, so runs trained by older code are not reused."""
    h = hashlib.sha256()
    for mod in (sys.modules[__name__], loop, models, block):
        h.update(Path(mod.__file__).read_bytes())
    return h.hexdigest()[:12]


def unigram_entropy(encoded, vocab_size: int) -> float:
    """Entropy (nats/token) of the unigram distribution of the training targets, end-of-sentence included (the
    tokens the validation NLL is measured on): the NLL of a model that learned token frequencies and nothing else.
    A model whose validation NLL is not clearly below it has not learned to translate."""
    if not len(encoded):
        raise ValueError("unigram_entropy: no training pairs")
    ids = np.concatenate([np.asarray(t, dtype=np.int64) for t in encoded.tgt] +
                         [np.full(len(encoded), encoded.eos_id, dtype=np.int64)])
    counts = np.bincount(ids, minlength=vocab_size).astype(np.float64)
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


# ------------------------------------------------------------------------------------------------------ data/setup
def _tokenizer(params: dict, tparams: dict, corpus, out: Path):
    """The translation artefact's tokenizer: ``tokenizer_path`` (set by the workflow to the translation_tokenizer
    rule's ``tokenizer.json``, or a .model / dict.<lang>.txt).  When unset (a hand run or a test) one is made the
    same way into ``out``: the data-bin's dictionary, or a sentencepiece model trained with the translation
    section's tokenizer settings on both sides of the training split.  ``vocab_size`` (a text corpus only): this
    claim's own, smaller sentencepiece vocabulary, trained the same way into ``out`` (small models learn a
    1-2k-piece output layer in far fewer updates than the shared 8k one; every variant uses the same one)."""
    path = params.get("tokenizer_path")
    bpe = tparams["corpus"].get("bpe_symbol")
    own = params.get("vocab_size")
    if own and tparams["corpus"]["format"] == "data_bin":
        raise ValueError("warmup_stability.vocab_size: a data-bin corpus comes with its dictionary; set it to null")
    if path and not own:
        real = artefacts.tokenizer_file(path, "warmup_stability")
        return load_tokenizer(real, bpe), real
    if tparams["corpus"]["format"] == "data_bin":
        tgt = tparams["corpus"]["direction"].split("-")[1]
        p = Path(tparams["corpus"]["path"]) / f"dict.{tgt}.txt"
        if not p.exists():
            raise FileNotFoundError(f"translation.corpus.path: {p} (the fairseq dictionary) does not exist")
        return load_tokenizer(p, bpe), str(p)
    tk = tparams["tokenizer"]
    size = int(own or tk["vocab_size"])
    prefix = out / "tokenizer" / f"spm{size}"
    texts = [s for pair in corpus.train for s in pair]
    # trained once per settings and training text: the part jobs (workflow.parts) start side by side and share it
    want = {"vocab_size": size, "tokenizer": {k: tk.get(k) for k in ("model_type", "character_coverage", "seed")},
            "texts_sha256": hashlib.sha256("\n".join(texts).encode()).hexdigest()}
    stamp = Path(str(prefix) + ".params.json")
    prefix.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(prefix.parent / ".lock"):  # the other part jobs wait, then reuse it
        if stamp.exists() and Path(str(prefix) + ".model").exists() and json.loads(stamp.read_text()) == want:
            tok = load_tokenizer(str(prefix) + ".model", bpe)
            log.info("reusing the %d-piece tokenizer %s (same settings and training text)", tok.vocab_size, prefix)
            return tok, str(prefix) + ".model"
        stamp.unlink(missing_ok=True)
        tok = train_sentencepiece(texts, prefix, size, tk.get("model_type", "unigram"),
                                  tk.get("character_coverage", 1.0), tk.get("seed", 0))
        atomic_write_json(stamp, want)
    log.info("trained a %d-piece tokenizer on %d sentences into %s (%s)", tok.vocab_size, len(texts), prefix,
             "warmup_stability.vocab_size" if own else "tokenizer_path unset")
    return tok, str(prefix) + ".model"


def _model_params(params: dict, run: dict) -> dict:
    m = json.loads(json.dumps(params["model"]))
    m["n_encoder_layers"] = m["n_decoder_layers"] = run["layers"]
    m["block"] = {**m["block"], "norm": run["norm"], "norm_position": run["position"]}
    return m


# ------------------------------------------------------------------------------------------------------------ run
def decay_from(params: dict) -> int:
    """The update at which every arm's inverse-sqrt decay starts: the longest warm-up of the grid."""
    return warmup_lengths(params)[0]


def schedule_of(params: dict, run: dict) -> ScheduleConfig:
    """One decay schedule for both arms, as the papers: lr * sqrt(W / step) after W = ``decay_from`` updates.
    The warm-up arm ramps linearly over its own warm-up (from ``warmup_init_lr``); the no-warm-up arm starts at the
    peak lr and holds it until W (a "ramp" from the peak to the peak), so the paired gap is warm-up alone."""
    tr = params["training"]
    if run["warmup"]:
        return ScheduleConfig("inverse_sqrt", run["warmup"], tr["warmup_init_lr"])
    return ScheduleConfig("inverse_sqrt", decay_from(params), run["lr"])


def train_one(params: dict, run: dict, tok, enc: dict, test: dict, out: Path, device: str) -> dict:
    """Train one configuration from scratch; returns its summary (losses, divergence, BLEU)."""
    tr = params["training"]
    torch.manual_seed(run["seed"])
    model = build_model(_model_params(params, run), tok.vocab_size, tok.pad_id)  # fairseq Xavier init
    if run["fixnorm"]:
        apply_fixnorm(model, params["scalenorm_fixnorm"]["fixnorm_g"])
    opt = OptimConfig(lr=run["lr"], betas=tuple(tr["betas"]), eps=tr["adam_eps"], weight_decay=tr["weight_decay"],
                      clip_norm=tr["clip_norm"], label_smoothing=tr["label_smoothing"])
    sched = schedule_of(params, run)
    rcfg = RunConfig(seed=run["seed"], max_steps=tr["max_steps"], max_minutes=tr.get("max_minutes"),
                     log_every=tr["log_every"], valid_every=tr["valid_every"], ckpt_every_steps=10 ** 9,
                     ckpt_every_minutes=1e9, explode_loss=tr["explode_loss"], progress=False)
    t0 = time.perf_counter()
    res = train(model, batches_fn(enc["train"], tr["max_tokens"], run["seed"]),
                valid_batches(enc["valid"], tr["max_tokens"]), opt, sched, rcfg, ckpt_dir=None,
                curve_path=out / "curves" / f"{run['name']}.csv", resume=False, device=device)
    train_s = time.perf_counter() - t0
    ev = params["eval"]
    finite = not res.diverged and all(torch.isfinite(p).all() for p in model.parameters())
    t1 = time.perf_counter()
    if finite:
        model.eval()
        dcfg = DecodeConfig(decoder="greedy", max_len_a=ev["max_len_a"], max_len_b=ev["max_len_b"],
                            max_tokens=ev["max_tokens"])
        ids, _ = decode_ids(model, test["src_ids"], enc["train"].bos_id, enc["train"].eos_id, enc["train"].pad_id,
                            dcfg, device)
        hyps = [tok.decode(h) for h in ids]
    else:  # a diverged model has no translation: score empty outputs
        hyps = [""] * len(test["refs"])
    rep = bleu_report(hyps, test["refs"], test["srcs"], test["clean"])
    # a diverged run has no final validation loss (the last one logged predates the divergence)
    valid_nll = res.valid_curve[-1]["valid_nll"] if res.valid_curve and not res.diverged else None
    best_nll = min(v["valid_nll"] for v in res.valid_curve) if res.valid_curve else None
    summ = {**{k: run[k] for k in ("name", "groups", "norm", "position", "fixnorm", "layers", "lr", "warmup", "seed")},
            "diverged": res.diverged, "diverged_step": res.diverged_step, "stop_reason": res.stop_reason,
            "steps": res.steps, "final_train_loss": res.final_loss, "final_valid_nll": valid_nll,
            "best_valid_nll": best_nll, "bleu": rep["full"]["score"], "bleu_clean": rep["clean"]["score"],
            "bleu_copy": rep["copy_full"]["score"], "bleu_copy_clean": rep["copy_clean"]["score"],
            "bleu_signature": rep["full"]["signature"], "test_sentences": len(hyps),
            "train_seconds": train_s, "eval_seconds": time.perf_counter() - t1, "tokens_per_s": res.tokens_per_s,
            "valid_curve": res.valid_curve}
    log.info("%s: %s after %d steps (%.0f s), valid nll %s, BLEU %.2f (copy %.2f)", run["name"],
             "DIVERGED" if res.diverged else res.stop_reason, res.steps, train_s,
             f"{valid_nll:.3f}" if valid_nll is not None else "-", rep["full"]["score"], rep["copy_full"]["score"])
    return summ


def _published(s: dict, params: dict) -> dict:
    """Registry key (and index) for a run's BLEU where the papers report the same configuration."""
    main_layers = params["model"]["n_encoder_layers"]
    if s["norm"] == "layernorm" and s["position"] == "post" and s["layers"] == main_layers:
        if s["warmup"] == 0 and math.isclose(s["lr"], 5e-4):
            return {"published_key": "xiong_postln_no_warmup_bleu"}
        if s["warmup"] == 500 and math.isclose(s["lr"], 5e-4):
            return {"published_key": "xiong_postln_warmup500_lr5e4_bleu"}
        if s["warmup"] == 500 and math.isclose(s["lr"], 1e-3):
            return {"published_key": "xiong_postln_warmup500_lr1e3_bleu"}
        if s["warmup"] and s["warmup"] == max(warmup_lengths(params)):
            return {"published_key": "xiong_postln_warmup_bleu"}
    if s["norm"] == "layernorm" and s["warmup"] == 0 and s["layers"] in (4, 5, 6) and "depth" in s["groups"]:
        key = "nguyen_no_warmup_postnorm_dev_bleu" if s["position"] == "post" else "nguyen_no_warmup_prenorm_dev_bleu"
        return {"published_key": key, "published_index": s["layers"] - 4}
    return {}


def rows_from_summaries(summaries: list[dict], params: dict, data: dict | None = None) -> list[dict]:
    """Metrics rows: one set per run (sweep: the configuration and its seed), and the data set's rows (sweep
    run="data": unigram entropy of the training targets, training pairs, vocabulary) from ``data``."""
    rows = []
    for s in summaries:
        sw = dict(run=s["name"], group="+".join(s["groups"]), norm=s["norm"], position=s["position"],
                  fixnorm=s["fixnorm"], layers=s["layers"], lr=s["lr"], warmup=s["warmup"], seed=s["seed"])
        n = s["test_sentences"]
        rows += [
            metric(CLAIM, "diverged", float(s["diverged"]), "bool", **sw),
            metric(CLAIM, "steps", s["steps"], "updates", **sw),
            metric(CLAIM, "final_valid_nll", s["final_valid_nll"], "nats/token", **sw),
            metric(CLAIM, "best_valid_nll", s["best_valid_nll"], "nats/token", **sw),
            metric(CLAIM, "final_train_loss", s["final_train_loss"], "nats/token (label-smoothed)", **sw),
            metric(CLAIM, "bleu", s["bleu"], "BLEU", n=n, **_published(s, params), **sw),
            metric(CLAIM, "bleu_clean", s["bleu_clean"], "BLEU", **sw),
            metric(CLAIM, "bleu_copy_baseline", s["bleu_copy"], "BLEU", n=n, **sw),
            metric(CLAIM, "train_seconds", s["train_seconds"], "s", **sw),
            metric(CLAIM, "train_tokens_per_s", s["tokens_per_s"], "tokens/s", **sw),
        ]
        if s["diverged_step"] is not None:
            rows.append(metric(CLAIM, "diverged_step", s["diverged_step"], "update", **sw))
    if data:
        rows += [metric(CLAIM, "unigram_entropy", data["unigram_entropy"], "nats/token", run="data"),
                 metric(CLAIM, "train_pairs", data["train_pairs"], "pairs", run="data"),
                 metric(CLAIM, "vocab_size", data["vocab_size"], "pieces", run="data")]
        if "no_warmup_decay_from" in data:
            rows.append(metric(CLAIM, "no_warmup_decay_from", data["no_warmup_decay_from"], "update", run="data"))
    return rows


# ------------------------------------------------------------------------------------------------------------- run
def prepare(params: dict, scale: str, out: Path) -> dict:
    """Corpus, tokenizer, encoded splits, the test subset and the data rows' values (what every run shares)."""
    tparams = artefacts.translation_params(params, scale)
    corpus = load_data(tparams)  # fails first, naming translation.corpus.path, when the data path is missing
    if params["device"] == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("warmup_stability.device: cuda requested but no GPU is available")
    tok, tok_path = _tokenizer(params, tparams, corpus, out)
    tr = params["training"]
    enc = encode_splits(tparams, tok, corpus, tr["max_len"])
    nv = params["eval"]["valid_sentences"]
    if nv:
        enc["valid"] = _head(enc["valid"], nv)
    nt = min(params["eval"]["test_sentences"], len(corpus.test))
    srcs, refs = corpus.sources("test")[:nt], corpus.references("test")[:nt]
    clean = list(corpus.clean_masks["test"][:nt])
    db = getattr(corpus, "data_bin", None)
    if db is not None:
        src_ids = [list(x) for x in db.encoded("test", tr["max_len"], "truncate").src[:nt]]
    else:
        src_ids = [list(e)[: tr["max_len"] - 1] + [tok.eos_id] for e in tok.encode_batch(srcs)]
    data = {"unigram_entropy": unigram_entropy(enc["train"], tok.vocab_size), "train_pairs": len(enc["train"]),
            "vocab_size": tok.vocab_size, "no_warmup_decay_from": decay_from(params)}
    return {"tok": tok, "tok_path": tok_path, "enc": enc, "data": data,
            "test": {"srcs": srcs, "refs": refs, "clean": clean, "src_ids": src_ids}}


_WORKER: dict = {}


def _worker_init(params: dict, scale: str, out: str) -> None:
    """A worker process: one torch thread, the shared data prepared once (the tokenizer the parent resolved)."""
    setup_logging()
    torch.set_num_threads(1)
    _WORKER.update(params=params, out=Path(out), **prepare(params, scale, Path(out)))


def _worker_train(r: dict) -> dict:
    w = _WORKER
    return train_one(w["params"], r, w["tok"], w["enc"], w["test"], w["out"], w["params"]["device"])


def _resume_key(params: dict) -> str:
    """What a finished run is kept by: the parameters (not the tokenizer path or the worker count) and the training
    code; changed parameters or training code retrain every run."""
    return json.dumps({**{k: v for k, v in params.items() if k not in ("tokenizer_path", "workers")},
                       "training_code": _training_code_hash()}, sort_keys=True, default=str)


def _runs_files(out: Path) -> list[Path]:
    """Where finished runs are recorded: runs.json (the judging job) and parts/<i>-of-<n>.runs.json (part jobs)."""
    return [out / "runs.json", *sorted((out / "parts").glob("*.runs.json"))]


def _kept(out: Path, plan: list[dict], key: str) -> dict[str, dict]:
    """The planned runs already trained with these parameters and this code (their curve written), from any runs
    file: a rerun (after an interruption, or after the part jobs) trains only the others."""
    done: dict[str, dict] = {}
    for f in _runs_files(out):
        if f.exists():
            old = json.loads(f.read_text())
            if old.get("params_key") == key:
                done.update({s["name"]: s for s in old["runs"] if (out / "curves" / f"{s['name']}.csv").exists()})
    groups = {r["name"]: r["groups"] for r in plan}
    return {n: {**s, "groups": groups[n]} for n, s in done.items() if n in groups}  # groups are plan metadata


def _train_runs(params: dict, scale: str, out: Path, shared: dict, plan: list[dict], mine: list[dict],
                runs_file: Path, label: str) -> dict[str, dict]:
    """Train the runs of ``mine`` not yet finished, recording each in ``runs_file`` as it ends; returns every
    finished run of ``mine``. More than one worker (``workers``, at most the torch threads this job was given)
    trains that many runs at once in processes of one torch thread each."""
    key = _resume_key(params)
    kept = _kept(out, plan, key)
    finished = {r["name"]: kept[r["name"]] for r in mine if r["name"] in kept}
    todo = [r for r in mine if r["name"] not in finished]
    log.info("%s: %d runs kept from earlier results, %d to train", label, len(finished), len(todo))
    progress = Progress(f"{label} training runs", len(mine), "runs", logger=log, done=len(finished))

    def write() -> None:
        atomic_write_json(runs_file, {"tokenizer": shared["tok_path"], "params_key": key,
                                      "runs": [finished[r["name"]] for r in mine if r["name"] in finished]})

    def record(s: dict) -> None:
        finished[s["name"]] = s
        write()
        progress.update(note=s["name"])

    workers = min(int(params.get("workers") or 1), len(todo), max(1, torch.get_num_threads()))
    if workers > 1:
        wparams = {**params, "tokenizer_path": shared["tok_path"], "vocab_size": None}  # the tokenizer made above
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                 initializer=_worker_init, initargs=(wparams, scale, str(out))) as ex:
            futures = [ex.submit(_worker_train, r) for r in todo]
            for f in as_completed(futures):
                record(f.result())
    else:
        for r in todo:
            log.info("run %s (groups %s)", r["name"], ",".join(r["groups"]))
            record(train_one(params, r, shared["tok"], shared["enc"], shared["test"], out, params["device"]))
    write()  # also the runs kept from other files (the judging job after the parts: runs.json holds every run)
    return finished


def _prepared(params: dict, scale: str, out: Path) -> tuple[dict, list[dict]]:
    t0 = time.time()
    plan = plan_runs(params)  # a bad grid fails before the data is read
    shared = prepare(params, scale, out)
    enc, test, data = shared["enc"], shared["test"], shared["data"]
    log.info("data: %d train pairs, %d valid, %d test sentences; vocab %d (%s); target unigram entropy %.3f nats; "
             "%d runs planned; %.1f s", len(enc["train"]), len(enc["valid"]), len(test["refs"]),
             shared["tok"].vocab_size, shared["tok_path"], data["unigram_entropy"], len(plan), time.time() - t0)
    return shared, plan


def split_runs(plan: list[dict], count: int) -> list[list[dict]]:
    """The planned runs in ``count`` parts of about equal cost (longest first, each to the part with the least so
    far), each part in plan order. A run's cost is taken as its layers per stack + 1 (measured, one thread: 6+6
    layers ~105 s, 2+2 ~41 s per 1000 updates), so the part jobs end close together and none is left alone at the
    end of the run."""
    parts: list[list[dict]] = [[] for _ in range(count)]
    load = [0.0] * count
    order = {r["name"]: i for i, r in enumerate(plan)}
    for r in sorted(plan, key=lambda r: (-(r["layers"] + 1), order[r["name"]])):
        k = min(range(count), key=lambda i: (load[i], i))
        parts[k].append(r)
        load[k] += r["layers"] + 1
    return [sorted(p, key=lambda r: order[r["name"]]) for p in parts]


def run_part(params: dict, scale: str, out, index: int, count: int) -> dict:
    """Part ``index`` of ``count`` (the workflow's claim_part jobs, config workflow.parts): train the runs
    :func:`split_runs` gives this part, recorded in parts/<index>-of-<count>.runs.json (kept on a rerun with the
    same parameters and code). The job without a part judges once every part is done."""
    out = Path(out)
    (out / "parts").mkdir(parents=True, exist_ok=True)
    shared, plan = _prepared(params, scale, out)
    mine = split_runs(plan, count)[index]
    finished = _train_runs(params, scale, out, shared, plan, mine, out / "parts" / f"{index}-of-{count}.runs.json",
                           f"warmup_stability part {index}-of-{count}")
    return {"runs": [r["name"] for r in mine if r["name"] in finished]}


def run(params: dict, scale: str, out) -> tuple[list[dict], dict]:
    """Train every configuration (Post/Pre-LN x warm-up x lr, ScaleNorm+FixNorm, depth sweep) once per seed: the
    metrics rows and the context (the device); repro/judges/warmup_stability.py judges them.  Runs already finished
    with the same parameters and code (by an interrupted earlier run, or by the part jobs: ``run_part``) are kept.
    ``workers`` > 1 trains that many runs at once in worker processes of one torch thread each (small models use
    one core far better than two threads of one process), at most as many as the torch threads this job was given;
    the results do not depend on it."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    shared, plan = _prepared(params, scale, out)
    finished = _train_runs(params, scale, out, shared, plan, plan, out / "runs.json", "warmup_stability")
    summaries = [finished[r["name"]] for r in plan]
    rows = rows_from_summaries(summaries, params, shared["data"])
    return rows, {"device": str(params["device"])}


def _head(encoded, n: int):
    """The first ``n`` pairs of an EncodedCorpus (validation subset)."""
    return dataclasses.replace(encoded, src=encoded.src[:n], tgt=encoded.tgt[:n], index=encoded.index[:n])


if __name__ == "__main__":
    from repro.claims._cli import main

    raise SystemExit(main(CLAIM, run))
