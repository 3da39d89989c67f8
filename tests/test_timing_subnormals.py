"""repro.bench.timing.flush_subnormals: timing claims flush subnormal floats in every intra-op thread (x86 arithmetic
on subnormals takes microcode assists: rmsnorm_speed's model step ran 3-4x slower from about its 65th repetition on).
Each case runs in a fresh interpreter, since the mode belongs to threads and a thread inherits it when created."""
import subprocess
import sys
import textwrap

import pytest
import torch

FLUSH_SUPPORTED = torch.set_flush_denormal(True)
torch.set_flush_denormal(False)
pytestmark = pytest.mark.skipif(not FLUSH_SUPPORTED, reason="this CPU has no flush-to-zero mode (not x86 with SSE3)")


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


def test_flushed_first_reaches_every_thread():
    got = _run("""
        import torch
        torch.set_num_threads(2)
        from repro.bench import timing
        assert timing.flush_subnormals()
        tiny = torch.ones(1 << 22, dtype=torch.int32).view(torch.float32)
        print(int(((tiny * 1.0) != 0).sum()), timing.load_summary()["subnormals_flushed"])
    """)
    assert got == "0 True"


def test_the_check_fails_when_the_pool_predates_the_flush():
    """Negative control: a parallel op before flushing leaves the pool's worker threads unflushed, and the check
    (not the return of torch.set_flush_denormal) says so."""
    got = _run("""
        import torch
        torch.set_num_threads(2)
        torch.ones(1 << 22).mul_(2.0).sum()  # the intra-op pool starts here, unflushed
        from repro.bench import timing
        print(timing.flush_subnormals(), timing.load_summary()["subnormals_flushed"])
    """)
    assert got == "False False"


def test_not_asked_is_recorded_as_none():
    got = _run("""
        from repro.bench import timing
        print(timing.load_summary()["subnormals_flushed"])
    """)
    assert got == "None"
