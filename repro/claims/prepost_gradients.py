"""C2 prepost_gradients: Post-LN vs Pre-LN gradients at initialization (Xiong et al., ICML 2020, arXiv 2002.04745).

Reproduces, with the suite's shared block (repro.model) at initialization:

- Fig 3(a,b): Frobenius norm of the gradient of every weight matrix, per layer, of a 6+6 encoder-decoder on a real
  translation batch, Post-LN vs Pre-LN (and the RMSNorm / ScaleNorm variants), over several seeds. The FFN weights'
  log-gradient-norm is fitted against the layer index: Post-LN grows toward the output, Pre-LN stays flat.
- Fig 3(c,d): gradient norm of W^2 of the final decoder FFN for L-L models (6-6 ... 14-14): Post-LN flat, Pre-LN
  falling. The depth exponent of the Pre/Post ratio (log-log fit per seed) is compared with Theorem 1's -0.5.
- Theorem 1 in its own simplified setting (Section 3.3: one head, W^Q = W^K = 0 so attention is uniform, every
  weight d x d, Xavier init): the same depth exponent measured on a stack of blocks with a cross-entropy readout.
- Lemma 2 by Monte Carlo in that setting: Post-LN E||x^{post,5}||^2 = 3d/2 per layer; Pre-LN
  (1 + l/2) d <= E||x_l||^2 <= (1 + 3l/2) d after l layers (input with E||x||^2 = d).

Initialization: ``init: fairseq`` (the paper's code base) sets every attention projection and FFN weight to Xavier
uniform (q/k/v with gain 1/sqrt(2), as fairseq's MultiheadAttention), biases to 0 and token embeddings to
N(0, d^-1/2) with a zero padding row; ``xavier`` uses gain 1 everywhere; ``pytorch`` keeps torch's default Linear init.
The init used is recorded in every row. This module only measures: the verdict rules are in
repro/judges/prepost_gradients.py, their thresholds in the judge: section of config/claims/prepost_gradients.yaml.
"""
from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from repro.config import resolve_device
from repro.data.batching import encode_corpus, token_batches
from repro.data.corpus import load_corpus
from repro.data.fairseq_io import load_data_bin
from repro.data.tokenizer import train_sentencepiece
from repro.io import atomic_write_json, metric
from repro.model import BlockConfig, EncoderDecoder, ModelConfig, make_norm
from repro.model.block import Block
from repro.model.init import init_weights
from repro.stats import fit_slope, mean_std
from repro.rows import Rows
from repro.vocabulary.prepost_gradients import CLAIM, FFN_MATRICES

log = logging.getLogger("repro.prepost_gradients")


# ------------------------------------------------------------------------------------------------ data
def real_batches(data: dict, out: Path) -> tuple[list, int, int]:
    """The first ``n_batches`` token batches (about ``max_tokens`` padded tokens each) of the training split.

    From a fairseq data-bin when ``data.data_bin`` is set, else from ``data.corpus`` with a sentencepiece model
    (``data.vocab_size``) trained into ``out/_work``. Returns (batches, vocabulary size, pad id)."""
    if data.get("data_bin"):
        path = Path(data["data_bin"])
        if not path.is_dir():
            raise FileNotFoundError(f"data.data_bin: {path} is not a directory")
        db = load_data_bin(path, data["direction"], splits=("train",))
        encoded = db.encoded("train", max_len=data["max_len"])
        if len(db.src_dict) != len(db.tgt_dict):
            raise ValueError(f"data.data_bin: {path} has separate dictionaries; a joined dictionary is needed "
                             "for the shared embeddings")
        vocab, pad = len(db.tgt_dict), db.tgt_dict.pad_index
    else:
        corpus = load_corpus(data["corpus"], data["direction"])
        pairs = corpus.train
        texts = [s for pair in pairs[: data["tokenizer_sentences"]] for s in pair]
        tok = train_sentencepiece(texts, out / "_work" / "spm", data["vocab_size"])  # _work/ is git-ignored
        encoded = encode_corpus(pairs[: data["encode_sentences"]], tok, data["max_len"])
        vocab, pad = tok.vocab_size, tok.pad_id
    it = token_batches(encoded, data["max_tokens"], shuffle=True, seed=data["batch_seed"])
    batches = [b for _, b in zip(range(data["n_batches"]), it)]
    log.info("real batches: %s, vocabulary %d, %s", len(batches), vocab,
             ", ".join(f"{b.src.shape[0]} pairs / {b.ntokens} target tokens" for b in batches))
    return batches, vocab, pad


# ------------------------------------------------------------------------------------------------ full model
def build_model(p: dict, norm: str, position: str, layers: int, vocab: int, pad: int, seed: int) -> EncoderDecoder:
    m = p["model"]
    block = BlockConfig(d_model=m["d_model"], n_heads=m["n_heads"], d_ff=m["d_ff"], norm=norm, norm_position=position,
                        attention=m["attention"], ffn="relu", norm_eps=m["norm_eps"])
    cfg = ModelConfig(block=block, vocab_size=vocab, n_encoder_layers=layers, n_decoder_layers=layers,
                      max_seq_len=p["data"]["max_len"] + 1, positional="sinusoidal", embed_scale=True,
                      tie_output=True, share_encoder_decoder_embeddings=True, pad_id=pad)
    torch.manual_seed(seed)
    model = EncoderDecoder(cfg)
    init_weights(model, p["init"])
    return model


def weight_grad_norms(model: EncoderDecoder, batches, label_smoothing: float, pad: int, device,
                      only: set[str] | None = None) -> dict[str, float]:
    """Frobenius norm of the batch-averaged gradient of every block weight matrix, keyed "encoder.3.ffn.fc2";
    with ``only``, of those keys alone: no other parameter requires a gradient, so backpropagation stops below the
    lowest of them (the depth sweep's final decoder W2: ~0.45x the time, the same bits, measured at 8-8 and 14-14)."""
    model.to(device).train()
    model.zero_grad(set_to_none=True)
    named = _block_weights(model)
    if only is not None:
        if not only <= named.keys():
            raise KeyError(f"weight_grad_norms: no block weight {sorted(only - named.keys())[0]!r}")
        keep = {id(named[k]) for k in only}
        for prm in model.parameters():
            prm.requires_grad_(id(prm) in keep)
    for b in batches:
        b = b.to(device)
        logits = model(b.src, b.tgt_in, b.src_pad_mask, b.tgt_pad_mask)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), b.tgt_out.flatten(), ignore_index=pad,
                               label_smoothing=label_smoothing)
        (loss / len(batches)).backward()
    return {key: prm.grad.norm().item() for key, prm in named.items() if prm.grad is not None}


def _block_weights(model: EncoderDecoder) -> dict[str, torch.Tensor]:
    """Every 2-D parameter of the encoder's and decoder's blocks, keyed "decoder.6.ffn.fc2" (layers from 1)."""
    out = {}
    for stack_name, stack in (("encoder", model.encoder), ("decoder", model.decoder)):
        for i, blk in enumerate(stack.layers.layers):
            for name, prm in blk.named_parameters():
                if prm.dim() == 2:
                    out[f"{stack_name}.{i + 1}.{name.removesuffix('.weight')}"] = prm
    return out


def model_grads(p: dict, norm: str, position: str, L: int, seed: int, batches, vocab: int, pad: int, device,
                cache: dict, only: set[str] | None = None) -> dict[str, float]:
    """Weight-gradient norms of one L-L model at init (``only``: those keys, see :func:`weight_grad_norms`); the
    depth sweep reuses the per-layer sweep's identical runs."""
    key = (norm, position, L, seed)
    have, complete = cache.get(key, ({}, False))
    if not complete and (only is None or not only <= have.keys()):
        model = build_model(p, norm, position, L, vocab, pad, seed)
        have = {**have, **weight_grad_norms(model, batches, p["label_smoothing"], pad, device, only)}
        cache[key] = (have, only is None)
    return have


def per_layer_sweep(p: dict, batches, vocab: int, pad: int, device, cache: dict | None = None) -> list[dict]:
    """Fig 3(a,b): every weight matrix's gradient norm per layer, each norm kind x position x seed."""
    rows, L, cache = [], p["per_layer_depth"], {} if cache is None else cache
    for norm in p["norms"]:
        for position in ("post", "pre"):
            for seed in p["seeds"]:
                g = model_grads(p, norm, position, L, seed, batches, vocab, pad, device, cache)
                for key, val in g.items():
                    stack, layer, matrix = key.split(".", 2)
                    rows.append(metric(CLAIM, "weight_grad_norm", val, "frobenius", norm=norm, position=position,
                                       stack=stack, layer=int(layer), matrix=matrix, seed=seed, depth=L,
                                       init=p["init"]))
                log.info("per-layer %s %s-%s seed %d: decoder FFN W2 grad norms %s", f"{L}-{L}", norm, position, seed,
                         " ".join(f"{g[f'decoder.{i}.ffn.fc2']:.3g}" for i in range(1, L + 1)))
    return rows


def layer_slopes(rows: list[dict], p: dict) -> list[dict]:
    """Slope of log(FFN gradient norm) against the layer index, per seed; mean with the seeds' std."""
    out = []
    grads = Rows(rows).metric("weight_grad_norm").filter(lambda r: r["sweep"]["matrix"] in FFN_MATRICES)
    keys = sorted({(r["sweep"]["norm"], r["sweep"]["position"], r["sweep"]["stack"], r["sweep"]["matrix"])
                   for r in grads})
    for norm, position, stack, matrix in keys:
        sel = grads.where(norm=norm, position=position, stack=stack, matrix=matrix)
        slopes = []
        for seed in sorted(sel.sweep("seed")):
            pts = sorted((r["sweep"]["layer"], r["value"]) for r in sel.where(seed=seed))
            slopes.append(fit_slope([a for a, _ in pts], [math.log(b) for _, b in pts]))
        m, s = mean_std(slopes)
        out.append(metric(CLAIM, "ffn_grad_log_slope_per_layer", m, "d ln(norm) / d layer", spread=s, n=len(slopes),
                          published_key="fig3_per_layer_grad_trend" if norm == "layernorm" else None,
                          norm=norm, position=position, stack=stack, matrix=matrix, init=p["init"]))
    return out


def depth_sweep(p: dict, batches, vocab: int, pad: int, device, cache: dict | None = None) -> list[dict]:
    """Fig 3(c,d): gradient norm of W^2 in the final decoder FFN for L-L models."""
    rows, cache = [], {} if cache is None else cache
    for norm in p["depth_norms"]:
        for L in p["depths"]:
            for position in ("post", "pre"):
                vals = []
                for seed in p["seeds"]:
                    w2 = f"decoder.{L}.ffn.fc2"
                    vals.append(model_grads(p, norm, position, L, seed, batches, vocab, pad, device, cache, {w2})[w2])
                    rows.append(metric(CLAIM, "final_w2_grad_norm", vals[-1], "frobenius", norm=norm,
                                       position=position, depth=L, seed=seed, init=p["init"]))
                m, s = mean_std(vals)
                key = "fig3_postln_final_w2_grad_norm" if (position, norm) == ("post", "layernorm") else None
                rows.append(metric(CLAIM, "final_w2_grad_norm_mean", m, "frobenius", spread=s, n=len(vals),
                                   published_key=key, norm=norm, position=position, depth=L, init=p["init"]))
                log.info("depth sweep %s %d-%d %s: final W2 grad norm %.4g +- %.2g", norm, L, L, position, m, s)
    return rows + depth_exponents(rows, "final_w2_grad_norm", "fig3", p["init"])


def depth_exponents(rows: list[dict], name: str, prefix: str, init: str) -> list[dict]:
    """Per seed, the slope of ln(norm) vs ln(L) for Post-LN, Pre-LN and the Pre/Post ratio; mean +- std."""
    out = []
    per = Rows(rows).metric(name)
    for norm in sorted(per.sweep("norm")):
        exps = {"post": [], "pre": [], "ratio": []}
        for seed in sorted(per.sweep("seed")):
            post, pre = ({r["sweep"]["depth"]: r["value"] for r in per.where(norm=norm, position=pos, seed=seed)}
                         for pos in ("post", "pre"))
            depths = sorted(post)
            lx = [math.log(L) for L in depths]
            exps["post"].append(fit_slope(lx, [math.log(post[L]) for L in depths]))
            exps["pre"].append(fit_slope(lx, [math.log(pre[L]) for L in depths]))
            exps["ratio"].append(fit_slope(lx, [math.log(pre[L] / post[L]) for L in depths]))
        for kind, vals in exps.items():
            m, s = mean_std(vals)
            key = None
            if norm == "layernorm":
                key = {"ratio": "thm1_preln_over_postln_depth_exponent",
                       "pre": "fig3_preln_final_w2_grad_trend" if prefix == "fig3" else None}.get(kind)
            out.append(metric(CLAIM, f"{prefix}_depth_exponent_{kind}", m, "d ln(norm) / d ln(L)", spread=s,
                              n=len(vals), published_key=key, norm=norm, init=init))
    return out


# ------------------------------------------------------------------------------------------------ simplified setting
def simplified_stack(d: int, layers: int, position: str, seed: int, device) -> tuple[nn.ModuleList, nn.Module | None]:
    """Xiong et al. Section 3.3: one head, W^Q = W^K = 0 (uniform attention), d x d FFN, no biases, Xavier init."""
    cfg = BlockConfig(d_model=d, n_heads=1, d_ff=d, norm="layernorm", norm_position=position, attention="math",
                      ffn="relu", bias=False)
    torch.manual_seed(seed)
    blocks = nn.ModuleList(Block(cfg) for _ in range(layers))
    init_weights(blocks, "xavier")
    with torch.no_grad():
        for b in blocks:
            b.self_attn.q_proj.weight.zero_()
            b.self_attn.k_proj.weight.zero_()
    final = make_norm("layernorm", d) if position == "pre" else None
    return blocks.to(device), None if final is None else final.to(device)


def lemma2(p: dict, device) -> list[dict]:
    """Monte Carlo of Lemma 2: E||x||^2 / d per layer, Post-LN (x^{post,5}) and Pre-LN (x_l after l layers)."""
    q, rows = p["lemma2"], []
    d, L, n = q["d_model"], q["layers"], q["n_tokens"]
    for position in ("post", "pre"):
        per_sample = []  # (samples, L): mean over tokens of ||x||^2 / d
        for s in range(q["samples"]):
            blocks, _ = simplified_stack(d, L, position, 10_000 + s, device)
            captured = []
            if position == "post":  # x^{post,5} is the input of the block's second (FFN) norm
                hooks = [b.norm_ffn.register_forward_pre_hook(lambda m, a: captured.append(a[0])) for b in blocks]
            gen = torch.Generator(device="cpu").manual_seed(20_000 + s)
            x = torch.randn(q["batch"], n, d, generator=gen).to(device)  # E||x_i||^2 = d
            with torch.no_grad():
                for b in blocks:
                    x = b(x)
                    if position == "pre":
                        captured.append(x)
            if position == "post":
                for h in hooks:
                    h.remove()
            per_sample.append([c.pow(2).sum(-1).mean().item() / d for c in captured])
        arr = np.asarray(per_sample)
        for l in range(1, L + 1):
            v = arr[:, l - 1]
            rows.append(metric(CLAIM, f"lemma2_{position}ln_sq_norm_over_d", float(v.mean()), "x d",
                               spread=float(v.std(ddof=1) / math.sqrt(len(v))), n=len(v),
                               published_key="lemma2_postln_sq_norm_over_d" if position == "post" else None,
                               layer=l, d_model=d))
        log.info("Lemma 2 %s-LN: E||x||^2/d per layer %s", position, " ".join(f"{v:.3f}" for v in arr.mean(0)))
        if position == "pre":  # least-squares slope in l through the exact intercept 1 (E||x_0||^2 = d)
            ls = np.arange(1, L + 1)
            slope = float(((arr.mean(0) - 1.0) * ls).sum() / (ls * ls).sum())
            for key in ("lemma2_preln_sq_norm_lower", "lemma2_preln_sq_norm_upper"):
                rows.append(metric(CLAIM, "lemma2_preln_sq_norm_slope", slope, "x d per layer", published_key=key,
                                   published_index=1, bound=key.rsplit("_", 1)[-1], d_model=d))
    return rows


def theorem1(p: dict, device) -> list[dict]:
    """Final-layer W^2 gradient norm vs depth in the simplified setting, Post-LN vs Pre-LN (+ final LN)."""
    q, rows = p["theorem1"], []
    d, n = q["d_model"], q["n_tokens"]
    for L in q["depths"]:
        for position in ("post", "pre"):
            for seed in q["seeds"]:
                blocks, final = simplified_stack(d, L, position, seed, device)
                gen = torch.Generator(device="cpu").manual_seed(30_000 + seed)
                x = torch.randn(q["batch"], n, d, generator=gen).to(device)
                readout = torch.empty(q["classes"], d)
                nn.init.xavier_uniform_(readout, generator=gen)
                labels = torch.randint(0, q["classes"], (q["batch"], n), generator=gen).to(device)
                for b in blocks:
                    x = b(x)
                if final is not None:
                    x = final(x)
                loss = F.cross_entropy((x @ readout.to(device).t()).flatten(0, 1), labels.flatten())
                loss.backward()
                g = blocks[-1].ffn.fc2.weight.grad.norm().item()
                rows.append(metric(CLAIM, "thm1_final_w2_grad_norm", g, "frobenius", norm="layernorm",
                                   position=position, depth=L, seed=seed, d_model=d, init="xavier"))
        log.info("Theorem 1 setting depth %d: post %.4g, pre %.4g", L,
                 *[np.mean(Rows(rows).where(depth=L, position=pos).values()) for pos in ("post", "pre")])
    return rows + depth_exponents(rows, "thm1_final_w2_grad_norm", "thm1", "xavier")


def run(params: dict, scale: str, out) -> tuple[list[dict], dict]:
    """Per-layer and final-layer gradient norms at init (real batch), Theorem 1 exponent and Lemma 2 norms."""
    out = Path(out)
    device = resolve_device(params["device"], "prepost_gradients.device")
    batches, vocab, pad = real_batches(params["data"], out)
    cache: dict = {}  # (norm, position, depth, seed) -> (gradient norms, all of them?), shared by the two sweeps
    rows = per_layer_sweep(params, batches, vocab, pad, device, cache)
    rows += layer_slopes(rows, params)
    rows += depth_sweep(params, batches, vocab, pad, device, cache)
    rows += theorem1(params, device)
    rows += lemma2(params, device)
    atomic_write_json(out / "setup.json", {"device": str(device), "init": params["init"], "vocab": vocab,
                                           "batches": [{"pairs": b.src.shape[0], "target_tokens": b.ntokens,
                                                        "padded_tokens": b.num_tokens} for b in batches]})
    return rows, {"device": str(device)}


if __name__ == "__main__":
    from repro.claims._cli import main

    raise SystemExit(main(CLAIM, run))
