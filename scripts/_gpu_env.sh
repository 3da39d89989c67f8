# Sourced by scripts/gpu_check.sh and scripts/gpu_paper.sh (needs PY set): PYTHONPATH with the repository, and the
# wheels carried from the submit machine (scripts/gpu_wheels.sh) installed into a scratch site, first on the path.
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}."
if compgen -G ".whl/*.whl" > /dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/repro_site \
        .whl/*.whl && export PYTHONPATH="/tmp/repro_site:$PYTHONPATH" || { echo "wheel install failed"; exit 1; }
fi
