"""Memory helpers (the saved-activation counts of activation_checkpointing live in that claim's module).

- ``peak_memory``: peak bytes allocated while ``fn`` runs, above what was allocated before: the CUDA caching
  allocator's peak on GPU, the profiler's allocation events on CPU (process RSS is useless for this).
"""
from __future__ import annotations

from typing import Callable

import torch
from torch.profiler import ProfilerActivity, profile


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
