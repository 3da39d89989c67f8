"""Reproduction suite for published claims about the Transformer block."""
import os
import sys

# OpenMP threads that finish a parallel region spin only briefly (1000 iterations, microseconds) before they sleep
# (libgomp reads this when torch loads it, so it is set before anything imports torch). Measured on the 2-core Intel
# Xeon: 300 Adam steps of a 16-layer d=32 MLP at 2 threads beside a 1-thread job took 2.9 s with libgomp's default
# spin (300000), 0.6-0.8 s with OMP_WAIT_POLICY=PASSIVE or this spin count; a training step of the default
# translation model at 2 threads on the idle machine took 0.93-1.03 s passive (threads sleeping and waking between
# every pair of kernels) and 0.82-0.85 s with this spin count (0.78-0.82 s spinning freely). Set OMP_WAIT_POLICY or
# GOMP_SPINCOUNT to override. The timing claims, which run alone on the idle machine, undo it
# (:func:`openmp_default_wait`).
# The suite marks its own setting (REPRO_SUITE_SPIN), so a process started by one that imported the suite (every job
# of the Snakemake workflow, whose Snakefile imports repro) tells the inherited spin from a user's.
_SUITE_SPIN = "1000"
_OPENMP = {"suite_spin": "OMP_WAIT_POLICY" not in os.environ and (
               "GOMP_SPINCOUNT" not in os.environ or
               os.environ.get("REPRO_SUITE_SPIN") == os.environ["GOMP_SPINCOUNT"] == _SUITE_SPIN),
           "torch_first": "torch" in sys.modules, "default_wait": False}
if _OPENMP["suite_spin"]:
    os.environ["GOMP_SPINCOUNT"] = os.environ["REPRO_SUITE_SPIN"] = _SUITE_SPIN


def openmp_default_wait() -> bool:
    """Give this process libgomp's default wait (threads spin ~300000 iterations between parallel regions) instead of
    the suite's short spin. For the timing claims only, which hold every core of the idle machine while they time:
    there nothing shares the cores, and the short spin put each of the 2 threads to sleep and woke it again around
    every kernel (~5,000 context switches a second), which made rmsnorm_speed's model step ~18% slower (~145 vs
    ~120 ms) and charged each variant per kernel launched: torch's RMSNorm (several kernels) timed 8% slower than its
    fused LayerNorm, 5% slower with the default wait. Call it at the top of the claim's module, before torch is
    imported (libgomp reads its variables when torch loads it); a user's OMP_WAIT_POLICY or GOMP_SPINCOUNT is kept.
    Returns whether the default wait is in effect (:func:`openmp_wait` says which wait the process has)."""
    if _OPENMP["suite_spin"] and not _OPENMP["torch_first"] and "torch" not in sys.modules:
        os.environ.pop("GOMP_SPINCOUNT", None)  # the marker stays: a child process takes the suite's spin again
        _OPENMP["default_wait"] = True
    return _OPENMP["default_wait"]


def openmp_wait() -> str:
    """The OpenMP wait this process's libgomp read when torch loaded it, as recorded in timing results:
    ``default`` (libgomp's), ``suite spin 1000`` (repro's short spin), ``user: VAR=value`` (set by the user), or
    ``unknown`` (torch was imported before the suite, under whatever the environment then held)."""
    if _OPENMP["torch_first"]:
        return "unknown"
    if _OPENMP["default_wait"]:
        return "default"
    if _OPENMP["suite_spin"]:
        return "suite spin 1000"
    return "user: " + ", ".join(f"{k}={os.environ[k]}" for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
                                if k in os.environ)


# REPRO_RECORD_MODULES=<folder>: each process writes, when it exits, its command line and the repro source files it
# loaded (<folder>/<pid>.json), so a test can check that every file a measurement loaded is covered by its key
# (repro.provenance follows imports from the source; a file loaded some other way would escape the key).
if os.environ.get("REPRO_RECORD_MODULES"):
    import atexit
    import json as _json

    def _record_modules(folder: str = os.environ["REPRO_RECORD_MODULES"]) -> None:
        package = os.path.dirname(os.path.abspath(__file__))  # by file: `python -m` runs its module as __main__
        files = sorted({os.path.relpath(f, os.path.dirname(package)).replace(os.sep, "/")
                        for f in (getattr(m, "__file__", None) for m in list(sys.modules.values()))
                        if f and os.path.abspath(f).startswith(package + os.sep)})
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"{os.getpid()}.json"), "w") as fh:
            _json.dump({"argv": list(getattr(sys, "orig_argv", sys.argv)), "files": files}, fh)

    atexit.register(_record_modules)
