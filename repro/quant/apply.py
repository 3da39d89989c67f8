"""Quantizing the shared block's linear layers in a whole model.

Every ``nn.Linear`` inside a ``repro.model.block.Block`` (attention q/k/v/out projections, cross-attention, FFN)
is replaced; embeddings and the output projection stay in full precision, as in both papers' evaluations
(LLM.int8() and GPTQ quantize the Transformer blocks' linear layers). Weight-only methods (RTN, GPTQ) store
packed integer codes (:class:`PackedLinear`) and compute with the weight dequantized from them (simulated
quantization: no low-bit kernel runs on a CPU); int8 methods compute the int8 products of repro.quant.int8.

GPTQ runs sequentially block by block, as the reference ``opt_sequential``: the calibration inputs of block i's
linear layers are produced by the model whose blocks 0..i-1 are already quantized.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

import torch
from torch import nn

from repro.model.block import Block, BlockStack

from .grid import QuantizedWeight, pack_bits, rtn, unpack_bits
from .gptq import GPTQ
from .int8 import Int8Linear


def blocks_of(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The model's Transformer blocks in forward order (encoder before decoder), with their names."""
    return [(n, m) for n, m in model.named_modules() if isinstance(m, Block)]


def block_linears(model: nn.Module) -> dict[str, nn.Linear]:
    """Every ``nn.Linear`` (or already replaced quantized layer) inside a block, by qualified name."""
    out = {}
    for bname, block in blocks_of(model):
        for n, m in block.named_modules():
            if isinstance(m, (nn.Linear, PackedLinear, Int8Linear)):
                out[f"{bname}.{n}"] = m
    return out


def replace(model: nn.Module, name: str, new: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent_name) if parent_name else model, child, new)


@contextmanager
def restored(model: nn.Module) -> Iterator[nn.Module]:
    """Quantize ``model`` in place inside the block; its original block linears are put back on exit. The
    quantizers here build new modules and never write to the originals, so this equals quantizing a deep copy
    without a second copy of the model (a 7B model in fp32 fills 28 GB)."""
    orig = block_linears(model)
    try:
        yield model
    finally:
        for name, mod in orig.items():
            replace(model, name, mod)


class PackedLinear(nn.Module):
    """A linear layer whose weight is held as densely packed ``bits``-bit codes, 16-bit scales, packed zero points
    and (for GPTQ's activation order) the group index of each input column; the forward uses the weight
    dequantized once from exactly these buffers."""

    def __init__(self, qw: QuantizedWeight, bias: torch.Tensor | None):
        super().__init__()
        self.bits, self.group_size = qw.bits, qw.group_size
        self.out_features, self.in_features = qw.codes.shape
        self.register_buffer("codes_packed", torch.frombuffer(bytearray(pack_bits(qw.codes, qw.bits)), dtype=torch.uint8))
        self.register_buffer("scales", qw.scale.to(torch.float16))
        self.register_buffer("zeros_packed", torch.frombuffer(bytearray(pack_bits(qw.zero.round().to(torch.int16),
                                                                                  qw.bits)), dtype=torch.uint8))
        consecutive = torch.equal(qw.g_idx.cpu(), torch.arange(self.in_features) // qw.group_size)
        self.register_buffer("g_idx", None if consecutive else qw.g_idx.to(torch.int32))
        self.register_buffer("bias", None if bias is None else bias.detach().clone())
        self._weight = None

    def stored_bytes(self) -> dict:
        return {"codes": self.codes_packed.numel(), "scales": self.scales.numel() * 2,
                "zeros": self.zeros_packed.numel(), "g_idx": 0 if self.g_idx is None else self.g_idx.numel() * 4,
                "bias": 0 if self.bias is None else self.bias.numel() * self.bias.element_size()}

    def weight_dequantized(self) -> torch.Tensor:
        n_groups = self.scales.shape[1]
        codes = unpack_bits(self.codes_packed.numpy().tobytes(), self.bits, self.out_features * self.in_features)
        zeros = unpack_bits(self.zeros_packed.numpy().tobytes(), self.bits, self.out_features * n_groups)
        codes = codes.view(self.out_features, self.in_features).float()
        zeros = zeros.view(self.out_features, n_groups).float()
        g = (torch.arange(self.in_features) // self.group_size) if self.g_idx is None else self.g_idx.long()
        return self.scales.float()[:, g] * (codes - zeros[:, g])

    def forward(self, x):
        if self._weight is None or self._weight.device != x.device:
            self._weight = self.weight_dequantized().to(device=x.device, dtype=x.dtype)
        return nn.functional.linear(x, self._weight, self.bias)


def quantize_rtn(model: nn.Module, bits: int, group_size: int | None = None, sym: bool = False) -> dict:
    """Round-to-nearest on every block linear; returns {name: PackedLinear}."""
    out = {}
    for name, lin in block_linears(model).items():
        out[name] = PackedLinear(rtn(lin.weight.detach().float().cpu(), bits, group_size, sym), lin.bias)
        replace(model, name, out[name].to(lin.weight.device))
    return out


def quantize_int8(model: nn.Module, mode: str, threshold: float = 6.0) -> dict:
    """absmax / vector-wise int8 or LLM.int8() on every block linear; returns {name: Int8Linear}."""
    out = {}
    for name, lin in block_linears(model).items():
        out[name] = Int8Linear(lin, mode, threshold)
        replace(model, name, out[name])
    return out


def relative_error(W: torch.Tensor, W_hat: torch.Tensor, H: torch.Tensor) -> float:
    """||W X - W_hat X||_F^2 / ||W X||_F^2 from H = 2 X X^T / n (the factor cancels), on H's device."""
    W = W.to(device=H.device, dtype=torch.float64)
    D = W - W_hat.to(device=H.device, dtype=torch.float64)
    return float(torch.einsum("ij,jk,ik->", D, H, D) / torch.einsum("ij,jk,ik->", W, H, W))


def _stacks(model: nn.Module) -> list[nn.Module]:
    """The model's block stacks (repro.model.block.BlockStack) in forward order (encoder before decoder)."""
    return [m for m in model.modules() if isinstance(m, BlockStack)]


def _stack_inputs(model: nn.Module, stacks: list, i: int, calibrate: Callable[[nn.Module], None]) -> list:
    """(x, kwargs) of every call of ``stacks[i]`` while ``calibrate(model)`` runs, with the blocks of that stack and
    of all later ones bypassed (``BlockStack.skip``): the earlier stacks run as they are (already quantized)."""
    seen, skips = [], [set(s.skip) for s in stacks]
    def capture(mod, args, kw):
        if kw.get("cache") is not None or kw.get("return_hidden"):
            raise ValueError("quantize_gptq: calibration runs the model without cache and hidden states")
        seen.append((args[0], {k: v for k, v in kw.items() if k not in ("cache", "return_hidden")}))

    hook = stacks[i].register_forward_pre_hook(capture, with_kwargs=True)
    try:
        for s in stacks[i:]:
            s.skip = set(range(len(s.layers)))
        calibrate(model)
    finally:
        hook.remove()
        for s, sk in zip(stacks, skips):
            s.skip = sk
    return seen


def _hessians(lins: dict, run: Callable[[], None]) -> dict:
    """A GPTQ accumulator (H = 2 X X^T / n) per linear of ``lins``, filled with the inputs ``run()`` feeds them."""
    g = {name: GPTQ(lin) for name, lin in lins.items()}
    hooks = [lin.register_forward_hook(lambda m, inp, out, name=name: g[name].add_batch(inp[0].detach()))
             for name, lin in lins.items()]
    try:
        run()
    finally:
        for h in hooks:
            h.remove()
    return g


def _gptq_block(bname: str, block: nn.Module, run: Callable[[], None], bits, group_size, act_order, damp,
                block_size, sym, run_heldout: Callable[[], None] | None = None) -> dict:
    """GPTQ on the linears of one block, whose calibration inputs ``run()`` produces; ``run_heldout()`` (optional)
    feeds the block inputs GPTQ never saw, on which the layer errors are scored again (out of sample)."""
    lins = {f"{bname}.{n}": m for n, m in block.named_modules() if isinstance(m, nn.Linear)}
    g = _hessians(lins, run)
    g_ho = _hessians(lins, run_heldout) if run_heldout is not None else {}
    results = {}
    for name, lin in lins.items():
        W = lin.weight.detach().float().cpu()
        qw, loss = g[name].quantize(bits, group_size, act_order, damp, block_size, sym)
        mod = PackedLinear(qw, lin.bias).to(lin.weight.device)
        W_rtn = rtn(W, bits, group_size, sym).dequantize()
        H = g[name].H
        results[name] = {"module": mod, "loss": loss, "tokens": g[name].nsamples,
                         "rel_error": relative_error(W, mod.weight_dequantized(), H),
                         "rel_error_rtn": relative_error(W, W_rtn, H)}
        if name in g_ho:
            H_ho = g_ho[name].H
            results[name].update(tokens_heldout=g_ho[name].nsamples,
                                 rel_error_heldout=relative_error(W, mod.weight_dequantized(), H_ho),
                                 rel_error_rtn_heldout=relative_error(W, W_rtn, H_ho))
            del g_ho[name].H
        replace(block, name[len(bname) + 1:], mod)
        del g[name].H
    return results


@torch.no_grad()
def quantize_gptq(model: nn.Module, calibrate: Callable[[nn.Module], None], bits: int, group_size: int | None,
                  act_order: bool, damp: float, block_size: int = 128, sym: bool = False,
                  heldout: Callable[[nn.Module], None] | None = None) -> dict:
    """GPTQ, block by block. ``calibrate(model)`` runs the calibration batches through the model (the hooks
    collect each linear's inputs). Returns {name: {"module", "rel_error", "rel_error_rtn", "loss"}}: the
    layer-wise relative reconstruction error of GPTQ and of RTN with the same grid options, on the same inputs.
    With ``heldout(model)`` (batches GPTQ never sees), also "rel_error_heldout" and "rel_error_rtn_heldout": the
    same errors on those inputs, which GPTQ does not minimise by construction.

    As the reference ``opt_sequential``: the inputs of a stack's first block are captured once (one calibration
    pass with that stack bypassed), each block then runs alone on the cached inputs, and its outputs after its
    own quantization are the next block's inputs, so a model of L blocks costs about one calibration pass, not L.
    Blocks outside a BlockStack are calibrated by a whole calibration pass each."""
    results, opts = {}, (bits, group_size, act_order, damp, block_size, sym)
    names = {id(m): n for n, m in blocks_of(model)}
    stacks = _stacks(model)
    done = set()
    for i, stack in enumerate(stacks):
        inputs = _stack_inputs(model, stacks, i, calibrate)
        held = _stack_inputs(model, stacks, i, heldout) if heldout is not None else None
        for j, block in enumerate(stack.layers):
            if j in stack.skip:
                continue
            run_ho = (lambda: [block(x, **kw) for x, kw in held]) if held is not None else None
            results.update(_gptq_block(names[id(block)], block, lambda: [block(x, **kw) for x, kw in inputs], *opts,
                                       run_heldout=run_ho))
            inputs = [(block(x, **kw), kw) for x, kw in inputs]
            if held is not None:
                held = [(block(x, **kw), kw) for x, kw in held]
            done.add(id(block))
    for bname, block in blocks_of(model):
        if id(block) not in done and not any(block in s.layers for s in stacks):
            results.update(_gptq_block(bname, block, lambda: calibrate(model), *opts,
                                       run_heldout=(lambda: heldout(model)) if heldout is not None else None))
    return results


def stored_weight_bytes(model: nn.Module) -> dict:
    """Bytes of the block linears' weights as stored (quantized layers: their packed buffers; full-precision
    nn.Linear: weight numel x element size), with the same count at 16 and 32 bits for reference."""
    total, n_params = 0, 0
    for lin in block_linears(model).values():
        if isinstance(lin, nn.Linear):
            total += lin.weight.numel() * lin.weight.element_size()
            n_params += lin.weight.numel()
        else:
            b = lin.stored_bytes()
            total += sum(v for k, v in b.items() if k != "bias")
            n_params += lin.out_features * lin.in_features
    return {"bytes": total, "params": n_params, "fp16_bytes": 2 * n_params, "fp32_bytes": 4 * n_params}
