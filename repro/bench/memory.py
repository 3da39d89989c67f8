"""Memory helpers.

- ``saved_activation_bytes``: the exact bytes autograd keeps for backward, counted with
  ``torch.autograd.graph.saved_tensors_hooks`` and deduplicated by storage (a tensor saved twice, or two views of
  one storage, count once). Parameters can be excluded. This is what activation checkpointing changes
  (Chen et al. 2016; Korthikanti et al. 2023, Eq. 1).
- ``peak_memory``: peak bytes allocated while ``fn`` runs, above what was allocated before: the CUDA caching
  allocator's peak on GPU, the profiler's allocation events on CPU (process RSS is useless for this).
"""
from __future__ import annotations

from typing import Callable, Iterable

import torch
from torch.profiler import ProfilerActivity, profile


def _storage_key(t: torch.Tensor):
    s = t.untyped_storage()
    return (t.device.type, s.data_ptr(), s.nbytes())


def saved_activation_bytes(fn: Callable[[], object], exclude: Iterable[torch.Tensor] = ()) -> dict:
    """Run ``fn`` (a forward) and count the storages autograd saves; returns bytes, count and by-dtype bytes."""
    excluded = {_storage_key(t) for t in exclude}
    seen: dict = {}

    def pack(t: torch.Tensor):
        key = _storage_key(t)
        if key not in excluded and key not in seen:
            seen[key] = (t.untyped_storage().nbytes(), str(t.dtype))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    by_dtype: dict[str, int] = {}
    for nbytes, dtype in seen.values():
        by_dtype[dtype] = by_dtype.get(dtype, 0) + nbytes
    return {"bytes": sum(v[0] for v in seen.values()), "tensors": len(seen), "by_dtype": by_dtype, "output": out}


def peak_memory(fn: Callable[[], object], device="cpu") -> int:
    """Peak bytes allocated during ``fn`` above the starting level."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU)
    level = peak = 0
    for _, nbytes in events:
        level += nbytes
        peak = max(peak, level)
    return peak
