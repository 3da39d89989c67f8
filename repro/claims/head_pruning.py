"""C5 head_pruning: most attention heads of a trained Transformer can be removed.

Reproduces, on the suite's trained translation model (or an imported fairseq checkpoint at paper scale):

- Michel, Levy, Neubig, "Are Sixteen Heads Really Better than One?", NeurIPS 2019 (arXiv 1905.10650):
  Table 1 (ablating one head: BLEU change, paired bootstrap p < 0.01; 8 of 96 encoder heads significant, half of
  them raising BLEU), Tables 2-3 (keeping only the best head of one layer), Sec. 4.1 eq. 2 (importance
  I_h = E|dL/d xi_h|, l2-normalised per layer), Fig. 3 (pruning 10% of heads per step by importance: 20% (WMT) /
  40% (BERT) prunable without noticeable loss, sharp drop past ~60%), Table 4 (50% of heads physically removed:
  +1.9% examples/s at batch 1, +17.5% at batch 16 and 64).
- Voita, Talbot, Moiseev, Sennrich, Titov, "Analyzing Multi-Head Self-Attention", ACL 2019 (arXiv 1905.09418):
  Sec. 6 Hard-Concrete gates with an L0 penalty fine-tuned from the trained model; "pruning 38 out of 48 encoder
  heads results in a drop of only 0.15 BLEU".

Every BLEU here is sacrebleu corpus BLEU on a fixed, seeded subset of the test set (``eval_sentences``); the full
test BLEU, the placeholder-free subset and the copy baseline of the unpruned model are reported beside it.

With ``hf_model`` (a Hugging Face BERT classifier fine-tuned on MNLI) and ``mnli_path`` the claim runs Michel et
al.'s BERT experiment instead (repro.claims._heads_mnli: Fig. 3's BERT curve, 40% prunable; Tables 2-3's BERT
column; Table 4's speed), judged on MNLI accuracy.

This module only measures: ``run`` returns the rows and the context recorded in measured.json; the verdict rules
and their thresholds (the ``judge:`` section of config/claims/head_pruning.yaml) are in repro/judges/head_pruning.py.
"""
from __future__ import annotations

import copy
import hashlib
import json
import logging
import random
import time
from pathlib import Path

import numpy as np
import torch

from repro import artefacts, provenance
from repro.bench.timing import time_interleaved
from repro.data.batching import EncodedCorpus, collate, encode_corpus, token_batches
from repro.errors import ConfigError
from repro.io import atomic_write_json, file_sha256, metric
from repro.train.bleu import (bleu_from_stats, bleu_report, bootstrap_counts, corpus_bleu, paired_bootstrap,
                              sentence_stats)
from repro.train.decode import DecodeConfig, decode_ids
from repro.train.loop import model_loss
from repro.train.pipeline import load_data
from repro.claims._heads import (Head, BleuEvaluator, HardConcreteGates, all_heads, attention_modules, bleu,
                                 head_importance, pruned_copy, pruning_levels, set_pruned, speed_rows)
from repro.claims._heads_mnli import run_mnli
from repro.vocabulary.head_pruning import CLAIM

log = logging.getLogger("repro.head_pruning")


class ClaimParamError(ConfigError):
    """A head_pruning parameter or path is missing or wrong; the message names the key."""


# ------------------------------------------------------------------------------------------------ setup
class Setup:
    """The trained model, tokenizer, corpus, evaluation subset and batches every experiment shares."""

    def __init__(self, params: dict, out: Path):
        self.device = params["device"]
        if self.device == "cuda" and not torch.cuda.is_available():
            raise ClaimParamError("head_pruning.device: cuda requested but no GPU is available")
        self.ckpt = ckpt = resolve_model(params, out)
        self.trained = t = artefacts.load_trained_model(ckpt, device=self.device)
        self.model, self.tok, self.bos_id = t.model, t.tokenizer, t.bos_id
        self.model.eval()
        corpus_cfg = params.get("corpus") or t.params.get("corpus")
        if not corpus_cfg:
            raise ClaimParamError(f"head_pruning.corpus: not set and the checkpoint {ckpt} records no corpus")
        if corpus_cfg.get("format") == "data_bin" and not corpus_cfg.get("path"):
            raise ClaimParamError("head_pruning.corpus.path: a data_bin corpus needs its directory")
        self.corpus = load_data({"corpus": corpus_cfg})
        ev = decode_section(params.get("decode"), t.params.get("eval"))
        if not ev:
            raise ClaimParamError(f"head_pruning.decode: not set and the checkpoint {ckpt} records no eval section")
        self.dcfg = DecodeConfig.from_params(ev)
        max_len = self.model.cfg.max_seq_len
        test = self.encoded("test", max_len, "truncate")
        n_all = len(self.corpus.test)
        n = params["eval_sentences"] or n_all
        idx = sorted(random.Random(params["eval_subset_seed"]).sample(range(n_all), min(n, n_all)))
        self.subset = idx
        self.test_full = test
        self.src_ids = [list(map(int, test.src[i])) for i in idx]
        self.sources = [self.corpus.test[i][0] for i in idx]
        self.refs = [self.corpus.test[i][1] for i in idx]
        self.clean = [self.corpus.clean_masks["test"][i] for i in idx]
        self.vocab_limit = getattr(t, "vocab_limit", None)  # imported models: ids past the target dictionary
        self.evaluator = BleuEvaluator(self.model, self.tok, self.bos_id, self.src_ids, self.refs, self.dcfg,
                                       self.device, self.vocab_limit)
        self.test_subset = _subset(test, idx)
        self.kinds = params["kinds"]
        self.heads = all_heads(self.model, self.kinds)

    def encoded(self, split: str, max_len: int, on_long: str):
        db = getattr(self.corpus, "data_bin", None)
        enc = db.encoded(split, max_len, on_long) if db is not None else \
            encode_corpus(getattr(self.corpus, split), self.tok, max_len, on_long=on_long)
        enc.bos_id = self.bos_id  # decoder start token (eos for fairseq-trained models)
        return enc

    def batches(self, split: str, max_tokens: int, max_batches: int | None, shuffle: bool, seed: int = 0) -> list:
        enc = self.encoded(split, self.model.cfg.max_seq_len, "truncate" if split != "train" else "drop")
        out = []
        for b in token_batches(enc, max_tokens, shuffle=shuffle, seed=seed):
            out.append(b)
            if max_batches and len(out) >= max_batches:
                break
        return out


def decode_section(decode: dict | None, recorded: dict | None) -> dict:
    """The decoding settings: the eval section recorded in the model's checkpoint, with the keys of
    ``head_pruning.decode`` over it (the default sets only max_tokens: its 250 short sentences in one batch of
    8,000 tokens were two-thirds padding in the encoder)."""
    return {**(recorded or {}), **(decode or {})}


def _subset(enc, idx):
    return EncodedCorpus([enc.src[i] for i in idx], [enc.tgt[i] for i in idx], np.asarray(idx, dtype=np.int64),
                         enc.pad_id, enc.bos_id, enc.eos_id, len(idx))


def resolve_model(params: dict, out: Path) -> Path:
    """The checkpoint folder: an imported fairseq checkpoint (paper scale), ``model_dir`` (the workflow passes the
    shared translation artefact there), or that artefact beside this claim's results folder (repro.artefacts)."""
    if params.get("fairseq_checkpoint"):
        if not params.get("corpus"):
            raise ClaimParamError("head_pruning.corpus: a fairseq checkpoint needs its data-bin corpus section")
        return artefacts.import_fairseq(params["fairseq_checkpoint"], {"corpus": params["corpus"],
                                        "eval": params.get("decode") or {}}, Path(out) / "_imported", CLAIM)
    if params.get("require_fairseq_checkpoint"):
        raise ClaimParamError("head_pruning.fairseq_checkpoint: not set; this scale reruns Michel et al.'s setting "
                              "and needs the fairseq WMT14 En-Fr Transformer-large checkpoint (model.pt)")
    return artefacts.trained_model_path(params, "model_dir", CLAIM, out, "translation_model")


# ------------------------------------------------------------------------------------------------ experiments
def baseline(S: Setup, params: dict, rows: list) -> np.ndarray:
    """Unpruned BLEU on the subset, its placeholder-free part and the copy baseline; full-test BLEU once."""
    hyps = S.evaluator.hypotheses()
    stats = sentence_stats(hyps, S.refs)
    rep = bleu_report(hyps, S.refs, S.sources, S.clean)
    n = len(S.refs)
    rows += [metric(CLAIM, "bleu_unpruned", rep["full"]["score"], "BLEU", n=n, subset="eval",
                    published_key="michel_wmt_base_bleu", signature=rep["full"]["signature"]),
             metric(CLAIM, "bleu_unpruned_clean", rep["clean"]["score"], "BLEU", n=rep["clean"]["n"], subset="eval"),
             metric(CLAIM, "bleu_copy_baseline", rep["copy_full"]["score"], "BLEU", n=n, subset="eval"),
             metric(CLAIM, "bleu_copy_baseline_clean", rep["copy_clean"]["score"], "BLEU", n=rep["copy_clean"]["n"],
                    subset="eval")]
    log.info("unpruned BLEU %.2f on %d test sentences (clean %.2f; copy %.2f / %.2f); decode %.1f s",
             rep["full"]["score"], n, rep["clean"]["score"], rep["copy_full"]["score"], rep["copy_clean"]["score"],
             S.evaluator.seconds)
    if params["full_test_bleu"] and len(S.subset) < len(S.corpus.test):
        ids = [list(map(int, s)) for s in S.test_full.src]
        h, _ = decode_ids(S.model, ids, S.bos_id, S.tok.eos_id, S.tok.pad_id, S.dcfg, S.device, S.vocab_limit)
        full = corpus_bleu([S.tok.decode(x) for x in h], S.corpus.references("test"))
        rows.append(metric(CLAIM, "bleu_unpruned", full.score, "BLEU", n=full.n, subset="full_test"))
        log.info("unpruned BLEU on the full test set (%d sentences): %.2f", full.n, full.score)
    return stats


def compare(base: np.ndarray, stats: np.ndarray, params: dict) -> dict:
    return _BOOTSTRAP(base, stats, samples=params["bootstrap_samples"], seed=params["bootstrap_seed"],
                      alpha=params["significance"])


class _SharedBootstrap:
    """repro.train.bleu.paired_bootstrap (Koehn 2004) with what every comparison of a run shares computed once: the
    resample counts (a pure function of the sentences, samples and seed) and the resampled BLEU of the reference
    system (the unpruned model in all but the L0 control comparisons). The same numbers as paired_bootstrap
    (tests/test_claim_head_pruning.py), at a fraction of the cost: the default's 20,000 resamples (a bootstrap
    p-value fine enough for Holm's correction over the single-head tests) cost ~0.15 s per comparison, not ~1 s.
    A cache only: a part job's own instance gives the same numbers as the claim job's."""

    def __init__(self):
        self._counts: tuple | None = None
        self._ref: tuple | None = None

    def counts(self, n: int, samples: int, seed: int) -> np.ndarray:
        if self._counts is None or self._counts[0] != (n, samples, seed):
            self._counts, self._ref = ((n, samples, seed), bootstrap_counts(n, samples, seed)), None
        return self._counts[1]

    def resampled_ref(self, stats_a: np.ndarray, counts: np.ndarray) -> np.ndarray:
        key = (stats_a.shape, stats_a.tobytes())
        if self._ref is None or self._ref[0] != key:
            self._ref = (key, bleu_from_stats(counts @ stats_a))
        return self._ref[1]

    def __call__(self, stats_a: np.ndarray, stats_b: np.ndarray, samples: int, seed: int, alpha: float) -> dict:
        stats_a = np.asarray(stats_a)
        counts = self.counts(stats_a.shape[0], samples, seed)
        return paired_bootstrap(stats_a, stats_b, samples, seed, alpha, counts=counts,
                                resampled_a=self.resampled_ref(stats_a, counts))


_BOOTSTRAP = _SharedBootstrap()


def single_head_ablation(S: Setup, params: dict, base: np.ndarray, rows: list, out: Path) -> dict:
    """Michel Table 1: mask one head at a time; BLEU change and paired-bootstrap p-value."""
    res, t0 = {}, time.time()
    for i, h in enumerate(S.heads):
        set_pruned(S.model, [h])
        r = compare(base, S.evaluator.stats(), params)
        res[h] = r
        sig = r["p_value"] < params["significance"]
        rows.append(metric(CLAIM, "ablation_bleu_delta", r["delta"], "BLEU", sweep={"kind": h.kind}, layer=h.layer,
                           head=h.head, p_value=r["p_value"], significant=bool(sig)))
        log.info("ablate %d/%d %s: BLEU %+.2f (p=%.3f)%s  [%.0f s]", i + 1, len(S.heads), h.name, r["delta"],
                 r["p_value"], " *" if sig else "", time.time() - t0)
    set_pruned(S.model)
    for kind in [*S.kinds, "all"]:
        hs = [h for h in S.heads if kind in ("all", h.kind)]
        if not hs:
            continue
        sig = [h for h in hs if res[h]["p_value"] < params["significance"]]
        up = [h for h in sig if res[h]["delta"] > 0]
        enc = kind == "encoder_self"  # Michel's Table 1 counts encoder self-attention heads
        rows += [metric(CLAIM, "significant_heads", len(sig), "heads", n=len(hs), sweep={"kind": kind},
                        published_key="michel_significant_heads" if enc else None),
                 metric(CLAIM, "significant_heads_fraction", len(sig) / len(hs), "fraction", n=len(hs), kind="statistic",
                        sweep={"kind": kind}),
                 metric(CLAIM, "significant_heads_raising_bleu", len(up), "heads", n=len(sig), sweep={"kind": kind},
                        published_key="michel_significant_heads_raising_bleu" if enc else None),
                 metric(CLAIM, "heads_total", len(hs), "heads", sweep={"kind": kind},
                        published_key="michel_heads_total" if enc else None)]
    (out / "ablation.json").write_text(json.dumps(
        [{"head": h.name, **{k: v for k, v in r.items() if k in ("delta", "p_value", "delta_ci", "bleu_b")}}
         for h, r in res.items()], indent=1) + "\n")
    return res


def one_head_per_layer(S: Setup, params: dict, base: np.ndarray, ablation: dict, rows: list) -> None:
    """Michel Tables 2-3: in one layer keep only its best head (all other layers intact).

    ``one_head``: "ablation" keeps the head whose single ablation cost most BLEU (one decode per layer);
    "exhaustive" tries every head and keeps the best BLEU (Michel's procedure; heads-per-layer decodes)."""
    mode = params["one_head"]
    if mode == "none":
        return
    mods = attention_modules(S.model, S.kinds)
    for kind, ms in mods.items():
        for li, m in enumerate(ms):
            heads = [Head(kind, li, h) for h in range(m.n_heads)]
            cands = heads if mode == "exhaustive" else [min(heads, key=lambda h: ablation[h]["delta"])]
            best = None
            for keep in cands:
                set_pruned(S.model, [h for h in heads if h != keep])
                r = compare(base, S.evaluator.stats(), params)
                if best is None or r["delta"] > best[1]["delta"]:
                    best = (keep, r)
            keep, r = best
            last_cross = kind == "cross" and li == len(ms) - 1
            rows.append(metric(CLAIM, "one_head_bleu_delta", r["delta"], "BLEU", sweep={"kind": kind}, layer=li,
                               head=keep.head, p_value=r["p_value"],
                               significant=bool(r["p_value"] < params["significance"]), choice=mode,
                               published_key="michel_one_head_enc_dec_last_layer_delta" if last_cross else None))
            log.info("one head in %s layer %d (keep H%d): BLEU %+.2f (p=%.3f)", kind, li, keep.head, r["delta"],
                     r["p_value"])
    set_pruned(S.model)


def iterative_pruning(S: Setup, params: dict, base: np.ndarray, rows: list, out: Path) -> dict:
    """Michel Fig. 3: prune ``step_fraction`` of the heads per step, lowest importance first (importance
    recomputed on the partly pruned model after each step when ``recompute_importance``); the random orders they
    are compared with are :func:`random_orders` (independent of these: a stage of its own).

    Orders (``pruning.orders``): "importance" is Michel's score, l2-normalised within each layer; "importance_raw"
    ranks the unnormalised scores across layers (a diagnostic: with few heads per layer the per-layer
    normalisation makes scores of different layers incomparable).  Returns Michel's order and the curves."""
    p = params["pruning"]
    levels = pruning_levels(len(S.heads), p["step_fraction"], p["max_fraction"])
    imp_batches = S.batches(params["importance"]["split"], params["importance"]["max_tokens"],
                            params["importance"]["max_batches"], shuffle=False)
    curves: dict[str, list] = {}
    orders: dict[str, list] = {}
    for name in p["orders"]:
        curves[name], orders[name] = _importance_curve(S, params, base, rows, name, levels, imp_batches)
    set_pruned(S.model)
    base_bleu = bleu(base)
    for name, curve in curves.items():
        rows += _curve_rows(name, curve, base_bleu, len(S.heads), params)
    (out / "pruning_order.json").write_text(json.dumps({k: [h.name for h in v] for k, v in orders.items()},
                                                       indent=1) + "\n")
    main = orders.get("importance") or next(iter(orders.values()), [])
    return {"order": main, "curves": curves}


def random_orders(S: Setup, params: dict, base: np.ndarray, rows: list) -> None:
    """Michel Fig. 3's control: the curves of the seeded random orders (``pruning.random_seeds``), at the levels
    of the importance orders."""
    p = params["pruning"]
    levels = pruning_levels(len(S.heads), p["step_fraction"], p["max_fraction"])
    curves = {f"random_{seed}": _random_curve(S, params, base, seed, levels) for seed in p["random_seeds"]}
    set_pruned(S.model)
    for name, curve in curves.items():
        rows += _curve_rows(name, curve, bleu(base), len(S.heads), params)


def _importance_curve(S: Setup, params: dict, base: np.ndarray, rows: list, name: str, levels: list[int],
                      imp_batches: list) -> tuple[list, list[Head]]:
    """One importance order's curve [(heads pruned, comparison)] and the heads in the order pruned; the first
    scores go to ``rows`` (``head_importance``)."""
    p = params["pruning"]
    pad, gran = S.tok.pad_id, params["importance"]["granularity"]
    norm = name == "importance"
    pruned: list[Head] = []
    scores = head_importance(S.model, imp_batches, pad, [], S.kinds, S.device, normalize=norm, granularity=gran)
    for h, v in scores.items():
        rows.append(metric(CLAIM, "head_importance", v, "l2-normalised per layer" if norm else "nats/token",
                           kind="statistic", sweep={"kind": h.kind}, layer=h.layer, head=h.head, order=name))
    curve = []
    for n in levels:
        if p["recompute_importance"] and pruned:
            scores = head_importance(S.model, imp_batches, pad, pruned, S.kinds, S.device, normalize=norm,
                                     granularity=gran)
        ranked = sorted((h for h in S.heads if h not in pruned), key=lambda h: scores[h])
        pruned += ranked[: n - len(pruned)]
        set_pruned(S.model, pruned)
        r = compare(base, S.evaluator.stats(), params)
        curve.append((n, r))
        log.info("%s order: %d/%d heads pruned: BLEU %.2f (%+.2f, p=%.3f)", name, n, len(S.heads),
                 r["bleu_b"], r["delta"], r["p_value"])
    return curve, list(pruned)


def _random_curve(S: Setup, params: dict, base: np.ndarray, seed: int, levels: list[int]) -> list:
    """The curve of one seeded random order of the heads."""
    perm = list(S.heads)
    random.Random(seed).shuffle(perm)
    curve = []
    for n in levels:
        set_pruned(S.model, perm[:n])
        r = compare(base, S.evaluator.stats(), params)
        curve.append((n, r))
        log.info("random order (seed %d): %d heads pruned: BLEU %.2f (%+.2f)", seed, n, r["bleu_b"], r["delta"])
    return curve


def _curve_rows(name: str, curve: list, base_bleu: float, total: int, params: dict) -> list[dict]:
    """A curve's rows: BLEU per level (the unpruned model at 0), its mean and, for an importance order, the
    prunable fraction and the start of the sharpest drop."""
    order_kind, seed = ("random", int(name.split("_")[1])) if name.startswith("random_") else (name, None)
    rows = [metric(CLAIM, "pruning_bleu", base_bleu, "BLEU", order=order_kind, seed=seed, pruned=0, fraction=0.0,
                   p_value=1.0)]
    for n, r in curve:
        rows.append(metric(CLAIM, "pruning_bleu", r["bleu_b"], "BLEU", order=order_kind, seed=seed, pruned=n,
                           fraction=n / total, p_value=r["p_value"],
                           significant_loss=bool(r["p_value"] < params["significance"] and r["delta"] < 0)))
    # area under the curve (mean BLEU over the pruning levels)
    rows.append(metric(CLAIM, "pruning_mean_bleu", float(np.mean([r["bleu_b"] for _, r in curve])), "BLEU",
                       order=order_kind, seed=seed))
    if name.startswith("random_"):
        return rows
    # prunable fraction: the largest fraction before the first significant loss
    ok = 0.0
    for n, r in curve:
        if r["p_value"] < params["significance"] and r["delta"] < 0:
            break
        ok = n / total
    michel = name == "importance"
    rows.append(metric(CLAIM, "prunable_fraction", 100 * ok, "percent", n=total, kind="statistic",
                       published_key="michel_prunable_wmt" if michel else None, order=name))
    # sharp drop: the start of the steepest single-step BLEU fall
    pts = [(0, base_bleu)] + [(n, r["bleu_b"]) for n, r in curve]
    drops = [(pts[i][1] - pts[i + 1][1], pts[i][0]) for i in range(len(pts) - 1)]
    if drops:
        _, start = max(drops)
        rows.append(metric(CLAIM, "sharp_drop_fraction", 100 * start / total, "percent", n=total, kind="statistic",
                           published_key="michel_sharp_drop_fraction" if michel else None, order=name))
    return rows


def l0_gates(S: Setup, params: dict, base: np.ndarray, rows: list) -> None:
    """Voita Sec. 6: Hard-Concrete gates on the heads of ``l0.targets`` fine-tuned from the trained model with
    loss = NLL/token + lambda * sum_h P(g_h != 0); heads with P(g != 0) < 0.5 are removed at evaluation."""
    p = params["l0"]
    if not p["lambdas"]:
        return
    train = S.encoded("train", min(p["max_len"], S.model.cfg.max_seq_len), "drop")
    base_bleu = bleu(base)
    control = None
    for lam in sorted(p["lambdas"]):
        torch.manual_seed(p["seed"])
        model = copy.deepcopy(S.model)
        set_pruned(model)
        mods = attention_modules(model, p["targets"])
        gates = _attach_gates(mods, p, S.device)
        opt = _gate_optimizer(model, gates, p)
        model.train()
        t0 = time.time()
        step = _finetune(S, model, gates, opt, train, p, lam, t0)
        model.eval()
        kept = _fix_gates(mods, gates)
        n_gated = sum(m.n_heads for ms in mods.values() for m in ms)
        stats = S.evaluator.stats(model)
        r = compare(base, stats, params)
        secs = time.time() - t0
        if lam == 0:
            control = stats
        elif control is not None:  # against the same fine-tune without the penalty (all gates kept)
            rc = compare(control, stats, params)
            rows.append(metric(CLAIM, "l0_bleu_delta_vs_control", rc["delta"], "BLEU", lam=lam, heads_kept=kept,
                               p_value=rc["p_value"]))
        rows += [metric(CLAIM, "l0_heads_kept", kept, "heads", n=n_gated, lam=lam, targets="+".join(p["targets"])),
                 metric(CLAIM, "l0_heads_pruned_fraction", 1 - kept / n_gated, "fraction", n=n_gated, lam=lam,
                        kind="statistic"),
                 metric(CLAIM, "l0_bleu", r["bleu_b"], "BLEU", lam=lam, heads_kept=kept, p_value=r["p_value"]),
                 metric(CLAIM, "l0_bleu_delta", r["delta"], "BLEU", lam=lam, heads_kept=kept, p_value=r["p_value"]),
                 metric(CLAIM, "l0_finetune_steps", step, "updates", lam=lam, seconds=secs)]
        log.info("L0 lambda %g: %d/%d heads kept after %d updates (%.0f s): BLEU %.2f (%+.2f vs %.2f, p=%.3f)",
                 lam, kept, n_gated, step, secs, r["bleu_b"], r["delta"], base_bleu, r["p_value"])
        del model


def _attach_gates(mods: dict, p: dict, device) -> dict:
    """One HardConcreteGates per attention module of ``mods``, installed as its ``gate_module``."""
    gates = {}
    for kind, ms in mods.items():
        for li, m in enumerate(ms):
            g = HardConcreteGates(m.n_heads, p["init_log_alpha"], p["beta"], p["stretch"]).to(device)
            m.gate_module = g
            gates[(kind, li)] = g
    return gates


def _gate_optimizer(model, gates: dict, p: dict) -> torch.optim.Adam:
    """Adam on the gates' log_alpha and, when ``model_lr`` > 0, on the model's weights (else they are frozen)."""
    gate_params = [g.log_alpha for g in gates.values()]
    groups = [{"params": gate_params, "lr": p["gate_lr"]}]
    if p["model_lr"] > 0:
        groups.append({"params": [q for q in model.parameters() if all(q is not g for g in gate_params)],
                       "lr": p["model_lr"]})
    else:
        for q in model.parameters():
            q.requires_grad_(any(q is g for g in gate_params))
    return torch.optim.Adam(groups, betas=(0.9, 0.98))


def _finetune(S: Setup, model, gates: dict, opt, train, p: dict, lam: float, t0: float) -> int:
    """Fine-tune with loss = NLL/token + lambda * L0 for ``steps`` updates or ``max_seconds`` since ``t0``
    (seeded epochs over the training split); returns the number of updates."""
    step, epoch = 0, 0
    done = False
    while not done:
        for b in token_batches(train, p["max_tokens"], shuffle=True, seed=p["seed"] + epoch):
            b = b.to(S.device)
            loss, nll, _ = model_loss(model, b, p["label_smoothing"], S.tok.pad_id)
            l0 = sum(g.p_open().sum() for g in gates.values())
            total = loss / b.ntokens + lam * l0
            opt.zero_grad()
            total.backward()
            opt.step()
            step += 1
            if step % max(1, p["steps"] // 5) == 0:
                log.info("L0 lambda %g step %d: nll %.3f, expected open heads %.1f [%.0f s]", lam, step,
                         nll.item() / b.ntokens, l0.item(), time.time() - t0)
            if step >= p["steps"] or time.time() - t0 > p["max_seconds"]:
                done = True
                break
        epoch += 1
    return step


@torch.no_grad()
def _fix_gates(mods: dict, gates: dict) -> int:
    """Replace the stochastic gates by their deterministic values, 0 where P(g != 0) < 0.5; returns the heads kept."""
    kept = 0
    for (kind, li), g in gates.items():
        m = mods[kind][li]
        det, open_ = g(), g.p_open()
        m.gate_module = None
        m.head_gate.copy_(torch.where(open_ >= 0.5, det, torch.zeros_like(det)))
        kept += int((open_ >= 0.5).sum())
    return kept


def throughput(S: Setup, params: dict, order: list[Head], rows: list) -> None:
    """Michel Table 4: examples/s of a forward pass on fixed batches, unpruned vs ``prune_fraction`` of the heads
    (lowest importance first) physically removed; interleaved timing, medians, paired ratios."""
    p = params["throughput"]
    n_prune = int(round(p["prune_fraction"] * len(S.heads)))
    if len(order) < n_prune:  # pruning stopped earlier: extend by a fresh importance ranking
        imp_batches = S.batches(params["importance"]["split"], params["importance"]["max_tokens"],
                                params["importance"]["max_batches"], shuffle=False)
        sc = head_importance(S.model, imp_batches, S.tok.pad_id, order, S.kinds, S.device,
                             granularity=params["importance"]["granularity"])
        order = order + sorted(sc, key=sc.get)[: n_prune - len(order)]
    small = pruned_copy(S.model, order[:n_prune]).eval()
    full = S.model
    set_pruned(full)
    enc = S.test_subset
    # fixed pool: the subset's sentences in a seeded order, cycled when a batch is larger than the subset
    pool = list(range(len(enc)))
    random.Random(p["seed"]).shuffle(pool)
    for bs in p["batch_sizes"]:
        pos = [pool[i % len(pool)] for i in range(bs)]
        b = collate(enc, pos).to(S.device)

        def fwd(m, b=b):
            with torch.no_grad():
                return m(b.src, b.tgt_in, b.src_pad_mask, b.tgt_pad_mask)

        samples = time_interleaved({"unpruned": lambda: fwd(full), "pruned": lambda: fwd(small)}, reps=p["reps"],
                                   warmup=p["warmup"], device=S.device, min_time=p["min_seconds"])
        rows += speed_rows(bs, samples, p["prune_fraction"], n_prune)


# ------------------------------------------------------------------------------------------------ parts
# The measurement's stages after the baseline, in four groups that share nothing but the trained model and the
# unpruned model's decodes of the evaluation subset (each process decodes them itself: decoding is deterministic,
# and the claim job checks that a part's were the same): the single-head ablation with the one-head-per-layer table
# built on it (Michel Tables 1-3); the importance orders' pruning curves with the timing of the model they prune
# (Fig. 3, Table 4); the random orders' curves (Fig. 3's control); the L0 fine-tunes (Voita). None reads another's
# results or changes the model for the next (every stage restores all gates; the fine-tunes train a copy), every
# random draw is seeded locally (random.Random(seed), torch.manual_seed before each fine-tune), and the bootstrap's
# cache is a pure function of its inputs; so the groups can run in any order, in any process (the workflow's part
# jobs, workflow.parts), with the same rows. Each group's rows, stage seconds, decodes and files are recorded in
# parts/<group>.rows.json under a key of the parameters, the trained model's checkpoint and the measuring code:
# ``run`` keeps a group recorded with its key (by a part job, or by an interrupted earlier run), measures the rest.
GROUPS: dict[str, tuple[str, ...]] = {"ablation": ("ablation", "one_head"), "l0": ("l0",),
                                      "random_orders": ("random_orders",), "pruning": ("pruning", "throughput")}
# CPU-seconds of each group on the cpu-intel-xeon-2c default reference (its stage_seconds rows; the one pruning
# stage's 152 s shared by its decodes: 45 of the random orders, 18 and the importance passes of the importance
# orders), longest first: what split_groups balances the parts by
GROUP_SECONDS = {"ablation": 168.0, "l0": 121.0, "random_orders": 100.0, "pruning": 66.0}
ARTEFACT_FILES = {"ablation": ("ablation.json",), "pruning": ("pruning_order.json",)}  # files beside the rows
STAGES = ("baseline", "ablation", "one_head", "pruning", "random_orders", "l0", "throughput")  # the rows' order


def split_groups(count: int) -> list[list[str]]:
    """The groups in ``count`` parts of about equal cost (longest first, each to the part with the least so far;
    parts beyond the number of groups get none). Two parts on two cores: ablation + importance orders (~234 s)
    beside L0 + random orders (~221 s); four parts, one group each, in that order."""
    parts: list[list[str]] = [[] for _ in range(count)]
    load = [0.0] * count
    for g in sorted(GROUPS, key=lambda g: -GROUP_SECONDS[g]):
        k = min(range(count), key=lambda i: (load[i], i))
        parts[k].append(g)
        load[k] += GROUP_SECONDS[g]
    return parts


def _resume_key(params: dict, S: Setup) -> str:
    """What a group's record is kept by: the parameters (not the model's path), the sha256 of the trained model's
    checkpoint and the claim's measurement code (repro.provenance); any change measures every group again."""
    return json.dumps({"params": {k: v for k, v in params.items() if k not in ("model_dir", "judge")},
                       "checkpoint": file_sha256(artefacts.checkpoint_file(S.ckpt)),
                       "code": provenance.code_files(CLAIM)}, sort_keys=True, default=str)


def _digest(stats: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(stats, dtype=np.float64).tobytes()).hexdigest()


def _record_file(out: Path, group: str) -> Path:
    return out / "parts" / f"{group}.rows.json"


def _kept(out: Path, group: str, key: str) -> dict | None:
    """The record of ``group`` measured with this key, or None."""
    f = _record_file(out, group)
    if not f.exists():
        return None
    rec = json.loads(f.read_text())
    return rec if rec.get("key") == key and rec.get("group") == group else None


def _measure_group(S: Setup, params: dict, base: np.ndarray, group: str, out: Path, job: str,
                   since: tuple[float, int, float], key: str) -> dict:
    """Measure ``group``'s stages and record them in parts/<group>.rows.json (written as it ends, so an interrupted
    run keeps it): rows and seconds per stage, the decodes made and their seconds, the files written, and the
    overhead before the group (``since``: the time, decodes and decode seconds it is counted from; a part job
    counts its setup and its decode of the unpruned model there)."""
    t_start = time.time()
    rows: dict[str, list] = {}
    seconds: dict[str, float] = {}
    state: dict = {}
    for stage in GROUPS[group]:
        t0 = time.time()
        rows[stage] = []
        if stage == "ablation":
            state["ablation"] = single_head_ablation(S, params, base, rows[stage], out)
        elif stage == "one_head":
            one_head_per_layer(S, params, base, state["ablation"], rows[stage])
        elif stage == "pruning":
            state["pruning"] = iterative_pruning(S, params, base, rows[stage], out)
        elif stage == "random_orders":
            random_orders(S, params, base, rows[stage])
        elif stage == "l0":
            l0_gates(S, params, base, rows[stage])
        elif stage == "throughput":
            throughput(S, params, state["pruning"]["order"], rows[stage])
        seconds[stage] = time.time() - t0
    files = {name: (out / name).read_text() for name in ARTEFACT_FILES.get(group, ())}
    rec = {"group": group, "key": key, "base": _digest(base), "job": job, "rows": rows, "seconds": seconds,
           "setup_seconds": t_start - since[0], "decode_calls": S.evaluator.calls - since[1],
           "decode_seconds": S.evaluator.seconds - since[2], "files": files}
    _record_file(out, group).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(_record_file(out, group), rec)
    log.info("%s (%s): %s s; %d decodes", group, job, {k: round(v, 1) for k, v in seconds.items()},
             rec["decode_calls"])
    return rec


def run_part(params: dict, scale: str, out, index: int, count: int) -> dict:
    """Part ``index`` of ``count`` (the workflow's claim_part jobs, config workflow.parts): measure the groups
    :func:`split_groups` gives this part that are not recorded yet with this key. With ``hf_model`` (the MNLI
    experiment) a part does nothing: the claim job measures it all."""
    out = Path(out)
    mine = split_groups(count)[index]
    if params.get("hf_model") or not mine:
        return {"groups": []}
    t0 = time.time()
    out.mkdir(parents=True, exist_ok=True)
    S = Setup(params, out)
    key = _resume_key(params, S)
    todo = [g for g in mine if _kept(out, g, key) is None]
    log.info("head_pruning part %d-of-%d: groups %s; %d kept from earlier results", index, count, mine,
             len(mine) - len(todo))
    if todo:
        base = S.evaluator.stats()  # the unpruned model's decodes every comparison is against (as the claim job's)
        since = (t0, 0, 0.0)
        for g in todo:
            _measure_group(S, params, base, g, out, f"part {index}-of-{count}", since, key)
            since = (time.time(), S.evaluator.calls, S.evaluator.seconds)
    return {"groups": mine, "measured": todo}


# ------------------------------------------------------------------------------------------------ run
def run(params: dict, scale: str, out) -> tuple[list[dict], dict]:
    """Ablate, score, prune and time the attention heads of the trained translation model (or, with ``hf_model``,
    of an imported BERT MNLI classifier: repro.claims._heads_mnli). Groups of stages already measured with the same
    parameters, model and code (by the part jobs, ``run_part``, or an interrupted earlier run) are kept; the rows
    are the same either way, in the same order."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if params.get("hf_model"):
        rows = run_mnli(params, out)
        return rows, {"device": str(params["device"])}
    t0 = time.time()
    S = Setup(params, out)
    log.info("model %s; %d heads (%s); %d test sentences in the evaluation subset; decoding %s", S.model.cfg.block,
             len(S.heads), ", ".join(S.kinds), len(S.refs), S.dcfg)
    key = _resume_key(params, S)
    base_rows: list[dict] = []
    base = baseline(S, params, base_rows)
    timing = {"baseline": (time.time() - t0, "claim")}
    records, kept = {}, []
    for g in GROUPS:
        rec = _kept(out, g, key)
        if rec is not None and rec["base"] != _digest(base):
            log.warning("%s: parts/%s.rows.json decoded the unpruned model differently; measuring it again", g, g)
            rec = None
        if rec is None:
            rec = _measure_group(S, params, base, g, out, "claim", (time.time(), S.evaluator.calls,
                                                                   S.evaluator.seconds), key)
        else:
            log.info("%s: kept from parts/%s.rows.json (%s)", g, g, rec["job"])
            kept.append(rec)
            for name, text in rec["files"].items():
                (out / name).write_text(text)
        records[g] = rec
    by_stage = {stage: rec for rec in records.values() for stage in rec["rows"]}
    rows = base_rows + [r for stage in STAGES[1:] for r in by_stage[stage]["rows"][stage]]
    timing.update({s: (by_stage[s]["seconds"][s], by_stage[s]["job"]) for s in STAGES[1:]})
    for k, (s, job) in timing.items():
        rows.append(metric(CLAIM, "stage_seconds", s, "s", stage=k, job=job))
    setup = sum(rec["setup_seconds"] for rec in kept)
    if setup:  # the part jobs' own loading and decoding of the unpruned model
        rows.append(metric(CLAIM, "stage_seconds", setup, "s", stage="part_setup", job="parts"))
    # every decode this measurement made: this job's and those of the groups it kept (a part's own unpruned decode)
    calls = S.evaluator.calls + sum(rec["decode_calls"] for rec in kept)
    dsecs = S.evaluator.seconds + sum(rec["decode_seconds"] for rec in kept)
    rows.append(metric(CLAIM, "decode_calls", calls, "decodes", seconds=dsecs, groups_kept=len(kept)))
    log.info("stage seconds: %s; %d decodes in %.0f s", {k: round(s, 1) for k, (s, _) in timing.items()}, calls,
             dsecs)
    return rows, {"device": str(params["device"])}


if __name__ == "__main__":
    from repro.claims._cli import main

    raise SystemExit(main(CLAIM, run))
