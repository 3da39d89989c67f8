#!/usr/bin/env bash
# Prepared paper-scale run of the speed and memory claims (issue 6) on a GPU node, without Snakemake.
#
#   PYTHONPATH=. bash scripts/gpu_paper.sh [CLAIM ...]      # default: flash_attention activation_checkpointing rmsnorm_speed
#   GPU_PAPER_TIMEOUT=300 ...                               # seconds per claim (default 300)
#
# Each claim runs exactly as its Snakemake rule would at scale=paper (python -m repro.claims.<id> --scale paper,
# parameters from config/claims/<id>.yaml), writing results/<hardware-id>/paper/<id>/ (metrics.csv, verdict.json,
# fingerprint.json, config.json; the hardware id is derived from the GPU), then its page
# under reports/<hardware-id>/paper/. A claim that times out writes nothing (results are written at the end), and
# the next one still runs. Needs torch + triton + pandas + seaborn; no snakemake. Back on a machine with the suite
# installed, `snakemake compare_hardware --config scale=paper` puts these results beside the paper and every other
# hardware. The node's image lacks jsonschema: run `bash scripts/gpu_wheels.sh` here first and carry .whl/.
# Exit status: non-zero if a claim failed or timed out. Measured on an H200 (docs/pilots/gpu_h200.md): flash_attention
# 180-200 s, rmsnorm_speed 110-120 s, activation_checkpointing 45-50 s, each plus ~5 s for its page; the default
# timeout leaves room, a tighter one (a device lease) must not cut below these.
set -uo pipefail

PY="${PYTHON:-python}"
source "$(dirname "$0")/_gpu_env.sh"
TIMEOUT="${GPU_PAPER_TIMEOUT:-300}"
CLAIMS=("$@")
[ "${#CLAIMS[@]}" -eq 0 ] && CLAIMS=(flash_attention activation_checkpointing rmsnorm_speed)

HW="$("$PY" -c 'from repro.bench.fingerprint import hardware_id; print(hardware_id())')" || exit 1
case "$HW" in gpu-*) ;; *) echo "gpu_paper: hardware id '$HW' is not a GPU; the paper sections need CUDA"; exit 1 ;; esac
RES="results/$HW/paper"
REP="reports/$HW/paper"
mkdir -p "$RES" "$REP" "logs/$HW/paper"
status=0

for claim in "${CLAIMS[@]}"; do
    echo "== $claim (paper scale, timeout ${TIMEOUT}s) -> $RES/$claim"
    start=$(date +%s)
    timeout "$TIMEOUT" "$PY" -m "repro.claims.$claim" --scale paper --out "$RES/$claim" \
        2>&1 | tee "logs/$HW/paper/$claim.log"
    rc=${PIPESTATUS[0]}
    echo "== $claim: exit $rc after $(( $(date +%s) - start )) s"
    if [ "$rc" -ne 0 ] || [ ! -f "$RES/$claim/verdict.json" ]; then
        status=1
        continue
    fi
    "$PY" -m repro.report claim --claim "$claim" --results "$RES/$claim" --page "$REP/$claim.md" \
        --figures "$REP/$claim" || status=1
done
echo "== done: $RES (status $status)"
exit "$status"
