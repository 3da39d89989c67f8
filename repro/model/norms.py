"""Normalisation layers of the block.

- LayerNorm (Ba et al. 2016): (x - mean) / sqrt(var + eps) * g + b.
- RMSNorm (Zhang & Sennrich, NeurIPS 2019, arXiv 1910.07467, eq. 4): x / sqrt(mean(x^2) + eps) * g.
- ScaleNorm (Nguyen & Salazar 2019, arXiv 1910.05895, eq. 9): g * x / max(||x||_2, eps), one scalar g = sqrt(d).

``impl`` selects the implementation: "torch" (F.layer_norm / F.rms_norm), "manual" (the formula in
eager ops, ``layer_norm_manual`` / ``rms_norm_manual``: a reference, and the "hand-written" baseline of rmsnorm_speed
and of the kernel benchmark, repro.bench.kernels) or "triton" (the suite's
fused kernels in repro.kernels).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def layer_norm_manual(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    """LayerNorm written out in eager ops: fp32 statistics, normalised value cast back, then the affine map. The
    centred value is computed once (subtracting the mean twice was an extra pass over x that RMSNorm does not make,
    which biased the RMSNorm-vs-LayerNorm timing)."""
    xf = x.float()
    centred = xf - xf.mean(-1, keepdim=True)
    var = centred.pow(2).mean(-1, keepdim=True)
    y = (centred * torch.rsqrt(var + eps)).to(x.dtype) * weight
    return y + bias if bias is not None else y


def rms_norm_manual(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm written out in eager ops (Llama style): fp32 statistics, normalised value cast back, times the gain."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


def _triton():
    try:
        from repro import kernels  # lazy: imports triton, needed only by norm_impl "triton"
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise RuntimeError(f"block.norm_impl: 'triton' needs repro.kernels and triton ({exc})") from exc
    return kernels


class LayerNorm(nn.Module):
    slot = "norms"

    def __init__(self, d: int, eps: float = 1e-5, bias: bool = True, impl: str = "torch"):
        super().__init__()
        self.eps, self.impl = eps, impl
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.impl == "triton":
            return _triton().layer_norm(x, self.weight, self.bias, self.eps)
        if self.impl == "manual":
            return layer_norm_manual(x, self.weight, self.bias, self.eps)
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)


class RMSNorm(nn.Module):
    slot = "norms"

    def __init__(self, d: int, eps: float = 1e-5, impl: str = "torch"):
        super().__init__()
        self.eps, self.impl = eps, impl
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.impl == "triton":
            return _triton().rms_norm(x, self.weight, self.eps)
        if self.impl == "manual":
            return rms_norm_manual(x, self.weight, self.eps)
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


class ScaleNorm(nn.Module):
    slot = "norms"

    def __init__(self, d: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.scale = nn.Parameter(torch.tensor(math.sqrt(d)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * x / x.norm(dim=-1, keepdim=True).clamp_min(self.eps)


def make_norm(kind: str, d: int, eps: float = 1e-5, bias: bool = True, impl: str = "torch") -> nn.Module:
    """A norm module by kind; "none" gives nn.Identity (a block without normalisation)."""
    if kind == "layernorm":
        return LayerNorm(d, eps, bias, impl)
    if kind == "rmsnorm":
        return RMSNorm(d, eps, impl)
    if kind == "scalenorm":
        return ScaleNorm(d, eps)
    if kind == "none":
        return nn.Identity()
    raise ValueError(f"block.norm: unknown norm kind {kind!r}")
