"""GPTQ: one-shot second-order weight quantization (Frantar et al., ICLR 2023, arXiv 2210.17323).

For one linear layer with weight W (out, in) and calibration inputs X (in, n tokens), GPTQ minimises the layer-wise
reconstruction error ||W X - Q X||^2 (Eq. 1) row by row with the Optimal Brain Quantization update, in the form of
Algorithm 1 of the paper (this follows the reference ``gptq.py`` ``fasterquant`` line by line):

- H = 2 X X^T / n (the Hessian of the squared error, accumulated over calibration batches: :meth:`GPTQ.add_batch`);
  dead inputs (H_jj = 0) get H_jj = 1 and zero weights;
- dampening: H += lambda I with lambda = ``damp`` x mean(diag H) (Section 4, "1% of the average diagonal");
- act-order (``act_order``, the "desc_act" heuristic of the reference code): columns are processed in order of
  decreasing H_jj and put back at the end;
- Cholesky form (Step 3): the rows of H^-1 needed at each step are those of the upper Cholesky factor of H^-1,
  computed once (``cholesky -> cholesky_inverse -> cholesky(upper=True)``);
- lazy batch updates (Step 2): columns are quantized in blocks of ``block_size`` (128); inside a block each
  column's error (w - q) / [H^-1]_jj is spread over the block's later columns, and the block's accumulated error is
  applied to all later columns at once;
- groups (``group_size``): a new min-max grid (repro.quant.grid) is fitted to the next ``group_size`` (not yet
  quantized, already updated) columns whenever the column index crosses a group boundary, as in the reference (with
  act-order this groups columns in the permuted order, and the group index of each column is stored).

H and the column loop live on the layer's device (float64; a GPU at paper scale); the result is returned on the CPU.
"""
from __future__ import annotations

import math

import torch

from .grid import QuantizedWeight, fit_grid, quantize


class GPTQ:
    """Hessian accumulator and quantizer for one ``nn.Linear``."""

    def __init__(self, layer: torch.nn.Linear):
        self.layer = layer
        self.columns = layer.weight.shape[1]
        self.H = torch.zeros(self.columns, self.columns, dtype=torch.float64, device=layer.weight.device)
        self.nsamples = 0

    @torch.no_grad()
    def add_batch(self, inp: torch.Tensor) -> None:
        """Add the inputs of one batch (..., in): H <- (n H + 2 X X^T) / (n + m), a running mean."""
        x = inp.reshape(-1, inp.shape[-1]).to(device=self.H.device, dtype=torch.float64)
        m = x.shape[0]
        self.H *= self.nsamples / (self.nsamples + m)
        self.nsamples += m
        x = math.sqrt(2 / self.nsamples) * x
        self.H += x.t() @ x

    @torch.no_grad()
    def quantize(self, bits: int, group_size: int | None = None, act_order: bool = False, damp: float = 0.01,
                 block_size: int = 128, sym: bool = False) -> tuple[QuantizedWeight, float]:
        """(quantized weight, sum of the OBQ losses (w - q)^2 / [H^-1]_jj / 2 over all weights)."""
        if self.nsamples == 0:
            raise RuntimeError("GPTQ.quantize: no calibration batch was added")
        W = self.layer.weight.detach().to(torch.float64).clone()
        rows, cols = W.shape
        gs = cols if not group_size or group_size <= 0 else group_size
        if cols % gs:
            raise ValueError(f"group_size {gs} does not divide the {cols} input columns")
        H = self.H.clone()
        dead = torch.diag(H) == 0
        H[dead, dead] = 1
        W[:, dead] = 0
        perm = torch.argsort(torch.diag(H), descending=True) if act_order else torch.arange(cols, device=H.device)
        W, H = W[:, perm], H[perm][:, perm]
        H += damp * torch.mean(torch.diag(H)) * torch.eye(cols, dtype=H.dtype, device=H.device)
        Hinv = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(H)), upper=True)

        Q = torch.zeros(rows, cols, dtype=torch.int16, device=W.device)
        scales, zeros, g_of_col = [], [], torch.zeros(cols, dtype=torch.int64, device=W.device)
        grid = None if gs < cols else fit_grid(W, bits, sym)
        if grid is not None:
            scales, zeros = [grid.scale], [grid.zero]
        loss = 0.0
        for i1 in range(0, cols, block_size):
            i2 = min(i1 + block_size, cols)
            W1 = W[:, i1:i2].clone()
            Err1 = torch.zeros_like(W1)
            Hinv1 = Hinv[i1:i2, i1:i2]
            for i in range(i2 - i1):
                j = i1 + i
                if gs < cols and j % gs == 0:  # a new group: fit its grid to the (updated) columns j..j+gs
                    block_part = W1[:, i:i + gs]
                    rest = W[:, i2:j + gs] if j + gs > i2 else W[:, :0]
                    grid = fit_grid(torch.cat([block_part, rest], 1), bits, sym)
                    scales.append(grid.scale)
                    zeros.append(grid.zero)
                g_of_col[j] = len(scales) - 1
                w, d = W1[:, i], Hinv1[i, i]
                q = quantize(w.unsqueeze(1), grid).flatten()
                Q[:, j] = q
                w_hat = (grid.scale * (q.to(torch.float64).unsqueeze(1) - grid.zero)).flatten()
                loss += float(((w - w_hat) ** 2 / d ** 2).sum()) / 2
                err = (w - w_hat) / d
                W1[:, i:] -= err.unsqueeze(1) @ Hinv1[i, i:].unsqueeze(0)
                Err1[:, i] = err
            W[:, i2:] -= Err1 @ Hinv[i1:i2, i2:]
        inv = torch.argsort(perm)
        qw = QuantizedWeight(Q[:, inv].cpu(), torch.cat(scales, 1).float().cpu(), torch.cat(zeros, 1).float().cpu(),
                             g_of_col[inv].cpu(), bits, gs)
        return qw, loss
