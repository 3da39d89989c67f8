"""The tiny workflow through Snakemake's SLURM executor on a real single-node SLURM started by this test.

Run it with ``scripts/test_slurm.sh`` (installs Debian's slurmctld, slurmd, munge and the executor plugin, then
runs this file with REPRO_SLURM_TEST=1). It needs root: it writes /etc/slurm/slurm.conf (the executor's job step
drops SLURM_* variables, so SLURM_CONF cannot point elsewhere; an existing file is backed up and restored), starts
munged, slurmctld and slurmd in the foreground as child processes, and stops them by PID afterwards.
Accounting is disabled, so the status command is squeue and MinJobAge is 300 s (>= 120 s); with sacct, or with
squeue and a short MinJobAge, Snakemake would wait forever for finished jobs. See docs/cluster.md.

What it checks: every job of ``claim_param_accounting claim_block_numerics`` at scale tiny (2 claim rules and 2
report rules) is submitted with sbatch and finishes, the results and pages exist, the local ``compare_hardware``
rule runs beside them, and a ``gpu=1`` resource (given to param_accounting with --set-resources, as paper-scale
rules declare it) reaches the allocation as a GPU (the node offers one fake GPU, gres File=/dev/null).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
CONF = Path("/etc/slurm/slurm.conf")
GRES = Path("/etc/slurm/gres.conf")  # one fake GPU (File=/dev/null) so the `gpu` resource can be checked
STATE = Path(os.environ.get("REPRO_SLURM_STATE", "/tmp/repro-slurm-test"))
MARK = "# written by tests/slurm/test_slurm_executor.py"
DAEMONS = ("munged", "slurmctld", "slurmd", "sinfo", "squeue", "sbatch", "srun", "scontrol")
CTLD_PORT, SLURMD_PORT = 6817, 6818

if os.environ.get("REPRO_SLURM_TEST") != "1":
    pytest.skip("starts a real SLURM as root and writes /etc/slurm/slurm.conf: run scripts/test_slurm.sh",
                allow_module_level=True)


def _run(cmd: list[str], timeout: float = 30, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)


def _port_in_use(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _node() -> dict:
    """This machine as slurmd sees it (NodeName, CPUs, RealMemory, ...)."""
    out = _run(["slurmd", "-C"]).stdout.splitlines()[0]
    return dict(kv.split("=", 1) for kv in out.split())


def slurm_conf(state: Path, node: dict) -> str:
    name = node["NodeName"]
    mem = max(1000, int(node["RealMemory"]) - 1024)
    return "\n".join([
        MARK, f"# state: {state}",
        "ClusterName=repro-test", f"SlurmctldHost={name}", "SlurmUser=root", "SlurmdUser=root",
        "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={state}/munge/munge.sock",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "MinJobAge=300",  # squeue must still list finished jobs when the executor asks (>= 120 s)
        "SchedulerType=sched/backfill", "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core_Memory",
        "ReturnToService=2", "MpiDefault=none", "MailProg=/bin/true", "GresTypes=gpu",
        f"SlurmctldPort={CTLD_PORT}", f"SlurmdPort={SLURMD_PORT}",
        f"StateSaveLocation={state}/ctld", f"SlurmdSpoolDir={state}/spool",
        f"SlurmctldPidFile={state}/slurmctld.pid", f"SlurmdPidFile={state}/slurmd.pid",
        f"SlurmctldLogFile={state}/slurmctld.log", f"SlurmdLogFile={state}/slurmd.log",
        f"NodeName={name} CPUs={node['CPUs']} RealMemory={mem} Gres=gpu:1 State=UNKNOWN",
        f"PartitionName=debug Nodes={name} Default=YES MaxTime=INFINITE State=UP", ""])


def gres_conf(node: dict) -> str:
    return f"{MARK}\nAutoDetect=off\nNodeName={node['NodeName']} Name=gpu File=/dev/null\n"


def _stop(procs: list[subprocess.Popen]) -> None:
    """Stop the daemons this test started, by PID, newest first."""
    for p in reversed(procs):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in reversed(procs):
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=10)


@pytest.fixture(scope="module")
def cluster():
    missing = [d for d in DAEMONS if shutil.which(d) is None]
    if missing:
        pytest.fail(f"not installed: {', '.join(missing)} (scripts/test_slurm.sh installs slurmctld slurmd "
                    "slurm-client munge with apt-get)")
    if os.geteuid() != 0:
        pytest.fail("needs root (writes /etc/slurm/slurm.conf, runs slurmd)")
    busy = [p for p in (CTLD_PORT, SLURMD_PORT) if _port_in_use(p)]
    if busy:
        pytest.fail(f"port(s) {busy} already in use: a SLURM is already running here; not touching it")
    if STATE.exists():
        shutil.rmtree(STATE)
    for sub in ("munge", "ctld", "spool"):
        (STATE / sub).mkdir(parents=True)
    (STATE / "munge").chmod(0o755)
    key = STATE / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    backups = {}
    for f in (CONF, GRES):
        if f.exists() and MARK not in f.read_text():
            backups[f] = STATE / f"{f.name}.backup"
            shutil.copy2(f, backups[f])
    CONF.parent.mkdir(parents=True, exist_ok=True)
    CONF.write_text(slurm_conf(STATE, _node()))
    GRES.write_text(gres_conf(_node()))
    procs: list[subprocess.Popen] = []
    pids = STATE / "pids"

    def start(cmd, name):
        log = open(STATE / f"{name}.out", "w")
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        procs.append(p)
        with pids.open("a") as fh:  # scripts/test_slurm.sh stops these if pytest itself is killed
            fh.write(f"{p.pid} {name}\n")
        return p

    try:
        m = STATE / "munge"
        start(["munged", "-F", "-f", f"--socket={m}/munge.sock", f"--key-file={key}", f"--pid-file={m}/munged.pid",
               f"--seed-file={m}/seed", f"--log-file={m}/munged.log"], "munged")
        _wait(lambda: (m / "munge.sock").exists(), 20, "munged socket")
        start(["slurmctld", "-D", "-i"], "slurmctld")
        _wait(lambda: _run(["scontrol", "ping"]).stdout.count("UP") > 0, 60, "slurmctld to answer")
        start(["slurmd", "-D"], "slurmd")
        _wait(lambda: _run(["sinfo", "-h", "-o", "%T"]).stdout.strip() == "idle", 90, "the node to be idle")
        yield STATE
    finally:
        jobs = _run(["squeue", "-h", "-o", "%i"]).stdout.split() if procs else []
        if jobs:
            _run(["scancel", *jobs])
        _stop(procs)
        for f in (CONF, GRES):
            if f in backups:
                shutil.copy2(backups[f], f)
            elif f.exists() and MARK in f.read_text():
                f.unlink()


def _wait(cond, timeout: float, what: str) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            if cond():
                return
        except (OSError, subprocess.SubprocessError):
            pass
        time.sleep(1)
    logs = "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted(STATE.glob("*.out")) + sorted(STATE.glob("*.log")))
    raise TimeoutError(f"waited {timeout:.0f} s for {what}\n{logs}")


def test_sbatch_roundtrip(cluster):
    """The cluster itself: a batch job with a job step runs and its output arrives."""
    out = cluster / "hello.out"
    r = _run(["sbatch", "--parsable", "-o", str(out), "--wrap", "srun hostname"])
    assert r.returncode == 0, r.stderr
    _wait(lambda: out.exists() and out.read_text().strip(), 60, "the batch job's output")
    assert out.read_text().strip() == _node()["NodeName"]


def test_tiny_workflow_through_slurm_executor(cluster, tmp_path):
    res, rep = tmp_path / "results", tmp_path / "reports"
    cmd = [sys.executable, "-m", "snakemake", "claim_param_accounting", "claim_block_numerics", "compare_hardware",
           "--profile", "profiles/slurm",
           "--slurm-status-command", "squeue", "--slurm-no-account", "--slurm-init-seconds-before-status-checks", "5",
           "--slurm-keep-successful-logs", "--slurm-logdir", str(tmp_path / "slurm_logs"),
           # a GPU request as paper-scale rules make it: must reach sbatch as --gpus (checked below)
           "--set-resources", "param_accounting:gpu=1",
           "--config", "scale=tiny", "claims=[param_accounting,block_numerics]", f"results_dir={res}",
           f"reports_dir={rep}"]
    t0 = time.time()
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1200)
    took = time.time() - t0
    out = r.stdout + r.stderr
    (cluster / "snakemake.out").write_text(out)
    assert r.returncode == 0, out[-6000:]
    submitted = dict(re.findall(r"has been submitted with SLURM jobid (\d+) \(log: \S*/rule_(\w+)/", out))
    # param_accounting and block_numerics (and their report pages unless those are localrules)
    assert {"param_accounting", "block_numerics"} <= set(submitted.values()), out[-4000:]
    # finished jobs stay visible for MinJobAge: the GPU request reached the allocation, and only that one
    shown = {rule: _run(["scontrol", "show", "job", jid]).stdout for jid, rule in submitted.items()}
    assert "TresPerJob=gres:gpu:1" in shown["param_accounting"], shown["param_accounting"]
    assert "gres:gpu" not in shown["block_numerics"], shown["block_numerics"]
    hw = next(p.name for p in res.iterdir())
    for claim in ("param_accounting", "block_numerics"):
        v = json.loads((res / hw / "tiny" / claim / "verdict.json").read_text())
        assert v["verdict"] == "not_applicable" and v["scale"] == "tiny"
        assert (res / hw / "tiny" / claim / "metrics.csv").stat().st_size > 0
        assert (rep / hw / "tiny" / f"{claim}.md").read_text().startswith("#")
        logs = list((tmp_path / "slurm_logs").glob(f"rule_{claim}/**/*.log"))
        assert logs, f"no SLURM log for rule {claim}"
    assert (rep / "compare" / "tiny" / "index.md").exists()
    print(f"SLURM jobs {submitted}; snakemake took {took:.0f} s")
