"""8-bit matrix multiplication: absmax and vector-wise int8, and LLM.int8() (Dettmers et al., NeurIPS 2022,
arXiv 2208.07339).

For an ``nn.Linear`` with weight W (out, in) and input X (tokens, in), C = X W^T:

- absmax (Section 2.1, Eq. 1): one scale for the whole tensor, s = 127 / max|X| (and 127 / max|W|);
  X_i8 = round(s_x X), C ~= (X_i8 W_i8^T) / (s_x s_w), the int32 product of int8 codes;
- vector-wise (Section 3.1, Eq. 4): one scale per row of X (per token) and one per output channel of W (a row of
  the torch weight, a column of the paper's W in X W), C ~= (X_i8 W_i8^T) / (c_x c_w^T) (outer product of the
  row- and column-wise normalisation constants);
- LLM.int8() (Section 3.2, Eq. 7): mixed-precision decomposition. The feature dimensions O = {j : max_t |X_tj| >=
  ``threshold``} (6.0, the paper's alpha) are multiplied in 16 bits, all others with vector-wise int8:
  C ~= X_O W_O^T (16-bit) + vector-wise int8 (X_{not O}, W_{not O}). The weights are stored in int8 only (the
  memory halving of the paper); the outlier columns of W are dequantized from their int8 codes to 16 bits, as the
  bitsandbytes implementation (``Linear8bitLt``) does; X_O stays in 16 bits (float16 here).

Integer products are exact in float64 for these sizes (|sum| <= in x 127^2 < 2^53), so the int32 matmul is
computed as a float64 matmul of the int8 codes where no int8 kernel is used; ``torch._int_mm`` is the real int8
kernel and is only timed (repro.claims.quantization).
"""
from __future__ import annotations

import torch
from torch import nn


def absmax_quantize(x: torch.Tensor, dim: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """int8 codes round(127 / max|x| * x) (Eq. 1, s = 127 / ||x||_inf over ``dim``, keepdim; the whole tensor if
    None) and the dequantization scale max|x| / 127."""
    amax = (x.abs().amax() if dim is None else x.abs().amax(dim=dim, keepdim=True)).float().clamp(min=1e-12)
    return torch.clamp(torch.round(x.float() * (127.0 / amax)), -127, 127).to(torch.int8), amax / 127.0


def int8_product(xq: torch.Tensor, wq: torch.Tensor) -> torch.Tensor:
    """The exact integer product X_i8 W_i8^T (tokens, out), as float64."""
    return xq.double() @ wq.double().t()


def matmul_absmax(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Tensor-wise absmax int8 X W^T (Eq. 1 and 2)."""
    xq, sx = absmax_quantize(x)
    wq, sw = absmax_quantize(w)
    return (int8_product(xq, wq) * (sx.double() * sw.double())).to(x.dtype)


def matmul_vectorwise(x: torch.Tensor, w: torch.Tensor, wq=None, sw=None) -> torch.Tensor:
    """Vector-wise int8 X W^T (Eq. 4): row-wise scales of X (tokens), row-wise scales of W (output channels)."""
    xq, sx = absmax_quantize(x, dim=1)  # (tokens, 1)
    if wq is None:
        wq, sw = absmax_quantize(w, dim=1)  # (out, 1)
    return (int8_product(xq, wq) * (sx.double() @ sw.double().t())).to(x.dtype)


def outlier_dims(x: torch.Tensor, threshold: float) -> torch.Tensor:
    """Indices of the feature dimensions (columns of x (tokens, in)) with any |value| >= threshold."""
    return torch.nonzero(x.abs().amax(0) >= threshold).flatten()


def matmul_llm_int8(x: torch.Tensor, wq: torch.Tensor, sw: torch.Tensor, threshold: float = 6.0):
    """LLM.int8() X W^T from the stored int8 weight (codes ``wq`` (out, in), scales ``sw`` (out, 1)) (Eq. 7).

    Returns (output, outlier column indices)."""
    cols = outlier_dims(x, threshold)
    if len(cols) == 0:
        return matmul_vectorwise(x, None, wq, sw), cols
    keep = torch.ones(x.shape[1], dtype=torch.bool, device=x.device)
    keep[cols] = False
    x16 = x[:, cols].to(torch.float16)
    w16 = (wq[:, cols].float() * sw).to(torch.float16)  # outlier weight columns dequantized to 16 bits
    high = (x16.float() @ w16.float().t()).to(torch.float16)  # a 16-bit result, accumulated in fp32 as on a GPU
    xr = x[:, keep]
    xq, sx = absmax_quantize(xr, dim=1)
    low = int8_product(xq, wq[:, keep]) * (sx.double() @ sw.double().t())
    return (high.double() + low).to(x.dtype), cols


class Int8Linear(nn.Module):
    """An ``nn.Linear`` whose weight is stored as int8 codes with one scale per output channel (or, for
    ``mode="absmax"``, one per tensor). ``mode``: "absmax" (tensor-wise), "vectorwise", or "llm_int8"
    (vector-wise with the outlier decomposition at ``threshold``). Counts of the values multiplied in 8 and in
    16 bits are kept in ``stats`` (inputs and weights, per call)."""

    def __init__(self, linear: nn.Linear, mode: str = "llm_int8", threshold: float = 6.0):
        super().__init__()
        if mode not in ("absmax", "vectorwise", "llm_int8"):
            raise ValueError(f"Int8Linear.mode: {mode!r} (valid: absmax, vectorwise, llm_int8)")
        self.mode, self.threshold = mode, threshold
        self.in_features, self.out_features = linear.in_features, linear.out_features
        w = linear.weight.detach()
        wq, sw = absmax_quantize(w, dim=None if mode == "absmax" else 1)
        self.register_buffer("weight_int8", wq)
        self.register_buffer("weight_scale", sw.reshape(-1, 1).float())  # fp32, as bitsandbytes' SCB
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().clone())
        self.stats = {"calls": 0, "x_values": 0, "x_values_16bit": 0, "w_values_16bit": 0, "outlier_dims": set()}

    def stored_bytes(self) -> dict:
        return {"codes": self.weight_int8.numel(), "scales": self.weight_scale.numel() * 4,
                "bias": 0 if self.bias is None else self.bias.numel() * self.bias.element_size()}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        if self.mode == "absmax":
            xq, sx = absmax_quantize(x2)
            y = (int8_product(xq, self.weight_int8) * (sx.double() * self.weight_scale.double())).to(x.dtype)
            cols = ()
        elif self.mode == "vectorwise":
            y, cols = matmul_vectorwise(x2, None, self.weight_int8, self.weight_scale), ()
        else:
            y, cols = matmul_llm_int8(x2, self.weight_int8, self.weight_scale, self.threshold)
        s = self.stats
        s["calls"] += 1
        s["x_values"] += x2.numel()
        s["x_values_16bit"] += x2.shape[0] * len(cols)
        s["w_values_16bit"] += self.out_features * len(cols)
        s["outlier_dims"].update(int(c) for c in cols)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*shape[:-1], self.out_features)
