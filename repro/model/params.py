"""Parameter accounting by slot: attention, ffn, router, norms, embeddings.

Each parameter is attributed to the nearest enclosing module that declares a ``slot`` class attribute (the
suite's own classes do), so shared (tied) tensors are counted once. Works on meta-device models.
Reproduces C1 (Vaswani et al. 2017 Table 3; Geva et al. 2021; Michel et al. 2019; Llama / Mixtral totals).
"""
from __future__ import annotations

from collections import Counter

from torch import nn

from .ffn import MoE

SLOTS = ("attention", "ffn", "router", "norms", "embeddings", "other")


def count_by_slot(model: nn.Module) -> dict[str, int]:
    """Parameters per slot (each tensor once, even when tied), plus "total"."""
    counts: Counter = Counter()
    seen: set[int] = set()

    def visit(module: nn.Module, slot: str) -> None:
        slot = getattr(module, "slot", slot)
        for p in module.parameters(recurse=False):
            if id(p) not in seen:
                seen.add(id(p))
                counts[slot] += p.numel()
        for child in module.children():
            visit(child, slot)

    visit(model, "other")
    out = {s: int(counts.get(s, 0)) for s in SLOTS}
    out["total"] = sum(out[s] for s in SLOTS)
    return out


def active_parameters(model: nn.Module) -> int:
    """Parameters used per token: for MoE layers only top_k of n_experts experts run (Mixtral's "active")."""
    total = count_by_slot(model)["total"]
    for m in model.modules():
        if isinstance(m, MoE):
            per_expert = sum(p.numel() for p in m.experts[0].parameters())
            total -= (len(m.experts) - m.top_k) * per_expert
    return total
