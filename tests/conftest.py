"""Shared pytest setup.

Marker ``cuda``: tests that need a CUDA device; skipped (with the reason) where there is none.
Select them on a GPU node with ``pytest -m cuda``.
"""
import pytest
import torch


def pytest_configure(config):
    config.addinivalue_line("markers", "cuda: needs a CUDA device (skipped on CPU-only machines)")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device; none is available on this machine")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)
