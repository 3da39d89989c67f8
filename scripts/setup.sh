#!/usr/bin/env bash
# Create .venv with everything the suite needs (idempotent; a second run installs nothing new).
# CPU machines get torch 2.13.0's CPU build (never an unpinned torch: that pulls a multi-GB CUDA build).
# On a GPU node with a CUDA torch already installed in the base Python, use that Python instead:
#   REPRO_PYTHON=python3 REPRO_KEEP_TORCH=1 bash scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${REPRO_PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv ${REPRO_KEEP_TORCH:+--system-site-packages} .venv
fi
pip() { .venv/bin/python -m pip --disable-pip-version-check -q "$@"; }
if [ -z "${REPRO_KEEP_TORCH:-}" ] && ! .venv/bin/python -c "import torch" 2>/dev/null; then
  pip install "torch==2.13.0"
fi
if ! .venv/bin/python -c "import repro, snakemake, triton, sacrebleu, sentencepiece, seaborn, pytest_timeout, xdist, selenium, snakemake_executor_plugin_slurm, safetensors, filelock, transformers, bitsandbytes" 2>/dev/null; then
  pip install -e ".[test,slurm]"
fi
# The browser test (tests/test_report_browser.py) drives Debian's headless Chromium; installed here where apt-get
# runs as root (set REPRO_NO_APT=1 to skip), otherwise that test is skipped with the reason.
if ! command -v chromedriver >/dev/null && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ] && [ -z "${REPRO_NO_APT:-}" ]; then
  echo "setup: installing chromium and chromium-driver for the browser test (apt-get)"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      chromium chromium-driver >/dev/null) || echo "setup: chromium not installed; the browser test will be skipped"
fi
.venv/bin/python -c "import torch, triton, snakemake; print(f'setup ok: torch {torch.__version__}, triton {triton.__version__}, snakemake {snakemake.__version__}')"
