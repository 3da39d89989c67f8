"""Triton kernels for the shared Transformer block: RMSNorm, LayerNorm, FlashAttention.

Public API (what `repro.model` imports)::

    from repro.kernels import rms_norm, layer_norm, flash_attention, triton_available, TritonUnavailable

One source, two machines: the same ``@triton.jit`` kernels compile for a CUDA GPU and run on CPU under
Triton's interpreter. The interpreter is selected by the environment variable ``TRITON_INTERPRET=1``,
which Triton reads when a kernel is decorated. Importing this package therefore sets
``TRITON_INTERPRET=1`` when no CUDA device is available, ``triton`` has not been imported yet and the
variable is not already set (an explicit ``TRITON_INTERPRET=0`` is respected). If triton was imported
earlier in compiled mode on a machine without CUDA, set ``TRITON_INTERPRET=1`` yourself before the
first import; `triton_available()` tells whether the kernels can run, and the kernels raise
`TritonUnavailable` (with the reason) when called where they cannot.

In interpreter mode the kernels serve CPU tensors; in compiled mode CUDA tensors.
"""
from __future__ import annotations

import os

import torch

if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

from ._runtime import TritonUnavailable, interpreter_enabled, triton_available, unavailable_reason  # noqa: E402

__all__ = [
    "rms_norm", "layer_norm", "flash_attention", "RMSNorm", "LayerNorm", "FlashAttention",
    "triton_available", "TritonUnavailable", "interpreter_enabled", "unavailable_reason",
]

try:
    from .norms import LayerNorm, RMSNorm, layer_norm, rms_norm  # noqa: E402
    from .attention import FlashAttention, flash_attention  # noqa: E402
except ImportError as _err:  # triton missing: keep the package importable, fail on use
    _import_error = _err

    def _unavailable(*_args, **_kwargs):
        raise TritonUnavailable(f"triton kernels could not be imported: {_import_error}")

    rms_norm = layer_norm = flash_attention = _unavailable  # type: ignore[assignment]

    class _UnavailableModule(torch.nn.Module):
        def __init__(self, *_args, **_kwargs):
            _unavailable()

    RMSNorm = LayerNorm = FlashAttention = _UnavailableModule  # type: ignore[misc,assignment]
