"""The Transformer block, and stacks of blocks with activation-checkpointing policies.

Norm placement is data: with ``norm_position="post"`` a sublayer is x <- Norm(x + s * F(x)) (Post-LN, Vaswani et
al. 2017); with "pre" it is x <- x + s * F(Norm(x)) (Pre-LN, Xiong et al. 2020, Fig. 1). ``s`` is
``residual_scale`` (e.g. 1/sqrt(L), Noci et al. 2022). A block has self-attention, optional cross-attention
(decoder of an encoder-decoder) and an FFN.

Stack checkpoint policies (Chen et al. 2016; Korthikanti et al. 2023): "full" recomputes each block, "every_k"
stores only the inputs of segments of k blocks, "sqrt" uses segments of round(sqrt(n)) blocks (O(sqrt n) memory
for one extra forward), "selective" recomputes only the attention core inside each block.
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from .attention import MultiHeadAttention
from .config import BlockConfig
from .ffn import make_ffn
from .norms import make_norm


class Block(nn.Module):
    """``layer_idx``: the block's index in its stack, fixed at construction (only GPT-2's
    ``attn_scale_by_layer`` reads it; a block keeps it when others are dropped)."""

    def __init__(self, cfg: BlockConfig, cross_attention: bool = False, layer_idx: int = 0):
        super().__init__()
        self.cfg = cfg
        norm = lambda: make_norm(cfg.norm, cfg.d_model, cfg.norm_eps, cfg.norm_bias, cfg.norm_impl)
        self.self_attn, self.norm_self = MultiHeadAttention(cfg, layer_idx), norm()
        self.cross_attn = MultiHeadAttention(cfg, layer_idx) if cross_attention else None
        self.norm_cross = norm() if cross_attention else None
        self.ffn, self.norm_ffn = make_ffn(cfg), norm()
        self.drop = nn.Dropout(cfg.dropout)

    def _sublayer(self, x, norm, fn):
        s = self.cfg.residual_scale
        skip = x if self.cfg.residual else 0.0
        drop = self.drop if self.training and self.drop.p > 0 else (lambda h: h)  # no call when it is the identity
        scale = (lambda h: h) if s == 1.0 else (lambda h: s * h)  # no multiply by 1.0 (forward and backward)
        if self.cfg.norm_position == "pre":
            return skip + scale(drop(fn(norm(x))))
        return norm(skip + scale(drop(fn(x))))

    def forward(self, x, *, causal=False, key_padding_mask=None, memory=None, memory_padding_mask=None,
                cache: dict | None = None, positions=None):
        self_cache = None if cache is None else cache.setdefault("self", {})
        x = self._sublayer(x, self.norm_self, lambda h: self.self_attn(
            h, causal=causal, key_padding_mask=key_padding_mask, cache=self_cache, positions=positions))
        if self.cross_attn is not None:
            if memory is None:
                raise ValueError("a decoder block with cross-attention needs the encoder output (memory)")
            cross_cache = None if cache is None else cache.setdefault("cross", {})
            x = self._sublayer(x, self.norm_cross, lambda h: self.cross_attn(
                h, memory, key_padding_mask=memory_padding_mask, cache=cross_cache))
        return self._sublayer(x, self.norm_ffn, self.ffn)


class BlockStack(nn.Module):
    """n blocks; ``skip`` holds indices of blocks bypassed at run time (layer-pruning experiments)."""

    def __init__(self, cfg: BlockConfig, n_layers: int, cross_attention: bool = False,
                 checkpoint_policy: str = "none", checkpoint_every: int = 2):
        super().__init__()
        if checkpoint_policy == "selective":
            cfg = cfg.replace(checkpoint="selective")
        self.layers = nn.ModuleList(Block(cfg, cross_attention, i) for i in range(n_layers))
        self.checkpoint_policy, self.checkpoint_every = checkpoint_policy, checkpoint_every
        self.skip: set[int] = set()

    def segment_length(self) -> int:
        n = len(self.layers)
        return {"full": 1, "every_k": self.checkpoint_every, "sqrt": max(1, round(math.sqrt(n)))}.get(
            self.checkpoint_policy, 0)

    def forward(self, x, cache: list | None = None, return_hidden: bool = False, **kw):
        active = [i for i in range(len(self.layers)) if i not in self.skip]
        hidden = [x]
        seg = self.segment_length() if torch.is_grad_enabled() and cache is None and not return_hidden else 0

        def run(h, idx):
            for i in idx:
                h = self.layers[i](h, cache=None if cache is None else cache[i], **kw)
                if return_hidden:
                    hidden.append(h)
            return h

        if seg:
            for start in range(0, len(active), seg):
                x = checkpoint(run, x, active[start:start + seg], use_reentrant=False)
        else:
            x = run(x, active)
        return (x, hidden) if return_hidden else x

    def drop_layers(self, indices) -> None:
        """Physically remove the blocks at ``indices`` (Gromov et al. 2025; Men et al. 2025)."""
        indices = set(int(i) for i in indices)
        bad = sorted(i for i in indices if not 0 <= i < len(self.layers))
        if bad:
            raise ValueError(f"drop_layers: indices {bad} outside 0..{len(self.layers) - 1}")
        self.layers = nn.ModuleList(b for i, b in enumerate(self.layers) if i not in indices)
        self.skip = set()
