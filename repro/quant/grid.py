"""Uniform integer grids for weights: round-to-nearest (RTN) quantization and bit packing.

The grid is the one of GPTQ's reference code (Frantar et al. 2023, arXiv 2210.17323, ``quant.py``) and of the
RTN baseline in its Tables 2-4: per output channel (one row of an ``nn.Linear`` weight ``(out, in)``) or per
group of ``group_size`` consecutive input columns, with ``maxq = 2^bits - 1`` levels above zero and

    asymmetric: scale = (max - min) / maxq,    zero = round(-min / scale)
    symmetric:  scale = 2 max|w| / maxq,       zero = (maxq + 1) / 2
    code q = clamp(round(w / scale) + zero, 0, maxq),   dequantized w_hat = scale (q - zero)

(the row range always includes 0, as in the reference, so an all-positive row still has 0 on its grid).
``pack_bits`` / ``unpack_bits`` store the codes densely (``bits`` bits each, little-endian within a byte stream),
which is what "weight bytes actually stored" counts.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class Grid:
    """Scale and zero point of a grid, broadcastable against the weight slice they were fitted to."""

    scale: torch.Tensor  # (rows, 1)
    zero: torch.Tensor  # (rows, 1), integer-valued float
    bits: int

    @property
    def maxq(self) -> int:
        return 2 ** self.bits - 1


def fit_grid(w: torch.Tensor, bits: int, sym: bool = False) -> Grid:
    """Per-row grid of ``w`` (rows, cols): the min-max fit of the reference ``Quantizer.find_params``."""
    if not 2 <= bits <= 8:
        raise ValueError(f"bits must be in 2..8, got {bits}")
    maxq = 2 ** bits - 1
    w = w.float()
    xmin = torch.minimum(w.min(1).values, torch.zeros(w.shape[0], device=w.device))
    xmax = torch.maximum(w.max(1).values, torch.zeros(w.shape[0], device=w.device))
    if sym:
        xmax = torch.maximum(xmin.abs(), xmax)
        xmin = torch.where(xmin < 0, -xmax, xmin)
    both_zero = (xmin == 0) & (xmax == 0)
    xmin, xmax = torch.where(both_zero, -1.0, xmin), torch.where(both_zero, 1.0, xmax)
    scale = (xmax - xmin) / maxq
    zero = torch.full_like(scale, (maxq + 1) / 2) if sym else torch.round(-xmin / scale)
    return Grid(scale.unsqueeze(1), zero.unsqueeze(1), bits)


def quantize(w: torch.Tensor, g: Grid) -> torch.Tensor:
    """Integer codes in [0, maxq] (as int16; float arithmetic as the reference)."""
    return torch.clamp(torch.round(w.float() / g.scale) + g.zero, 0, g.maxq).to(torch.int16)


def dequantize(q: torch.Tensor, g: Grid) -> torch.Tensor:
    return g.scale * (q.float() - g.zero)


def quantize_dequantize(w: torch.Tensor, g: Grid) -> torch.Tensor:
    return dequantize(quantize(w, g), g)


@dataclass
class QuantizedWeight:
    """Integer codes of a weight (out, in) with one grid per (row, group); ``g_idx[j]`` is the group of input
    column j (consecutive groups, or the activation-order groups of GPTQ)."""

    codes: torch.Tensor  # (out, in) int16 in [0, maxq]
    scale: torch.Tensor  # (out, n_groups)
    zero: torch.Tensor  # (out, n_groups)
    g_idx: torch.Tensor  # (in,) int64
    bits: int
    group_size: int  # input columns per group (= in for one grid per row)

    def dequantize(self) -> torch.Tensor:
        s, z = self.scale[:, self.g_idx], self.zero[:, self.g_idx]
        return s * (self.codes.float() - z)

    def stored_bytes(self, scale_bytes: int = 2) -> dict:
        """Bytes of the packed representation: codes and zeros at ``bits`` bits, scales in 16 bits, and the group
        index (int32 per input column) only when it is not the plain consecutive one."""
        n_in = self.codes.shape[1]
        consecutive = bool(torch.equal(self.g_idx.cpu(), _consecutive(n_in, self.group_size)))
        return {"codes": len(pack_bits(self.codes, self.bits)),
                "scales": self.scale.numel() * scale_bytes,
                "zeros": len(pack_bits(self.zero.round().to(torch.int16), self.bits)),
                "g_idx": 0 if consecutive else 4 * n_in}


def _consecutive(n_in: int, group_size: int) -> torch.Tensor:
    return torch.arange(n_in) // max(group_size, 1)


def rtn(w: torch.Tensor, bits: int, group_size: int | None = None, sym: bool = False) -> QuantizedWeight:
    """Round-to-nearest: each row (``group_size`` None) or each group of ``group_size`` consecutive input columns
    gets its own min-max grid; every weight goes to its nearest grid point independently."""
    out, n_in = w.shape
    gs = n_in if not group_size or group_size <= 0 else group_size
    if n_in % gs:
        raise ValueError(f"group_size {gs} does not divide the {n_in} input columns")
    codes, scales, zeros = [], [], []
    for j in range(0, n_in, gs):
        g = fit_grid(w[:, j:j + gs], bits, sym)
        codes.append(quantize(w[:, j:j + gs], g))
        scales.append(g.scale)
        zeros.append(g.zero)
    return QuantizedWeight(torch.cat(codes, 1), torch.cat(scales, 1), torch.cat(zeros, 1), _consecutive(n_in, gs),
                           bits, gs)


# ------------------------------------------------------------------------------------------------ bit packing
def pack_bits(codes: torch.Tensor, bits: int) -> bytes:
    """Pack non-negative integer codes (< 2^bits) densely into ceil(n * bits / 8) bytes (LSB first)."""
    v = codes.flatten().to(torch.int64).cpu().numpy()
    if v.size and (int(v.min()) < 0 or int(v.max()) >> bits):
        raise ValueError(f"a code does not fit in {bits} bits")
    bitplanes = ((v[:, None] >> np.arange(bits, dtype=v.dtype)) & 1).astype(np.uint8)  # (n, bits) LSB first
    return np.packbits(bitplanes.reshape(-1), bitorder="little").tobytes()


def unpack_bits(data: bytes, bits: int, n: int) -> torch.Tensor:
    """Inverse of :func:`pack_bits`: the first ``n`` codes (int16)."""
    flat = np.unpackbits(np.frombuffer(data, dtype=np.uint8), bitorder="little")[: n * bits].reshape(n, bits)
    vals = (flat.astype(np.int64) << np.arange(bits)).sum(1)
    return torch.from_numpy(vals).to(torch.int16)
