"""Hardware and software fingerprint of the machine a result was measured on, and a stable hardware id.

The hardware id is a readable slug (``cpu-amd-epyc-9b14-2c``, ``gpu-nvidia-h200``) used as a path component of
every results folder, so results from different machines never overwrite each other.
"""
from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from repro.provenance import git_commit

PACKAGES = ("torch", "triton", "snakemake", "pandas", "numpy", "seaborn", "sacrebleu", "sentencepiece")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_mhz() -> float | None:
    """The CPU clock the kernel reports (/proc/cpuinfo's "cpu MHz", averaged over the processors), or None where
    there is none. A virtual machine's CPU name may carry no clock ("Intel(R) Xeon(R) Processor"), so one hardware id
    can run on hosts of different speeds (the 2-core Intel ran the same jobs 1.2-1.6x faster on a 2600-MHz host than
    on the host of an earlier run): every result's fingerprint and every run.json keep the clock the run saw."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return None
    mhz = []
    for line in lines:
        key, _, value = line.partition(":")
        if key.strip() == "cpu MHz":
            try:
                mhz.append(float(value))
            except ValueError:
                continue
    return round(sum(mhz) / len(mhz), 1) if mhz else None


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


def _mem_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def _version(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def accelerator() -> dict | None:
    try:
        import torch  # lazy: the workflow imports this module while Snakemake builds the DAG, without torch
    except ImportError:  # pragma: no cover
        return None
    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    driver = None
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=20).stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        pass
    return {"name": props.name, "count": torch.cuda.device_count(), "memory_gib": round(props.total_memory / 2**30, 1),
            "capability": f"{props.major}.{props.minor}", "cuda": torch.version.cuda, "driver": driver}


def fingerprint(hardware: str | None = None) -> dict:
    """Everything that identifies where and with what a number was measured. ``hardware``: the id the results are
    filed under, decided once by the entry point (the workflow's ``hardware`` setting, a job's ``--hardware``);
    None detects it (:func:`hardware_id`)."""
    accel = accelerator()
    return {
        "hardware_id": hardware or hardware_id(accel),
        "hardware": {"cpu": _cpu_model(), "cpu_mhz": cpu_mhz(), "cores": _cores(), "memory_gib": _mem_gib(),
                     "machine": platform.machine(), "accelerator": accel},
        "software": {"python": platform.python_version(), "os": platform.platform(),
                     **{p: _version(p) for p in PACKAGES}},
        "git": git_commit(),
        "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def slug(text: str) -> str:
    text = re.sub(r"\((r|tm)\)|cpu @.*|processor|\d+-core", "", text.lower())
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-")


def hardware_id(accel: dict | None = "auto") -> str:
    """The detected id: ``gpu-<name>[x<count>]`` on a GPU machine, else ``cpu-<model>-<cores>c`` (an entry point
    may be told another: the workflow's ``hardware`` setting)."""
    if accel == "auto":
        accel = accelerator()
    if accel:
        count = f"x{accel['count']}" if accel.get("count", 1) > 1 else ""
        return f"gpu-{slug(accel['name'])}{count}"
    return f"cpu-{slug(_cpu_model())}-{_cores()}c"


if __name__ == "__main__":
    json.dump(fingerprint(), sys.stdout, indent=2)
    print()
