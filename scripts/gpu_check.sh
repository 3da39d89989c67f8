#!/usr/bin/env bash
# Prepared GPU check for the Triton kernels (issue 3): run on a GPU node from the repository root.
#
#   PYTHONPATH=. bash scripts/gpu_check.sh [OUT_DIR]        # default OUT_DIR: results/_gpu_check
#   GPU_CHECK_QUICK=1 ...                                   # smaller benchmark sweep
#
# 1. prints the device fingerprint (GPU, driver, CUDA, torch, triton, python, CPU) and nvidia-smi;
# 2. runs the kernel tests on CUDA (the same parametrised tests as on CPU, marker `cuda`);
# 3. runs the benchmark sweeps (python -m repro.bench.kernels), which measure copy bandwidth and
#    write OUT_DIR/kernels.csv with the issue's targets as derived rows (op == "target"); the attention
#    sweep includes a sliding-window case (seq 4096, window 1024, bf16, column `window`; issue 29) after
#    the dense seq-4096 cases, with the target attention_window_fwd_speedup_vs_causal (triton windowed
#    forward vs its own full causal forward: the skipped key tiles must show, >= 1.5x). The CUDA
#    kernel tests of step 2 include the windowed forward/backward cases.
# Measured on an H200 (docs/pilots/gpu_h200.md): 125 s with GPU_CHECK_QUICK=1, the tests 35 s of it.
# Sized for ~8 minutes on an H100/H200 (the window case adds ~6 short cases, seconds): tests <= 200 s and
# sweeps <= 330 s by timeout (a cut-off sweep
# keeps every case it finished: the CSV is rewritten after each case and the targets are still derived).
# Needs no snakemake; torch + triton (3.6-3.9) + pytest + pandas. Exit status: non-zero if a step failed.
set -uo pipefail

OUT="${1:-results/_gpu_check}"
PY="${PYTHON:-python}"
source "$(dirname "$0")/_gpu_env.sh"
mkdir -p "$OUT"
status=0

echo "== [1/3] device fingerprint"
"$PY" -m repro.bench.fingerprint | tee "$OUT/fingerprint_device.json" || status=1
nvidia-smi 2>&1 | tee "$OUT/nvidia-smi.txt" || true
"$PY" - <<'PYEOF' || status=1
import torch
if not torch.cuda.is_available():
    raise SystemExit("gpu_check: no CUDA device visible to torch; this script is for a GPU node")
import triton
print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__,
      "device", torch.cuda.get_device_name(0))
PYEOF
[ "$status" -eq 0 ] || { echo "gpu_check: no usable GPU, stopping"; exit 1; }

echo "== [2/3] kernel tests on CUDA"
# 8 workers, cases spread one by one (the ini's loadscope would put each test file on one worker, two in all): the
# 86 cases took 35 s so on an H200 node's 16 cores (each worker compiles its own kernels)
export PYTEST_ADDOPTS="${PYTEST_ADDOPTS:---maxprocesses=8 --dist load}"
timeout 200 "$PY" -m pytest -q -m cuda -p no:cacheprovider \
    tests/test_kernels_norms.py tests/test_kernels_attention.py 2>&1 | tee "$OUT/tests_cuda.log"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] || { echo "gpu_check: CUDA kernel tests failed or timed out (rc=$rc)"; status=1; }

echo "== [3/3] benchmark sweeps"
quick=()
[ -n "${GPU_CHECK_QUICK:-}" ] && quick=(--quick)
timeout 330 "$PY" -m repro.bench.kernels --out "$OUT" "${quick[@]}" 2>&1 | tee "$OUT/bench.log"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] || { echo "gpu_check: benchmark failed or timed out (rc=$rc); partial rows may be in $OUT/kernels.csv"; status=1; }

echo "== done: $OUT (status $status)"
exit "$status"
