"""Shared pytest setup.

Marker ``cuda``: tests that need a CUDA device; skipped (with the reason) where there is none.
Select them on a GPU node with ``pytest -m cuda``.
"""
import os

import pytest
import torch

# Select Triton's CPU interpreter before anything else imports triton (transformers and torch.utils.checkpoint
# do): the flag is read when @triton.jit runs, so the kernel tests must not depend on the order tests run in.
import repro.kernels  # noqa: E402,F401


if os.environ.get("PYTEST_XDIST_WORKER"):  # the workers share the cores: one torch thread each
    torch.set_num_threads(1)


def pytest_configure(config):
    config.addinivalue_line("markers", "cuda: needs a CUDA device (skipped on CPU-only machines)")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device; none is available on this machine")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)
