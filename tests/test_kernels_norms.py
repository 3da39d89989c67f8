"""Triton RMSNorm / LayerNorm (repro.kernels.norms) against fp32 PyTorch references.

Zhang & Sennrich 2019 (RMSNorm) and Ba et al. 2016 (LayerNorm). On CPU the kernels run under
Triton's interpreter (repro.kernels sets TRITON_INTERPRET=1 when there is no CUDA device); the same
parametrised tests run on CUDA when marked ``cuda`` (``pytest -m cuda``).
"""
import pytest
import torch
import torch.nn.functional as F

import repro.kernels as K
from repro.kernels import TritonUnavailable, layer_norm, rms_norm

DEVICES = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=pytest.mark.cuda)]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# (atol, rtol) for outputs / input gradients; weight/bias grads are sums over rows and are compared
# relative to their own scale (see _close).
TOL = {torch.float32: (1e-5, 1e-5), torch.float16: (2e-3, 2e-3), torch.bfloat16: (2e-2, 2e-2)}


def _skip_unless_runnable(device):
    if device == "cpu" and not K.interpreter_enabled():
        pytest.skip("CPU kernels need the Triton interpreter (TRITON_INTERPRET=1); it is off on this machine")
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")


def _close(actual, expected, dtype, name):
    """Compare in fp32; tolerance scales with the reference's magnitude so that sums over many rows
    (weight gradients) are judged by their own rounding, not by an absolute bound."""
    atol, rtol = TOL[dtype]
    scale = max(1.0, expected.abs().max().item())
    torch.testing.assert_close(actual.float(), expected.float(), atol=atol * scale, rtol=rtol,
                               msg=lambda m: f"{name} ({dtype}): {m}")


def _reference(kind, x, w, b, eps):
    if kind == "rms":
        return F.rms_norm(x, (x.shape[-1],), w, eps)
    return F.layer_norm(x, (x.shape[-1],), w, b, eps)


def _run(kind, x, w, b, eps):
    return rms_norm(x, w, eps) if kind == "rms" else layer_norm(x, w, b, eps)


def _check(kind, x, w, b, eps, dtype):
    """Output and every gradient of the kernel vs the fp32 reference on the same (rounded) inputs."""
    leaves = [t for t in (x, w, b) if t is not None]
    for t in leaves:
        t.requires_grad_(True)
    y = _run(kind, x, w, b, eps)
    assert y.shape == x.shape and y.dtype == x.dtype
    dy = torch.randn_like(y)
    y.backward(dy)
    ref = [t.detach().float().requires_grad_(True) if t is not None else None for t in (x, w, b)]
    yr = _reference(kind, *ref, eps)
    yr.backward(dy.float())
    _close(y, yr, dtype, "y")
    for name, t, r in zip(("dx", "dweight", "dbias"), (x, w, b), ref):
        if t is None:
            continue
        assert t.grad is not None, f"{name} missing"
        assert t.grad.dtype == t.dtype, f"{name} dtype {t.grad.dtype} != {t.dtype}"
        _close(t.grad, r.grad, dtype, name)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kind", ["rms", "ln"])
@pytest.mark.parametrize("shape", [(5, 123, 4097), (3, 11008), (7, 64), (2, 3, 5, 100), (1, 3)], ids=str)
def test_norm_matches_reference(device, dtype, kind, shape):
    _skip_unless_runnable(device)
    torch.manual_seed(0)
    n = shape[-1]
    # Shift the input so LayerNorm's mean subtraction matters (a kernel that skipped it would fail).
    x = (torch.randn(shape, device=device) * 2 + 0.5).to(dtype)
    w = (torch.rand(n, device=device) + 0.5).to(dtype)
    b = torch.randn(n, device=device).to(dtype) if kind == "ln" else None
    _check(kind, x, w, b, 1e-5, dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["rms", "ln"])
def test_norm_without_affine(device, kind):
    _skip_unless_runnable(device)
    x = torch.randn(9, 300, device=device)
    _check(kind, x, None, None, 1e-6, torch.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["rms", "ln"])
def test_norm_strided_rows(device, kind):
    """A column slice has row stride != N; a kernel that assumed contiguous rows reads wrong data."""
    _skip_unless_runnable(device)
    torch.manual_seed(1)
    base = torch.randn(6, 4, 200, device=device)
    x = base[:, 1, 13:163].detach()  # (6, 150), row stride 800
    assert x.stride(0) != x.shape[-1]
    w = torch.rand(150, device=device) + 0.5
    b = torch.randn(150, device=device) if kind == "ln" else None
    _check(kind, x, w, b, 1e-5, torch.float32)
    # Transposed (last dim not contiguous) input is also accepted.
    xt = torch.randn(150, 6, device=device).t()
    _check(kind, xt, w.detach().clone(), None if b is None else b.detach().clone(), 1e-5, torch.float32)


@pytest.mark.parametrize("device", DEVICES)
def test_eps_is_used(device):
    """A tiny-variance row is dominated by eps: catches an eps that is dropped or misplaced."""
    _skip_unless_runnable(device)
    x = torch.full((2, 33), 1e-3, device=device)
    for eps in (1e-6, 1e-2):
        torch.testing.assert_close(rms_norm(x, None, eps), F.rms_norm(x, (33,), None, eps))
        torch.testing.assert_close(layer_norm(x + torch.arange(33, device=device) * 1e-4, None, None, eps),
                                   F.layer_norm(x + torch.arange(33, device=device) * 1e-4, (33,), None, None, eps))


@pytest.mark.parametrize("device", DEVICES)
def test_modules_train(device):
    """Modules expose parameters that receive gradients (catches a missing weight gradient path)."""
    _skip_unless_runnable(device)
    for mod, ref in ((K.RMSNorm(48, eps=1e-6), torch.nn.RMSNorm(48, eps=1e-6)),
                     (K.LayerNorm(48), torch.nn.LayerNorm(48))):
        mod, ref = mod.to(device), ref.to(device)
        with torch.no_grad():
            for p, q in zip(mod.parameters(), ref.parameters()):
                p.copy_(torch.randn_like(p))
                q.copy_(p)
        x = torch.randn(4, 48, device=device)
        mod(x).square().sum().backward()
        ref(x).square().sum().backward()
        names = [n for n, _ in mod.named_parameters()]
        assert names == ["weight"] or names == ["weight", "bias"]
        for p, q in zip(mod.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-4)


def test_bad_arguments_name_the_argument():
    x = torch.randn(3, 8)
    with pytest.raises(ValueError, match="weight"):
        rms_norm(x, torch.ones(7), 1e-6)
    with pytest.raises(ValueError, match="bias"):
        layer_norm(x, torch.ones(8), torch.zeros(9), 1e-5)
    with pytest.raises(ValueError, match="eps"):
        rms_norm(x, None, -1.0)
    with pytest.raises(ValueError, match="dtype"):
        rms_norm(x.double(), None, 1e-6)
    with pytest.raises(ValueError, match=r"x.shape\[-1\]"):
        rms_norm(torch.randn(1, 70000), None, 1e-6)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only error path")
def test_wrong_device_mode_raises():
    if not K.interpreter_enabled():
        with pytest.raises(TritonUnavailable):
            rms_norm(torch.randn(2, 8), None, 1e-6)
    else:
        assert K.triton_available()


def test_norm_byte_model_and_targets():
    """The benchmark's GB/s model (repro.bench.kernels.norm_bytes) and the derived target rows."""
    from repro.bench.kernels import COLUMNS, norm_bytes, target_rows
    m, n = 1000, 4096
    assert norm_bytes("rmsnorm", m, n, torch.bfloat16, "fwd") == 2 * m * n * 2 + n * 2 + 4 * m
    assert norm_bytes("layernorm", m, n, torch.float32, "bwd") == 3 * m * n * 4 + 2 * 2 * n * 4 + 2 * 4 * m
    assert norm_bytes("rmsnorm", m, n, torch.float16, "fwd_bwd") == (
        norm_bytes("rmsnorm", m, n, torch.float16, "fwd") + norm_bytes("rmsnorm", m, n, torch.float16, "bwd"))

    def row(**kw):
        r = {c: None for c in COLUMNS}
        r.update(status="ok", **kw)
        return r
    case = dict(op="rmsnorm", dtype="bfloat16", rows=m, hidden=n, **{"pass": "fwd_bwd"})
    rows = [row(op="copy", provider="torch", median_ms=1.0, gbps=3000.0),
            row(provider="triton", median_ms=1.0, gbps=2700.0, **case),
            row(provider="torch", median_ms=2.5, gbps=1080.0, **case),
            row(provider="compile", median_ms=0.9, gbps=3000.0, **case)]
    got = {r["metric"]: (round(r["value"], 3), r["met"]) for r in target_rows(rows)}
    assert got == {"rmsnorm_fraction_of_copy_bandwidth": (0.9, True),
                   "rmsnorm_speedup_vs_eager": (2.5, True),
                   "rmsnorm_speedup_vs_compile": (0.9, False)}


@pytest.mark.cuda
@pytest.mark.parametrize("kind", ["rms", "ln"])
def test_gpu_many_rows(kind):
    """Benchmark-like size: many rows per persistent backward program, so the per-program weight
    gradient accumulation over a band of rows is exercised. CUDA only (slow in the interpreter)."""
    _skip_unless_runnable("cuda")
    torch.manual_seed(2)
    x = torch.randn(8192, 4096, device="cuda").to(torch.bfloat16)
    w = (torch.rand(4096, device="cuda") + 0.5).to(torch.bfloat16)
    b = torch.randn(4096, device="cuda").to(torch.bfloat16) if kind == "ln" else None
    _check(kind, x, w, b, 1e-5, torch.bfloat16)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the interpreter switch of a CPU-only machine")
def test_import_switches_interpreter_on_cpu():
    """`import repro.kernels` turns the interpreter on where there is no GPU, but respects an explicit
    TRITON_INTERPRET=0 (then the kernels raise TritonUnavailable with the reason)."""
    import os
    import subprocess
    import sys
    code = ("import os, torch, repro.kernels as K\n"
            "print(os.environ.get('TRITON_INTERPRET'), K.triton_available())\n"
            "try:\n    K.rms_norm(torch.randn(2, 8), None, 1e-6); print('ran')\n"
            "except K.TritonUnavailable as e:\n    print('unavailable')\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    base = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    base["PYTHONPATH"] = root + os.pathsep + base.get("PYTHONPATH", "")
    run = lambda env: subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                     timeout=120, cwd=root).stdout.split()
    assert run(base) == ["1", "True", "ran"]
    assert run({**base, "TRITON_INTERPRET": "0"}) == ["0", "False", "unavailable"]
