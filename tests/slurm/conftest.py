"""Marker ``slurm``: tests that start a real single-node SLURM (root, Debian's slurmctld/slurmd/munge).

They run only through ``scripts/test_slurm.sh`` (which sets REPRO_SLURM_TEST=1); elsewhere they are skipped with
the reason, because they write /etc/slurm/slurm.conf and start daemons."""


def pytest_configure(config):
    config.addinivalue_line("markers", "slurm: starts a real single-node SLURM (run with scripts/test_slurm.sh)")
