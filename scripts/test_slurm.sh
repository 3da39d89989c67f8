#!/usr/bin/env bash
# Real single-node SLURM test: runs the tiny workflow through Snakemake's SLURM executor (docs/cluster.md).
#   sudo scripts/test_slurm.sh            # about 2-3 minutes once the packages are installed
#   sudo scripts/test_slurm.sh -k sbatch  # extra arguments go to pytest
# Installs what it needs (Debian's slurmctld, slurmd, slurm-client, munge with apt-get; the executor plugin into
# the venv), then runs tests/slurm with REPRO_SLURM_TEST=1. The test writes /etc/slurm/slurm.conf (an existing
# one is backed up and restored), keeps its state in $REPRO_SLURM_STATE (default /tmp/repro-slurm-test), starts
# munged, slurmctld and slurmd itself and stops them by PID; if pytest is killed, the trap below stops the PIDs
# it recorded. Not part of .ci/run: it needs root, ports 6817/6818 and a few minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
export REPRO_SLURM_STATE=${REPRO_SLURM_STATE:-/tmp/repro-slurm-test}

if [ "$(id -u)" != 0 ]; then
  echo "scripts/test_slurm.sh: needs root (writes /etc/slurm/slurm.conf, runs slurmd)" >&2
  exit 2
fi
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null \
   || ! command -v sbatch >/dev/null; then
  echo "installing slurmctld slurmd slurm-client munge (apt-get)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurmctld slurmd slurm-client munge >/dev/null
fi
if ! "$PY" -c "import snakemake_executor_plugin_slurm" 2>/dev/null; then
  echo "installing snakemake-executor-plugin-slurm into $("$PY" -c 'import sys; print(sys.prefix)')"
  "$PY" -m pip install -q "snakemake-executor-plugin-slurm>=1.0"
fi

cleanup() {
  # Only the daemons the test started (their PIDs are in $REPRO_SLURM_STATE/pids) and only if still alive.
  local f="$REPRO_SLURM_STATE/pids"
  [ -f "$f" ] || return 0
  while read -r pid name; do
    if kill -0 "$pid" 2>/dev/null && [ "$(cat /proc/"$pid"/comm 2>/dev/null)" = "$name" ]; then
      echo "stopping leftover $name (pid $pid)"; kill "$pid" 2>/dev/null || true
    fi
  done < "$f"
}
trap cleanup EXIT

start=$(date +%s)
status=0
REPRO_SLURM_TEST=1 "$PY" -m pytest -v -s -p no:cacheprovider tests/slurm "$@" || status=$?
echo "scripts/test_slurm.sh: pytest exit $status after $(( $(date +%s) - start )) s (state and daemon logs: $REPRO_SLURM_STATE)"
exit $status
