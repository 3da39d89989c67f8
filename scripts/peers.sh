#!/usr/bin/env bash
# The peer throughput benchmarks of this machine on an existing run (docs/running.md, "Training and decoding
# throughput against plain PyTorch and fairseq"): repro.peers.throughput (the suite vs torch.nn.Transformer), then
# repro.peers.fairseq (the suite vs fairseq 0.12.3.1 from its own venv), one after the other, 1 thread each, on the
# run's trained translation model and tokenizer (<results>/<hw>/<scale>/_models/). Then publish them beside the
# run's reference: python -m repro.report publish --peers-only (docs/running.md).
#
#   bash scripts/peers.sh [RESULTS] [--scale S] [--out DIR] [--report DIR] [--allow-untrained]
#                         [--throughput "ARGS"] [--fairseq "ARGS"]
#
# RESULTS: the run's results folder (default: results); the benchmarks write <RESULTS>/<hw>/<scale>/_bench/
#   {throughput,fairseq_peer}/ and their pages <RESULTS>/../reports/<hw>/<scale>/{throughput,fairseq_peer}.md.
# --out DIR / --report DIR: write DIR/{throughput,fairseq_peer}/ and DIR/{throughput,fairseq_peer}.md instead.
# --allow-untrained: run without the run's trained model (decoding times an untrained model; not for references).
# --throughput / --fairseq: more arguments for one benchmark (e.g. --fairseq "--repeats 1 --updates 10").
# FAIRSEQ_VENV: a Python 3.11 venv with torch==2.13.0 (CPU) and fairseq-fixed==0.12.3.1 (default /work/fairseq-venv;
#   tests/fixtures/fairseq/README.md). PY: the suite's Python (default .venv/bin/python).
set -euo pipefail
usage() { sed -n "8,9p" "$0" | sed "s/^# *//" >&2; exit "${1:-2}"; }
RESULTS=results SCALE=default OUT="" REPORT="" UNTRAINED="" TP_ARGS="" FS_ARGS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --scale) SCALE=${2:?--scale needs a value}; shift 2 ;;
    --out) OUT=${2:?--out needs a folder}; shift 2 ;;
    --report) REPORT=${2:?--report needs a folder}; shift 2 ;;
    --allow-untrained) UNTRAINED=1; shift ;;
    --throughput) TP_ARGS=${2?--throughput needs arguments}; shift 2 ;;
    --fairseq) FS_ARGS=${2?--fairseq needs arguments}; shift 2 ;;
    -h|--help) usage 0 ;;
    -*) echo "peers.sh: unknown option $1" >&2; usage ;;
    *) RESULTS=$1; shift ;;
  esac
done
abs() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
RESULTS=$(abs "$RESULTS"); [ -z "$OUT" ] || OUT=$(abs "$OUT"); [ -z "$REPORT" ] || REPORT=$(abs "$REPORT")
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
FAIRSEQ_VENV=${FAIRSEQ_VENV:-/work/fairseq-venv}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

if ! "$FAIRSEQ_VENV/bin/python" -c "import fairseq, fairseq_cli" >/dev/null 2>&1; then
  cat >&2 <<EOF
peers.sh: $FAIRSEQ_VENV has no importable fairseq; set FAIRSEQ_VENV or build it outside the repository (a few
minutes; torch pinned to its CPU build, fairseq built against it, one compile job):
  python3.11 -m venv $FAIRSEQ_VENV
  $FAIRSEQ_VENV/bin/pip install torch==2.13.0 'setuptools<81' wheel cython numpy
  MAX_JOBS=1 $FAIRSEQ_VENV/bin/pip install --no-build-isolation fairseq-fixed==0.12.3.1 torch==2.13.0
EOF
  exit 2
fi
# this machine's hardware id and the run's trained model, as the benchmarks find them
FOUND=$("$PY" -c "import sys
from pathlib import Path
from repro.artefacts import MODELS_DIR, artefact_file
from repro.bench.fingerprint import hardware_id
hw = hardware_id()
print(hw, artefact_file(Path(sys.argv[1]) / hw / sys.argv[2] / MODELS_DIR, 'translation_model'))" "$RESULTS" "$SCALE")
read -r HW MODEL <<< "$FOUND"
RUN="$RESULTS/$HW/$SCALE"
if [ ! -d "$RUN" ]; then
  echo "peers.sh: $RUN: no run of this machine ($HW) at scale $SCALE; run the workflow first" \
       "(snakemake reproduce_all --config scale=$SCALE) or name its results folder" >&2
  exit 2
fi
if [ ! -f "$MODEL" ] && [ -z "$UNTRAINED" ]; then
  echo "peers.sh: $MODEL: no trained translation model in the run (snakemake translation_model); the reference" \
       "numbers decode with it (--allow-untrained to time an untrained model anyway)" >&2
  exit 2
fi

paths() {  # the --out/--report arguments of benchmark $1
  [ -z "$OUT" ] || printf -- '--out\n%s\n' "$OUT/$1"
  [ -z "$REPORT" ] || printf -- '--report\n%s\n' "$REPORT/$1.md"
}
mapfile -t TP_PATHS < <(paths throughput)
mapfile -t FS_PATHS < <(paths fairseq_peer)
read -r -a TP_EXTRA <<< "$TP_ARGS"
read -r -a FS_EXTRA <<< "$FS_ARGS"

echo "peers.sh: $HW, scale $SCALE, run $RUN, 1 thread per side; fairseq from $FAIRSEQ_VENV" >&2
"$PY" -m repro.peers.throughput --scale "$SCALE" --threads 1 --results "$RESULTS" "${TP_PATHS[@]}" "${TP_EXTRA[@]}"
"$PY" -m repro.peers.fairseq --fairseq-venv "$FAIRSEQ_VENV" --scale "$SCALE" --threads 1 --results "$RESULTS" \
  "${FS_PATHS[@]}" "${FS_EXTRA[@]}"

echo "results: ${OUT:-$RUN/_bench}/{throughput,fairseq_peer}/"
echo "pages:   ${REPORT:-$(dirname "$RESULTS")/reports/$HW/$SCALE}/{throughput,fairseq_peer}.md"
if [ -z "$OUT" ]; then
  echo "publish them beside the reference of $HW (a clean tree; run from the repository root):"
  echo "  $PY -m repro.report publish --peers-only --hardware $HW --scale $SCALE --results $RESULTS"
else
  echo "(--out: outside the run, so not what publish reads: $RUN/_bench/)"
fi
