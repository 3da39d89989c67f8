"""Head-level tools for C5 head_pruning on the shared EncoderDecoder (repro.model).

- Heads are addressed as :class:`Head` (attention kind, layer, head); gates are the attention modules'
  ``head_gate`` buffers (Michel, Levy, Neubig 2019, Sec. 2: xi_h multiplies each head's output).
- :class:`BleuEvaluator`: decodes a fixed test subset once per gate setting and keeps per-sentence BLEU
  statistics, so every variant is compared with the unpruned model by paired bootstrap (Koehn 2004).
- :func:`head_importance`: Michel's I_h = E_x |dL/d xi_h| (per sentence or per batch), l2-normalised per
  layer (Sec. 4.1, eq. 2).
- :class:`HardConcreteGates`: Voita et al. (2019, Sec. 6.1) stochastic gates (Louizos et al. 2018) with the L0
  penalty sum_h P(g_h != 0).
- :func:`pruned_copy`: a copy of the model with heads physically removed (``prune_heads``), for Table 4 timing, and
  :func:`speed_rows`, Table 4's rows from interleaved timings.
"""
from __future__ import annotations

import copy
import logging
import math
import time
import warnings
from dataclasses import dataclass
from typing import Iterable

import numpy as np
import torch
from torch import nn

from repro.bench.timing import paired_ratios, summarize
from repro.io import metric
from repro.train.bleu import bleu_from_stats, sentence_stats
from repro.train.decode import decode_ids
from repro.train.loop import model_loss

log = logging.getLogger("repro.head_pruning")

KINDS = ("encoder_self", "decoder_self", "cross")


@dataclass(frozen=True, order=True)
class Head:
    kind: str
    layer: int
    head: int

    @property
    def name(self) -> str:
        return f"{self.kind}.L{self.layer}.H{self.head}"


def attention_modules(model, kinds: Iterable[str] = KINDS) -> dict[str, list]:
    mods = model.attention_modules()
    missing = [k for k in kinds if k not in mods]
    if missing:
        raise ValueError(f"head_pruning.kinds: the model has no {missing[0]!r} attention (has {sorted(mods)})")
    return {k: mods[k] for k in kinds}


def all_heads(model, kinds: Iterable[str] = KINDS) -> list[Head]:
    return [Head(k, li, h) for k, mods in attention_modules(model, kinds).items()
            for li, m in enumerate(mods) for h in range(m.n_heads)]


@torch.no_grad()
def set_pruned(model, pruned: Iterable[Head] = ()) -> None:
    """Gates: 1 for every head, 0 for the heads in ``pruned`` (masking, Michel Sec. 2)."""
    mods = model.attention_modules()
    for ms in mods.values():
        for m in ms:
            m.head_gate.fill_(1.0)
    for h in pruned:
        mods[h.kind][h.layer].head_gate[h.head] = 0.0


class EncoderCache:
    """``model.encode`` that keeps each batch's encoder output while the encoder's weights and head gates are
    unchanged: a variant gating decoder heads only (the single-head ablation of a decoder self- or cross-attention
    head, the one-head tables of the decoder layers) reuses the output of the encoder as it was, a third of a
    greedy decode at the default, instead of computing the same numbers again. Keyed by the encoder's gate values
    and its parameters' version counters (an in-place update, an optimizer step or a load, moves them) and by the
    batch's ids; a gate module (Hard-Concrete) or training mode disables it."""

    def __init__(self, model):
        self.model, self.hits, self.misses = model, 0, 0
        self._state: tuple | None = None
        self._memory: dict[tuple, torch.Tensor] = {}

    def _encoder_state(self) -> tuple | None:
        mods = self.model.attention_modules().get("encoder_self", [])
        if self.model.training or any(m.gate_module is not None for m in mods):
            return None
        return (tuple(tuple(m.head_gate.tolist()) for m in mods),
                tuple(p._version for p in self.model.encoder.parameters()))

    def __call__(self, src: torch.Tensor, src_pad_mask: torch.Tensor) -> torch.Tensor:
        state = self._encoder_state()
        if state is None:
            return self.model.encode(src, src_pad_mask)
        if state != self._state:
            self._state, self._memory = state, {}
        key = (tuple(src.shape), src.cpu().numpy().tobytes(), src_pad_mask.cpu().numpy().tobytes())
        if key in self._memory:
            self.hits += 1
        else:
            self.misses += 1
            self._memory[key] = self.model.encode(src, src_pad_mask)
        return self._memory[key]


class BleuEvaluator:
    """Decodes a fixed list of source id sequences and scores them against the references.

    ``stats()`` returns the (N, 10) per-sentence BLEU statistics of the model with its current gates (its encoder
    outputs through an :class:`EncoderCache`; another ``model`` is decoded without one)."""

    def __init__(self, model, tokenizer, bos_id: int, src_ids: list[list[int]], refs: list[str], dcfg,
                 device="cpu", vocab_limit: int | None = None):
        self.model, self.tok, self.bos_id, self.vocab_limit = model, tokenizer, bos_id, vocab_limit
        self.src_ids, self.refs, self.dcfg, self.device = src_ids, refs, dcfg, device
        self.calls, self.seconds = 0, 0.0
        self.encoder_cache = EncoderCache(model)

    def hypotheses(self, model=None) -> list[str]:
        t0 = time.perf_counter()
        encode = self.encoder_cache if model is None or model is self.model else None
        hyps, _ = decode_ids(model or self.model, self.src_ids, self.bos_id, self.tok.eos_id, self.tok.pad_id,
                             self.dcfg, self.device, self.vocab_limit, encode)
        self.calls += 1
        self.seconds += time.perf_counter() - t0
        return [self.tok.decode(h) for h in hyps]

    def stats(self, model=None) -> np.ndarray:
        return sentence_stats(self.hypotheses(model), self.refs)


def bleu(stats: np.ndarray) -> float:
    return float(bleu_from_stats(np.asarray(stats).sum(0)))


def head_importance(model, batches: list, pad_id: int, pruned: Iterable[Head] = (), kinds=KINDS,
                    device="cpu", normalize: bool = True, granularity: str = "sentence",
                    loss=None) -> dict[Head, float]:
    """Michel et al. (2019) eq. 2: I_h = E_x |Att_h(x)^T dL/dAtt_h(x)| = E_x |dL/d xi_h|, summed over the
    sentences (``granularity="sentence"``: the absolute value per sentence, read from the head outputs entering
    the output projection) or over the batches (``"batch"``: |dL/d xi_h| of each batch's summed NLL, as
    Michel et al.'s code accumulates it), divided by the target tokens, then l2-normalised within each layer
    (one attention module).  Pruned heads keep gate 0 while scoring and are left out of the result.
    ``loss(model, batch) -> (summed loss, targets)``: another model's loss (a classifier's summed cross-entropy
    over its examples); default the translation NLL over the target tokens."""
    if granularity not in ("sentence", "batch"):
        raise ValueError(f"head_pruning.importance.granularity: {granularity!r} is not sentence or batch")
    pruned = set(pruned)
    mods = attention_modules(model, kinds)
    was = model.training
    model.eval()
    req = [p.requires_grad for p in model.parameters()]
    for p in model.parameters():
        p.requires_grad_(False)
    set_pruned(model, pruned)
    gates = [(k, li, m.head_gate) for k, ms in mods.items() for li, m in enumerate(ms)]
    acc = {(k, li): torch.zeros_like(g) for k, li, g in gates}
    handles = []

    def pre_hook(key, n_heads):
        def fn(_, args):
            x = args[0]  # (B, T, H * dh): head outputs times their gates (1 for kept heads)
            if x.requires_grad:
                def grad_hook(g):
                    B, T = x.shape[0], x.shape[1]
                    per = (x.detach() * g).reshape(B, T, n_heads, -1).sum(dim=(1, 3))  # (B, H) = dL/d xi per sentence
                    acc[key].add_(per.abs().sum(0).to(acc[key].dtype))
                x.register_hook(grad_hook)
        return fn

    ntok = 0
    try:
        for _, _, g in gates:
            g.requires_grad_(True)
        if granularity == "sentence":
            for k, ms in mods.items():
                for li, m in enumerate(ms):
                    handles.append(m.out_proj.register_forward_pre_hook(pre_hook((k, li), m.n_heads)))
        for b in batches:
            for _, _, g in gates:
                g.grad = None
            value, n = (loss or _translation_nll)(model, b, pad_id, device)
            value.backward()
            if granularity == "batch":
                for k, li, g in gates:
                    acc[(k, li)] += g.grad.detach().abs()
            ntok += n
    finally:
        for hd in handles:
            hd.remove()
        for _, _, g in gates:
            g.requires_grad_(False)
            g.grad = None
        for p, r in zip(model.parameters(), req):
            p.requires_grad_(r)
        model.train(was)
    out: dict[Head, float] = {}
    for (k, li), v in acc.items():
        v = v / max(ntok, 1)
        keep = [h for h in range(len(v)) if Head(k, li, h) not in pruned]
        if normalize and keep:
            norm = float(v[keep].norm(p=2))
            if norm > 0:
                v = v / norm
        for h in keep:
            out[Head(k, li, h)] = float(v[h])
    return out


def _translation_nll(model, b, pad_id: int, device) -> tuple[torch.Tensor, int]:
    b = b.to(device)
    value, _, _ = model_loss(model, b, 0.0, pad_id)  # label smoothing 0: the summed NLL, with grad
    return value, b.ntokens


class HardConcreteGates(nn.Module):
    """One Hard-Concrete gate per head (Louizos et al. 2018; Voita et al. 2019, Sec. 6.1).

    Training: u ~ U(0,1), s = sigmoid((log u - log(1-u) + log_alpha) / beta), g = clamp(s (r - l) + l, 0, 1).
    Evaluation: the deterministic gate clamp(sigmoid(log_alpha) (r - l) + l, 0, 1).
    ``p_open()`` = P(g != 0) = sigmoid(log_alpha - beta log(-l / r)), the L0 penalty term."""

    def __init__(self, n: int, init_log_alpha: float, beta: float, stretch: tuple[float, float]):
        super().__init__()
        self.log_alpha = nn.Parameter(torch.full((n,), float(init_log_alpha)))
        self.beta, (self.l, self.r) = float(beta), (float(stretch[0]), float(stretch[1]))
        if not (self.l < 0 and self.r > 1):
            raise ValueError(f"head_pruning.l0.stretch: need l < 0 and r > 1, got {stretch}")

    def forward(self) -> torch.Tensor:
        if self.training:
            u = torch.rand_like(self.log_alpha).clamp(1e-6, 1 - 1e-6)
            s = torch.sigmoid((torch.log(u) - torch.log1p(-u) + self.log_alpha) / self.beta)
        else:
            s = torch.sigmoid(self.log_alpha)
        return (s * (self.r - self.l) + self.l).clamp(0.0, 1.0)

    def p_open(self) -> torch.Tensor:
        return torch.sigmoid(self.log_alpha - self.beta * math.log(-self.l / self.r))


def pruned_copy(model, pruned: Iterable[Head]):
    """A deep copy with the ``pruned`` heads physically removed (``MultiHeadAttention.prune_heads``)."""
    m = copy.deepcopy(model)
    set_pruned(m)
    drop: dict[tuple[str, int], set[int]] = {}
    for h in pruned:
        drop.setdefault((h.kind, h.layer), set()).add(h.head)
    mods = m.attention_modules()
    for (k, li), heads in drop.items():
        mod = mods[k][li]
        with warnings.catch_warnings():  # an empty keep makes zero-element projections
            warnings.simplefilter("ignore", UserWarning)
            mod.prune_heads([h for h in range(mod.n_heads) if h not in heads])
    return m


def pruning_levels(total: int, step_fraction: float, max_fraction: float) -> list[int]:
    """Numbers of pruned heads at each iterative step: round(k * step_fraction * total), k = 1, 2, ...
    (Michel et al. 2019, Sec. 5: 10% of the heads per step), up to ``max_fraction`` of the heads."""
    levels, k = [], 1
    while k * step_fraction <= max_fraction + 1e-9:
        n = min(total, int(round(k * step_fraction * total)))
        if n > (levels[-1] if levels else 0):
            levels.append(n)
        k += 1
    return levels


def speed_rows(batch: int, samples: dict, prune_fraction: float, n_prune: int) -> list[dict]:
    """Michel Table 4's rows for one batch size from interleaved timings ``samples`` ("unpruned", "pruned"):
    examples/s of both (medians) and the paired speed-up in percent, beside the paper's where it has the batch."""
    su, sp = summarize(samples["unpruned"]), summarize(samples["pruned"])
    ratio = paired_ratios(samples, "unpruned", "pruned")
    k = f"bs{batch}" if batch in (1, 4, 16, 64) else None
    rows = [metric("head_pruning", "examples_per_s", batch / su["median"], "examples/s", n=su["n"], batch=batch,
                   model="unpruned", published_key=k and f"michel_speed_{k}", published_index=0 if k else None),
            metric("head_pruning", "examples_per_s", batch / sp["median"], "examples/s", n=sp["n"], batch=batch,
                   model=f"pruned_{int(round(100 * prune_fraction))}pct", published_key=k and f"michel_speed_{k}",
                   published_index=1 if k else None),
            metric("head_pruning", "speedup", 100 * (ratio["median"] - 1), "percent", spread=100 * ratio["iqr"],
                   n=ratio["n"], kind="ratio_time", batch=batch, heads_pruned=n_prune,
                   published_key=k and f"michel_speedup_{k}")]
    log.info("throughput bs %d: unpruned %.1f ex/s, %d heads removed %.1f ex/s: %+.1f%%", batch,
             batch / su["median"], n_prune, batch / sp["median"], 100 * (ratio["median"] - 1))
    return rows
