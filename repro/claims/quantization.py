"""C10 quantization: LLM.int8() (Dettmers et al., NeurIPS 2022, arXiv 2208.07339) and GPTQ (Frantar et al.,
ICLR 2023, arXiv 2210.17323) on the suite's trained models.

The models: the shared target-side LM (``<results>/_models/lm``, scored by validation perplexity) and, when
``models`` lists it, the shared translation model (``_models/translation``, validation perplexity and test BLEU).
Every linear layer of every block is quantized (repro.quant); embeddings and the output projection stay fp32.

Paper path (``hf_model``: a Hugging Face folder of the Llama/Mistral, OPT or GPT-2 families, loaded by
repro.model.hf_import.load_pretrained; ``text_path``: a text file the user gives, WikiText-2 / C4 style), as the
papers evaluate (GPTQ's ``datautils``/``opt_eval``, LLM.int8() Table 1): the file is tokenized as one stream with the
folder's tokenizer (``tokenizer.model`` with sentencepiece, or ``tokenizer.json`` with the ``tokenizers`` library;
repro.data.text); perplexity is the mean NLL over windows of the model's context (``eval.seq_len``; disjoint windows
as GPTQ's, or a sliding context with ``eval.stride``); GPTQ is calibrated per seed on ``calibration.sentences``
random segments of ``calibration.seq_len`` tokens (GPTQ: 128 x 2048 tokens of C4) from ``calibration_path`` or, when
that is null, from the held-out end of text_path (``calibration.text_share``). Every method above runs on the q/k/v/o
projections and the MLP of every decoder layer; the token embeddings and lm_head stay fp32 as in both papers. The
gate: the fp32 model's perplexity must be below ``judge.lm_gate_ratio`` x exp(entropy) of the scored tokens' own
unigram distribution (the best a model without context can do on that text), else the verdict is inconclusive.

Methods (``int8.modes``, ``rtn``, ``gptq`` in the config):

- fp32 (the reference; LLM.int8() Table 1's "32-bit Float");
- int8 ``absmax`` (one scale per tensor), ``vectorwise`` (row-wise scales of the activations, one per output
  channel of the weights: LLM.int8() Section 3.1) and ``llm_int8`` (vector-wise plus the mixed-precision
  decomposition of the feature dimensions with |x| >= ``int8.threshold``: Section 3.2) - Table 1;
- RTN (round-to-nearest, min-max grid per output channel or per group of input columns) at ``rtn.bits`` - the
  baseline of GPTQ Tables 3-5;
- GPTQ at ``gptq.bits`` with its options (groups, act-order, dampening, block size 128), calibrated on
  ``calibration.sentences`` training sentences drawn with each of ``calibration.seeds`` (GPTQ: 128 random
  2048-token C4 segments): the spread over calibration seeds decides the GPTQ checks.

LLM.int8() is judged where it can discriminate: with ``outlier_copy.dims`` > 0 the shared LM is also measured as
``lm_outliers``, a function-preserving copy whose int8 matmul inputs carry outlier features of the paper's size
(repro.quant.outliers; fp32 and the families of ``outlier_copy.methods``, on the first ``outlier_copy.sentences``
scored sentences, with the copy's fp32 change against the LM recorded: ``outlier_copy_fp32_change``). GPTQ against
RTN is judged there too when ``outlier_copy.methods`` lists rtn and gptq: the copy's outlier weight columns are
``scale`` times smaller than the rest while their inputs are ``scale`` times larger, the OPT-size situation where
RTN fails and GPTQ's Hessian-aware updates hold (GPTQ Tables 3-5); on the small LM itself 4-bit RTN barely hurts.

Measured per model and method: validation perplexity (and BLEU for the translation model) with each evaluation
unit's loss (validation sentence, or window of the paper path) kept, so that every comparison of two methods on the
same tokens is paired: ``paired_nll_diff`` rows (:func:`paired_rows`: every method against fp32, GPTQ against RTN
at the same bits and groups, absmax and vector-wise int8 against LLM.int8()) give the per-token NLL difference and
its standard error over the units, the evaluation tokens' own sampling error, which the judge adds to the spread over
calibration seeds; the weight bytes
actually stored (packed codes, 16-bit scales, zero points, group indices) against 16-bit weights, the share of
values multiplied in 16 bits by LLM.int8(), and for GPTQ the layer-wise relative reconstruction error
||WX - QX||^2 / ||WX||^2 of GPTQ and of RTN on the same inputs: GPTQ's calibration inputs (which it minimises by
construction) and held-out inputs it never saw (validation sentences; an imported model's first scored windows),
the split that decides the check (sweep ``split``). Outlier features (LLM.int8() Section
4.1): per block, the feature dimensions of the inputs of the attention projections and of the FFN expansion with
|x| >= 6 and the share of tokens they touch, and the paper's criteria (magnitude >= 6, in >= 25% of layers, in >= 6%
of sequence positions) across the models measured. Timing: the int8 matmul kernel of this machine
(``torch._int_mm``) against fp32 on one matrix shape, for information; GPTQ's speedups need its packed 3/4-bit
GPU kernels. Verdict rules: repro/judges/quantization.py (its thresholds: the ``judge:`` section of
config/claims/quantization.yaml).
"""
from __future__ import annotations

import copy
import logging
import math
import os
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from repro import artefacts
from repro import quant as Q
from repro.data.baselines import unigram_ppl
from repro.data.batching import collate, encode_corpus
from repro.data.text import lm_batch, random_segments, stride_windows, token_stream
from repro.errors import ConfigError, HFImportError
from repro.io import atomic_write_json, metric
from repro.train.bleu import corpus_bleu
from repro.train.decode import DecodeConfig
from repro.train.pipeline import encode_splits, load_data as load_corpus, valid_batches
from repro.vocabulary.quantization import CLAIM

log = logging.getLogger("repro.quantization")
MODELS = ("lm", "translation")


class QuantizationError(ConfigError):
    """A quantization parameter or path is missing or wrong; the message names the config key."""


# ------------------------------------------------------------------------------------------------------ methods
def methods(params: dict) -> list[dict]:
    """The method grid of the config, fp32 first: {"method", "family", "bits", "group_size", "seed"}."""
    out = [{"method": "fp32", "family": "fp32", "bits": 32, "group_size": None, "seed": None}]
    for mode in params["int8"]["modes"]:
        out.append({"method": f"int8_{mode}" if mode != "llm_int8" else "llm_int8", "family": "int8", "mode": mode,
                    "bits": 8, "group_size": None, "seed": None})
    for fam in ("rtn", "gptq"):
        sec = params[fam]
        for bits in sec["bits"]:
            for gs in sec["group_sizes"]:
                name = f"{fam}_w{bits}" + (f"_g{gs}" if gs else "")
                seeds = params["calibration"]["seeds"] if fam == "gptq" else [None]
                out += [{"method": name, "family": fam, "bits": bits, "group_size": gs, "seed": s} for s in seeds]
    return out


def apply_method(model, m: dict, params: dict, calibrate, heldout=None) -> dict:
    """Quantize ``model`` in place with method ``m``; returns what the method reports (GPTQ layer errors, also on
    the ``heldout`` batches when given)."""
    if m["family"] == "int8":
        Q.quantize_int8(model, m["mode"], params["int8"]["threshold"])
        return {}
    if m["family"] == "rtn":
        Q.quantize_rtn(model, m["bits"], m["group_size"], params["rtn"]["sym"])
        return {}
    if m["family"] == "gptq":
        g = params["gptq"]
        return Q.quantize_gptq(model, calibrate, m["bits"], m["group_size"], g["act_order"], g["damp"],
                               g["block_size"], g["sym"], heldout=heldout)
    return {}


# ------------------------------------------------------------------------------------------------------- models
def resolve_models(params: dict, out: Path) -> dict:
    """{"lm": folder, "translation": folder} for ``models`` (the workflow passes the shared artefacts in
    ``lm_model`` / ``translation_model``; null: the artefacts beside this claim's results folder), or
    ``{<folder name>: folder}`` for ``hf_model``. Missing paths fail naming the key (repro.artefacts)."""
    if params.get("hf_model"):
        p = artefacts.hf_folder(params, CLAIM)
        if params.get("calibration_path") and not Path(params["calibration_path"]).is_file():
            raise artefacts.ArtefactError(f"quantization.calibration_path: {params['calibration_path']!r} is not an "
                                          "existing text file (null: calibrate on a held-out share of text_path)")
        return {p.name: p}
    paths = {}
    for name in params["models"]:
        if name not in MODELS:
            raise QuantizationError(f"quantization.models: unknown model {name!r} (valid: {', '.join(MODELS)})")
        paths[name] = artefacts.trained_model_path(params, f"{name}_model", CLAIM, out,
                                                   "lm" if name == "lm" else "translation_model")
    if not paths:
        raise QuantizationError("quantization.models: empty (give lm and/or translation, or hf_model)")
    return paths


def _subset(enc, positions):
    positions = list(positions)
    return replace(enc, src=[enc.src[i] for i in positions], tgt=[enc.tgt[i] for i in positions],
                   index=np.asarray(enc.index)[positions], n_input=len(positions))


def _scored_test(tparams: dict, tokenizer, corpus, max_len: int, n, offset: int):
    """The first ``n`` test pairs (null: all; 0: none) encoded as the validation pairs are (truncated, never
    dropped), their indices moved past the validation's so the two join into one set of scored sentences."""
    if n == 0:
        return None
    db = getattr(corpus, "data_bin", None)
    if db is not None and "test" not in getattr(db, "splits", {}):
        return None
    enc = db.encoded("test", max_len, "truncate") if db is not None else \
        encode_corpus(corpus.split("test", False), tokenizer, max_len, on_long="truncate")
    enc = _subset(enc, range(min(n or len(enc), len(enc))))
    return replace(enc, index=np.asarray(enc.index) + offset) if len(enc) else None


def _join(a, b):
    return a if b is None else replace(a, src=list(a.src) + list(b.src), tgt=list(a.tgt) + list(b.tgt),
                                       index=np.concatenate([np.asarray(a.index), np.asarray(b.index)]),
                                       n_input=a.n_input + b.n_input)


def load_data(t, name: str, params: dict) -> dict:
    """The scored sentences' batches (the first ``eval.valid_sentences`` validation sentences and the first
    ``eval.ppl_test_sentences`` test sentences: held-out text the model never trained on, target side for the LM),
    calibration sentences per seed, the unigram baseline of the scored sentences, and (translation) the test subset
    with its copy baseline."""
    tparams = t.params
    corpus = load_corpus(tparams)
    tr = (tparams.get("lm") or {}).get("training") if name == "lm" else tparams.get("training")
    max_len = int((tr or {}).get("max_len", 128))
    enc = encode_splits(tparams, t.tokenizer, corpus, max_len)
    ev, cal = params["eval"], params["calibration"]
    n_val = min(ev["valid_sentences"] or len(enc["valid"]), len(enc["valid"]))
    val = _subset(enc["valid"], range(n_val))
    scored = _join(val, _scored_test(tparams, t.tokenizer, corpus, max_len, ev.get("ppl_test_sentences", 0),
                                     int(np.max(enc["valid"].index, initial=0)) + 1))
    data = {"valid": valid_batches(scored, ev["max_tokens"]), "calib": {}, "scored": scored,
            "max_tokens": ev["max_tokens"],
            "unigram_ppl": unigram_ppl(enc["train"], scored, int(t.checkpoint["model_cfg"]["vocab_size"]))}
    for seed in cal["seeds"]:
        rng = np.random.default_rng(seed)
        pos = sorted(rng.permutation(len(enc["train"]))[: min(cal["sentences"], len(enc["train"]))].tolist())
        data["calib"][seed] = [collate(enc["train"], [i]) for i in pos]  # one sentence per batch: no padding
    # GPTQ's layer errors scored again on validation sentences it never saw (one per batch, as calibration)
    data["heldout"] = [collate(val, [i]) for i in range(min(cal["sentences"], len(val)))]
    if name == "translation":
        pairs = corpus.split("test", False)[: ev["test_sentences"]]
        tc = copy.copy(corpus)
        tc.test = pairs
        tc.clean_masks = {**corpus.clean_masks, "test": [True] * len(pairs)}
        data["test_corpus"], data["test_ref"] = tc, [b for _, b in pairs]
        data["copy_bleu"] = corpus_bleu([a for a, _ in pairs], data["test_ref"]).score
    return data


def load_hf(folder: Path, device):
    """A decoder-only Hugging Face folder (Llama/Mistral, OPT, GPT-2) as the suite's model, its tokenizer, and the
    import record (repro.artefacts.load_hf_model's ``meta``: family, kind, parameters)."""
    try:
        t = artefacts.load_hf_model(folder, device=device)
    except HFImportError as exc:
        raise QuantizationError(f"quantization.hf_model: {exc}") from None
    info = t.checkpoint
    if info["kind"] != "decoder_lm":
        raise QuantizationError(f"quantization.hf_model: {folder} is a {info['family']} encoder; perplexity needs a "
                                "decoder-only language model (Llama/Mistral, OPT, GPT-2)")
    return t.model.eval(), t.tokenizer, info


def text_data(tok, params: dict, context: int) -> dict:
    """The paper path's text (``hf_model``): ``text_path`` tokenized as one stream with the folder's tokenizer
    (repro.data.text.token_stream), perplexity windows of ``eval.seq_len`` tokens (null: the model's context)
    every ``eval.stride`` tokens (null: disjoint windows, GPTQ's evaluation) over the first ``eval.windows``;
    per calibration seed ``calibration.sentences`` random segments of ``calibration.seq_len`` tokens (GPTQ: 128
    x 2048 from C4) from ``calibration_path`` or, when it is null, from the last ``calibration.text_share`` of
    text_path's tokens, which are then not scored. The gate's baseline is the perplexity of the scored tokens'
    own unigram distribution, exp(entropy): the best any model without context can do on this text."""
    ev, cal = params["eval"], params["calibration"]
    ids = token_stream(tok, params["text_path"])
    if params.get("calibration_path"):
        cal_ids, eval_ids, cal_src = token_stream(tok, params["calibration_path"]), ids, "calibration_path"
    else:
        cut = int(round(len(ids) * (1 - cal["text_share"])))
        eval_ids, cal_ids, cal_src = ids[:cut], ids[cut:], f"the last {cal['text_share']:.0%} of text_path"
    seq = min(ev["seq_len"] or context, context)
    cal_len = min(cal["seq_len"] or context, context)
    if len(cal_ids) < cal_len + 1:
        raise QuantizationError(f"quantization.calibration.seq_len: {cal_src} has {len(cal_ids)} tokens, fewer "
                                f"than one calibration segment of {cal_len} (shorten calibration.seq_len, raise "
                                "calibration.text_share or give calibration_path)")
    wins = stride_windows(len(eval_ids), seq, ev["stride"] or seq)[: ev["windows"] or None]
    if not wins or len(eval_ids) < 2:
        raise QuantizationError(f"quantization.text_path: {params['text_path']} leaves {len(eval_ids)} tokens to "
                                "score (too short for one perplexity window)")
    scored = np.concatenate([eval_ids[f:e] for _, e, f in wins])
    p = np.bincount(scored) / len(scored)
    p = p[p > 0]
    calib = {s: [lm_batch(x) for x in random_segments(cal_ids, cal["sentences"], cal_len + 1, s)]
             for s in cal["seeds"]}
    heldout = [lm_batch(eval_ids[b:e]) for b, e, _ in wins[: cal["sentences"]]]  # scored text, not calibration
    return {"ids": eval_ids, "windows": wins, "calib": calib, "heldout": heldout, "unigram_ppl": float(np.exp(-(p * np.log(p)).sum())),
            "unigram_about": {"basis": "exp(entropy) of the scored tokens' unigram distribution"},
            "text": {"scored_tokens": int(len(scored)), "text_path": str(params["text_path"]),
                     "stream_tokens": int(len(ids)), "windows": len(wins), "seq_len": seq,
                     "stride": ev["stride"] or seq, "calibration": cal_src, "calibration_seq_len": cal_len,
                     "calibration_tokens": int(len(cal_ids))}}


@torch.no_grad()
def window_ppl(model, data: dict, device) -> dict:
    """Perplexity of ``model`` over the windows of :func:`text_data`: each window runs alone and scores its targets
    from its first new one (repro.data.text.stride_windows)."""
    sums, counts = [], []
    for begin, end, first in data["windows"]:
        b = lm_batch(data["ids"][begin:end]).to(device)
        logits = model(b.tgt_in)
        k = first - begin - 1
        sums.append(float(torch.nn.functional.cross_entropy(logits[0, k:].float(), b.tgt_out[0, k:],
                                                            reduction="sum")))
        counts.append(end - first)
    return _scores(np.asarray(sums, dtype=np.float64), np.asarray(counts, dtype=np.int64), "windows")


def _scores(sums: np.ndarray, counts: np.ndarray, unit: str) -> dict:
    """The perplexity of per-unit summed NLLs ``sums`` over ``counts`` scored tokens, with the units kept (the
    evaluation's sampling error of a paired comparison is estimated from them: :func:`paired_rows`)."""
    nll, n = float(sums.sum()), int(counts.sum())
    return {"valid_nll": nll / n, "valid_ppl": math.exp(min(nll / n, 50)), "valid_tokens": n,
            "unit_nll": sums, "unit_tokens": counts, "unit": unit}


@torch.no_grad()
def sentence_nll(model, batches, pad_id: int, device) -> dict:
    """Perplexity over the validation ``batches`` with the summed NLL and the scored tokens of each sentence (in
    corpus order), so two methods' losses pair sentence by sentence. The NLL is repro.train.loop.model_loss's
    (cross-entropy of the fp32 logits, pad targets ignored)."""
    model.eval()
    sums, counts, index = [], [], []
    for b in batches:
        b = b.to(device)
        logits = model_forward(model, b).float()
        nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), b.tgt_out.reshape(-1),
                                                ignore_index=pad_id, reduction="none").view(b.tgt_out.shape)
        sums.append(nll.sum(1).double().cpu())
        counts.append((b.tgt_out != pad_id).sum(1).cpu())
        index.append(torch.as_tensor(b.index).cpu())
    order = torch.argsort(torch.cat(index))
    return _scores(torch.cat(sums)[order].numpy(), torch.cat(counts)[order].numpy().astype(np.int64), "sentences")


# ------------------------------------------------------------------------------------------- paired comparisons
def paired_diff(a: tuple, b: tuple) -> dict:
    """Method a's per-token NLL minus method b's on the same evaluation units (sentences or windows), and the
    standard error of that difference over the units: ``a``, ``b`` = (summed NLL per unit, scored tokens per unit).
    The difference is a ratio of sums, D = sum(dL_i) / sum(w_i); its standard error is the paired t-interval's over
    units of the linearised variable r_i = dL_i - D w_i (the delta method for a ratio estimator: Cochran, Sampling
    Techniques, 6.3): se = sd(r) sqrt(n) / sum(w). Pairing removes what the units share (a hard sentence is hard
    for every method), so only the methods' disagreement counts. numpy only: the paper path runs on GPU images
    without scipy."""
    (la, wa), (lb, wb) = a, b
    if len(la) != len(lb) or not np.array_equal(wa, wb):
        raise QuantizationError("quantization: two methods were scored on different evaluation units")
    dl, w = np.asarray(la, float) - np.asarray(lb, float), np.asarray(wa, float)
    n, tot = len(dl), float(w.sum())
    d = float(dl.sum() / tot)
    r = dl - d * w
    se = float(np.std(r, ddof=1) * math.sqrt(n) / tot) if n > 1 else math.inf
    return {"diff": d, "se": se, "units": n, "identical": bool(np.all(dl == 0))}


def comparisons(names: list[str]) -> list[tuple[str, str]]:
    """The paired comparisons the judge reads: every method against fp32, GPTQ against RTN at the same bits and
    groups, and tensor-wise absmax and vector-wise int8 against LLM.int8()."""
    out = [(m, "fp32") for m in names if m != "fp32"]
    out += [(m, m.replace("gptq", "rtn", 1)) for m in names if m.startswith("gptq") and m.replace("gptq", "rtn", 1)
            in names]
    out += [(m, "llm_int8") for m in ("int8_absmax", "int8_vectorwise") if m in names and "llm_int8" in names]
    return out


def paired_rows(name: str, losses: dict) -> list[dict]:
    """``paired_nll_diff`` rows of model ``name``: per comparison of :func:`comparisons`, the per-token NLL
    difference (nats/token; ln of the perplexity ratio) on the evaluation units, its standard error over the units
    (``spread``) and the number of units (``n``). ``losses``: method -> [(summed NLL per unit, tokens per unit, unit
    name)] (one entry per calibration seed for GPTQ, whose losses are averaged over the seeds unit by unit first:
    the row is the evaluation sampling error of the seed-mean the judge decides on, the spread over seeds is the
    other source, read from the valid_ppl rows)."""
    merged = {}
    for meth, runs in losses.items():
        merged[meth] = (np.mean([r[0] for r in runs], axis=0), runs[0][1])
    rows = []
    for a, b in comparisons(list(losses)):
        p = paired_diff(merged[a], merged[b])
        rows.append(metric(CLAIM, "paired_nll_diff", p["diff"], "nats/token", kind="statistic", spread=p["se"],
                           n=p["units"], model=name, method=a, versus=b, seeds=len(losses[a]),
                           units=losses[a][0][2], identical=p["identical"]))
    for bits, pairs in pooled_pairs(list(losses)).items():
        # GPTQ against RTN at one bit width, pooled over the group settings: the mean of the settings' per-unit
        # losses on each side, so the units' paired error of the pooled difference the judge decides on
        g = (np.mean([merged[a][0] for a, _ in pairs], axis=0), merged[pairs[0][0]][1])
        r = (np.mean([merged[b][0] for _, b in pairs], axis=0), merged[pairs[0][1]][1])
        p = paired_diff(g, r)
        rows.append(metric(CLAIM, "paired_nll_diff", p["diff"], "nats/token", kind="statistic", spread=p["se"],
                           n=p["units"], model=name, method=f"gptq_{bits}bit", versus=f"rtn_{bits}bit",
                           seeds=len(losses[pairs[0][0]]), units=losses[pairs[0][0]][0][2], identical=p["identical"],
                           pooled=",".join(a for a, _ in pairs)))
    return rows


def pooled_pairs(names: list[str]) -> dict[int, list[tuple[str, str]]]:
    """Per bit width, the (GPTQ, RTN) settings of :func:`comparisons` at that width (every group setting)."""
    out: dict[int, list] = {}
    for a, b in comparisons(names):
        if a.startswith("gptq_w") and b.startswith("rtn_w"):
            out.setdefault(int(a.split("_")[1][1:]), []).append((a, b))
    return out


def model_forward(model, batch):
    if hasattr(model, "encoder"):
        return model(batch.src, batch.tgt_in, batch.src_pad_mask, batch.tgt_pad_mask)
    return model(batch.tgt_in, batch.tgt_pad_mask)


def evaluate(t, model, name: str, data: dict, params: dict, device) -> dict:
    q = sentence_nll(model, data["valid"], t.tokenizer.pad_id, device)
    if name == "translation" and params["eval"]["test_sentences"]:
        hyps, _ = replace(t, model=model).translate_split(data["test_corpus"], "test",
                                                          DecodeConfig.from_params(params["eval"]), device)
        q["bleu"] = corpus_bleu(hyps, data["test_ref"]).score
    return q


# ------------------------------------------------------------------------------------------------------ outliers
def outlier_sites(model) -> dict[int, list]:
    """Per block (forward order), the linear layers whose inputs LLM.int8() Section 4.1 tracks: the attention
    projections (q/k/v share one input, and out_proj) and the FFN expansion (fc1, or w1/w3 of SwiGLU)."""
    sites = {}
    for i, (_, block) in enumerate(Q.apply.blocks_of(model)):
        mods = [block.self_attn.q_proj, block.self_attn.out_proj]
        if block.cross_attn is not None:
            mods += [block.cross_attn.q_proj, block.cross_attn.out_proj]
        ffn = block.ffn
        mods += [ffn.fc1] if hasattr(ffn, "fc1") else [ffn.w1] if hasattr(ffn, "w1") else []
        sites[i] = mods
    return sites


@torch.no_grad()
def outlier_stats(model, batches, threshold: float, device) -> dict:
    """Per block: the tokens seen, per feature dimension the tokens with |x| >= threshold at any tracked input of
    that block, and the largest |x| (a mask per dimension, not stored per token)."""
    sites = outlier_sites(model)
    stats = {i: {"tokens": 0, "hits": None, "max_abs": 0.0, "cur": None} for i in sites}

    def hook(i):
        def fn(mod, inp, out):
            x = inp[0].reshape(-1, inp[0].shape[-1]).abs()
            s = stats[i]
            big = x >= threshold
            if s["cur"] is None or s["cur"].shape != big.shape:
                s["cur"] = big
            else:
                s["cur"] |= big
            s["max_abs"] = max(s["max_abs"], float(x.max()))
        return fn

    handles = [m.register_forward_hook(hook(i)) for i, mods in sites.items() for m in mods
               if m.in_features == model_dim(model)]
    try:
        for b in batches:
            for s in stats.values():
                s["cur"] = None
            model_forward(model, b.to(device))
            for s in stats.values():  # a token counts once per block: |x| >= threshold at any tracked input
                if s["cur"] is None:
                    continue
                s["tokens"] += s["cur"].shape[0]
                hits = s["cur"].sum(0).double().cpu()
                s["hits"] = hits if s["hits"] is None else s["hits"] + hits
    finally:
        for h in handles:
            h.remove()
    return stats


def model_dim(model) -> int:
    return Q.apply.blocks_of(model)[0][1].cfg.d_model


def emergence(stats: dict, layers_min_pct: float, seq_min_pct: float) -> dict:
    """LLM.int8() Section 4.1 criteria: a feature dimension is a systematic outlier when |x| >= threshold in at least
    ``layers_min_pct`` % of the layers and, over those layers, in at least ``seq_min_pct`` % of the sequence
    positions. Returns the systematic dims, the % of layers they touch and the % of sequence positions (over all
    layers) with an outlier in one of them (the paper's 65% -> 100% and 35% -> 75% between 6B and 6.7B)."""
    L = len(stats)
    d = len(next(iter(stats.values()))["hits"])
    hits = torch.stack([s["hits"] for s in stats.values()])  # (L, d)
    tokens = torch.tensor([s["tokens"] for s in stats.values()], dtype=torch.float64)
    frac = hits / tokens[:, None]
    large = hits > 0
    in_layers = large.sum(0).double() / L
    seq_frac = torch.where(large, frac, torch.zeros_like(frac)).sum(0) / large.sum(0).clamp(min=1)
    dims = torch.nonzero((in_layers * 100 >= layers_min_pct) & (seq_frac * 100 >= seq_min_pct)).flatten().tolist()
    layers_aff = float(large[:, dims].any(1).double().mean() * 100) if dims else 0.0
    # share of sequence positions with an outlier in a systematic dim: an upper bound from the per-dim counts
    # (positions hit in several dims are counted once per dim, capped at 100%)
    seq_aff = float((frac[:, dims].sum(1).clamp(max=1.0)).mean() * 100) if dims else 0.0
    return {"dims": dims, "layers_affected_pct": layers_aff, "seq_affected_pct": seq_aff, "n_layers": L,
            "d_model": d, "dims_ge_threshold_per_layer": large.sum(1).tolist(),
            "max_abs_per_layer": [s["max_abs"] for s in stats.values()]}


# ------------------------------------------------------------------------------------------------------ timing
def time_int8_matmul(shape: tuple[int, int, int], reps: int, device="cpu") -> dict | None:
    """Median seconds of an fp32 matmul and of torch._int_mm (the int8 kernel of this build) on (m, k) x (k, n), on
    ``device`` (the claim's device)."""
    if not hasattr(torch, "_int_mm"):
        return None
    m, k, n = shape
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(m, k, generator=g).to(device), torch.randn(k, n, generator=g).to(device)
    ai, bi = torch.randint(-127, 128, (m, k), generator=g, dtype=torch.int8).to(device), \
        torch.randint(-127, 128, (k, n), generator=g, dtype=torch.int8).to(device)
    sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)
    try:
        torch._int_mm(ai, bi)
    except RuntimeError as exc:
        log.info("torch._int_mm unavailable here: %s", exc)
        return None
    res = {}
    for name, fn in (("fp32", lambda: a @ b), ("int8", lambda: torch._int_mm(ai, bi))):
        fn()
        ts = []
        for _ in range(reps):
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            ts.append(time.perf_counter() - t0)
        res[name] = float(np.median(ts))
    return res


# ------------------------------------------------------------------------------------------------------ run
def _load(paths: dict, name: str, device):
    t = artefacts.load_trained_model(paths[name], device=device)
    t.model.to(device).eval()
    return t


def run_model(base, name: str, params: dict, device, data: dict, score, about: dict | None = None,
              grid: list[dict] | None = None) -> tuple[list[dict], dict]:
    """Every method of ``grid`` (None: :func:`methods`) on ``base`` (restored after each), scored by
    ``score(model)`` (a dict with valid_ppl, valid_nll, valid_tokens and, for translation, bleu); ``data`` holds the
    calibration batches per seed, the unigram baseline and (translation) the copy baseline."""
    rows, extra = [], {}
    t0 = time.perf_counter()
    n_params = sum(p.numel() for p in base.parameters())
    rows.append(metric(CLAIM, "model_parameters", n_params, "params", model=name, **(about or {})))
    rows.append(metric(CLAIM, "unigram_ppl", data["unigram_ppl"], "perplexity", model=name,
                       **data.get("unigram_about", {})))
    if "copy_bleu" in data:
        rows.append(metric(CLAIM, "copy_bleu", data["copy_bleu"], "BLEU", model=name,
                           n=params["eval"]["test_sentences"]))
    seed0 = params["calibration"]["seeds"][0]
    thr = params["int8"]["threshold"]
    st = outlier_stats(base, data["calib"][seed0], thr, device)
    em = emergence(st, params["outliers"]["layers_min_pct"], params["outliers"]["seq_min_pct"])
    extra["outliers"] = em
    for i, s in st.items():
        rows.append(metric(CLAIM, "outlier_max_abs", s["max_abs"], "|x|", model=name, layer=i))
        rows.append(metric(CLAIM, "outlier_dims_ge_threshold", int((s["hits"] > 0).sum()), "dims", model=name,
                           layer=i, threshold=thr, d_model=em["d_model"]))
    rows.append(metric(CLAIM, "systematic_outlier_dims", len(em["dims"]), "dims", model=name, d_model=em["d_model"],
                       dims=",".join(map(str, em["dims"])), published_key="int8_max_outlier_dims_13b"))
    rows.append(metric(CLAIM, "outlier_layers_affected", em["layers_affected_pct"], "percent of layers", model=name,
                       kind="statistic",
                       n_params=n_params, published_key="int8_emergence_layers_affected"))
    rows.append(metric(CLAIM, "outlier_seq_affected", em["seq_affected_pct"], "percent of sequence positions",
                       kind="statistic",
                       model=name, n_params=n_params, published_key="int8_emergence_seq_dims_affected"))
    log.info("%s: %d params; outliers >= %.1f per layer %s, max |x| %s; systematic dims %s", name, n_params, thr,
             em["dims_ge_threshold_per_layer"], [round(v, 2) for v in em["max_abs_per_layer"]], em["dims"])

    def calibrate_with(seed):
        return lambda model: [model_forward(model, b.to(device)) for b in data["calib"][seed]]

    def heldout(model):
        return [model_forward(model, b.to(device)) for b in data.get("heldout", [])]

    fp_bytes = Q.stored_weight_bytes(base)
    losses: dict[str, list] = {}
    for m in methods(params) if grid is None else grid:
        tm = time.perf_counter()
        with Q.restored(base) as model:
            r, report, q, b = _one_method(model, name, m, params, calibrate_with, score,
                                          heldout if data.get("heldout") else None)
        rows += r
        losses.setdefault(m["method"], []).append((q["unit_nll"], q["unit_tokens"], q["unit"]))
        log.info("%s %s%s: ppl %.3f%s, weights %.3f x fp16 (%.1f s)", name, m["method"],
                 "" if m["seed"] is None else f" seed {m['seed']}", q["valid_ppl"],
                 f", BLEU {q['bleu']:.2f}" if "bleu" in q else "", b["bytes"] / b["fp16_bytes"],
                 time.perf_counter() - tm)
        rows.append(metric(CLAIM, "method_seconds", time.perf_counter() - tm, "s", **_sweep(name, m)))
    rows += paired_rows(name, losses)
    extra["fp32_losses"] = losses["fp32"][0]
    rows.append(metric(CLAIM, "weight_bytes_fp32", fp_bytes["bytes"], "bytes", model=name))
    rows.append(metric(CLAIM, "model_seconds", time.perf_counter() - t0, "s", model=name))
    return rows, extra


OUTLIER_MODEL = "lm_outliers"


def run_outlier_copy(t, params: dict, device, data: dict, fp32_losses: tuple) -> tuple[list[dict], dict]:
    """fp32 and the methods of :func:`copy_methods` on the LM's function-preserving copy with outlier features
    (repro.quant.outliers.with_outliers, ``outlier_copy``), as model ``lm_outliers``, on the first
    ``outlier_copy.sentences`` scored sentences (null: all). Also the copy's fp32 against the LM's own fp32 on the
    same sentences: ``outlier_copy_fp32_change``, the largest per-sentence change of the NLL per token (the copy
    computes the same function: float rounding only)."""
    oc = params["outlier_copy"]
    twin, dims = Q.with_outliers(t.model, int(oc["dims"]), float(oc["scale"]))
    sub = dict(data)
    n = oc.get("sentences")
    if n:
        sub["valid"] = _first_sentences(data, int(n))
    grid = copy_methods(params)
    score = lambda m: evaluate(t, m, "lm", sub, params, device)  # noqa: E731
    rows, extra = run_model(twin, OUTLIER_MODEL, params, device, sub, score,
                            dict(source="lm", outlier_dims=",".join(map(str, dims)), scale=float(oc["scale"])),
                            grid=grid)
    mine, theirs = extra["fp32_losses"], fp32_losses
    k = len(mine[0])
    change = np.abs(mine[0] - theirs[0][:k]) / np.maximum(mine[1], 1)
    rows.append(metric(CLAIM, "outlier_copy_fp32_change", float(change.max()), "nats/token", kind="statistic",
                       model=OUTLIER_MODEL, n=k, dims=",".join(map(str, dims)), scale=float(oc["scale"])))
    return rows, extra


def copy_methods(params: dict) -> list[dict]:
    """The methods measured on the outlier copy: fp32, and of :func:`methods` the families in
    ``outlier_copy.methods`` (int8: LLM.int8()'s comparison; rtn, gptq: GPTQ against RTN where RTN's grid meets
    weight columns ``scale`` times smaller than the rest), RTN and GPTQ at the group settings of
    ``outlier_copy.group_sizes`` (null: every one of rtn/gptq.group_sizes), RTN only at GPTQ's bit widths when
    GPTQ runs there (the copy's RTN is the comparison's baseline)."""
    oc = params["outlier_copy"]
    fams, groups = set(oc.get("methods") or ["int8"]), oc.get("group_sizes")
    missing = [g for g in groups or [] for f in ("rtn", "gptq") if f in fams and g not in params[f]["group_sizes"]]
    if missing:
        raise QuantizationError(f"quantization.outlier_copy.group_sizes: {sorted(set(missing), key=str)} not in "
                                "rtn.group_sizes / gptq.group_sizes (the copy measures a subset of their settings)")
    return [m for m in methods(params) if m["family"] == "fp32" or m["family"] in fams and (
        m["family"] == "int8" or (groups is None or m["group_size"] in groups) and (
            m["family"] == "gptq" or "gptq" not in fams or m["bits"] in params["gptq"]["bits"]))]


def _first_sentences(data: dict, n: int) -> list:
    """Batches of the first ``n`` scored sentences (:func:`load_data`'s, in corpus order, as the LM's losses are)."""
    scored = data["scored"]
    if np.any(np.diff(np.asarray(scored.index)) <= 0):
        raise QuantizationError("quantization.outlier_copy.sentences: the scored sentences are not in corpus order")
    return valid_batches(_subset(scored, range(min(n, len(scored)))), data["max_tokens"])


def _sweep(name: str, m: dict) -> dict:
    sw = dict(model=name, method=m["method"], family=m["family"], bits=m["bits"], group_size=m["group_size"])
    if m["seed"] is not None:
        sw["calibration_seed"] = m["seed"]
    return sw


def _one_method(model, name: str, m: dict, params: dict, calibrate_with, score, heldout=None):
    """Quantize ``model`` in place with method ``m``, score it, and return (rows, GPTQ report, scores, bytes)."""
    rows = []
    report = apply_method(model, m, params, calibrate_with(m["seed"]) if m["seed"] is not None else None, heldout)
    q = score(model)
    sw = _sweep(name, m)
    rows.append(metric(CLAIM, "valid_ppl", q["valid_ppl"], "perplexity", n=q["valid_tokens"],
                       published_key={"fp32": "int8_c4_ppl_13b_fp32", "int8_absmax": "int8_c4_ppl_13b_absmax",
                                      "llm_int8": "int8_c4_ppl_13b_llm_int8"}.get(m["method"]), **sw))
    rows.append(metric(CLAIM, "valid_nll", q["valid_nll"], "nats/token", n=q["valid_tokens"], **sw))
    if "bleu" in q:
        rows.append(metric(CLAIM, "bleu", q["bleu"], "BLEU", n=params["eval"]["test_sentences"], **sw))
    b = Q.stored_weight_bytes(model)
    rows.append(metric(CLAIM, "weight_bytes", b["bytes"], "bytes", **sw, fp16_bytes=b["fp16_bytes"],
                       params=b["params"]))
    rows.append(metric(CLAIM, "weight_bytes_vs_fp16", b["bytes"] / b["fp16_bytes"], "ratio", kind="ratio_memory",
                       **sw))
    if m["family"] != "fp32":
        rows.append(metric(CLAIM, "weight_memory_reduction", 100 * (1 - b["bytes"] / b["fp16_bytes"]),
                           "percent vs 16-bit", kind="ratio_memory",
                           published_key="int8_memory_reduction" if m["method"] == "llm_int8" else None, **sw))
    if m["family"] == "int8":
        mods = [x for x in Q.block_linears(model).values() if isinstance(x, Q.Int8Linear)]
        xv = sum(x.stats["x_values"] for x in mods)
        x16 = sum(x.stats["x_values_16bit"] for x in mods)
        wv = sum(x.stats["calls"] * x.in_features * x.out_features for x in mods)
        w16 = sum(x.stats["w_values_16bit"] for x in mods)
        dims = sorted({(n, d) for n, x in Q.block_linears(model).items() for d in x.stats["outlier_dims"]})
        rows.append(metric(CLAIM, "values_8bit_pct", 100.0 * (1 - (x16 + w16) / max(xv + wv, 1)), "percent",
                           kind="statistic", published_key="int8_fraction_values_8bit" if m["method"] == "llm_int8" else None,
                           x_values_16bit=x16, w_values_16bit=w16, **sw))
        rows.append(metric(CLAIM, "decomposed_dims", len(dims), "(layer, dim) pairs", **sw))
    for lname, r in report.items():
        for split, sfx, tok in (("calibration", "", "tokens"), ("held_out", "_heldout", "tokens_heldout")):
            if f"rel_error{sfx}" not in r:
                continue
            for quantizer, key in (("gptq", f"rel_error{sfx}"), ("rtn", f"rel_error_rtn{sfx}")):
                rows.append(metric(CLAIM, "layer_rel_error", r[key], "||WX-QX||^2/||WX||^2", layer=lname,
                                   quantizer=quantizer, split=split, tokens=r[tok], **sw))
    return rows, report, q, b


def run(params: dict, scale: str, out) -> tuple[list[dict], dict]:
    """Quantize the shared models with every method, score them and measure outliers: (rows, context); the judge is
    repro/judges/quantization.py."""
    out = Path(out)
    device = params["device"]
    if device == "cuda" and not torch.cuda.is_available():
        raise QuantizationError("quantization.device: cuda requested but no GPU is available")
    paths = resolve_models(params, out)
    rows, extra = [], {}
    for name in paths:
        if params.get("hf_model"):
            model, tok, info = load_hf(paths[name], device)
            data = text_data(tok, params, model.cfg.max_seq_len)
            rows.append(metric(CLAIM, "text_tokens", data["text"]["scored_tokens"], "tokens", model=name,
                               **{k: v for k, v in data["text"].items() if k != "scored_tokens"}))
            score = lambda m, data=data: window_ppl(m, data, device)  # noqa: E731
            r, e = run_model(model, name, params, device, data, score,
                             dict(hf_model=str(paths[name]), family=info["family"]))
        else:
            t = _load(paths, name, device)
            data = load_data(t, name, params)
            r, e = run_model(t.model, name, params, device, data,
                             lambda m, t=t, name=name, data=data: evaluate(t, m, name, data, params, device))
            if name == "lm" and params.get("outlier_copy", {}).get("dims"):
                rows += r
                extra[name] = e
                r, e = run_outlier_copy(t, params, device, data, e["fp32_losses"])
                name = OUTLIER_MODEL
        rows += r
        extra[name] = e
    tm = params["timing"]
    if tm["reps"]:
        la0 = os.getloadavg()[0]
        res = time_int8_matmul(tuple(tm["shape"]), tm["reps"], device)
        la1 = os.getloadavg()[0]
        if res:
            for k, v in res.items():
                rows.append(metric(CLAIM, "matmul_seconds", v, "s", kernel=k, shape="x".join(map(str, tm["shape"])),
                                   loadavg_before=la0, loadavg_after=la1))
    atomic_write_json(out / "outliers.json", {k: v["outliers"] for k, v in extra.items()})
    return rows, {"device": str(params["device"])}


if __name__ == "__main__":
    from repro.claims._cli import main

    raise SystemExit(main(CLAIM, run))
