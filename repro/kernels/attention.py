"""FlashAttention in Triton: exact attention with a tiled online softmax, forward and backward.

Dao, Fu, Ermon, Rudra & Re, "FlashAttention: Fast and Memory-Efficient Exact Attention with
IO-Awareness", NeurIPS 2022 (arXiv 2205.14135); the loop order (queries outer in the forward, keys
outer for dK/dV and a separate dQ pass in the backward, no atomics) follows FlashAttention-2
(Dao, arXiv 2307.08691) and Triton tutorial 06-fused-attention. This is the kernel the
``flash_attention`` claim (C7) measures.

    O = softmax(scale * Q K^T + mask) V,   LSE_i = log sum_j exp(scale * q_i . k_j + mask_ij)

The forward never materialises the (Nq, Nk) score matrix: each program keeps a running max m_i, a
running denominator l_i and an unnormalised accumulator, rescaling them as key tiles stream by. It
saves LSE (natural log, fp32, (B, H, Nq)) so that the backward recomputes P = exp(S - LSE) tile by
tile. Masks: causal (key j visible to query i iff j <= i), optionally banded (sliding window W: also
i - W < j, as Mistral / FlashAttention-2's ``window_size``), a boolean key padding mask (B, Nk) with
True = padded (ignored), like ``torch.nn.MultiheadAttention``; rows whose keys are all masked give
output 0 (and LSE = +inf, so their recomputed P is 0 in the backward). Grouped-query attention: q has
H heads, k/v have Hkv heads, H % Hkv == 0, query head h reads kv head h // (H // Hkv); the dK/dV
program of a kv head loops over its group's query heads, so the sum over the group needs no atomics.

Layering: ``_attn_fwd_kernel`` / ``_attn_bwd_preprocess`` / ``_attn_bwd_dkdv_kernel`` /
``_attn_bwd_dq_kernel`` (``@triton.jit``) -> ``_flash_forward`` / ``_flash_backward`` (launchers;
tile heuristics in ``attention_launch_config``) -> ``_FlashAttentionFunction`` -> ``flash_attention``
-> ``FlashAttention`` (module).

Supported: fp32 / fp16 / bf16 (fp32 accumulation and statistics; fp32 dots use IEEE precision, not
TF32), head_dim in SUPPORTED_HEAD_DIMS, any sequence lengths >= 1 (tails masked), any strides with a
contiguous last dim (other layouts are copied).
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ._runtime import check_device, interpreter_enabled

SUPPORTED_HEAD_DIMS = (16, 32, 64, 128, 256)
_LOG2E = 1.4426950408889634  # softmax runs in base 2: exp(x) = exp2(x * log2(e)), exp2 is the fast path
_LN2 = 0.6931471805599453


@triton.jit
def _attn_fwd_inner(
    acc, l_i, m_i,
    q,  # (BLOCK_M, HEAD_DIM) query tile
    k_base, v_base,  # pointers to this (batch, kv head)'s K and V
    stride_kn, stride_vn,
    kpm_base,  # pointer to this batch's key padding mask row (uint8, 1 = padded)
    lo, hi,  # key range [lo, hi) this stage walks
    offs_m,
    N_K,
    WINDOW,  # sliding window: key j visible to query i iff i - WINDOW < j (when MASK_WINDOW)
    qk_scale,  # softmax scale * log2(e)
    HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr,
    MASK_CAUSAL: tl.constexpr, MASK_WINDOW: tl.constexpr, HAS_KPM: tl.constexpr, EVEN_N: tl.constexpr,
    UPCAST: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    """Stream key tiles [lo, hi) through the online softmax (shared by the stages of the causal
    forward: band edge, unmasked interior, diagonal; so the inner loop exists once)."""
    offs_n0 = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + offs_n0
        kv_in = offs_n < N_K
        # K is loaded transposed, (HEAD_DIM, BLOCK_N), so the score tile is a plain q @ kT.
        if EVEN_N:
            kt = tl.load(k_base + offs_n[None, :] * stride_kn + offs_d[:, None])
            v = tl.load(v_base + offs_n[:, None] * stride_vn + offs_d[None, :])
        else:
            kt = tl.load(k_base + offs_n[None, :] * stride_kn + offs_d[:, None], mask=kv_in[None, :], other=0.0)
            v = tl.load(v_base + offs_n[:, None] * stride_vn + offs_d[None, :], mask=kv_in[:, None], other=0.0)
        if UPCAST:  # the interpreter's bf16 arithmetic is wrong: compute in fp32 there
            kt = kt.to(tl.float32)
            v = v.to(tl.float32)
        s = tl.dot(q, kt, input_precision=DOT_PRECISION) * qk_scale  # base-2 logits
        if MASK_CAUSAL or MASK_WINDOW or HAS_KPM or (not EVEN_N):
            valid = kv_in[None, :]
            if HAS_KPM:
                pad = tl.load(kpm_base + offs_n, mask=kv_in, other=1)
                valid = valid & (pad == 0)[None, :]
            if MASK_CAUSAL:
                valid = valid & (offs_m[:, None] >= offs_n[None, :])
            if MASK_WINDOW:
                valid = valid & (offs_n[None, :] > offs_m[:, None] - WINDOW)
            s = tl.where(valid, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        # While every key seen by a row is masked, m_new is -inf; shift by 0 instead so that
        # exp2(-inf - shift) is 0 and not NaN (-inf - -inf).
        m_shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(s - m_shift[:, None])
        alpha = tl.exp2(m_i - m_shift)  # rescales what was accumulated under the old max
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=DOT_PRECISION)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _attn_fwd_kernel(
    Q, K, V, O,
    LSE,  # (B, H, N_Q) fp32, natural-log log-sum-exp per query row, saved for the backward
    KPM,  # (B, N_K) uint8 key padding mask (1 = padded) or a dummy when HAS_KPM is False
    stride_qb, stride_qh, stride_qm,
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om,
    stride_kpm_b,
    H, N_Q, N_K,
    GROUP,  # query heads per kv head (H // Hkv)
    WINDOW,  # sliding window (keys per query, itself included) when HAS_WINDOW
    qk_scale,  # softmax scale * log2(e)
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, HAS_KPM: tl.constexpr, EVEN_N: tl.constexpr,
    UPCAST: tl.constexpr, DOT_PRECISION: tl.constexpr, HAS_WINDOW: tl.constexpr,
):
    """Grid (cdiv(N_Q, BLOCK_M), B * H): one program owns BLOCK_M query rows of one head.
    Causal: key tiles strictly left of the query tile need no mask (stage 1); only the diagonal
    tile(s) pay for the causal compare (stage 2), and tiles right of it are never loaded.
    Sliding window (HAS_WINDOW, causal only; FlashAttention-2's ``window_size=(WINDOW - 1, 0)``):
    key tiles entirely left of every row's band are never loaded, tiles the band covers only
    partly (its left edge) pay for the window compare (stage 0), the interior stays unmasked."""
    start_m = tl.program_id(0)
    off_bh = tl.program_id(1)
    off_b = (off_bh // H).to(tl.int64)
    off_h = (off_bh % H).to(tl.int64)
    off_hkv = off_h // GROUP
    q_base = Q + off_b * stride_qb + off_h * stride_qh
    k_base = K + off_b * stride_kb + off_hkv * stride_kh
    v_base = V + off_b * stride_vb + off_hkv * stride_vh
    o_base = O + off_b * stride_ob + off_h * stride_oh
    kpm_base = KPM + off_b * stride_kpm_b

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    m_in = offs_m < N_Q
    q = tl.load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :], mask=m_in[:, None], other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)
    if CAUSAL:
        diag = start_m * BLOCK_M  # BLOCK_M is a multiple of BLOCK_N, so tiles align with the diagonal
        mid = 0  # key tiles in [mid, diag) are visible to every row of this tile
        if HAS_WINDOW:
            # first key tile any row sees (row diag sees keys > diag - WINDOW); tiles before it are skipped.
            # Operands are clamped at 0 before dividing (integer division of negatives differs by backend).
            lo = tl.maximum(diag - WINDOW + 1, 0) // BLOCK_N * BLOCK_N
            # first tile inside the band of the tile's last row (diag + BLOCK_M - 1), rounded up to a tile
            mid = (tl.maximum(diag + BLOCK_M - WINDOW, 0) + BLOCK_N - 1) // BLOCK_N * BLOCK_N
            mid = tl.minimum(tl.maximum(mid, lo), diag)
            acc, l_i, m_i = _attn_fwd_inner(
                acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, kpm_base, lo, mid, offs_m, N_K, WINDOW,
                qk_scale, HEAD_DIM, BLOCK_N, False, True, HAS_KPM, EVEN_N, UPCAST, DOT_PRECISION)
        acc, l_i, m_i = _attn_fwd_inner(
            acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, kpm_base, mid, diag, offs_m, N_K, WINDOW,
            qk_scale, HEAD_DIM, BLOCK_N, False, False, HAS_KPM, EVEN_N, UPCAST, DOT_PRECISION)
        acc, l_i, m_i = _attn_fwd_inner(
            acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, kpm_base,
            diag, tl.minimum(diag + BLOCK_M, N_K), offs_m, N_K, WINDOW, qk_scale,
            HEAD_DIM, BLOCK_N, True, HAS_WINDOW, HAS_KPM, EVEN_N, UPCAST, DOT_PRECISION)
    else:
        acc, l_i, m_i = _attn_fwd_inner(
            acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, kpm_base, 0, N_K, offs_m, N_K, WINDOW,
            qk_scale, HEAD_DIM, BLOCK_N, False, False, HAS_KPM, EVEN_N, UPCAST, DOT_PRECISION)
    # Fully masked rows have l_i == 0: output 0, LSE = +inf (so exp(s - LSE) = 0 in the backward).
    empty = l_i == 0.0
    l_safe = tl.where(empty, 1.0, l_i)
    o = acc / l_safe[:, None]
    lse = tl.where(empty, float("inf"), (m_i + tl.log2(l_safe)) * 0.6931471805599453)
    tl.store(LSE + off_bh.to(tl.int64) * N_Q + offs_m, lse, mask=m_in)
    tl.store(o_base + offs_m[:, None] * stride_om + offs_d[None, :], o.to(O.dtype.element_ty), mask=m_in[:, None])


@triton.jit
def _attn_bwd_preprocess(
    O, DO, DELTA,
    stride_ob, stride_oh, stride_om,
    stride_dob, stride_doh, stride_dom,
    H, N_Q,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
):
    """delta_i = sum_d O_id * dO_id = sum_j P_ij dP_ij, the row term of the softmax gradient
    dS = P * (dP - delta)."""
    start_m = tl.program_id(0)
    off_bh = tl.program_id(1)
    off_b = (off_bh // H).to(tl.int64)
    off_h = (off_bh % H).to(tl.int64)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    m_in = offs_m < N_Q
    o = tl.load(O + off_b * stride_ob + off_h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :],
                mask=m_in[:, None], other=0.0).to(tl.float32)
    do = tl.load(DO + off_b * stride_dob + off_h * stride_doh + offs_m[:, None] * stride_dom + offs_d[None, :],
                 mask=m_in[:, None], other=0.0).to(tl.float32)
    tl.store(DELTA + off_bh.to(tl.int64) * N_Q + offs_m, tl.sum(o * do, 1), mask=m_in)


@triton.jit
def _attn_bwd_dkdv_kernel(
    Q, K, V, DO, DK, DV, LSE, DELTA, KPM,
    stride_qb, stride_qh, stride_qm,
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    stride_dob, stride_doh, stride_dom,
    stride_dkb, stride_dkh, stride_dkn,
    stride_dvb, stride_dvh, stride_dvn,
    stride_kpm_b,
    H, HKV, N_Q, N_K, GROUP, WINDOW,
    sm_scale, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, HAS_KPM: tl.constexpr, EVEN_N: tl.constexpr,
    UPCAST: tl.constexpr, DOT_PRECISION: tl.constexpr, HAS_WINDOW: tl.constexpr,
):
    """Grid (cdiv(N_K, BLOCK_N), B * Hkv): one program owns BLOCK_N keys of one kv head and walks
    every query tile of every query head in its group that can see them (GQA sum without atomics;
    with a sliding window only the queries i < j + WINDOW of its keys j):
        P^T = exp(scale * K Q^T - LSE),  dV += P^T dO,  dP^T = V dO^T,
        dS^T = P^T * (dP^T - delta),     dK += scale * dS^T Q."""
    start_n = tl.program_id(0) * BLOCK_N
    off_bkv = tl.program_id(1)
    off_b = (off_bkv // HKV).to(tl.int64)
    off_hkv = (off_bkv % HKV).to(tl.int64)
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_m0 = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    kv_in = offs_n < N_K
    k = tl.load(K + off_b * stride_kb + off_hkv * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :],
                mask=kv_in[:, None], other=0.0)
    v = tl.load(V + off_b * stride_vb + off_hkv * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :],
                mask=kv_in[:, None], other=0.0)
    if UPCAST:
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    key_ok = kv_in
    if HAS_KPM:
        pad = tl.load(KPM + off_b * stride_kpm_b + offs_n, mask=kv_in, other=1)
        key_ok = key_ok & (pad == 0)
    dk = tl.zeros((BLOCK_N, HEAD_DIM), dtype=tl.float32)
    dv = tl.zeros((BLOCK_N, HEAD_DIM), dtype=tl.float32)
    # Causal: queries before this key tile never see it; start at the query tile holding row start_n.
    lo = (start_n // BLOCK_M) * BLOCK_M if CAUSAL else 0
    hi = N_Q
    if HAS_WINDOW:  # the last query that sees this tile's last key: start_n + BLOCK_N - 1 + WINDOW - 1
        hi = tl.minimum(N_Q, start_n + BLOCK_N + WINDOW - 1)
    for g in range(0, GROUP):
        off_h = off_hkv * GROUP + g
        q_base = Q + off_b * stride_qb + off_h * stride_qh
        do_base = DO + off_b * stride_dob + off_h * stride_doh
        row_base = (off_b * H + off_h) * N_Q
        for start_m in range(lo, hi, BLOCK_M):
            offs_m = start_m + offs_m0
            m_in = offs_m < N_Q
            # Q and dO are loaded transposed, (HEAD_DIM, BLOCK_M), so both products are plain dots.
            qt = tl.load(q_base + offs_m[None, :] * stride_qm + offs_d[:, None], mask=m_in[None, :], other=0.0)
            do = tl.load(do_base + offs_m[:, None] * stride_dom + offs_d[None, :], mask=m_in[:, None], other=0.0)
            if UPCAST:
                qt = qt.to(tl.float32)
                do = do.to(tl.float32)
            # Rows past N_Q read LSE = +inf, so their P is exactly 0.
            lse = tl.load(LSE + row_base + offs_m, mask=m_in, other=float("inf")) * 1.4426950408889634
            delta = tl.load(DELTA + row_base + offs_m, mask=m_in, other=0.0)
            st = tl.dot(k, qt, input_precision=DOT_PRECISION) * qk_scale  # (BLOCK_N, BLOCK_M), base 2
            pt = tl.exp2(st - lse[None, :])
            if CAUSAL or HAS_KPM or (not EVEN_N):
                valid = key_ok[:, None]
                if CAUSAL:
                    valid = valid & (offs_m[None, :] >= offs_n[:, None])
                if HAS_WINDOW:
                    valid = valid & (offs_n[:, None] > offs_m[None, :] - WINDOW)
                pt = tl.where(valid, pt, 0.0)
            dv = tl.dot(pt.to(do.dtype), do, dv, input_precision=DOT_PRECISION)
            dpt = tl.dot(v, tl.trans(do), input_precision=DOT_PRECISION)
            dst = pt * (dpt - delta[None, :])
            dk = tl.dot(dst.to(qt.dtype), tl.trans(qt), dk, input_precision=DOT_PRECISION)
    dk = dk * sm_scale
    tl.store(DK + off_b * stride_dkb + off_hkv * stride_dkh + offs_n[:, None] * stride_dkn + offs_d[None, :],
             dk.to(DK.dtype.element_ty), mask=kv_in[:, None])
    tl.store(DV + off_b * stride_dvb + off_hkv * stride_dvh + offs_n[:, None] * stride_dvn + offs_d[None, :],
             dv.to(DV.dtype.element_ty), mask=kv_in[:, None])


@triton.jit
def _attn_bwd_dq_kernel(
    Q, K, V, DO, DQ, LSE, DELTA, KPM,
    stride_qb, stride_qh, stride_qm,
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    stride_dob, stride_doh, stride_dom,
    stride_dqb, stride_dqh, stride_dqm,
    stride_kpm_b,
    H, N_Q, N_K, GROUP, WINDOW,
    sm_scale, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, HAS_KPM: tl.constexpr, EVEN_N: tl.constexpr,
    UPCAST: tl.constexpr, DOT_PRECISION: tl.constexpr, HAS_WINDOW: tl.constexpr,
):
    """Grid (cdiv(N_Q, BLOCK_M), B * H): dQ = scale * sum_j dS_ij k_j, with
    dS = P * (dO V^T - delta) and P recomputed from the saved LSE; with a sliding window the key
    tiles left of the band are skipped as in the forward."""
    start_m = tl.program_id(0)
    off_bh = tl.program_id(1)
    off_b = (off_bh // H).to(tl.int64)
    off_h = (off_bh % H).to(tl.int64)
    off_hkv = off_h // GROUP
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n0 = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    m_in = offs_m < N_Q
    q = tl.load(Q + off_b * stride_qb + off_h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :],
                mask=m_in[:, None], other=0.0)
    do = tl.load(DO + off_b * stride_dob + off_h * stride_doh + offs_m[:, None] * stride_dom + offs_d[None, :],
                 mask=m_in[:, None], other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
        do = do.to(tl.float32)
    row_base = off_bh.to(tl.int64) * N_Q
    lse = tl.load(LSE + row_base + offs_m, mask=m_in, other=float("inf")) * 1.4426950408889634
    delta = tl.load(DELTA + row_base + offs_m, mask=m_in, other=0.0)
    k_base = K + off_b * stride_kb + off_hkv * stride_kh
    v_base = V + off_b * stride_vb + off_hkv * stride_vh
    kpm_base = KPM + off_b * stride_kpm_b
    dq = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)
    hi = tl.minimum((start_m + 1) * BLOCK_M, N_K) if CAUSAL else N_K
    lo = 0
    if HAS_WINDOW:
        lo = tl.maximum(start_m * BLOCK_M - WINDOW + 1, 0) // BLOCK_N * BLOCK_N
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + offs_n0
        kv_in = offs_n < N_K
        # K and V loaded transposed, (HEAD_DIM, BLOCK_N).
        kt = tl.load(k_base + offs_n[None, :] * stride_kn + offs_d[:, None], mask=kv_in[None, :], other=0.0)
        vt = tl.load(v_base + offs_n[None, :] * stride_vn + offs_d[:, None], mask=kv_in[None, :], other=0.0)
        if UPCAST:
            kt = kt.to(tl.float32)
            vt = vt.to(tl.float32)
        s = tl.dot(q, kt, input_precision=DOT_PRECISION) * qk_scale
        p = tl.exp2(s - lse[:, None])
        if CAUSAL or HAS_KPM or (not EVEN_N):
            valid = kv_in[None, :]
            if HAS_KPM:
                pad = tl.load(kpm_base + offs_n, mask=kv_in, other=1)
                valid = valid & (pad == 0)[None, :]
            if CAUSAL:
                valid = valid & (offs_m[:, None] >= offs_n[None, :])
            if HAS_WINDOW:
                valid = valid & (offs_n[None, :] > offs_m[:, None] - WINDOW)
            p = tl.where(valid, p, 0.0)
        dp = tl.dot(do, vt, input_precision=DOT_PRECISION)
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(kt.dtype), tl.trans(kt), dq, input_precision=DOT_PRECISION)
    dq = dq * sm_scale
    tl.store(DQ + off_b * stride_dqb + off_h * stride_dqh + offs_m[:, None] * stride_dqm + offs_d[None, :],
             dq.to(DQ.dtype.element_ty), mask=m_in[:, None])


def attention_launch_config(head_dim: int, dtype: torch.dtype, device: torch.device) -> dict:
    """Tile sizes and launch parameters, in one place.

    GPU values follow Triton tutorial 06 on Hopper (forward 128x64 tiles; backward 32x128 for
    dK/dV and 128x32 for dQ), halved for head_dim 256 to fit shared memory; fp32 tiles are halved
    too (twice the bytes per element). Under the interpreter, tiles are small: the interpreter runs
    programs one after another with numpy, so tile size only trades Python overhead for memory.
    Every tile is >= 16 because tl.dot needs dims >= 16 on GPU, and BLOCK_M_FWD is a multiple of
    BLOCK_N_FWD (the causal forward splits at a tile boundary on the diagonal)."""
    if device.type != "cuda":
        return dict(BLOCK_M_FWD=32, BLOCK_N_FWD=32, BLOCK_M_DKDV=32, BLOCK_N_DKDV=32,
                    BLOCK_M_DQ=32, BLOCK_N_DQ=32, fwd_warps=4, fwd_stages=1, bwd_warps=4, bwd_stages=1)
    big = head_dim >= 256 or dtype == torch.float32
    cfg = dict(BLOCK_M_FWD=128, BLOCK_N_FWD=64, BLOCK_M_DKDV=32, BLOCK_N_DKDV=128,
               BLOCK_M_DQ=128, BLOCK_N_DQ=32, fwd_warps=8 if head_dim >= 128 else 4, fwd_stages=3,
               bwd_warps=4, bwd_stages=3)
    if big:
        cfg.update(BLOCK_M_FWD=64, BLOCK_N_FWD=32, BLOCK_M_DKDV=16, BLOCK_N_DKDV=64,
                   BLOCK_M_DQ=64, BLOCK_N_DQ=16, fwd_stages=2, bwd_stages=2)
    if head_dim >= 256 and dtype == torch.float32:
        cfg.update(BLOCK_M_FWD=32, BLOCK_N_FWD=16, BLOCK_M_DKDV=16, BLOCK_N_DKDV=32,
                   BLOCK_M_DQ=32, BLOCK_N_DQ=16, fwd_stages=1, bwd_stages=1)
    return cfg


def _dense_last(t: torch.Tensor) -> torch.Tensor:
    """Kernels index the head dim with unit stride; copy only when that does not hold."""
    return t if t.stride(-1) == 1 else t.contiguous()


def _flash_forward(q, k, v, kpm, causal, scale, cfg, window=None):
    """Launch the forward kernel; returns (o, lse) with lse (B, H, Nq) fp32 natural log."""
    b, h, nq, d = q.shape
    hkv, nk = k.shape[1], k.shape[2]
    o = torch.empty((b, h, nq, d), dtype=q.dtype, device=q.device)
    lse = torch.empty((b, h, nq), dtype=torch.float32, device=q.device)
    bm, bn = cfg["BLOCK_M_FWD"], cfg["BLOCK_N_FWD"]
    grid = (triton.cdiv(nq, bm), b * h)
    _attn_fwd_kernel[grid](
        q, k, v, o, lse, kpm if kpm is not None else lse,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        o.stride(0), o.stride(1), o.stride(2),
        kpm.stride(0) if kpm is not None else 0,
        h, nq, nk, h // hkv, window or 0, scale * _LOG2E,
        HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal, HAS_KPM=kpm is not None,
        EVEN_N=nk % bn == 0, UPCAST=interpreter_enabled(), DOT_PRECISION=_dot_precision(q.dtype),
        HAS_WINDOW=window is not None, num_warps=cfg["fwd_warps"], num_stages=cfg["fwd_stages"],
    )
    return o, lse


def _flash_backward(do, q, k, v, o, lse, kpm, causal, scale, cfg, window=None):
    """Launch preprocess, dK/dV and dQ kernels; returns (dq, dk, dv)."""
    b, h, nq, d = q.shape
    hkv, nk = k.shape[1], k.shape[2]
    group = h // hkv
    upcast, prec = interpreter_enabled(), _dot_precision(q.dtype)
    delta = torch.empty_like(lse)
    pre_bm = 64
    _attn_bwd_preprocess[(triton.cdiv(nq, pre_bm), b * h)](
        o, do, delta, o.stride(0), o.stride(1), o.stride(2), do.stride(0), do.stride(1), do.stride(2),
        h, nq, HEAD_DIM=d, BLOCK_M=pre_bm,
    )
    dq = torch.empty_like(q, memory_format=torch.contiguous_format)
    dk = torch.empty_like(k, memory_format=torch.contiguous_format)
    dv = torch.empty_like(v, memory_format=torch.contiguous_format)
    kpm_arg = kpm if kpm is not None else lse
    kpm_stride = kpm.stride(0) if kpm is not None else 0
    bm, bn = cfg["BLOCK_M_DKDV"], cfg["BLOCK_N_DKDV"]
    _attn_bwd_dkdv_kernel[(triton.cdiv(nk, bn), b * hkv)](
        q, k, v, do, dk, dv, lse, delta, kpm_arg,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        do.stride(0), do.stride(1), do.stride(2),
        dk.stride(0), dk.stride(1), dk.stride(2),
        dv.stride(0), dv.stride(1), dv.stride(2),
        kpm_stride, h, hkv, nq, nk, group, window or 0, scale, scale * _LOG2E,
        HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal, HAS_KPM=kpm is not None,
        EVEN_N=nk % bn == 0, UPCAST=upcast, DOT_PRECISION=prec, HAS_WINDOW=window is not None,
        num_warps=cfg["bwd_warps"], num_stages=cfg["bwd_stages"],
    )
    bm, bn = cfg["BLOCK_M_DQ"], cfg["BLOCK_N_DQ"]
    _attn_bwd_dq_kernel[(triton.cdiv(nq, bm), b * h)](
        q, k, v, do, dq, lse, delta, kpm_arg,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        do.stride(0), do.stride(1), do.stride(2),
        dq.stride(0), dq.stride(1), dq.stride(2),
        kpm_stride, h, nq, nk, group, window or 0, scale, scale * _LOG2E,
        HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal, HAS_KPM=kpm is not None,
        EVEN_N=nk % bn == 0, UPCAST=upcast, DOT_PRECISION=prec, HAS_WINDOW=window is not None,
        num_warps=cfg["bwd_warps"], num_stages=cfg["bwd_stages"],
    )
    return dq, dk, dv


def _dot_precision(dtype: torch.dtype) -> str:
    # fp32 inputs: full IEEE products (TF32 would lose ~3 decimal digits); 16-bit inputs use the
    # tensor cores natively and the setting does not apply.
    return "ieee" if dtype == torch.float32 else "tf32"


class _FlashAttentionFunction(torch.autograd.Function):
    """Saves q, k, v, o and the fp32 LSE (B*H*Nq floats), never the (Nq, Nk) probabilities."""

    @staticmethod
    def forward(ctx, q, k, v, kpm, causal, scale, cfg, window):
        q, k, v = _dense_last(q), _dense_last(k), _dense_last(v)
        o, lse = _flash_forward(q, k, v, kpm, causal, scale, cfg, window)
        ctx.save_for_backward(q, k, v, o, lse, kpm)
        ctx.causal, ctx.scale, ctx.cfg, ctx.window = causal, scale, cfg, window
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse, kpm = ctx.saved_tensors
        dq, dk, dv = _flash_backward(_dense_last(do), q, k, v, o, lse, kpm, ctx.causal, ctx.scale, ctx.cfg,
                                     ctx.window)
        return dq, dk, dv, None, None, None, None, None


def _check_attention_args(q, k, v, causal, key_padding_mask, scale, window=None):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"flash_attention: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"flash_attention: {name} must be 4-D (batch, heads, seq, head_dim), got shape {tuple(t.shape)}")
        if t.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise ValueError(f"flash_attention: {name}.dtype must be float32, float16 or bfloat16, got {t.dtype}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"flash_attention: q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if k.device != q.device or v.device != q.device:
        raise ValueError(f"flash_attention: q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    b, h, nq, d = q.shape
    if k.shape != v.shape:
        raise ValueError(f"flash_attention: k and v must have the same shape, got k {tuple(k.shape)} and v {tuple(v.shape)}")
    if k.shape[0] != b or k.shape[3] != d:
        raise ValueError(f"flash_attention: k/v must be (batch={b}, kv_heads, seq, head_dim={d}), got {tuple(k.shape)}")
    hkv, nk = k.shape[1], k.shape[2]
    if hkv < 1 or h % hkv != 0:
        raise ValueError(f"flash_attention: q heads ({h}) must be a multiple of k/v heads ({hkv}) for grouped-query attention")
    if d not in SUPPORTED_HEAD_DIMS:
        raise ValueError(f"flash_attention: head_dim (q.shape[-1]) = {d} is not supported; supported: {SUPPORTED_HEAD_DIMS}")
    if nq < 1 or nk < 1:
        raise ValueError(f"flash_attention: sequence lengths must be >= 1, got q {nq} and k {nk}")
    if causal and nq != nk:
        raise ValueError(f"flash_attention: causal=True needs equal query and key lengths, got {nq} and {nk}")
    if key_padding_mask is not None:
        if not isinstance(key_padding_mask, torch.Tensor) or key_padding_mask.dtype != torch.bool:
            raise ValueError("flash_attention: key_padding_mask must be a bool tensor (True = padded key)")
        if tuple(key_padding_mask.shape) != (b, nk):
            raise ValueError(f"flash_attention: key_padding_mask must have shape (batch, k_seq) = ({b}, {nk}), "
                             f"got {tuple(key_padding_mask.shape)}")
        if key_padding_mask.device != q.device:
            raise ValueError(f"flash_attention: key_padding_mask is on {key_padding_mask.device}, q on {q.device}")
    if scale is not None and (not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0):
        raise ValueError(f"flash_attention: scale must be a positive finite number or None, got {scale!r}")
    if window is not None:
        if not isinstance(window, int) or isinstance(window, bool) or window < 1:
            raise ValueError(f"flash_attention: window must be a positive integer or None, got {window!r}")
        if not causal:
            raise ValueError("flash_attention: window (sliding-window attention) needs causal=True")
    check_device(q, k, v)


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                    key_padding_mask: torch.Tensor | None = None, scale: float | None = None,
                    window: int | None = None, _config: dict | None = None) -> torch.Tensor:
    """Exact attention softmax(scale * q k^T + mask) v without materialising the score matrix.

    q (B, H, Nq, D); k, v (B, Hkv, Nk, D) with H % Hkv == 0 (query head h uses kv head h // (H // Hkv));
    key_padding_mask bool (B, Nk), True = padded (ignored); causal needs Nq == Nk; scale defaults to
    1/sqrt(D). ``window`` (with causal): sliding-window attention, query i sees keys i - window < j <= i
    (Mistral's ``sliding_window``, FlashAttention-2's ``window_size=(window - 1, 0)``); key tiles outside
    the band are skipped. Returns (B, H, Nq, D) in q's dtype; differentiable in q, k, v (dk/dv summed
    over each group's query heads). ``_config`` overrides `attention_launch_config` (tests force small
    tiles)."""
    _check_attention_args(q, k, v, causal, key_padding_mask, scale, window)
    if window is not None and window >= k.shape[2]:
        window = None  # the band covers every causal key: plain causal attention, the same result
    d = q.shape[-1]
    scale = float(scale) if scale is not None else 1.0 / math.sqrt(d)
    cfg = attention_launch_config(d, q.dtype, q.device)
    if _config:
        unknown = set(_config) - set(cfg)
        if unknown:
            raise ValueError(f"flash_attention: unknown _config keys {sorted(unknown)}")
        cfg = {**cfg, **_config}
    if cfg["BLOCK_M_FWD"] % cfg["BLOCK_N_FWD"]:
        raise ValueError("flash_attention: _config BLOCK_M_FWD must be a multiple of BLOCK_N_FWD")
    kpm = key_padding_mask.to(torch.uint8).contiguous() if key_padding_mask is not None else None
    return _FlashAttentionFunction.apply(q, k, v, kpm, bool(causal), scale, cfg, window)


class FlashAttention(torch.nn.Module):
    """Module form of `flash_attention` (no parameters): ``FlashAttention(causal=True)(q, k, v)``."""

    def __init__(self, causal: bool = False, scale: float | None = None, window: int | None = None):
        super().__init__()
        self.causal = causal
        self.scale = scale
        self.window = window

    def forward(self, q, k, v, key_padding_mask=None):
        return flash_attention(q, k, v, causal=self.causal, key_padding_mask=key_padding_mask, scale=self.scale,
                               window=self.window)

    def extra_repr(self):
        return f"causal={self.causal}, scale={self.scale}, window={self.window}"
