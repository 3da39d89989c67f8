"""Outlier features put into a trained model by a function-preserving copy: the activations LLM.int8() (Dettmers et
al., NeurIPS 2022, arXiv 2208.07339, Section 3.2 and Section 4.2 / Fig. 3a) is about - |x| >= 6 in a few hidden
dimensions of most layers' inputs - in a model far too small to grow them (they emerge at ~6.7B parameters).

In a Pre-LN block (x <- x + F(Norm(x))) the inputs of the attention's q/k/v projections (the cross-attention's
query) and of the FFN's expansion (fc1, or w1/w3 of SwiGLU) are the output of a norm with a gain g per hidden
dimension (LayerNorm also a bias b). For a set S of hidden dimensions and a factor c > 0 the copy multiplies g_j
(and b_j) by c and divides column j of every linear layer fed by that norm by c, for j in S:

    W' (D_c y) = (W D_c^-1)(D_c y) = W y,    D_c = diag(c for j in S, 1 otherwise)

so in real arithmetic the copy computes the same function (in fp32 to rounding: tested), while the activations
entering those linear layers carry values c times larger in the dimensions S, in every block: systematic outlier
features in the sense of Section 4.1, whose size the measurement counts with the paper's criteria. The int8 methods
then meet what they meet in a large model: vector-wise int8 scales each token's row by its largest value, now an
outlier, and loses the other dimensions' precision; LLM.int8() takes the outlier dimensions to 16 bits. The weight
columns of S are c times smaller; int8 stores them on each output channel's grid as any weight (bitsandbytes'
Linear8bitLt dequantizes its outlier columns from the int8 codes, so does repro.quant.int8): their int8 error is c
times the original's relative to them, so LLM.int8()'s own error grows with c through those few columns (a
disadvantage to LLM.int8(), not a help; tests/test_quant_outliers.py measures it), while vector-wise int8 loses
the precision of every other dimension of every token. S: the ``n_dims`` dimensions whose gains have the largest
mean |g| over the blocks' norms (deterministic, no seed). Post-LN blocks (the norm output is the residual stream
itself) and ScaleNorm (one scalar gain) have no such per-dimension rescaling: refused.
"""
from __future__ import annotations

import copy

import torch
from torch import nn

from .apply import blocks_of


class OutlierCopyError(ValueError):
    """The model has no per-dimension norm gain feeding its linear layers (Post-LN, ScaleNorm)."""


def _fed_by(block) -> list[tuple[nn.Module, list[nn.Linear]]]:
    """(norm, the linear layers whose input is that norm's output) of one Pre-LN block."""
    out = [(block.norm_self, [block.self_attn.q_proj, block.self_attn.k_proj, block.self_attn.v_proj])]
    if block.cross_attn is not None:
        out.append((block.norm_cross, [block.cross_attn.q_proj]))  # keys and values read the encoder's memory
    ffn = block.ffn
    out.append((block.norm_ffn, [ffn.fc1] if hasattr(ffn, "fc1") else [ffn.w1, ffn.w3]))
    return out


def outlier_dims_of(model: nn.Module, n_dims: int) -> list[int]:
    """The ``n_dims`` hidden dimensions with the largest mean |gain| over every block's norms (ties: lower index)."""
    gains = [norm.weight.detach().abs().float() for _, b in blocks_of(model) for norm, _ in _fed_by(b)]
    if not gains:
        raise OutlierCopyError("outlier copy: the model has no Transformer block")
    mean = torch.stack(gains).mean(0)
    order = sorted(range(len(mean)), key=lambda j: (-float(mean[j]), j))
    return sorted(order[:n_dims])


@torch.no_grad()
def with_outliers(model: nn.Module, n_dims: int, scale: float) -> tuple[nn.Module, list[int]]:
    """A copy of ``model`` whose norm outputs carry ``scale`` times larger values in ``n_dims`` hidden dimensions,
    compensated in the linear layers they feed (module docstring); ``model`` is not changed. Returns (copy, dims)."""
    if scale <= 0 or n_dims < 1:
        raise OutlierCopyError(f"outlier copy: scale {scale} must be > 0 and dims {n_dims} >= 1")
    twin = copy.deepcopy(model)
    dims = outlier_dims_of(twin, n_dims)
    idx = torch.tensor(dims)
    for name, block in blocks_of(twin):
        if block.cfg.norm_position != "pre":
            raise OutlierCopyError(f"outlier copy: block {name} is Post-LN; its norm output is the residual stream "
                                   "and cannot be rescaled without changing the function")
        for norm, lins in _fed_by(block):
            w = getattr(norm, "weight", None)
            if w is None or w.numel() != block.cfg.d_model:
                raise OutlierCopyError(f"outlier copy: {name}'s {type(norm).__name__} has no gain per dimension")
            w[idx] *= scale
            if getattr(norm, "bias", None) is not None:
                norm.bias[idx] *= scale
            for lin in lins:
                lin.weight[:, idx] /= scale
    return twin, dims
