"""Each claim's ``python -m repro.claims.<id> --help`` lists every parameter of its schema with the meaning and the
value at each scale, and example commands (repro/claims/_cli.py)."""
import subprocess
import sys

import pytest

from repro import config
from repro.claims._cli import _flat_schema, parameters_help

CLAIMS = [c for c in config.available_sections() if (config.CONFIG_DIR / "schema" / f"{c}.schema.yaml").exists()
          and c != "translation"]


@pytest.mark.parametrize("claim", CLAIMS)
def test_help_lists_every_parameter_with_meaning_and_scales(claim):
    text = parameters_help(claim)
    for key, sub in _flat_schema(config._schema(claim)):
        assert f"\n  {key}\n" in text, key
    assert "tiny: " in text or "all scales: " in text
    assert f"python -m repro.claims.{claim} --scale tiny --out" in text and f"snakemake claim_{claim}" in text


def test_help_runs_from_the_command_line():
    r = subprocess.run([sys.executable, "-m", "repro.claims.rank_collapse", "--help"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "dong.depth" in r.stdout and "Layers of each stack." in r.stdout
    assert "tiny: 5 | default: 12 | paper: 24" in r.stdout and "examples:" in r.stdout
