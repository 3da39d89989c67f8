"""C3 warmup_stability: training with and without learning-rate warm-up, Post-LN vs Pre-LN (vs ScaleNorm+FixNorm).

Reproduces, on the suite's translation task (the corpus and tokenizer of the shared "translation" artefact; this
claim trains its OWN small models, never the shared one):

- Xiong et al., ICML 2020, arXiv 2002.04745, Section 3.2 and Fig. 2: Post-LN Transformers with Adam need warm-up
  (IWSLT14 De-En, 6+6 layers: 8.45 BLEU without warm-up vs about 34 with it; warm-up 500 steps: 31.16 at lr 5e-4
  and 2.77 at lr 1e-3), while Pre-LN trains without warm-up.  Grid: {Post-LN, Pre-LN} x {warm-up, none} x
  the configured learning rates (paper: 5e-4 and 1e-3, Adam betas (0.9, 0.98)).
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
a run that stays finite but far behind the best run of its learning rate counts as "failed" (``fail_margin_nats``),
since Post-LN without warm-up typically plateaus rather than producing NaN.

Per run (every configuration once per seed of ``seeds``; a seed fixes init, batch order and dropout, so configurations
are compared PAIRED within a seed): train/validation curves (``curves/<run>.csv``), final and best validation NLL,
training loss, divergence, BLEU of greedy decoding on the first ``eval.test_sentences`` test sentences (full,
placeholder-free subset, and the copy baseline on the same sentences: copying the German source already scores BLEU
here).  Per data set: the unigram entropy of the training targets (the NLL of a model that learned only token
frequencies), the training pairs kept and the vocabulary size.

Verdict (``judge``; the contract of ``repro.verdicts.verdict_from_checks``):

- Gates: every check is undecided unless both warm-up controls at the highest learning rate (Post-LN and Pre-LN
  with the longest warm-up, main depth) learned: the final validation NLL of EVERY seed (each seed is one side of a
  paired comparison) lies ``gate_nats`` below the unigram entropy, and their mean greedy BLEU lies strictly above the
  copy-the-source baseline on the same sentences plus ``gate_bleu`` (null: a margin of 0), at every scale.  A model
  that learned nothing cannot show that warm-up matters.
- Headline (two checks, both at the highest learning rate, main depth): "Post-LN needs warm-up" (its no-warm-up
  minus warm-up NLL gap above ``post_gap_nats``) and "Pre-LN trains without warm-up" (the same gap below
  ``pre_tolerance_nats``).  Xiong et al.'s claim is the CONTRAST: either half alone is not it (Post-LN needing
  warm-up is Vaswani et al.'s recipe; Pre-LN training without warm-up means nothing if no layout needs it), so a
  failure of either half fails the claim.  The highest learning rate is where the paper's effect is largest
  (Fig. 2: warm-up 500 still gives 31.16 BLEU at 5e-4 but 2.77 at 1e-3).
- Secondary: Pre-LN beats Post-LN without warm-up; Pre-LN trains without warm-up at the other learning rates;
  PreNorm + ScaleNorm + FixNorm trains without warm-up (Nguyen & Salazar); the depth trend (Nguyen & Salazar
  Table 5: Post-LN's no-warm-up gap to Pre-LN larger at the main depth than at the shallowest).
- Uncertainty: every check is decided on the per-seed PAIRED differences, by the 95% Student-t interval of their
  mean (``repro.verdicts.decide_interval``): held when the whole interval is on the paper's side of the threshold, failed
  when it is wholly on the other side, undecided when it straddles (or with fewer than two seeds).  A diverged run
  (NaN/inf or loss above ``explode_loss``) counts with the unigram entropy as its NLL: it learned nothing.
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

from repro import artefacts, registry
from repro.cli import setup_logging
from repro.data.tokenizer import train_sentencepiece
from repro.io import atomic_write_json, metric
from repro.model import block, models
from repro.progress import Progress
from repro.stats import sample_interval
from repro.train import loop
from repro.train.bleu import bleu_report
from repro.train.decode import DecodeConfig, decode_ids
from repro.train.loop import OptimConfig, RunConfig, ScheduleConfig, train
from repro.train.pipeline import batches_fn, build_model, encode_splits, load_data, load_tokenizer, valid_batches
from repro.verdicts import (Rows, both, check, decide_interval, gate, gated, numbers, setup_table,
                            verdict_from_checks)

CLAIM = "warmup_stability"
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


def warmup_lengths(params: dict) -> list[int]:
    """The warm-up lengths of the grid, longest first (``warmup_steps``: one length or a list, e.g. Xiong's
    [4000, 500]); the longest is "with warm-up" in the verdict."""
    w = params["warmup_steps"]
    return sorted({int(x) for x in (w if isinstance(w, list) else [w])}, reverse=True)


def seeds_of(params: dict) -> list[int]:
    """The seeds every configuration is trained with (``seeds``; each fixes init, batch order and dropout)."""
    return [int(s) for s in params["seeds"]]


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

    for position in params["positions"]:
        for lr in params["lrs"]:
            for warmup in (*warmups, 0):
                add("xiong", "layernorm", position, False, main_layers, lr, warmup)
    sn = params["scalenorm_fixnorm"]
    if sn["enabled"]:
        for lr in sn["lrs"]:
            add("nguyen", "scalenorm", "pre", True, main_layers, lr, 0)
    dp = params["depth"]
    for layers in sorted(set(dp["layers"]) | {main_layers}):  # the main depth's runs are reused from the grid
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
            for r in configs for seed in seeds_of(params)]


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


# ---------------------------------------------------------------------------------------------------------- verdict
def _runs(rows: list[dict]) -> dict[str, dict]:
    """run name -> {sweep..., metric: value}, for the training runs (not the data rows)."""
    out: dict[str, dict] = {}
    for r in Rows(rows).having("norm"):
        d = out.setdefault(r["sweep"]["run"], {"seed": 0, **r["sweep"]})
        d[r["metric"]] = r["value"]
    return out


def _data(rows: list[dict]) -> dict[str, float]:
    return {r["metric"]: r["value"] for r in Rows(rows).where(run="data")}


def _cfg_key(d: dict) -> tuple:
    return (d["norm"], d["position"], bool(d["fixnorm"]), int(d["layers"]), float(d["lr"]), int(d["warmup"]))


class Grid:
    """The runs by configuration and seed, with the NLL each counts with (a diverged run or one without a finite
    validation NLL counts as the unigram entropy ``H``: it learned nothing)."""

    def __init__(self, rows: list[dict], H: float):
        self.H = H
        self.by: dict[tuple, dict[int, dict]] = {}
        for d in _runs(rows).values():
            self.by.setdefault(_cfg_key(d), {})[int(d["seed"])] = d

    def get(self, norm="layernorm", position="pre", fixnorm=False, layers=6, lr=1e-3, warmup=0) -> dict[int, dict]:
        for k, v in self.by.items():
            if k[:4] == (norm, position, fixnorm, layers) and math.isclose(k[4], lr) and k[5] == warmup:
                return v
        return {}

    def layernorm(self, position: str, layers: int, lr: float, warmup: int = 0) -> dict[int, dict]:
        """The LayerNorm (no FixNorm) runs of one configuration, by seed."""
        return self.get("layernorm", position, False, layers, lr, warmup)

    def nll(self, d: dict) -> float:
        v = d.get("final_valid_nll")
        bad = d.get("diverged") or v is None or not math.isfinite(v)
        return self.H if bad else float(v)

    def paired(self, a: dict[int, dict], b: dict[int, dict]) -> list[float]:
        """Per-seed NLL(a) - NLL(b) over the seeds both configurations ran."""
        return [self.nll(a[s]) - self.nll(b[s]) for s in sorted(set(a) & set(b))]

    def describe(self, runs: dict[int, dict]) -> str:
        """'valid NLL m +- sd, BLEU m +- sd (k/n diverged)' over the seeds."""
        nll = [self.nll(d) for d in runs.values()]
        bleu = [d.get("bleu", math.nan) for d in runs.values()]
        div = sum(bool(d.get("diverged")) for d in runs.values())
        return (f"valid NLL {_ms(nll)}, BLEU {_ms(bleu, 2)}" + (f" ({div}/{len(runs)} diverged)" if div else ""))


def _ms(xs: list[float], nd: int = 3) -> str:
    """'mean +- sd' (sample standard deviation over seeds; just the value for one seed)."""
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    if not xs:
        return "n/a"
    m, _, _, sd = sample_interval(xs)
    return f"{m:.{nd}f}" if len(xs) < 2 else f"{m:.{nd}f} +- {sd:.{nd}f}"


def _ci(xs: list[float]) -> str:
    m, lo, hi, _ = sample_interval(xs)
    return f"mean {m:+.3f} nats, 95% t-interval [{lo:+.3f}, {hi:+.3f}] over {len(xs)} paired seeds"


def _decide(xs: list[float], **side) -> tuple[bool | None, str | None]:
    """decide_interval on the 95% t-interval of the mean of ``xs``, with the reason when undecided."""
    if len(xs) < 2:
        return None, f"{len(xs)} paired seed(s): no spread to decide by (needs >= 2)"
    _, lo, hi, _ = sample_interval(xs)
    passed = decide_interval(lo, hi, **side)
    if passed is None:
        edge = side.get("above", side.get("below"))
        return None, (f"the 95% interval [{lo:+.3f}, {hi:+.3f}] straddles the threshold {edge:+.3f}: too few seeds "
                      "or too much spread")
    return passed, None


def _check(name: str, xs: list[float], side: dict, measured: str, expected: str, headline=False,
           paper_text: str | None = None) -> dict:
    """A check on the paired per-seed NLL gaps ``xs``; ``paper_text`` (headline checks): the paper's numbers beside
    the mean gap in the headline tables."""
    passed, because = _decide(xs, **side)
    nums = None
    if paper_text is not None and xs:
        mean, lo, hi = (sample_interval(xs)[:3] if len(xs) >= 2 else (sum(xs) / len(xs), None, None))
        nums = numbers(mean, "nats (no warm-up - warm-up)", lo=lo, hi=hi, paper_text=paper_text)
    return check(name, passed, measured, expected, headline=headline,
                 interval=_ci(xs) if len(xs) >= 2 else None, undecided_because=because, numbers=nums)


def gates(g: Grid, params: dict, copy_bleu: float | None) -> list[dict]:
    """The warm-up controls (Post-LN and Pre-LN, longest warm-up, highest lr, main depth) learned: NLL clearly below
    the unigram entropy, BLEU clearly above the copy baseline (see the module docstring)."""
    v = params["verdict"]
    L, hi, w = params["model"]["n_encoder_layers"], max(params["lrs"]), warmup_lengths(params)[0]
    controls = {pos: g.get("layernorm", pos, False, L, hi, w) for pos in ("post", "pre")}
    need = g.H - v["gate_nats"]
    ok, parts = math.isfinite(g.H), [] if math.isfinite(g.H) else ["unigram entropy not recorded by this run"]
    for pos, runs in controls.items():
        xs = [g.nll(d) for d in runs.values()]
        if not xs:
            ok, parts = False, parts + [f"{pos}-LN + warm-up {w}: missing"]
            continue
        worst = max(xs)
        ok = ok and worst < need
        parts.append(f"{pos}-LN + warm-up {w}: valid NLL {_ms(xs)} (worst seed {worst:.3f})")
    out = [gate("warm-up controls learned (valid NLL vs unigram entropy)", ok,
                "; ".join(parts) + f"; unigram entropy of the training targets {g.H:.3f} nats",
                f"every seed of each control below {need:.3f} nats (entropy - {v['gate_nats']} nats), lr {hi:g}")]
    # the BLEU gate is on at every scale (a judge rule): a control that translates worse than copying the source
    # has not learned to translate, whatever its NLL; ``gate_bleu`` (null: 0) is only the margin above the copy
    margin = float(v.get("gate_bleu") or 0.0)
    ok, parts = copy_bleu is not None and math.isfinite(copy_bleu), []
    for pos, runs in controls.items():
        bl = [d.get("bleu", math.nan) for d in runs.values()]
        bl = [x if x is not None else math.nan for x in bl]
        m = sum(bl) / len(bl) if bl else math.nan
        ok = ok and bool(bl) and math.isfinite(m) and m > (copy_bleu or 0) + margin
        parts.append(f"{pos}-LN + warm-up {w}: BLEU {_ms(bl, 2)}")
    out.append(gate("warm-up controls translate (greedy BLEU vs copying the source)", ok,
                    "; ".join(parts) + (f"; copy-the-source baseline {copy_bleu:.2f} on the same sentences"
                                        if copy_bleu is not None else "; copy baseline not recorded"),
                    f"mean BLEU of each control > copy baseline + {margin:g} BLEU"))
    return out


def this_run(params: dict, data: dict, seeds: list[int]) -> dict[str, str]:
    """This run's side of the "Setup beside the paper" table, from the config and the data rows."""
    m, tr, b = params["model"], params["training"], params["model"]["block"]
    L = m["n_encoder_layers"]
    t = params.get("translation") or {}
    c = t.get("corpus") or {}
    corpus = f"{c.get('path', 'the translation corpus')} ({c.get('direction', '?')})"
    pairs = data.get("train_pairs")
    sn = params["scalenorm_fixnorm"]
    own = " (this claim's own)" if params.get("vocab_size") else ""
    return {
        "model": (f"Transformer encoder-decoder {L}+{L} layers, d {b['d_model']}, FFN {b['d_ff']}, {b['n_heads']} "
                  f"heads, dropout {b.get('dropout', 0)}, tied embeddings, fairseq (Xavier) init; depth sweep "
                  f"{sorted(set(params['depth']['layers']) | {L})} layers"),
        "data": (f"{corpus}, {int(pairs) if pairs else '?'} training pairs of <= {tr['max_len']} pieces, "
                 f"{int(data['vocab_size']) if data.get('vocab_size') else '?'}-piece vocabulary{own}; valid NLL on "
                 f"{params['eval'].get('valid_sentences') or 'all'} pairs, greedy BLEU on "
                 f"{params['eval']['test_sentences']} test sentences"),
        "steps": f"{tr['max_steps']} updates of <= {tr['max_tokens']} padded tokens per run",
        "learning rates": (f"{', '.join(f'{x:g}' for x in params['lrs'])} (Adam {tuple(tr['betas'])}, label "
                           f"smoothing {tr.get('label_smoothing', 0)}); ScaleNorm+FixNorm "
                           f"{', '.join(f'{x:g}' for x in sn['lrs']) if sn['enabled'] else 'not run'}"),
        "warm-up": (f"linear {', '.join(map(str, warmup_lengths(params)))} updates then inverse-sqrt decay, vs none "
                    + (f"(the peak lr from the first update, the same decay after update {data['no_warmup_decay_from']})"
                       if data.get("no_warmup_decay_from") else "(constant lr, no decay)")),
        "schedule difference": ("none: both arms share one inverse-sqrt decay; only the warm-up ramp differs"
                                if data.get("no_warmup_decay_from") else
                                "measured with the warm-up arm decaying (inverse_sqrt after its warm-up) while the "
                                "no-warm-up arm kept a constant lr, unlike the papers' one decay schedule for both "
                                "arms: the paired no-warm-up minus warm-up gap mixes 'no warm-up' with 'no decay'"),
        "seeds": (f"{len(seeds)} per configuration ({', '.join(map(str, seeds))}), compared paired, 95% t-intervals"
                  if len(seeds) > 1 else f"{len(seeds)} (no spread: no check can be decided)"),
        "precision": "fp32",
        "hardware": (f"{params.get('device', 'cpu')} (the machine: the verdict line above), "
                     + (f"{params['workers']} runs at once, one torch thread each" if (params.get("workers") or 1) > 1
                        else f"{torch.get_num_threads()} torch threads")),
    }


def judge(rows: list[dict], params: dict, scale: str) -> dict:
    """Verdict from the measured runs: the gates, headline and secondary checks of the module docstring. Rows
    measured before both arms shared one decay (no ``no_warmup_decay_from`` row) say on the page that the paired gap
    mixes 'no warm-up' with 'no decay'. Paper numbers in the checks come from the registry."""
    data = _data(rows)
    H = data.get("unigram_entropy")
    if H is None or not math.isfinite(H):  # measured before the gate existed (--rejudge of an old run)
        H = math.nan
    g = Grid(rows, H)
    same_decay = bool(data.get("no_warmup_decay_from"))
    checks = [_post_needs_warmup_check(g, params, same_decay), *_pre_without_warmup_checks(g, params),
              _pre_beats_post_check(g, params), *_scalenorm_checks(g, params), *_depth_trend_checks(g, params)]
    gs = gates(g, params, _copy_bleu(g))
    checks = [gated(c, gs) for c in checks]
    seeds = sorted({s for runs in g.by.values() for s in runs})
    return verdict_from_checks(CLAIM, checks, scale, gates=gs, setup=setup_table(CLAIM, this_run(params, data, seeds)),
                               meaning=_meaning(scale, len(seeds), max(params["lrs"]), same_decay))


def _pub(key: str):
    return registry.published(CLAIM, key)["value"]


def _copy_bleu(g: Grid) -> float | None:
    """The copy-the-source BLEU on the test subset (the same sentences for every run): the first run's."""
    copies = [d.get("bleu_copy_baseline") for runs in g.by.values() for d in runs.values()
              if d.get("bleu_copy_baseline") is not None]
    return copies[0] if copies else None


def _post_needs_warmup_check(g: Grid, params: dict, same_decay: bool) -> dict:
    """Headline, first half of the contrast: Post-LN's no-warm-up minus warm-up NLL gap above ``post_gap_nats`` at
    the highest learning rate."""
    L, hi, w = params["model"]["n_encoder_layers"], max(params["lrs"]), warmup_lengths(params)[0]
    gap = params["verdict"]["post_gap_nats"]
    post_w, post_n = g.layernorm("post", L, hi, w), g.layernorm("post", L, hi)
    return _check(f"Post-LN needs warm-up at lr {hi:g}", g.paired(post_n, post_w), {"above": gap},
                  f"no warm-up {g.describe(post_n)} vs warm-up {w}: {g.describe(post_w)}",
                  f"no-warm-up NLL higher by > {gap} nats (or diverged) (Xiong Fig. 2, Adam lr "
                  f"{' / '.join(f'{x:g}' for x in _pub('xiong_adam_lrs'))}: {_pub('xiong_postln_no_warmup_bleu')} "
                  f"without vs ~{_pub('xiong_postln_warmup_bleu'):g} BLEU with warm-up "
                  f"{max(_pub('xiong_warmup_steps'))}; warm-up {min(_pub('xiong_warmup_steps'))} at lr "
                  f"{max(_pub('xiong_adam_lrs')):g}: {_pub('xiong_postln_warmup500_lr1e3_bleu')} BLEU)"
                  + ("" if same_decay else "; the no-warm-up arm also has no decay (setup)"), headline=True,
                  paper_text=f"{_pub('xiong_postln_no_warmup_bleu')} vs ~{_pub('xiong_postln_warmup_bleu'):g} BLEU")


def _pre_without_warmup_checks(g: Grid, params: dict) -> list[dict]:
    """Pre-LN's no-warm-up minus warm-up gap below ``pre_tolerance_nats`` at each learning rate, highest first (the
    headline's second half; the other learning rates secondary)."""
    L, lrs, w = params["model"]["n_encoder_layers"], sorted(params["lrs"]), warmup_lengths(params)[0]
    tol = params["verdict"]["pre_tolerance_nats"]
    hi, checks = lrs[-1], []
    for lr in [hi] + [x for x in reversed(lrs) if x != hi]:
        a, b = g.layernorm("pre", L, lr, w), g.layernorm("pre", L, lr)
        checks.append(_check(f"Pre-LN trains without warm-up at lr {lr:g}", g.paired(b, a), {"below": tol},
                             f"no warm-up {g.describe(b)} vs warm-up {w}: {g.describe(a)}",
                             f"no-warm-up NLL within {tol} nats of warm-up (Xiong Sec. 3.2)", headline=lr == hi,
                             paper_text="trains without warm-up" if lr == hi else None))
    return checks


def _pre_beats_post_check(g: Grid, params: dict) -> dict:
    """Secondary: without warm-up, Post-LN's NLL above Pre-LN's by ``post_gap_nats`` at the highest learning rate."""
    L, hi, gap = params["model"]["n_encoder_layers"], max(params["lrs"]), params["verdict"]["post_gap_nats"]
    post_n, pre_n = g.layernorm("post", L, hi), g.layernorm("pre", L, hi)
    return _check(f"without warm-up Pre-LN beats Post-LN at lr {hi:g}", g.paired(post_n, pre_n), {"above": gap},
                  f"Post-LN {g.describe(post_n)} vs Pre-LN {g.describe(pre_n)}",
                  f"Post-LN NLL higher by > {gap} nats (Xiong Fig. 2)")


def _scalenorm_checks(g: Grid, params: dict) -> list[dict]:
    """Secondary (Nguyen & Salazar): PreNorm + ScaleNorm + FixNorm without warm-up within ``fail_margin_nats`` of
    the Pre-LN warm-up control, per learning rate."""
    L, hi, w = params["model"]["n_encoder_layers"], max(params["lrs"]), warmup_lengths(params)[0]
    margin = params["verdict"]["fail_margin_nats"]
    checks = []
    for lr, runs in [(k[4], runs) for k, runs in sorted(g.by.items()) if k[0] == "scalenorm" and k[2]]:
        ref = g.layernorm("pre", L, lr, w) or g.layernorm("pre", L, hi, w)
        checks.append(_check(f"PreNorm + ScaleNorm + FixNorm trains without warm-up at lr {lr:g}", g.paired(runs, ref),
                             {"below": margin},
                             f"{g.describe(runs)} vs Pre-LN (LayerNorm) with warm-up {w}: {g.describe(ref)}",
                             f"NLL within {margin} nats of the Pre-LN warm-up control "
                             "(Nguyen & Salazar: trains without warm-up)"))
    return checks


def _depth_trend_checks(g: Grid, params: dict) -> list[dict]:
    """Secondary (Nguyen & Salazar Table 5): without warm-up, Post-LN's gap to Pre-LN above ``post_gap_nats`` at the
    deepest stack and larger there than at the shallowest (paired by seed); none with fewer than two depths."""
    gap, dl = params["verdict"]["post_gap_nats"], params["depth"]["lr"]
    depths = sorted({k[3] for k in g.by if k[0] == "layernorm" and k[5] == 0 and math.isclose(k[4], dl)})
    trend = [(D, g.layernorm("post", D, dl), g.layernorm("pre", D, dl)) for D in depths]
    trend = [(D, po, pr) for D, po, pr in trend if po and pr]
    if len(trend) < 2:
        return []
    (D0, po0, pr0), (D1, po1, pr1) = trend[0], trend[-1]
    g0, g1 = g.paired(po0, pr0), g.paired(po1, pr1)
    seeds = sorted(set(po0) & set(pr0) & set(po1) & set(pr1))
    growth = [(g.nll(po1[s]) - g.nll(pr1[s])) - (g.nll(po0[s]) - g.nll(pr0[s])) for s in seeds]
    p_deep, why_deep = _decide(g1, above=gap)
    p_grow, why_grow = _decide(growth, above=0.0)
    return [check(
        f"no warm-up: Post-LN fails at {D1}+{D1} layers where Pre-LN trains, more than at {D0}+{D0}",
        both(p_deep, p_grow),
        "; ".join(f"{D}+{D} layers: Post {g.describe(po)}, Pre {g.describe(pr)}" for D, po, pr in trend)
        + f"; Post - Pre gap {_ms(g1)} at {D1} vs {_ms(g0)} at {D0} layers",
        f"Post - Pre NLL gap > {gap} nats at the main depth and larger than at the shallowest (Nguyen & Salazar "
        f"Table 5, {registry.published(CLAIM, 'nguyen_no_warmup_postnorm_dev_bleu')['setup']}: PostNorm "
        f"{' / '.join('fails' if x is None else f'{x:g}' for x in _pub('nguyen_no_warmup_postnorm_dev_bleu'))} "
        f"vs PreNorm {' / '.join(f'{x:g}' for x in _pub('nguyen_no_warmup_prenorm_dev_bleu'))} BLEU)",
        interval=(f"deepest gap: {_ci(g1)}; growth: {_ci(growth)}" if len(g1) >= 2 and len(growth) >= 2
                  else None),
        undecided_because="; ".join(x for x in (why_deep, why_grow) if x) or None)]


def _meaning(scale: str, n_seeds: int, hi: float, same_decay: bool) -> str:
    """The page's "What this verdict means" line."""
    return (f"At the {scale} scale with the setup above, over {n_seeds} seed(s): reproduced = both "
            f"warm-up controls learned (gates), Post-LN without warm-up ended clearly worse than with it at lr "
            f"{hi:g} while Pre-LN without warm-up did not (95% intervals of the paired per-seed NLL gaps), and "
            f"every decided secondary check held; partially = that contrast held and a secondary failed; "
            f"not_reproduced = a half of the contrast failed with its interval; inconclusive = a control did not "
            f"learn or an interval straddles its threshold. "
            + ("Both arms share one decay schedule, so each gap is the warm-up alone. " if same_decay else
               "The no-warm-up arm also kept a constant lr while the warm-up arm decayed, so each gap mixes "
               "'no warm-up' with 'no decay' (setup). ")
            + "A small model and a short run, not the paper's scale.")


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
    shared = prepare(params, scale, out)
    enc, test, data = shared["enc"], shared["test"], shared["data"]
    plan = plan_runs(params)
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
    """Train every configuration (Post/Pre-LN x warm-up x lr, ScaleNorm+FixNorm, depth sweep) once per seed, and
    judge.  Runs already finished with the same parameters and code (by an interrupted earlier run, or by the part
    jobs: ``run_part``) are kept. ``workers`` > 1 trains that many runs at once in worker processes of one torch
    thread each (small models use one core far better than two threads of one process), at most as many as the
    torch threads this job was given; the results do not depend on it."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    shared, plan = _prepared(params, scale, out)
    finished = _train_runs(params, scale, out, shared, plan, plan, out / "runs.json", "warmup_stability")
    summaries = [finished[r["name"]] for r in plan]
    rows = rows_from_summaries(summaries, params, shared["data"])
    return rows, judge(rows, params, scale)


def _head(encoded, n: int):
    """The first ``n`` pairs of an EncodedCorpus (validation subset)."""
    return dataclasses.replace(encoded, src=encoded.src[:n], tgt=encoded.tgt[:n], index=encoded.index[:n])


if __name__ == "__main__":
    from repro.claims._cli import main

    raise SystemExit(main(CLAIM, run))
