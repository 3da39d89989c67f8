"""Fused RMSNorm and LayerNorm in Triton, forward and backward.

RMSNorm (Zhang & Sennrich, "Root Mean Square Layer Normalization", NeurIPS 2019, arXiv 1910.07467):
    y = x / sqrt(mean(x^2) + eps) * w
LayerNorm (Ba, Kiros & Hinton, "Layer Normalization", arXiv 1607.06450):
    y = (x - mean(x)) / sqrt(var(x) + eps) * w + b

Both share one forward and one backward kernel; ``IS_RMS`` is a constexpr, so the mean branch compiles
away for RMSNorm (RMSNorm is LayerNorm with the mean fixed at zero and no bias). This is the kernel the
``rmsnorm_speed`` claim (C4) times.

Layering, as in Triton tutorial 05-layer-norm and Liger-Kernel ``ops/rms_norm.py``:
``_norm_fwd_kernel`` / ``_norm_bwd_kernel`` (``@triton.jit``) -> ``_norm_forward`` / ``_norm_backward``
(host launchers; heuristics in ``norm_launch_config``) -> ``_NormFunction`` (autograd) ->
``rms_norm`` / ``layer_norm`` (functional) -> ``RMSNorm`` / ``LayerNorm`` (modules).

Statistics and arithmetic are fp32 whatever the input dtype (fp32, fp16, bf16); outputs and input
gradients come back in the input's dtype, weight/bias gradients in the parameters' dtype.
"""
from __future__ import annotations

import numbers

import torch
import triton
import triton.language as tl

from ._runtime import check_device, next_power_of_2, sm_count

#: Largest hidden size served: one row is held in registers as a single block of BLOCK_N fp32 values.
MAX_HIDDEN = 65536


@triton.jit
def _norm_fwd_kernel(
    X,  # input, (M, N), last dim contiguous
    x_row_stride,
    Y,  # output, (M, N), last dim contiguous
    y_row_stride,
    W,  # weight (N,) or dummy when HAS_WEIGHT is False
    B,  # bias (N,) or dummy when HAS_BIAS is False
    Mean,  # (M,) fp32, written only for LayerNorm
    Rstd,  # (M,) fp32, 1 / sqrt(var + eps), saved for the backward
    N,  # hidden size
    eps,
    IS_RMS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """One program normalises one row.

    RMSNorm:   rstd = 1/sqrt(sum(x^2)/N + eps),            y = x * rstd * w
    LayerNorm: mu = sum(x)/N, rstd = 1/sqrt(sum((x-mu)^2)/N + eps), y = (x - mu) * rstd * w + b
    """
    # int64 row index: M * row_stride can exceed 2^31 for large activations.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N  # BLOCK_N is N rounded up to a power of two; the tail is masked.
    # Load in the storage dtype, compute in fp32 (also required by the interpreter, whose bf16
    # arithmetic is wrong).
    x = tl.load(X + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    if IS_RMS:
        xc = x
    else:
        mean = tl.sum(x, axis=0) / N
        tl.store(Mean + row, mean)
        # Zero the masked tail so it does not contribute (x - mean) to the variance.
        xc = tl.where(mask, x - mean, 0.0)
    var = tl.sum(xc * xc, axis=0) / N
    rstd = 1.0 / tl.sqrt(var + eps)
    tl.store(Rstd + row, rstd)
    y = xc * rstd
    if HAS_WEIGHT:
        y = y * tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_BIAS:
        y = y + tl.load(B + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + row * y_row_stride + cols, y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _norm_bwd_kernel(
    X,  # saved input (M, N)
    x_row_stride,
    DY,  # upstream gradient (M, N)
    dy_row_stride,
    DX,  # input gradient (M, N), written
    dx_row_stride,
    W,  # weight (N,) or dummy
    Mean,  # (M,) fp32 (LayerNorm only)
    Rstd,  # (M,) fp32
    DW,  # (P, N) fp32 partial weight gradients, one row per program
    DB,  # (P, N) fp32 partial bias gradients, one row per program
    M,
    N,
    rows_per_program,
    IS_RMS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Each program walks a contiguous band of rows (Liger-Kernel's layout): it writes dx row by
    row and keeps the weight/bias gradient of its band in registers, so dw/db need one (P, N)
    partial buffer summed on the host instead of atomics or an (M, N) temporary.

    With xhat = (x - mu) * rstd (mu = 0 for RMSNorm) and g = dy * w:
        dx = rstd * (g - xhat * mean(g * xhat) - mean(g))   (the mean(g) term is LayerNorm only)
        dw = sum_rows(dy * xhat),  db = sum_rows(dy)
    """
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    row_start = pid * rows_per_program
    row_end = tl.minimum(row_start + rows_per_program, M)
    if HAS_WEIGHT:
        w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    dw_acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    db_acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for r in range(row_start, row_end):
        row = tl.cast(r, tl.int64)
        x = tl.load(X + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + row * dy_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(Rstd + row)
        if IS_RMS:
            xhat = x * rstd
        else:
            mean = tl.load(Mean + row)
            xhat = tl.where(mask, (x - mean) * rstd, 0.0)
        if HAS_WEIGHT:
            g = dy * w
        else:
            g = dy
        c1 = tl.sum(xhat * g, axis=0) / N
        if IS_RMS:
            dx = (g - xhat * c1) * rstd
        else:
            c2 = tl.sum(g, axis=0) / N
            dx = (g - xhat * c1 - c2) * rstd
        tl.store(DX + row * dx_row_stride + cols, dx.to(DX.dtype.element_ty), mask=mask)
        if HAS_WEIGHT:
            dw_acc += dy * xhat
        if HAS_BIAS:
            db_acc += dy
    if HAS_WEIGHT:
        tl.store(DW + pid * N + cols, dw_acc, mask=mask)
    if HAS_BIAS:
        tl.store(DB + pid * N + cols, db_acc, mask=mask)


def norm_launch_config(n: int) -> tuple[int, int]:
    """(BLOCK_N, num_warps) for a row of ``n`` elements: the whole row in one block; more warps for
    wider rows so each thread keeps <= ~64 fp32 values in registers (Liger's calculate_settings)."""
    if n > MAX_HIDDEN:
        raise ValueError(f"hidden size (x.shape[-1]) = {n} exceeds the supported maximum {MAX_HIDDEN}")
    block = next_power_of_2(n)
    if block >= 32768:
        warps = 32
    elif block >= 8192:
        warps = 16
    elif block >= 2048:
        warps = 8
    else:
        warps = 4
    return block, warps


def _as_rows(t: torch.Tensor) -> torch.Tensor:
    """(..., N) -> (M, N) with a contiguous last dim; a view whenever the strides allow it, so a
    strided input (e.g. a column slice) is read in place through its row stride."""
    if t.stride(-1) != 1:
        t = t.contiguous()
    t2 = t.reshape(-1, t.shape[-1])
    if t2.shape[0] > 1 and t2.stride(1) != 1:  # reshape of an odd layout may return a copy; keep dim 1 dense
        t2 = t2.contiguous()
    return t2


def _norm_forward(x2, weight, bias, eps, is_rms):
    """Launch the forward kernel on (M, N) rows; returns (y2, mean or None, rstd)."""
    m, n = x2.shape
    block, warps = norm_launch_config(n)
    y2 = torch.empty((m, n), dtype=x2.dtype, device=x2.device)
    rstd = torch.empty((m,), dtype=torch.float32, device=x2.device)
    mean = None if is_rms else torch.empty((m,), dtype=torch.float32, device=x2.device)
    if m > 0:
        _norm_fwd_kernel[(m,)](
            x2, x2.stride(0), y2, y2.stride(0),
            weight if weight is not None else x2, bias if bias is not None else x2,
            mean if mean is not None else rstd, rstd,
            n, float(eps),
            IS_RMS=is_rms, HAS_WEIGHT=weight is not None, HAS_BIAS=bias is not None,
            BLOCK_N=block, num_warps=warps,
        )
    return y2, mean, rstd


def _norm_backward(dy2, x2, weight, has_bias, mean, rstd, is_rms):
    """Launch the backward kernel; returns (dx2, dw or None, db or None)."""
    m, n = x2.shape
    block, warps = norm_launch_config(n)
    dx2 = torch.empty((m, n), dtype=x2.dtype, device=x2.device)
    # Persistent grid: one program per SM on GPU, each owning a band of rows.
    programs = max(1, min(m, sm_count(x2.device)))
    rows_per_program = triton.cdiv(m, programs) if m > 0 else 1
    dw_part = torch.empty((programs, n), dtype=torch.float32, device=x2.device) if weight is not None else None
    db_part = torch.empty((programs, n), dtype=torch.float32, device=x2.device) if has_bias else None
    if m > 0:
        _norm_bwd_kernel[(programs,)](
            x2, x2.stride(0), dy2, dy2.stride(0), dx2, dx2.stride(0),
            weight if weight is not None else x2,
            mean if mean is not None else rstd, rstd,
            dw_part if dw_part is not None else rstd, db_part if db_part is not None else rstd,
            m, n, rows_per_program,
            IS_RMS=is_rms, HAS_WEIGHT=weight is not None, HAS_BIAS=has_bias,
            BLOCK_N=block, num_warps=warps,
        )
    dw = None
    db = None
    if weight is not None:
        dw = (dw_part.sum(0) if m > 0 else torch.zeros(n, device=x2.device)).to(weight.dtype)
    if has_bias:
        db = (db_part.sum(0) if m > 0 else torch.zeros(n, device=x2.device))
    return dx2, dw, db


class _NormFunction(torch.autograd.Function):
    """Autograd wrapper: saves x, weight and the fp32 row statistics (not the output)."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps, is_rms):
        x2 = _as_rows(x)
        y2, mean, rstd = _norm_forward(x2, weight, bias, eps, is_rms)
        ctx.save_for_backward(x2, weight, mean, rstd)
        ctx.is_rms = is_rms
        ctx.has_bias = bias is not None
        ctx.bias_dtype = bias.dtype if bias is not None else None
        ctx.x_shape = x.shape
        return y2.view(x.shape)

    @staticmethod
    def backward(ctx, dy):
        x2, weight, mean, rstd = ctx.saved_tensors
        dy2 = _as_rows(dy)
        dx2, dw, db = _norm_backward(dy2, x2, weight, ctx.has_bias, mean, rstd, ctx.is_rms)
        if db is not None:
            db = db.to(ctx.bias_dtype)
        return dx2.view(ctx.x_shape), dw, db, None, None


def _check_norm_args(x, weight, bias, eps, name):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: x must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() < 1:
        raise ValueError(f"{name}: x must have at least one dimension (the hidden size), got a scalar")
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(f"{name}: x.dtype must be float32, float16 or bfloat16, got {x.dtype}")
    n = x.shape[-1]
    for pname, p in (("weight", weight), ("bias", bias)):
        if p is None:
            continue
        if p.shape != (n,):
            raise ValueError(f"{name}: {pname} must have shape ({n},) to match x.shape[-1], got {tuple(p.shape)}")
        if p.device != x.device:
            raise ValueError(f"{name}: {pname} is on {p.device} but x is on {x.device}")
    if not isinstance(eps, numbers.Real) or eps < 0:
        raise ValueError(f"{name}: eps must be a non-negative number, got {eps!r}")
    norm_launch_config(n)  # raises ValueError for an unsupported hidden size
    check_device(x, weight, bias)


def _dense(p: torch.Tensor | None) -> torch.Tensor | None:
    """The kernels read ``W + cols`` (unit stride): a strided view (``w[::2]``) is copied first. ``contiguous``
    is differentiable, so the gradient still reaches the viewed parameter."""
    return p if p is None or p.is_contiguous() else p.contiguous()


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last dim of ``x`` (any leading dims); ``weight`` (N,) or None.
    Differentiable in ``x`` and ``weight``; fp32 statistics; returns x's dtype and shape."""
    _check_norm_args(x, weight, None, eps, "rms_norm")
    return _NormFunction.apply(x, _dense(weight), None, eps, True)


def layer_norm(x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
               eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm over the last dim of ``x``; ``weight``/``bias`` (N,) or None.
    Differentiable in ``x``, ``weight`` and ``bias``; fp32 statistics; returns x's dtype and shape."""
    _check_norm_args(x, weight, bias, eps, "layer_norm")
    return _NormFunction.apply(x, _dense(weight), _dense(bias), eps, False)


def _hidden(normalized_shape) -> int:
    if isinstance(normalized_shape, numbers.Integral):
        return int(normalized_shape)
    shape = tuple(normalized_shape)
    if len(shape) != 1:
        raise ValueError(f"normalized_shape must be an int or a 1-tuple (last dim only), got {shape}")
    return int(shape[0])


class RMSNorm(torch.nn.Module):
    """Module form of `rms_norm` (weight initialised to ones, like torch.nn.RMSNorm)."""

    def __init__(self, normalized_shape, eps: float = 1e-6, elementwise_affine: bool = True,
                 device=None, dtype=None):
        super().__init__()
        self.hidden = _hidden(normalized_shape)
        self.eps = eps
        if elementwise_affine:
            self.weight = torch.nn.Parameter(torch.ones(self.hidden, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps)

    def extra_repr(self):
        return f"{self.hidden}, eps={self.eps}, elementwise_affine={self.weight is not None}"


class LayerNorm(torch.nn.Module):
    """Module form of `layer_norm` (weight ones, bias zeros, like torch.nn.LayerNorm)."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True,
                 bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.hidden = _hidden(normalized_shape)
        self.eps = eps
        if elementwise_affine:
            self.weight = torch.nn.Parameter(torch.ones(self.hidden, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
        if elementwise_affine and bias:
            self.bias = torch.nn.Parameter(torch.zeros(self.hidden, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)

    def forward(self, x):
        return layer_norm(x, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return f"{self.hidden}, eps={self.eps}, elementwise_affine={self.weight is not None}"
