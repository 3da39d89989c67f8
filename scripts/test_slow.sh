#!/usr/bin/env bash
# The second stage of the tests (what .ci/run runs after the README's test command): the slow tests (Snakemake
# end-to-end runs, the README's commands dry-run, the headless browser; marked `slow`) and the fault-injection tests
# (kill -9 at random points of a training and a claim run; marked `faults`). The 25 slowest are printed.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pytest -q -m slow
.venv/bin/python -m pytest -q -m faults --numprocesses=2 tests/test_faults.py
