"""Position-wise feed-forward networks.

- relu / gelu / gelu_tanh: W2 act(W1 x + b1) + b2 (Vaswani et al. 2017, eq. 2; exact GELU as in BERT, its tanh
  approximation as in GPT-2).
- swiglu: W2 (silu(W1 x) * W3 x) (Shazeer 2020; Llama). Hidden size from config (Llama-7B: 11008 = 2/3 * 4d
  rounded up to a multiple of 256).
- moe: top-k routed mixture of SwiGLU experts (Mixtral 8x7B: 8 experts, top-2, softmax over the top-k logits).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import BlockConfig

# the block's activations: "gelu" is the exact erf GELU (BERT), "gelu_tanh" its tanh approximation (GPT-2's gelu_new)
ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu}


class DenseFFN(nn.Module):
    slot = "ffn"

    def __init__(self, d: int, d_ff: int, activation: str, bias: bool = True, act_dropout: float = 0.0):
        super().__init__()
        self.fc1 = nn.Linear(d, d_ff, bias=bias)
        self.fc2 = nn.Linear(d_ff, d, bias=bias)
        self.act = ACTIVATIONS[activation]
        self.drop = nn.Dropout(act_dropout)

    def forward(self, x):
        return self.fc2(self.drop(self.act(self.fc1(x))))


class SwiGLU(nn.Module):
    slot = "ffn"

    def __init__(self, d: int, d_ff: int, bias: bool = False, act_dropout: float = 0.0):
        super().__init__()
        self.w1 = nn.Linear(d, d_ff, bias=bias)  # gate
        self.w3 = nn.Linear(d, d_ff, bias=bias)  # up
        self.w2 = nn.Linear(d_ff, d, bias=bias)  # down
        self.drop = nn.Dropout(act_dropout)

    def forward(self, x):
        return self.w2(self.drop(ACTIVATIONS["silu"](self.w1(x)) * self.w3(x)))


class Router(nn.Linear):
    slot = "router"


class MoE(nn.Module):
    """Sparse mixture of experts; each token goes to its top-k experts, weights = softmax of their logits."""

    slot = "ffn"

    def __init__(self, d: int, d_ff: int, n_experts: int, top_k: int, bias: bool = False, act_dropout: float = 0.0):
        super().__init__()
        self.top_k = top_k
        self.router = Router(d, n_experts, bias=False)
        self.experts = nn.ModuleList(SwiGLU(d, d_ff, bias, act_dropout) for _ in range(n_experts))

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])  # (N, d)
        logits = self.router(x)
        weights, chosen = logits.topk(self.top_k, dim=-1)  # (N, k)
        weights = torch.softmax(weights.float(), dim=-1).to(x.dtype)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            token, slot = (chosen == e).nonzero(as_tuple=True)
            if token.numel():
                out.index_add_(0, token, expert(x[token]) * weights[token, slot, None])
        return out.reshape(shape)


def make_ffn(cfg: BlockConfig) -> nn.Module:
    if cfg.ffn in ("relu", "gelu", "gelu_tanh"):
        return DenseFFN(cfg.d_model, cfg.d_ff, cfg.ffn, cfg.use_ffn_bias, cfg.act_dropout)
    if cfg.ffn == "swiglu":
        return SwiGLU(cfg.d_model, cfg.d_ff, cfg.use_ffn_bias, cfg.act_dropout)
    if cfg.ffn == "moe":
        return MoE(cfg.d_model, cfg.d_ff, cfg.n_experts, cfg.moe_top_k, cfg.use_ffn_bias, cfg.act_dropout)
    raise ValueError(f"block.ffn: unknown kind {cfg.ffn!r}")


def swiglu_hidden(d_model: int, multiple_of: int = 256, ffn_mult: float = 4.0) -> int:
    """Llama's SwiGLU hidden size: 2/3 * ffn_mult * d rounded up to a multiple (4096 -> 11008)."""
    hidden = int(2 * ffn_mult * d_model / 3)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)
