"""Ahead-of-time compile check: build every kernel variant the launchers use for a GPU target, no GPU needed.

Triton can lower a kernel to PTX and a cubin (with its bundled ptxas) for an explicit target such as
Hopper (sm_90) on a machine without a GPU. This catches GPU-only compile errors (types, constexpr
branches, layouts) that the CPU interpreter cannot see, and reports each variant's shared memory,
registers and spills (from ``cuobjdump --dump-resource-usage``) so tile choices in
`norm_launch_config` / `attention_launch_config` can be judged before a GPU is available.

    python -m repro.kernels.aot_check [--arch 90] [--quick]

Runs in compiled mode: unless ``TRITON_INTERPRET=0`` is already set it re-runs itself in a fresh
process with it set (the kernels must be decorated in compiled mode). It launches nothing; timing
still needs a GPU (scripts/gpu_check.sh).
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from . import attention as A
from . import norms as Nm

_TL = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
# Pointer arguments: fp32 statistics / buffers whatever the data dtype, and the data pointers.
_FP32_PTRS = {"Mean", "Rstd", "DW", "DB", "LSE", "DELTA"}
_DATA_PTRS = {"X", "Y", "W", "B", "DX", "DY", "Q", "K", "V", "O", "DO", "DQ", "DK", "DV"}
_FLOAT_SCALARS = {"eps", "qk_scale", "sm_scale"}
SMEM_LIMIT = {90: 232448, 80: 166912, 89: 101376, 100: 232448}  # max dynamic shared memory per block


def _signature(fn, dtype: str, constexprs: dict) -> dict:
    sig = {}
    for name in fn.arg_names:
        if name in constexprs:
            sig[name] = "constexpr"
        elif name == "KPM":
            sig[name] = "*u8"
        elif name in _FP32_PTRS:
            sig[name] = "*fp32"
        elif name in _DATA_PTRS:
            sig[name] = f"*{_TL[dtype]}"
        elif name in _FLOAT_SCALARS:
            sig[name] = "fp32"
        else:
            sig[name] = "i32"
    return sig


def _resources(cubin: bytes, tools: Path) -> dict:
    """registers / spill bytes from cuobjdump (empty if the tool is missing)."""
    exe = tools / "cuobjdump"
    if not exe.exists():
        return {}
    with tempfile.NamedTemporaryFile(suffix=".cubin") as fh:
        fh.write(cubin)
        fh.flush()
        out = subprocess.run([str(exe), "--dump-resource-usage", fh.name], capture_output=True, text=True).stdout
    res = {}
    for key, pat in (("registers", r"REG:(\d+)"), ("stack", r"STACK:(\d+)"), ("local", r"LOCAL:(\d+)")):
        m = re.search(pat, out)
        if m:
            res[key] = int(m.group(1))
    return res


def variants(quick: bool = False):
    """(name, kernel, dtype, constexprs, num_warps, num_stages) for what the launchers launch on GPU."""
    dtypes = ("bfloat16",) if quick else ("bfloat16", "float16", "float32")
    hidden = (4096, 11008) if quick else (512, 2048, 4096, 8192, 11008, 32768, 65536)
    for dt in dtypes:
        for n in hidden:
            block, warps = Nm.norm_launch_config(n)
            for is_rms in (True, False):
                ce = dict(IS_RMS=is_rms, HAS_WEIGHT=True, HAS_BIAS=not is_rms, BLOCK_N=block)
                tag = f"{'rms' if is_rms else 'ln'} N={n} {dt}"
                yield f"norm_fwd {tag}", Nm._norm_fwd_kernel, dt, ce, warps, 3
                yield f"norm_bwd {tag}", Nm._norm_bwd_kernel, dt, ce, warps, 3
    head_dims = (128,) if quick else (64, 128, 256)
    for dt in dtypes:
        for d in head_dims:
            cfg = A.attention_launch_config(d, getattr(torch, dt), torch.device("cuda"))
            prec = A._dot_precision(getattr(torch, dt))
            for causal in (False, True, "window"):  # "window": causal with a sliding window
                for kpm in ((False,) if quick else (False, True)):
                    for even in ((True,) if quick else (True, False)):
                        tag = f"D={d} {dt} causal={causal} kpm={kpm} even={even}"
                        common = dict(HEAD_DIM=d, CAUSAL=bool(causal), HAS_KPM=kpm, EVEN_N=even, UPCAST=False,
                                      DOT_PRECISION=prec, HAS_WINDOW=causal == "window")
                        yield (f"attn_fwd {tag}", A._attn_fwd_kernel, dt,
                               dict(common, BLOCK_M=cfg["BLOCK_M_FWD"], BLOCK_N=cfg["BLOCK_N_FWD"]),
                               cfg["fwd_warps"], cfg["fwd_stages"])
                        yield (f"attn_dkdv {tag}", A._attn_bwd_dkdv_kernel, dt,
                               dict(common, BLOCK_M=cfg["BLOCK_M_DKDV"], BLOCK_N=cfg["BLOCK_N_DKDV"]),
                               cfg["bwd_warps"], cfg["bwd_stages"])
                        yield (f"attn_dq {tag}", A._attn_bwd_dq_kernel, dt,
                               dict(common, BLOCK_M=cfg["BLOCK_M_DQ"], BLOCK_N=cfg["BLOCK_N_DQ"]),
                               cfg["bwd_warps"], cfg["bwd_stages"])
            yield f"attn_pre D={d} {dt}", A._attn_bwd_preprocess, dt, dict(HEAD_DIM=d, BLOCK_M=64), 4, 3


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m repro.kernels.aot_check", description=__doc__.splitlines()[0])
    ap.add_argument("--arch", type=int, default=90, help="CUDA compute capability x10 (90 = Hopper)")
    ap.add_argument("--quick", action="store_true", help="bf16 only, a few sizes")
    ap.add_argument("--match", help="only variants whose name matches this regular expression")
    args = ap.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET") != "0":
        # Importing repro.kernels already decorated the kernels (as interpreted functions on a CPU-only
        # machine); start over in a fresh process with the interpreter off.
        env = {**os.environ, "TRITON_INTERPRET": "0"}
        argv = sys.argv[1:] if argv is None else list(argv)
        return subprocess.run([sys.executable, "-m", "repro.kernels.aot_check", *argv], env=env).returncode
    tools = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    target = GPUTarget("cuda", args.arch, 32)
    limit = SMEM_LIMIT.get(args.arch)
    failures = 0
    print(f"triton {triton.__version__}, target sm_{args.arch}")
    for name, fn, dt, ce, warps, stages in variants(args.quick):
        if args.match and not re.search(args.match, name):
            continue
        t0 = time.perf_counter()
        try:
            src = ASTSource(fn=fn, signature=_signature(fn, dt, ce), constexprs=ce)
            k = triton.compile(src, target=target, options={"num_warps": warps, "num_stages": stages})
        except Exception as e:  # report every failing variant, not just the first
            failures += 1
            print(f"FAIL {name}: {type(e).__name__}: {str(e).strip().splitlines()[-1][:300] if str(e) else ''}")
            continue
        res = _resources(k.asm["cubin"], tools)
        smem = k.metadata.shared
        over = limit is not None and smem > limit
        failures += over
        spill = res.get("local", 0)
        print(f"{'OVER' if over else 'ok  '} {name}: warps={warps} stages={stages} smem={smem} "
              f"regs={res.get('registers', '?')} spill_bytes={spill} ({time.perf_counter() - t0:.1f}s)", flush=True)
    print(f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
