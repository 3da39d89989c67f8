"""Training and decoding throughput of the suite's translation model against plain PyTorch.

``python -m repro.peers.throughput [--scale default] [--repeats 5] [--train-steps 2] [--sentences 256]
[--results results]``

In one process, alternating which goes first on every repeat, it times

* training: the shared encoder-decoder (repro.model, built by ``repro.train.pipeline.build_model``) trained by the
  suite's loop (``repro.train.loop.train``) vs a plain PyTorch loop on ``torch.nn.Transformer`` of the same sizes
  (same d_model/heads/FFN/layers, pre- or post-norm, dropout placement, tied sqrt(d)-scaled embeddings with
  sinusoidal positions and the tied output projection), the same label-smoothed loss, Adam, clipping and learning
  rate schedule, on the same token batches (``repro.data.batch_indices`` of the first training epoch);
* decoding: the suite's batched greedy and beam search (``repro.train.decode.decode_ids``) vs a plain PyTorch
  greedy / beam loop on the same ``torch.nn.Transformer`` with incremental state (keys/values of every decoder
  layer cached, cross-attention keys/values computed once; the encoder is ``nn.TransformerEncoder``, whose
  inference fast path runs). The reference gets the suite model's weights, so both decode the same tokens (the
  test checks that); the reference runs every row to the end of its batch, the suite drops finished rows, and the
  suite's beams of one sentence share its encoder output in cross-attention (not repeated or reordered per beam).
  256 test sentences by default (the BLEU evaluation decodes the whole test set in batches of ``eval.max_tokens``):
  16 sentences decode in ~45 ms, too short to time reliably on a shared CPU (measured ratios 0.97-1.24 between
  two runs of the same code).

The workload is the ``translation`` section of config/claims/translation.yaml at ``--scale`` (model, batch size
``training.max_tokens``, optimizer, schedule, ``eval`` decoding settings, threads). Decoding uses the model trained
by the workflow when ``<results>/<hw>/<scale>/_models/translation/checkpoint_last.pt`` exists (``--results``, default
``results``), otherwise the freshly initialised weights (a random model rarely emits eos, so every sentence runs to
its length cap).

Reported (``<results>/<hw>/<scale>/_bench/throughput/``: metrics.csv, config.json, fingerprint.json, verdict.json,
summary.json; ``<results>/../reports/<hw>/<scale>/throughput.md``): target tokens per second of each side (training:
non-pad target tokens; decoding: generated tokens with eos) as medians with the interquartile range over repeats, the
suite/reference ratio per repeat (median, IQR), the padding fraction of the training batches and the machine load.
Only ratios are comparable across runs on a shared CPU; absolute times are for this machine and moment.
``python -m repro.report publish`` copies them into a reference (``--peers-only``: into an existing one).
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import os
import statistics
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from repro import config
from repro.artefacts import MODELS_DIR, TOKENIZER_NAME, artefact_file
from repro.bench.fingerprint import fingerprint
from repro.data.batching import batch_indices, collate
from repro.io import atomic_write_json, atomic_write_text, metric, write_results
from repro.model.models import sinusoidal_table
from repro.train.decode import DecodeConfig, _length_caps, _src_tensor, decode_ids, length_batches
from repro.train.loop import RunConfig, configs_from_params, load_checkpoint, lr_at, train
from repro.train.pipeline import build_model, encode_splits, load_data, load_tokenizer, resolve_tokenizer
from repro.train.prepare import prepare
from repro.verdicts import verdict

log = logging.getLogger("repro.peers.throughput")
CLAIM = "throughput"


# ----------------------------------------------------------------------------- the plain PyTorch reference
class ReferenceTransformer(nn.Module):
    """``torch.nn.Transformer`` (batch_first) with shared, tied, sqrt(d)-scaled token embeddings and sinusoidal
    positions, sized and regularised like the suite's ``ModelConfig`` ``cfg`` (relu FFN, layernorm, no bias-free or
    GQA variants): dropout on embeddings and residual branches, ``attn_dropout`` on attention probabilities, no
    dropout after the FFN activation (the suite's ``act_dropout`` must be 0)."""

    def __init__(self, cfg):
        super().__init__()
        b = cfg.block
        if b.ffn != "relu" or b.norm != "layernorm" or b.kv_heads != b.n_heads or b.rope or b.act_dropout:
            raise ValueError("the torch.nn.Transformer reference covers relu FFN, layernorm, full multi-head "
                             "attention, no rope and no activation dropout")
        self.cfg, self.d, self.pad_id = cfg, b.d_model, cfg.pad_id
        self.embed = nn.Embedding(cfg.vocab_size, b.d_model, padding_idx=cfg.pad_id)
        self.register_buffer("pe", sinusoidal_table(cfg.max_seq_len, b.d_model), persistent=False)
        self.drop = nn.Dropout(b.dropout)
        with warnings.catch_warnings():  # "enable_nested_tensor is True, but ... norm_first": torch's own note
            warnings.simplefilter("ignore", UserWarning)
            self.transformer = nn.Transformer(b.d_model, b.n_heads, cfg.n_encoder_layers, cfg.n_decoder_layers, b.d_ff,
                                              b.dropout, activation="relu", batch_first=True,
                                              norm_first=b.norm_position == "pre", layer_norm_eps=b.norm_eps)
        for layer in [*self.transformer.encoder.layers, *self.transformer.decoder.layers]:
            layer.dropout = nn.Identity()  # torch puts `dropout` after the FFN activation too; the suite does not
            for attn in (layer.self_attn, getattr(layer, "multihead_attn", None)):
                if attn is not None:
                    attn.dropout = b.attn_dropout
        if not cfg.use_final_norm:
            self.transformer.encoder.norm = None
            self.transformer.decoder.norm = None
        self.norm_first = b.norm_position == "pre"

    def embed_tokens(self, tokens, offset: int = 0):
        T = tokens.shape[1]
        return self.drop(self.embed(tokens) * math.sqrt(self.d) + self.pe[offset:offset + T])

    def encode(self, src, src_pad_mask):
        return self.transformer.encoder(self.embed_tokens(src), src_key_padding_mask=src_pad_mask)

    def forward(self, src, tgt_in, src_pad_mask, tgt_pad_mask):
        T = tgt_in.shape[1]
        causal = torch.ones(T, T, dtype=torch.bool, device=src.device).triu(1)  # True = masked, like the pad masks
        h = self.transformer.decoder(self.embed_tokens(tgt_in), self.encode(src, src_pad_mask), tgt_mask=causal,
                                     tgt_key_padding_mask=tgt_pad_mask, memory_key_padding_mask=src_pad_mask,
                                     tgt_is_causal=True)
        return h @ self.embed.weight.t()


@torch.no_grad()
def copy_suite_weights(ref: ReferenceTransformer, model) -> None:
    """Load the suite's ``EncoderDecoder`` weights into the reference (q/k/v stacked into ``in_proj``)."""
    ref.embed.weight.copy_(model.encoder.embed.token.weight)

    def attn(dst, src):
        dst.in_proj_weight.copy_(torch.cat([src.q_proj.weight, src.k_proj.weight, src.v_proj.weight]))
        dst.in_proj_bias.copy_(torch.cat([src.q_proj.bias, src.k_proj.bias, src.v_proj.bias]))
        dst.out_proj.load_state_dict(src.out_proj.state_dict())

    def ffn_norms(dst, blk, norms):
        dst.linear1.load_state_dict(blk.ffn.fc1.state_dict())
        dst.linear2.load_state_dict(blk.ffn.fc2.state_dict())
        for d, s in norms:
            d.load_state_dict(s.state_dict())

    for dst, blk in zip(ref.transformer.encoder.layers, model.encoder.layers.layers):
        attn(dst.self_attn, blk.self_attn)
        ffn_norms(dst, blk, [(dst.norm1, blk.norm_self), (dst.norm2, blk.norm_ffn)])
    for dst, blk in zip(ref.transformer.decoder.layers, model.decoder.layers.layers):
        attn(dst.self_attn, blk.self_attn)
        attn(dst.multihead_attn, blk.cross_attn)
        ffn_norms(dst, blk, [(dst.norm1, blk.norm_self), (dst.norm2, blk.norm_cross), (dst.norm3, blk.norm_ffn)])
    for dst, src in ((ref.transformer.encoder.norm, model.encoder.final_norm),
                     (ref.transformer.decoder.norm, model.decoder.final_norm)):
        if dst is not None:
            dst.load_state_dict(src.state_dict())


def reference_train(ref: ReferenceTransformer, batches, opt_c, sch_c, steps: int) -> int:
    """``steps`` updates of the plain loop (a fresh Adam, the suite's schedule); returns the target tokens."""
    ref.train()
    params = list(ref.parameters())
    optimizer = torch.optim.Adam(params, lr=opt_c.lr, betas=opt_c.betas, eps=opt_c.eps)
    tokens = 0
    for step, b in zip(range(steps), batches):
        for g in optimizer.param_groups:
            g["lr"] = lr_at(step, opt_c.lr, sch_c)
        ntok = int((~b.tgt_pad_mask).sum())
        logits = ref(b.src, b.tgt_in, b.src_pad_mask, b.tgt_pad_mask)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), b.tgt_out.reshape(-1), ignore_index=ref.pad_id,
                               label_smoothing=opt_c.label_smoothing, reduction="sum") / ntok
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if opt_c.clip_norm > 0:
            nn.utils.clip_grad_norm_(params, opt_c.clip_norm)
        optimizer.step()
        tokens += ntok
    return tokens


class _IncrementalDecoder:
    """Step-by-step decoder over ``ref``'s ``nn.TransformerDecoder`` layers with cached keys/values."""

    def __init__(self, ref: ReferenceTransformer, memory, mem_pad_mask):
        self.ref, self.H = ref, ref.cfg.block.n_heads
        self.layers = ref.transformer.decoder.layers
        self.mem_mask = ~mem_pad_mask[:, None, None, :]  # True = attend
        d = ref.d
        self.cross = []
        for layer in self.layers:
            a = layer.multihead_attn
            k = F.linear(memory, a.in_proj_weight[d:2 * d], a.in_proj_bias[d:2 * d])
            v = F.linear(memory, a.in_proj_weight[2 * d:], a.in_proj_bias[2 * d:])
            self.cross.append((self._heads(k), self._heads(v)))
        self.self_kv: list = [None] * len(self.layers)

    def _heads(self, x):
        B, T, d = x.shape
        return x.view(B, T, self.H, d // self.H).transpose(1, 2)

    def _merge(self, x):
        B, H, T, dh = x.shape
        return x.transpose(1, 2).reshape(B, T, H * dh)

    def reorder(self, order):
        self.self_kv = [(k.index_select(0, order), v.index_select(0, order)) for k, v in self.self_kv]
        self.cross = [(k.index_select(0, order), v.index_select(0, order)) for k, v in self.cross]
        self.mem_mask = self.mem_mask.index_select(0, order)

    def _self_attn(self, i, layer, h):
        a = layer.self_attn
        q, k, v = (self._heads(t) for t in F.linear(h, a.in_proj_weight, a.in_proj_bias).chunk(3, -1))
        if self.self_kv[i] is not None:
            k, v = torch.cat([self.self_kv[i][0], k], 2), torch.cat([self.self_kv[i][1], v], 2)
        self.self_kv[i] = (k, v)
        return a.out_proj(self._merge(F.scaled_dot_product_attention(q, k, v)))

    def _cross_attn(self, i, layer, h):
        a, d = layer.multihead_attn, self.ref.d
        q = self._heads(F.linear(h, a.in_proj_weight[:d], a.in_proj_bias[:d]))
        k, v = self.cross[i]
        return a.out_proj(self._merge(F.scaled_dot_product_attention(q, k, v, attn_mask=self.mem_mask)))

    def step(self, tok, t: int):
        """Log-probabilities (N, V) of the next token after ``tok`` (N,) at position ``t``."""
        x = self.ref.embed_tokens(tok[:, None], offset=t)
        for i, layer in enumerate(self.layers):
            subs = ((layer.norm1, lambda h: self._self_attn(i, layer, h)),
                    (layer.norm2, lambda h: self._cross_attn(i, layer, h)),
                    (layer.norm3, lambda h: layer.linear2(F.relu(layer.linear1(h)))))
            for norm, fn in subs:
                x = x + fn(norm(x)) if self.ref.norm_first else norm(x + fn(x))
        if self.ref.transformer.decoder.norm is not None:
            x = self.ref.transformer.decoder.norm(x)
        return torch.log_softmax(x[:, -1] @ self.ref.embed.weight.t(), -1)


def _allowed(lp, t, caps, bos_id, eos_id, pad_id):
    """fairseq's token rules (as repro.train.decode): pad and a non-eos start token banned, eos banned at step 0,
    only eos at a row's length cap."""
    lp[:, pad_id] = -math.inf
    if bos_id != eos_id:
        lp[:, bos_id] = -math.inf
    if t == 0:
        lp[:, eos_id] = -math.inf
    at_cap = t >= caps
    eos_lp = lp[:, eos_id].clone()
    lp[at_cap] = -math.inf
    lp[at_cap, eos_id] = eos_lp[at_cap]
    return lp


@torch.inference_mode()
def reference_greedy(ref, src, src_pad_mask, bos_id, eos_id, pad_id, caps) -> list[list[int]]:
    """Plain greedy loop: every row runs until all rows have ended (finished rows emit pad)."""
    dec = _IncrementalDecoder(ref, ref.encode(src, src_pad_mask), src_pad_mask)
    B = src.shape[0]
    tok = torch.full((B,), bos_id, dtype=torch.long)
    done = torch.zeros(B, dtype=torch.bool)
    out = []
    for t in range(int(caps.max()) + 1):
        nxt = _allowed(dec.step(tok, t), t, caps, bos_id, eos_id, pad_id).argmax(-1)
        nxt = nxt.masked_fill(done, pad_id)
        out.append(nxt)
        done |= nxt == eos_id
        if bool(done.all()):
            break
        tok = nxt
    rows = torch.stack(out, 1).tolist()
    return [r[: r.index(eos_id)] for r in rows]


@torch.inference_mode()
def reference_beam(ref, src, src_pad_mask, bos_id, eos_id, pad_id, caps, beam: int,
                   len_penalty: float) -> list[list[int]]:
    """Plain beam loop with fairseq's rules: of the 2k best candidates, eos ones ranked in the top k end a
    hypothesis (score / length ** len_penalty, length with eos), the k best others continue; a sentence stops
    with k finished hypotheses or at its cap. Returns the best hypothesis per sentence."""
    B, K = src.shape[0], beam
    memory = ref.encode(src, src_pad_mask)
    dec = _IncrementalDecoder(ref, memory.repeat_interleave(K, 0), src_pad_mask.repeat_interleave(K, 0))
    caps_k = caps.repeat_interleave(K)
    score = torch.full((B, K), -math.inf)
    score[:, 0] = 0.0
    hyps = torch.full((B * K, 0), pad_id, dtype=torch.long)
    tok = torch.full((B * K,), bos_id, dtype=torch.long)
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(B)]
    open_ = [True] * B
    for t in range(int(caps.max()) + 1):
        lp = _allowed(dec.step(tok, t), t, caps_k, bos_id, eos_id, pad_id)
        V = lp.shape[1]
        top, idx = (score.reshape(-1, 1) + lp).view(B, K * V).topk(2 * K, 1)
        src_beam, word = idx // V, idx % V
        ends = (word == eos_id) & top.isfinite()
        for b, j in ends[:, :K].nonzero().tolist():
            if open_[b] and len(finished[b]) < K:
                h = hyps[b * K + src_beam[b, j]].tolist() + [eos_id]
                finished[b].append((float(top[b, j]) / len(h) ** len_penalty, h))
        open_ = [o and len(f) < K and t < c for o, f, c in zip(open_, finished, caps.tolist())]
        if not any(open_):
            break
        # k continuing candidates per sentence: non-eos finite ones first, in rank order
        rank = torch.arange(2 * K)[None, :] + 2 * K * ends.long() + 4 * K * (~top.isfinite()).long()
        keep = rank.argsort(1)[:, :K]
        score = top.gather(1, keep).masked_fill(~torch.tensor(open_)[:, None], -math.inf)
        word, origin = word.gather(1, keep), (src_beam.gather(1, keep) + K * torch.arange(B)[:, None]).view(-1)
        score = score.masked_fill(word == eos_id, -math.inf)
        hyps = torch.cat([hyps.index_select(0, origin), word.view(-1, 1)], 1)
        dec.reorder(origin)
        tok = word.view(-1)
    return [max(f, key=lambda x: x[0])[1][:-1] for f in finished]


def reference_decode_ids(ref, src_ids, bos_id, eos_id, pad_id, cfg) -> list[list[int]]:
    """The reference decoders over the suite's length-sorted source batches (``decode.length_batches``)."""
    ref.eval()
    hyps: list = [None] * len(src_ids)
    for idx, batch in length_batches(src_ids, cfg.max_tokens, ref.cfg.max_seq_len, eos_id):
        src, mask = _src_tensor(batch, pad_id, "cpu")
        caps = _length_caps(mask, cfg.max_len_a, cfg.max_len_b, ref.cfg.max_seq_len)
        if cfg.decoder == "greedy":
            out = reference_greedy(ref, src, mask, bos_id, eos_id, pad_id, caps)
        else:
            out = reference_beam(ref, src, mask, bos_id, eos_id, pad_id, caps, cfg.beam, cfg.len_penalty)
        for k, h in zip(idx, out):
            hyps[k] = h
    return hyps


# ----------------------------------------------------------------------------- workload
def padding_fraction(batches) -> dict:
    """Share of pad positions in the source and target tensors of ``batches`` (what a length-sorted batcher
    keeps small)."""
    src_pad = sum(int(b.src_pad_mask.sum()) for b in batches)
    src_all = sum(b.src.numel() for b in batches)
    tgt_pad = sum(int(b.tgt_pad_mask.sum()) for b in batches)
    tgt_all = sum(b.tgt_in.numel() for b in batches)
    return {"src": src_pad / max(src_all, 1), "tgt": tgt_pad / max(tgt_all, 1),
            "all": (src_pad + tgt_pad) / max(src_all + tgt_all, 1), "batches": len(batches)}


def tokenizer_for(params: dict, scale: str, work: Path, hardware: str,
                  results_root: str | Path = "results") -> tuple[str, Path | None]:
    """(tokenizer path, trained checkpoint or None): the workflow's trained translation model and its tokenizer
    (``results_root/<hardware>/<scale>/_models/``) when present, else a tokenizer trained (once, cached in ``work``)
    like ``repro.train.prepare``."""
    models = Path(results_root) / hardware / scale / MODELS_DIR
    ckpt, tok = artefact_file(models, "translation_model"), artefact_file(models, "tokenizer")
    if ckpt.exists() and tok.exists():
        return resolve_tokenizer(tok), ckpt
    info = work / TOKENIZER_NAME
    want = {"tokenizer": params["tokenizer"], "corpus": params["corpus"]}
    stamp = work / "tokenizer.params.json"
    if not (info.exists() and stamp.exists() and json.loads(stamp.read_text()) == want):
        prepare(params, work)
        stamp.write_text(json.dumps(want, sort_keys=True))
    return resolve_tokenizer(info), None


def side_by_side(rows: list, claim: str, task: str, suite: list, peer: list, peer_name: str) -> dict:
    """Append the metric rows of one task's repeated rates (suite, peer, and the per-repeat suite/peer ratio: median,
    interquartile range, every value) to ``rows``; returns the summary entry of the task."""
    entry = {}
    for name, xs, unit, kind in (("suite_tokens_per_s", suite, "tokens/s", "rate"),
                                 (f"{peer_name}_tokens_per_s", peer, "tokens/s", "rate"),
                                 (f"suite_over_{peer_name}", [a / b for a, b in zip(suite, peer)], "ratio",
                                  "ratio_time")):
        med, q1, q3 = quartiles(xs)
        rows.append(metric(claim, name, med, unit, kind=kind, spread=q3 - q1, n=len(xs), task=task, q25=q1, q75=q3))
        entry[name] = {"median": med, "q25": q1, "q75": q3, "values": xs}
    return entry


def side_by_side_rows(tasks: dict, peer_name: str) -> list[str]:
    """Markdown table rows (task, suite rate, peer rate, ratio; median [IQR]) of :func:`side_by_side`'s entries."""
    cell = lambda m, f: f"{m['median']:{f}} [{m['q25']:{f}}, {m['q75']:{f}}]"
    return [f"| {task} | {cell(e['suite_tokens_per_s'], '.0f')} | {cell(e[f'{peer_name}_tokens_per_s'], '.0f')} | "
            f"{cell(e[f'suite_over_{peer_name}'], '.3f')} |" for task, e in tasks.items()]


def default_paths(results_root: str | Path, hw: str, scale: str, name: str, out: Path | None,
                  report: Path | None) -> tuple[Path, Path]:
    """(results folder, page) of peer benchmark ``name``: ``out``/``report`` when given, else
    ``<results_root>/<hw>/<scale>/_bench/<name>/`` and ``<results_root>/../reports/<hw>/<scale>/<name>.md``
    (``results/`` -> ``reports/``, as the workflow places a run's pages)."""
    root = Path(results_root)
    return (Path(out or root / hw / scale / "_bench" / name),
            Path(report or root.parent / "reports" / hw / scale / f"{name}.md"))


def peer_paths_arguments(ap: argparse.ArgumentParser) -> None:
    """The peer benchmarks' --results, --out and --report options."""
    ap.add_argument("--results", type=Path, default=Path("results"),
                    help="results folder of the run: its <hw>/<scale>/_models/ trained translation model is decoded "
                         "when present, and the results go under it (default: results)")
    ap.add_argument("--out", type=Path, default=None,
                    help="results folder (default <results>/<hw>/<scale>/_bench/<benchmark>/)")
    ap.add_argument("--report", type=Path, default=None,
                    help="markdown page (default <results>/../reports/<hw>/<scale>/<benchmark>.md)")


def commit_text(fp: dict) -> str:
    """The measuring commit as pages print it: 10 characters, '(dirty)' for uncommitted changes."""
    return f"{(fp['git']['commit'] or '?')[:10]}{' (dirty)' if fp['git']['dirty'] else ''}"


def quartiles(xs) -> tuple[float, float, float]:
    """(median, q25, q75) of ``xs`` (inclusive method; one value gives itself three times)."""
    xs = sorted(float(x) for x in xs)
    if len(xs) == 1:
        return xs[0], xs[0], xs[0]
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return statistics.median(xs), q[0], q[2]


def _timed(fn):
    t0 = time.perf_counter()
    n = fn()
    return n / (time.perf_counter() - t0)


def run(scale: str = "default", repeats: int = 5, train_steps: int = 2, sentences: int = 256,
        out: Path | None = None, report: Path | None = None, threads: int | None = None,
        results_root: str | Path = "results") -> dict:
    """Measure, write the results folder and the page, return the summary (torch's thread count is restored).
    ``results_root``: the results folder whose ``<hw>/<scale>/`` run holds the trained model, and where the results
    go by default (the page by default beside it, in ``<results_root>/../reports/<hw>/<scale>/``)."""
    before = torch.get_num_threads()
    try:
        return _run(scale, repeats, train_steps, sentences, out, report, threads, results_root)
    finally:
        torch.set_num_threads(before)


@dataclass
class _Workload:
    """Both sides' inputs: the suite's model (and the reference of the same sizes), its optimizer, schedule and run
    settings, the benchmarked training batches with their padding fractions, and the encoded test sources."""
    tok: Any
    ckpt: Path | None
    batches: list
    pad_epoch: dict
    pad_bench: dict
    model: Any
    ref: ReferenceTransformer
    opt_c: Any
    sch_c: Any
    run_c: Any
    n_params: int
    n_ref: int
    src_ids: list


def encoded_corpus(params: dict, scale: str, work: Path, hw: str,
                   results_root: str | Path = "results") -> tuple[Any, Path | None, Any, dict]:
    """(tokenizer, trained checkpoint or None, corpus, encoded splits): the data both peer benchmarks time on."""
    tok_path, ckpt = tokenizer_for(params, scale, work, hw, results_root)
    tok = load_tokenizer(tok_path, params["corpus"].get("bpe_symbol"))
    corpus = load_data(params)
    return tok, ckpt, corpus, encode_splits(params, tok, corpus, params["training"]["max_len"])


def _workload(params: dict, scale: str, work: Path, hw: str, train_steps: int, sentences: int,
              results_root: str | Path = "results") -> _Workload:
    tr = params["training"]
    tok, ckpt, corpus, enc = encoded_corpus(params, scale, work, hw, results_root)
    enc = enc["train"]
    epoch = batch_indices(enc, tr["max_tokens"], shuffle=True, seed=tr["seed"])
    pad_epoch = padding_fraction([collate(enc, pos) for pos in epoch])
    batches = [collate(enc, pos) for pos in epoch[:train_steps]]
    pad_bench = padding_fraction(batches)

    torch.manual_seed(tr["seed"])
    model = build_model(params["model"], tok.vocab_size, tok.pad_id)
    ref = ReferenceTransformer(model.cfg)
    opt_c, sch_c, _ = configs_from_params(tr)
    run_c = RunConfig(seed=tr["seed"], max_steps=train_steps, log_every=10 ** 9, valid_every=10 ** 9,
                      ckpt_every_steps=10 ** 9, ckpt_every_minutes=1e9, progress=False, progress_every_s=1e9,
                      explode_loss=1e9)
    n_params = sum(p.numel() for p in model.parameters())
    n_ref = sum(p.numel() for p in ref.parameters())
    # decoding: the first `sentences` test sources; the same weights on both sides
    if ckpt is not None:
        model.load_state_dict(load_checkpoint(ckpt)["model"])
    copy_suite_weights(ref, model)
    test = [s for s, _ in corpus.test[:sentences]]
    src_ids = [list(e) + [tok.eos_id] for e in tok.encode_batch(test)]
    return _Workload(tok, ckpt, batches, pad_epoch, pad_bench, model, ref, opt_c, sch_c, run_c, n_params, n_ref,
                     src_ids)


def _tasks(w: _Workload, ev: dict, train_steps: int) -> tuple[dict, dict]:
    """{task: (suite side, reference side)}, each a call returning the target tokens it processed, and the dict
    the decoding calls leave their hypotheses in (by side and decoder)."""
    tok, model, ref = w.tok, w.model, w.ref
    dcfg = {k: DecodeConfig.from_params({**ev, "decoder": k}) for k in ("greedy", "beam")}
    decoded = {}

    def suite_train():
        return train(model, lambda e: w.batches, None, w.opt_c, w.sch_c, w.run_c, device="cpu").train_tokens

    def suite_decode(kind):
        hyps, _ = decode_ids(model, w.src_ids, tok.bos_id, tok.eos_id, tok.pad_id, dcfg[kind])
        decoded[("suite", kind)] = hyps
        return sum(len(h) + 1 for h in hyps)

    def ref_decode(kind):
        hyps = reference_decode_ids(ref, w.src_ids, tok.bos_id, tok.eos_id, tok.pad_id, dcfg[kind])
        decoded[("reference", kind)] = hyps
        return sum(len(h) + 1 for h in hyps)

    tasks = {"train": (suite_train, lambda: reference_train(ref, w.batches, w.opt_c, w.sch_c, train_steps)),
             "greedy": (lambda: suite_decode("greedy"), lambda: ref_decode("greedy")),
             "beam": (lambda: suite_decode("beam"), lambda: ref_decode("beam"))}
    return tasks, decoded


def _time_tasks(tasks: dict, w: _Workload, repeats: int) -> dict:
    """Tokens per second per (task, side) and repeat, after one untimed call of each side, alternating which side
    goes first."""
    tps: dict = {(t, side): [] for t in tasks for side in ("suite", "reference")}
    for task, (suite_fn, ref_fn) in tasks.items():
        if task != "train":  # decoding after training: put the trained (or initial) weights back on both sides
            copy_suite_weights(w.ref, w.model)
        suite_fn(), ref_fn()  # warm-up (allocator, first-call dispatch), not timed
        for r in range(repeats):
            order = (("suite", suite_fn), ("reference", ref_fn))
            for side, fn in (order if r % 2 == 0 else order[::-1]):
                tps[(task, side)].append(_timed(fn))
            log.info("%s repeat %d: suite %.0f, reference %.0f tokens/s", task, r, tps[(task, "suite")][-1],
                     tps[(task, "reference")][-1])
    return tps


def _run(scale, repeats, train_steps, sentences, out, report, threads, results_root) -> dict:
    params = config.section("translation", scale)
    fp = fingerprint()
    hw = fp["hardware_id"]
    out, report = default_paths(results_root, hw, scale, CLAIM, out, report)
    out.mkdir(parents=True, exist_ok=True)
    threads = int(threads or params.get("threads") or torch.get_num_threads())
    torch.set_num_threads(threads)
    load_before = os.getloadavg()
    w = _workload(params, scale, out / "_work", hw, train_steps, sentences, results_root)
    tasks, decoded = _tasks(w, params["eval"], train_steps)
    t_begin = time.perf_counter()
    tps = _time_tasks(tasks, w, repeats)
    seconds = time.perf_counter() - t_begin
    load_after = os.getloadavg()
    same = {k: decoded[("suite", k)] == decoded[("reference", k)] for k in ("greedy", "beam")}

    rows, summary = [], {"tasks": {}}
    for task in tasks:
        summary["tasks"][task] = side_by_side(rows, CLAIM, task, tps[(task, "suite")], tps[(task, "reference")],
                                              "reference")
    for where, pf in (("epoch", w.pad_epoch), ("benchmarked_batches", w.pad_bench)):
        for part in ("src", "tgt", "all"):
            rows.append(metric(CLAIM, "padding_fraction", pf[part], "fraction", kind="statistic", n=pf["batches"],
                               batches=where, part=part))
    summary.update(padding_fraction={"epoch": w.pad_epoch, "benchmarked_batches": w.pad_bench},
                   same_hypotheses=same, nice=os.nice(0), load_before=load_before, load_after=load_after, seconds=seconds,
                   threads=threads, parameters={"suite": w.n_params, "reference": w.n_ref},
                   weights="trained checkpoint " + str(w.ckpt) if w.ckpt else "initialised (untrained)",
                   train_tokens_per_repeat=sum(b.ntokens for b in w.batches), decode_sentences=len(w.src_ids))
    bench_cfg = {"scale": scale, "repeats": repeats, "train_steps": train_steps, "sentences": sentences,
                 "threads": threads, "translation": params}
    train_ratio = summary["tasks"]["train"]["suite_over_reference"]
    v = verdict(CLAIM, "not_applicable", "a benchmark (suite vs torch.nn.Transformer), not a published claim",
                train_ratio_median=train_ratio["median"])
    write_results(out, claim=CLAIM, scale=scale, metrics=rows, verdict=v, config=bench_cfg, fingerprint=fp)
    atomic_write_json(out / "summary.json", {**summary, "hardware": hw, "commit": fp["git"], "config": bench_cfg})
    report.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(report, markdown(summary, hw, scale, fp, bench_cfg))
    log.info("wrote %s and %s (%.0f s)", out, report, seconds)
    return summary


def markdown(summary: dict, hw: str, scale: str, fp: dict, cfg: dict) -> str:
    lines = [f"# Training and decoding throughput: suite vs torch.nn.Transformer ({hw}, {scale})", "",
             "`python -m repro.peers.throughput` (repro/peers/throughput.py): the same model sizes, batches, loss, "
             "optimizer and decoding rules on both sides, run alternately in one process; target tokens per "
             f"second, median [interquartile range] over {cfg['repeats']} repeats. Ratios > 1: the suite is faster.",
             "", "| task | suite tokens/s | torch.nn.Transformer tokens/s | suite / reference |", "|---|---|---|---|"]
    lines += side_by_side_rows(summary["tasks"], "reference")
    pe, pb = summary["padding_fraction"]["epoch"], summary["padding_fraction"]["benchmarked_batches"]
    lines += ["", f"Padding fraction of the training batches (length-sorted, max_tokens "
                  f"{cfg['translation']['training']['max_tokens']}): {pe['all']:.3f} over the first epoch "
                  f"({pe['batches']} batches; source {pe['src']:.3f}, target {pe['tgt']:.3f}), {pb['all']:.3f} in the "
                  f"{pb['batches']} benchmarked batches.",
              f"Same hypotheses on both sides: greedy {summary['same_hypotheses']['greedy']}, beam "
              f"{summary['same_hypotheses']['beam']} ({summary['decode_sentences']} test sentences, weights "
              f"{summary['weights']}).",
              f"Threads {summary['threads']}, nice {summary['nice']}; load average before {summary['load_before'][0]:.2f}, after "
              f"{summary['load_after'][0]:.2f}; {summary['seconds']:.0f} s; torch {fp['software']['torch']}, commit "
              f"{commit_text(fp)}.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m repro.peers.throughput", description=__doc__.split("\n")[0])
    ap.add_argument("--scale", default="default", choices=config.SCALES)
    ap.add_argument("--repeats", type=int, default=5, help="timed repeats per side and task (alternating order)")
    ap.add_argument("--train-steps", type=int, default=2, help="training updates per repeat")
    ap.add_argument("--sentences", type=int, default=256, help="test sentences decoded per repeat")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: the config's threads)")
    peer_paths_arguments(ap)
    a = ap.parse_args(argv)
    for key in ("repeats", "train_steps", "sentences"):
        if getattr(a, key) < 1:
            ap.error(f"--{key.replace('_', '-')}: must be >= 1")
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    summary = run(a.scale, a.repeats, a.train_steps, a.sentences, a.out, a.report, a.threads, a.results)
    print(json.dumps({t: e["suite_over_reference"]["median"] for t, e in summary["tasks"].items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
