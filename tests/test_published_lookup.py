"""Published numbers live only in the registry (repro/registry/published.yaml): a metrics row stores the key of the
registry value it is compared with, and every reader (repro.io.read_metrics, the judges, the pages) fills the value,
unit and citation from the registry as it is now, so a corrected paper number changes the verdicts and pages of
stored measurements without measuring again (repro.registry.with_published)."""
from __future__ import annotations

import copy
import math
import shutil
from pathlib import Path

import pytest

from repro import io, registry
from repro.judging import judge_stored
from repro.report import pages

ROOT = Path(__file__).resolve().parents[1]
CLAIM, KEY = "block_numerics", "gain_0p9_pow_40"  # the plain chain's 0.9^40 = 0.0148, a headline check
# a reference measured before rows stored only the registry key (its metrics.csv holds the published value too)
REFERENCE = ROOT / "references" / "results" / "cpu-intel-xeon-2c" / "default" / CLAIM


def _corrected(monkeypatch, claim: str, key: str, value) -> None:
    """The registry with ``claim``'s ``key`` changed to ``value`` (as a corrected paper number would be)."""
    data = copy.deepcopy(registry._data())
    rec = next(v for v in data["claims"][claim]["values"] if v["key"] == key)
    rec["value"] = value
    monkeypatch.setattr(registry, "_data", lambda: data)


@pytest.fixture
def stored(tmp_path) -> Path:
    out = tmp_path / CLAIM
    shutil.copytree(REFERENCE, out)
    for f in out.rglob("*"):
        f.chmod(0o755 if f.is_dir() else 0o644)
    return out


def test_a_new_row_stores_the_key_not_the_number(tmp_path):
    row = io.metric(CLAIM, "layernorm_output", 0.447, "", published_key="layernorm_2468", published_index=2, index=2)
    assert row["published_key"] == "layernorm_2468" and row["published_index"] == 2
    assert not {"published_value", "published_unit", "source"} & set(row)
    assert not {"published_value", "published_unit", "source"} & set(io.METRIC_COLUMNS)
    fp = {"hardware_id": "cpu-test", "git": {"commit": None, "dirty": None}, "timestamp": io._now()}
    io.write_measurement(tmp_path, claim=CLAIM, scale="tiny", metrics=[row], config={}, fingerprint=fp)
    header = (tmp_path / "metrics.csv").read_text().splitlines()[0].split(",")
    assert "published_value" not in header and "source" not in header and "published_index" in header
    frame = io.read_metrics(tmp_path, verify=False)
    assert frame.loc[0, "published_value"] == 0.447 and "Ba et al. 2016" in frame.loc[0, "source"]


def test_a_key_or_index_the_registry_lacks_fails_when_measuring():
    with pytest.raises(KeyError, match="no_such_key"):
        io.metric(CLAIM, "x", 1.0, "", published_key="no_such_key")
    with pytest.raises(KeyError, match="published_index"):
        io.metric(CLAIM, "x", 1.0, "", published_key="layernorm_2468", published_index=4)
    with pytest.raises(KeyError, match="published_index"):
        io.metric(CLAIM, "x", 1.0, "", kind="statistic", published_key=KEY, published_index=0)


def test_rows_read_now_carry_the_registry_value_now(monkeypatch):
    rows = [io.metric(CLAIM, "layernorm_output", 0.447, "", published_key="layernorm_2468", published_index=2),
            io.metric(CLAIM, "plain_chain_gradient_gain", 0.0148, "ratio", kind="statistic", published_key=KEY),
            io.metric(CLAIM, "other", 1.0, "ratio", kind="statistic")]
    filled = registry.with_published(rows)
    assert [r.get("published_value") for r in filled] == [0.447, 0.0148, None]
    assert "He et al. 2016" in filled[1]["source"] and filled[1]["published_unit"] == "ratio"
    _corrected(monkeypatch, CLAIM, "layernorm_2468", [-1.0, -0.5, 0.5, 1.0])
    _corrected(monkeypatch, CLAIM, KEY, 0.02)
    assert [r.get("published_value") for r in registry.with_published(rows)] == [0.5, 0.02, None]


def test_stored_rows_take_the_registry_value_over_the_one_they_stored(monkeypatch, stored):
    """The committed reference stored published_value 0.0148 beside the row (older files did): the registry's
    value overrides it, in the rows read, in the judge's verdict and on the page."""
    assert "0.0148," in (stored / "metrics.csv").read_text()  # what the older file stored
    before, _, _ = judge_stored(CLAIM, stored, "default")
    _corrected(monkeypatch, CLAIM, KEY, 0.02)
    frame = io.read_metrics(stored)
    row = frame[frame["published_key"] == KEY].iloc[0]
    assert row["published_value"] == 0.02
    after, _, _ = judge_stored(CLAIM, stored, "default")
    name = "gradient through 40 layers of gain 0.9"
    old, new = ([c for c in v["checks"] if c["name"] == name][0] for v in (before, after))
    assert old["numbers"]["paper"] == 0.0148 and old["passed"] is True
    assert new["numbers"]["paper"] == 0.02 and new["passed"] is False  # 0.01478 is no longer 0.02 +- 0.5%
    verdict, fp, metrics = pages.read_results(stored)
    table = dict(pages._published_blocks(metrics))["table"]
    published = table[table["setting"].str.contains("gain=0.9")]["published"].tolist()
    assert published == [pages._fmt(0.02)], published


def test_a_key_the_registry_no_longer_has_keeps_what_the_row_stored(monkeypatch, stored):
    data = copy.deepcopy(registry._data())
    values = data["claims"][CLAIM]["values"]
    data["claims"][CLAIM]["values"] = [v for v in values if v["key"] != KEY]
    monkeypatch.setattr(registry, "_data", lambda: data)
    frame = io.read_metrics(stored)
    row = frame[frame["published_key"] == KEY].iloc[0]
    assert math.isclose(row["published_value"], 0.0148)


def test_an_older_row_holding_one_element_of_a_list_keeps_it():
    """Rows stored before published_index was recorded hold one element of a list-valued entry and not which one:
    the element stays (the registry cannot say which it was); a row with its index takes the registry's."""
    old = {"claim": CLAIM, "published_key": "layernorm_2468", "published_value": 0.447, "source": "old"}
    assert registry.with_published([old])[0]["published_value"] == 0.447
    assert registry.with_published([{**old, "published_index": 0.0}])[0]["published_value"] == -1.342
    whole = {"claim": "rmsnorm_speed", "published_key": "reduction_range"}
    assert registry.with_published([whole])[0]["published_value"] == [7, 64]
