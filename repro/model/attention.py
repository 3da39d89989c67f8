"""Multi-head (and grouped-query) attention with selectable backends, head gates and head removal.

Backends: "math" materialises softmax(QK^T / sqrt(d)) V (the standard attention of Vaswani et al. 2017 and the
baseline of Dao et al. 2022); "sdpa" calls torch's scaled_dot_product_attention; "triton" calls the suite's
FlashAttention-style kernel (repro.kernels.flash_attention).

Per-head gates multiply each head's output before the output projection (Michel et al. 2019, Sec. 2: xi_h);
``head_gate`` is a buffer of ones that ablation code sets, and whose gradient is the head-importance signal
when it requires grad. ``gate_module`` (e.g. Hard-Concrete gates, Voita et al. 2019) overrides it when set.
``prune_heads`` removes heads physically by shrinking the projections.

With ``block.rope`` self-attention rotates q and k by their positions (repro.model.rope) before the attention core,
so every backend (math, sdpa, the Triton kernel) sees rotated q/k; cached keys are stored rotated, and positions
come from the caller (the models pass them, from the padding mask and the decoding offset) or else continue from
the cache length.

Sliding-window attention (``block.attn_window`` = W; Mistral 7B, Jiang et al. 2023, Sec. 2; Longformer's banded
causal pattern): causal self-attention in which query i sees only keys i - W < j <= i, exactly as transformers'
``sliding_window`` mask and FlashAttention-2's ``window_size=(W - 1, 0)``. Every backend honours it: "math" masks
the band, "sdpa" gets an explicit boolean band mask (``is_causal`` cannot express it), "triton" skips key tiles
outside the band. Incremental decoding attends the last W cached keys. GPT-2's ``scale_attn_by_inverse_layer_idx``
(``block.attn_scale_by_layer``) divides block l's scores by l + 1 on top of 1/sqrt(d).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from .config import BlockConfig
from .rope import apply_rope, inv_frequencies, rope_cos_sin


def causal_band(T: int, window: int | None, device=None) -> torch.Tensor:
    """(T, T) bool, True = key j visible to query i: j <= i, and i - window < j with a sliding window."""
    ones = torch.ones(T, T, dtype=torch.bool, device=device)
    return ones.tril() if window is None else ones.tril() & ~ones.tril(-window)


def _check_window(window, causal: bool, Tq: int, Tk: int) -> None:
    if causal and Tq != Tk:
        raise ValueError(f"causal attention needs equal query and key lengths, got {Tq} and {Tk}")
    if window is not None:
        if not isinstance(window, int) or isinstance(window, bool) or window < 1:
            raise ValueError(f"attention window: must be a positive integer or None, got {window!r}")
        if not causal:
            raise ValueError("attention window (sliding-window attention) needs causal self-attention")


def attention_core(q, k, v, *, backend: str, causal: bool = False, key_padding_mask=None,
                   dropout_p: float = 0.0, scale: float | None = None, window: int | None = None) -> torch.Tensor:
    """softmax(q k^T * scale + mask) v.  q (B, H, Tq, D); k, v (B, Hkv, Tk, D); key_padding_mask (B, Tk), True = pad;
    ``window`` (causal only): query i sees keys i - window < j <= i (sliding-window attention)."""
    B, H, Tq, D = q.shape
    Hkv, Tk = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    _check_window(window, causal, Tq, Tk)
    if window is not None and window >= Tk:
        window = None  # the band holds every causal key: plain causal attention, the same result
    if backend == "triton":
        from repro.kernels import flash_attention  # lazy: triton only when this backend is used
        return flash_attention(q, k, v, causal=causal, key_padding_mask=key_padding_mask, scale=scale, window=window)
    if backend == "sdpa":
        mask = None
        if key_padding_mask is not None:
            mask = ~key_padding_mask[:, None, None, :]  # (B, 1, 1, Tk), True = attend
        if causal and (mask is not None or window is not None):
            band = causal_band(Tq, window, q.device)
            mask = band if mask is None else mask & band
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p,
                                              is_causal=causal and mask is None, scale=scale,
                                              enable_gqa=Hkv != H)
    if backend != "math":
        raise ValueError(f"block.attention: unknown backend {backend!r}")
    return math_attention(q, k, v, causal=causal, key_padding_mask=key_padding_mask, dropout_p=dropout_p, scale=scale,
                          window=window)


def math_attention(q, k, v, *, causal: bool = False, key_padding_mask=None, dropout_p: float = 0.0,
                   scale: float | None = None, window: int | None = None) -> torch.Tensor:
    """Standard attention in eager ops: the (Tq, Tk) scores and probabilities are materialised (softmax in fp32).
    The reference of the attention kernels and the "math" provider of the kernel benchmark (repro.bench.kernels).
    ``window`` (causal only): the sliding-window band i - window < j <= i (Mistral; Jiang et al. 2023)."""
    B, H, Tq, D = q.shape
    Hkv, Tk = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    _check_window(window, causal, Tq, Tk)
    if Hkv != H:  # expand kv heads to their query-head groups
        k = k.repeat_interleave(H // Hkv, dim=1)
        v = v.repeat_interleave(H // Hkv, dim=1)
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale  # (B, H, Tq, Tk): the materialised matrix
    if key_padding_mask is not None:
        scores = scores.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
    if causal:
        scores = scores.masked_fill(~causal_band(Tq, window, q.device), float("-inf"))
    probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    if key_padding_mask is not None:  # a row with every key masked (a left pad under causal): 0, not NaN, as sdpa
        probs = probs.masked_fill(torch.isneginf(scores).all(-1, keepdim=True), 0.0)
    if dropout_p > 0:
        probs = F.dropout(probs, p=dropout_p, training=True)
    return torch.matmul(probs, v)


def _rows_per_memory_row(n_queries: int, n_memory: int) -> int:
    """Cross-attention with fewer memory rows than query rows (beam search: the K beams of a sentence, consecutive
    rows, attend to the sentence's one encoder output): each memory row serves r consecutive query rows, which are
    folded into its query length, so the keys and values are neither repeated nor reordered."""
    if n_memory <= 0 or n_queries % n_memory:
        raise ValueError(f"cross-attention: {n_queries} query rows cannot share {n_memory} memory rows")
    return n_queries // n_memory


class MultiHeadAttention(nn.Module):
    """Self- or cross-attention. ``forward(x, kv=None, ...)``: x (B, T, d); kv (B, S, d) for cross-attention, or
    (B / r, S, d) when each memory row serves r consecutive query rows (beam search's beams of one sentence)."""

    slot = "attention"

    def __init__(self, cfg: BlockConfig, layer_idx: int = 0):
        super().__init__()
        self.cfg = cfg
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.kv_heads, cfg.dim_head
        d, dh = cfg.d_model, self.head_dim
        self.q_proj = nn.Linear(d, self.n_heads * dh, bias=cfg.use_qkv_bias)
        self.k_proj = nn.Linear(d, self.n_kv_heads * dh, bias=cfg.use_qkv_bias)
        self.v_proj = nn.Linear(d, self.n_kv_heads * dh, bias=cfg.use_qkv_bias)
        self.out_proj = nn.Linear(self.n_heads * dh, d, bias=cfg.use_out_bias)
        # None: the backends' 1/sqrt(dh); GPT-2's scale_attn_by_inverse_layer_idx also divides by layer_idx + 1
        self.scale = 1.0 / math.sqrt(dh) / (layer_idx + 1) if cfg.attn_scale_by_layer else None
        self.window = cfg.attn_window
        self.register_buffer("head_gate", torch.ones(self.n_heads), persistent=False)
        self.gate_module: nn.Module | None = None
        self.backend = cfg.attention
        self.recompute_core = cfg.checkpoint == "selective"
        self.rope = cfg.rope
        self._gate_check: tuple | None = None  # (head_gate tensor, its version, all ones?): see gates_are_identity
        self._inv_freq: torch.Tensor | None = None  # computed on first use (works for meta-device models)

    def rotate(self, q, k, positions):
        """q (B, H, T, dh), k (B, Hkv, T, dh) rotated at ``positions`` (T,) or (B, T)."""
        if self._inv_freq is None or self._inv_freq.device != q.device:
            self._inv_freq = inv_frequencies(self.cfg.rotary_dim, self.cfg.rope_base, self.cfg.rope_scaling).to(q.device)
        cos, sin = rope_cos_sin(positions, self._inv_freq, q.dtype)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin)

    def gates(self) -> torch.Tensor:
        return self.gate_module() if self.gate_module is not None else self.head_gate

    def gates_are_identity(self) -> bool:
        """Whether multiplying by the gates would change nothing: no gate module, and ``head_gate`` all ones with no
        gradient wanted. Checked again (one read of the values) only after head_gate is replaced or changed in place
        (its version counter moves), so an ablation's ``head_gate[h] = 0`` is always honoured."""
        g = self.head_gate
        if self.gate_module is not None or g.requires_grad or torch.compiler.is_compiling() or g.is_inference():
            return False
        c = self._gate_check
        if c is None or c[0] is not g or c[1] != g._version:
            self._gate_check = c = (g, g._version, bool((g == 1).all()))
        return c[2]

    def forward(self, x, kv=None, *, causal: bool = False, key_padding_mask=None, cache: dict | None = None,
                positions=None):
        B, T, _ = x.shape
        if self.n_heads == 0:  # every head pruned: only the output bias is left
            out = x.new_zeros(B, T, self.out_proj.out_features)
            return out + self.out_proj.bias if self.out_proj.bias is not None else out
        q = self.q_proj(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, T, dh)
        src = x if kv is None else kv
        if cache is not None and kv is not None and "k" in cache:  # cross-attention: keys/values computed once
            k, v = cache["k"], cache["v"]
        else:
            Bs, S = src.shape[0], src.shape[1]  # Bs < B: cross-attention whose memory rows serve several query rows
            k = self.k_proj(src).view(Bs, S, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (Bs, Hkv, S, dh)
            v = self.v_proj(src).view(Bs, S, self.n_kv_heads, self.head_dim).transpose(1, 2)
            if self.rope and kv is None:
                if positions is None:
                    start = cache["k"].shape[2] if cache is not None and "k" in cache else 0
                    positions = torch.arange(start, start + T, device=x.device)
                q, k = self.rotate(q, k, positions)
            if cache is not None:
                if kv is None and "k" in cache:  # incremental self-attention: append this step
                    k = torch.cat([cache["k"], k], dim=2)
                    v = torch.cat([cache["v"], v], dim=2)
                cache["k"], cache["v"] = k, v
        window = self.window if kv is None else None  # the window bands self-attention only
        if cache is not None and kv is None and k.shape[2] != T:
            if T != 1:
                raise ValueError("incremental decoding: after the first (prefix) call a cache takes one token per call")
            causal = False  # one new query attends every cached key (with a window: the last `window` of them)
            if window is not None and k.shape[2] > window:
                k, v = k[:, :, -window:], v[:, :, -window:]
                if key_padding_mask is not None and key_padding_mask.shape[-1] > window:
                    key_padding_mask = key_padding_mask[:, -window:]
            window = None
        dropout_p = self.cfg.attn_dropout if self.training else 0.0
        core = lambda q_, k_, v_: attention_core(q_, k_, v_, backend=self.backend, causal=causal,
                                                 key_padding_mask=key_padding_mask, dropout_p=dropout_p,
                                                 scale=self.scale, window=window)
        shared = kv is not None and k.shape[0] != B  # cross-attention: r consecutive query rows share a memory row
        if shared:
            r = _rows_per_memory_row(B, k.shape[0])
            q = q.view(k.shape[0], r, self.n_heads, T, self.head_dim).transpose(1, 2).reshape(
                k.shape[0], self.n_heads, r * T, self.head_dim)
        if self.recompute_core and torch.is_grad_enabled():
            out = checkpoint(core, q, k, v, use_reentrant=False)
        else:
            out = core(q, k, v)
        if shared:
            out = out.view(k.shape[0], self.n_heads, r, T, self.head_dim).transpose(1, 2).reshape(
                B, self.n_heads, T, self.head_dim)
        if not self.gates_are_identity():
            out = out * self.gates().to(out.dtype)[None, :, None, None]  # per-head gate xi_h
        return self.out_proj(out.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim))

    @torch.no_grad()
    def prune_heads(self, keep) -> None:
        """Physically remove every head not in ``keep`` (query-head indices) by shrinking the projections.

        With grouped-query attention a key/value head is removed only when all its query heads are removed,
        and the kept groups must stay equal in size.
        """
        keep = sorted(set(int(h) for h in keep))
        if keep and (keep[0] < 0 or keep[-1] >= self.n_heads):
            raise ValueError(f"prune_heads: keep must be a subset of 0..{self.n_heads - 1}, got {keep}")
        group = self.n_heads // self.n_kv_heads
        kv_keep = sorted({h // group for h in keep})
        if keep and self.n_kv_heads != self.n_heads and len(keep) != group * len(kv_keep):
            raise ValueError("prune_heads: with grouped-query attention, keep whole query groups")
        dh = self.head_dim

        def rows(heads):
            return torch.tensor([h * dh + i for h in heads for i in range(dh)], dtype=torch.long)

        def shrink_out(lin: nn.Linear, idx) -> nn.Linear:
            new = nn.Linear(lin.in_features, len(idx), bias=lin.bias is not None,
                            device=lin.weight.device, dtype=lin.weight.dtype)
            new.weight.copy_(lin.weight[idx])
            if lin.bias is not None:
                new.bias.copy_(lin.bias[idx])
            return new

        q_idx, kv_idx = rows(keep), rows(kv_keep)
        self.q_proj = shrink_out(self.q_proj, q_idx)
        self.k_proj = shrink_out(self.k_proj, kv_idx)
        self.v_proj = shrink_out(self.v_proj, kv_idx)
        out = nn.Linear(len(q_idx), self.out_proj.out_features, bias=self.out_proj.bias is not None,
                        device=self.out_proj.weight.device, dtype=self.out_proj.weight.dtype)
        out.weight.copy_(self.out_proj.weight[:, q_idx])
        if self.out_proj.bias is not None:
            out.bias.copy_(self.out_proj.bias)
        self.out_proj = out
        self.head_gate = self.head_gate[keep].clone()
        self.n_heads, self.n_kv_heads = len(keep), len(kv_keep)
