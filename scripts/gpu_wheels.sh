#!/usr/bin/env bash
# Wheels a bare GPU node lacks (its image has torch, triton, pandas, seaborn, sacrebleu, sentencepiece, pyyaml, pytest,
# but not jsonschema, which validates config/claims/<id>.yaml). Run HERE, in the repository root, before carrying
# .whl/ to the node (git-ignored); scripts/gpu_check.sh and scripts/gpu_paper.sh install .whl/*.whl when present.
#   bash scripts/gpu_wheels.sh [PYTHON_VERSION]      # default 3.12 (the node's python)
set -euo pipefail
PYV="${1:-3.12}"
PIP="${PIP:-python3 -m pip}"
mkdir -p .whl
for spec in jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1; do
    $PIP download -q --no-deps --only-binary=:all: --python-version "$PYV" --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d .whl "$spec"
done
ls -1 .whl
