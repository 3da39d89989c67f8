"""Rotary position embeddings (RoPE; Su et al. 2021, arXiv 2104.09864, eq. 34), in the rotate-half convention of
GPT-NeoX and Llama (Touvron et al. 2023): the head dimension is split into halves (x1, x2) and rotated as
``x * cos + cat(-x2, x1) * sin`` with ``theta_i = base^(-2i/d)``, ``i < d/2``.

``rope_dim`` (default: the whole head) rotates only the first dims of each head (GPT-NeoX ``rotary_pct``).
Scaling of the frequencies (``rope_scaling``): ``linear`` (position interpolation, Chen et al. 2023: theta/factor)
and ``llama3`` (Llama 3.1's band-wise scaling with ``low_freq_factor``, ``high_freq_factor`` and
``original_max_position_embeddings``). cos/sin are computed in float32 from integer positions and cast to the
activations' dtype, as Hugging Face's Llama does, so imported models match it bit for bit in fp32.
"""
from __future__ import annotations

import math
from typing import Mapping

import torch

ROPE_SCALING_TYPES = ("none", "linear", "llama3")


def inv_frequencies(dim: int, base: float = 10000.0, scaling: Mapping | None = None) -> torch.Tensor:
    """theta_i = base^(-2i/dim), i < dim/2, with the configured scaling applied."""
    inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    kind = (scaling or {}).get("type", "none")
    if kind == "linear":
        inv = inv / float(scaling["factor"])
    elif kind == "llama3":
        factor, lo, hi = float(scaling["factor"]), float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
        old = float(scaling["original_max_position_embeddings"])
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > old / lo, inv / factor, inv)
        smooth = (old / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < old / hi) * ~(wavelen > old / lo)
        inv = torch.where(medium, smoothed, scaled)
    elif kind != "none":
        raise ValueError(f"block.rope_scaling.type: {kind!r} is not one of {', '.join(ROPE_SCALING_TYPES)}")
    return inv


def rope_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin of shape (B or 1, 1, T, dim) for position ids (T,) or (B, T)."""
    pos = positions if positions.dim() == 2 else positions[None, :]
    freqs = (inv_freq.to(pos.device)[None, :, None].float() @ pos[:, None, :].float()).transpose(1, 2)  # (B, T, d/2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype)[:, None], emb.sin().to(dtype)[:, None]


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the first ``cos.shape[-1]`` dims of x (B, H, T, D); the rest pass through (partial rotary)."""
    r = cos.shape[-1]
    if r == x.shape[-1]:
        return x * cos + rotate_half(x) * sin
    rot, rest = x[..., :r], x[..., r:]
    return torch.cat((rot * cos + rotate_half(rot) * sin, rest), dim=-1)
