"""Runtime plumbing shared by the Triton kernels: availability, interpreter mode, input checks.

Nothing here imports triton at module import time, so `repro.kernels.__init__` can decide on
``TRITON_INTERPRET`` before any kernel is decorated (the flag is read when ``@triton.jit`` runs).
"""
from __future__ import annotations

import functools
import importlib.util
import os

import torch


class TritonUnavailable(RuntimeError):
    """Raised when a Triton kernel is called but cannot run here (no triton, or no CUDA device and
    the interpreter is off, or the tensors live on a device the current mode cannot serve)."""


def interpreter_enabled() -> bool:
    """True when Triton's CPU interpreter is on (``TRITON_INTERPRET`` set to a true value)."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in {"1", "true", "on", "yes"}


@functools.lru_cache(maxsize=None)
def triton_importable() -> bool:
    # cached: find_spec walks sys.path, too slow for a per-call check in front of a 10 us kernel
    return importlib.util.find_spec("triton") is not None


def triton_available() -> bool:
    """Triton is importable and can run: a CUDA device is present, or interpreter mode is on."""
    return triton_importable() and (torch.cuda.is_available() or interpreter_enabled())


def unavailable_reason() -> str:
    """Why `triton_available()` is False (empty string when it is True)."""
    if not triton_importable():
        return "triton is not installed"
    if not (torch.cuda.is_available() or interpreter_enabled()):
        return ("no CUDA device and TRITON_INTERPRET is off (set TRITON_INTERPRET=1 before "
                "importing triton to run the kernels on CPU through the interpreter)")
    return ""


def check_device(*tensors: torch.Tensor) -> None:
    """Fail clearly when the tensors cannot be served by the current Triton mode.

    Interpreter mode runs kernels on CPU tensors; compiled mode runs them on CUDA tensors.
    """
    if not triton_available():
        raise TritonUnavailable(unavailable_reason())
    interp = interpreter_enabled()
    for t in tensors:
        if t is None:
            continue
        if interp and t.device.type != "cpu":
            raise TritonUnavailable(
                f"tensor on {t.device} but the Triton interpreter (TRITON_INTERPRET=1) only serves CPU tensors")
        if not interp and t.device.type != "cuda":
            raise TritonUnavailable(
                f"tensor on {t.device} but compiled Triton kernels need CUDA tensors "
                "(set TRITON_INTERPRET=1 before importing repro.kernels to use the CPU interpreter)")


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def sm_count(device: torch.device) -> int:
    """Streaming-multiprocessor count (used to size persistent grids); a small constant on CPU."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4
