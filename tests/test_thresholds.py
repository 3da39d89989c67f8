"""Thresholds belong to the judge (issue 36): every claim's ``judge:`` section is read, and every threshold in it can
change a verdict.

- **read**: judging a claim's committed reference rows reads every key of its ``judge:`` section (a key declared and
  read by nothing is a dead key: a user who edits it changes nothing);
- **matters**: moving each threshold past the value the reference measured (the candidate values below, within the
  key's schema) changes some check's outcome (held, failed or undecided) on the reference rows, or on the rows of
  the claim's controls where the reference cannot reach the check (``tests/controls/<claim>.py``:
  ``threshold_rows(rows, key)``, e.g. GPU-labelled rows for a GPU-only check);
- **recorded**: the checks that decide with a threshold name it (``thresholds=uses(T, key)``), so the page can show
  it beside the check, and verdict.json records the whole section.
"""
from __future__ import annotations

import copy
import json
import math

import pytest

from repro import config, registry
from test_judge_contract import CLAIMS, _controls, _judge, _reference, _rows


class Recording(dict):
    """A thresholds mapping that records the keys read."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.read: set = set()

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)


def _judge_with(claim, folder, rows, thresholds, controlled: bool = False):
    from repro.judging import judge_context, load_judge

    stored = json.loads((folder / "config.json").read_text())
    params = {k: v for k, v in stored["config"].items() if k != config.JUDGE}
    measured = folder / "measured.json"
    record = json.loads(measured.read_text()) if measured.exists() else {"context": {}}
    ctx = judge_context("default", params, record, json.loads((folder / "fingerprint.json").read_text()))
    controls = _controls(claim) if controlled else None
    if controls is not None and hasattr(controls, "context"):
        ctx = controls.context(ctx)
    return load_judge(claim)(rows, thresholds, ctx)


def _outcomes(v: dict) -> dict:
    return {"verdict": v["verdict"], **{c["name"]: c.get("passed") for c in v.get("checks") or []},
            **{"gate: " + g["name"]: g.get("passed") for g in v.get("gates") or []}}


def _candidates(value, sub: dict) -> list:
    """Values to move a threshold to: far below and far above, halves and doubles, the edges of its schema."""
    if isinstance(value, bool) or value is None:
        return [not value] if isinstance(value, bool) else []
    if isinstance(value, (int, float)):
        lo = sub.get("minimum", sub.get("exclusiveMinimum", -math.inf))
        hi = sub.get("maximum", sub.get("exclusiveMaximum", math.inf))
        raw = [value * f for f in (0.0, 1e-6, 0.01, 0.5, 2.0, 100.0, 1e6)] + [value - 10, value + 10, -1e6, 1e6]
        out = []
        for x in raw:
            x = int(round(x)) if sub.get("type") == "integer" else float(x)
            if lo <= x <= hi and x != value and ("exclusiveMinimum" not in sub or x > lo) and (
                    "exclusiveMaximum" not in sub or x < hi):
                out.append(x)
        return out
    if isinstance(value, list) and len(value) == 2 and all(isinstance(x, (int, float)) for x in value):
        a, b = value
        w = (b - a) or 1.0
        return [[a - 100 * w, a - 99 * w], [b + 99 * w, b + 100 * w], [a - 100 * w, b + 100 * w],
                [(a + b) / 2, (a + b) / 2 + 1e-9 * w]]
    enum = (sub.get("items") or {}).get("enum")
    if isinstance(value, list) and enum:  # a set of choices (e.g. headline bit widths): each one alone, and all
        return [c for c in [[x] for x in enum] + [list(enum)] if c != value]
    return []


def _thresholds_schema(claim: str) -> dict:
    return ((config._schema(claim) or {}).get("properties") or {}).get(config.JUDGE, {}).get("properties") or {}


@pytest.mark.parametrize("claim", CLAIMS)
def test_the_judge_section_is_the_claims_only_thresholds(claim):
    """Every claim has a judge: section at every scale, its keys described in the schema, and no threshold left
    among the measurement parameters under the old spellings."""
    schema = (config._schema(claim) or {}).get("properties") or {}
    assert config.JUDGE in schema, f"config/schema/{claim}.schema.yaml has no judge: section"
    for old in ("checks", "verdict", "tolerance"):
        assert old not in schema, f"{claim}: '{old}' is the old spelling of the judge: section"
    for key, sub in _thresholds_schema(claim).items():
        assert str(sub.get("description", "")).strip(), f"{claim}: judge.{key} has no description"
    for scale in config.SCALES:
        assert config.JUDGE not in config.section(claim, scale)
        assert isinstance(config.thresholds(claim, scale), dict)


@pytest.mark.parametrize("claim", CLAIMS)
def test_every_threshold_is_read(claim):
    folder = _reference(claim)
    rows = _rows(folder)
    seen: set = set()
    variants = [rows]
    controls = _controls(claim)
    if controls is not None:
        variants += [controls.paper_false(rows)] + list(getattr(controls, "ties", lambda r: [])(rows))
        if hasattr(controls, "threshold_rows"):
            variants += [r for key in config.thresholds(claim, "default")
                         for r in [controls.threshold_rows(rows, key)] if r is not None]
    for i, rs in enumerate(variants):
        T = Recording(config.thresholds(claim, "default"))
        _judge_with(claim, folder, rs, T, controlled=i > 0)
        seen |= T.read
    dead = sorted(set(config.thresholds(claim, "default")) - seen)
    assert not dead, f"{claim}: judge: keys never read by repro/judges/{claim}.py: {dead}"


@pytest.mark.parametrize("claim", CLAIMS)
def test_every_threshold_can_change_a_verdict(claim):
    folder = _reference(claim)
    rows = _rows(folder)
    base_T = config.thresholds(claim, "default")
    schema = _thresholds_schema(claim)
    controls = _controls(claim)
    never = []
    for key, value in base_T.items():
        sets = [(rows, False)]
        if controls is not None and hasattr(controls, "threshold_rows"):
            extra = controls.threshold_rows(rows, key)
            if extra is not None:
                sets.append((extra, True))
        moved = False
        for rs, controlled in sets:
            base = _outcomes(_judge_with(claim, folder, rs, copy.deepcopy(base_T), controlled))
            for x in _candidates(value, schema.get(key, {})):
                if _outcomes(_judge_with(claim, folder, rs, {**copy.deepcopy(base_T), key: x}, controlled)) != base:
                    moved = True
                    break
            if moved:
                break
        if not moved:
            never.append(key)
    assert not never, f"{claim}: moving these thresholds changes no check on the reference rows: {never}"


@pytest.mark.parametrize("claim", CLAIMS)
def test_verdict_records_the_thresholds_it_used(claim, tmp_path):
    import shutil

    from repro.claims._cli import rejudge

    folder = _reference(claim)
    out = tmp_path / claim
    shutil.copytree(folder, out)
    for f in out.rglob("*"):
        f.chmod(0o755 if f.is_dir() else 0o644)
    v = rejudge(claim, out, "default")
    assert v["thresholds"] == config.thresholds(claim, "default")
    named = {k for c in v["checks"] for k in (c.get("thresholds") or {})}
    assert named <= set(v["thresholds"]), named - set(v["thresholds"])
    if v["thresholds"]:
        assert named, f"{claim}: no check names the thresholds it decides with (thresholds=uses(T, key))"


def _leaf_keys(node, schema: dict | None, prefix=""):
    """The dotted keys of ``node`` that its schema declares as parameters (``properties``); the names of a mapping
    whose keys are data (``additionalProperties``: model names, registry keys) are not parameters themselves, but
    what the schema declares inside each entry is."""
    out = []
    if not isinstance(node, dict):
        return out
    schema = schema or {}
    props = schema.get("properties") or {}
    extra = schema.get("additionalProperties") if isinstance(schema.get("additionalProperties"), dict) else None
    for k, v in node.items():
        if k in props:
            out.append(f"{prefix}{k}")
            out += _leaf_keys(v, props[k], f"{prefix}{k}.")
        elif extra is not None:
            out += _leaf_keys(v, extra, f"{prefix}{k}.")
    return out


@pytest.mark.parametrize("claim", CLAIMS)
def test_every_measurement_parameter_is_read_by_the_measurement(claim):
    """Every key of the claim's scale sections (the judge: part aside, tested above) is named in the measurement's
    code, the files its key hashes (a key nothing reads is dead: editing it changes nothing but the key). A key
    consumed as a dataclass field or keyword counts as named."""
    import re

    from repro import provenance

    needs = tuple(provenance.ARTEFACT_CODE)  # the shared artefacts' code may consume the sections a claim lists
    files = provenance.module_closure((f"repro.claims.{claim}",) + tuple(m for a in needs
                                                                       for m in provenance.ARTEFACT_CODE[a]))
    text = "\n".join(p.read_text() for p in files)
    dead = set()
    for scale in config.SCALES:
        params = config.section(claim, scale)
        for key in _leaf_keys(params, config._schema(claim)):
            name = key.rsplit(".", 1)[-1]
            if not re.search(rf"\b{re.escape(name)}\b", text):
                dead.add(key)
    assert not dead, f"{claim}: parameters never named by repro/claims/{claim}.py or what it imports: {sorted(dead)}"


def _judged_sections() -> list[str]:
    return [n for n in config.available_sections() if config.JUDGE in ((config._schema(n) or {}).get("properties") or {})]


@pytest.mark.parametrize("name", _judged_sections())
def test_a_threshold_is_written_once(name):
    """One source per threshold: the claim file's top-level ``judge:`` block holds every threshold the schema
    declares (the schema gives its type and meaning, never a default), and a scale's ``judge:`` holds only the values
    that differ at that scale (a copy of the scale-free value is a second place to forget when it changes)."""
    import yaml

    data = yaml.safe_load((config.CONFIG_DIR / "claims" / f"{name}.yaml").read_text())
    declared = _thresholds_schema(name)
    with_default = sorted(k for k, sub in declared.items() if "default" in sub)
    assert not with_default, f"config/schema/{name}.schema.yaml: judge defaults (the claim file holds them): {with_default}"
    assert config.JUDGE in data, f"config/claims/{name}.yaml has no top-level judge: block"
    top = data[config.JUDGE] or {}
    assert set(top) == set(declared), (f"config/claims/{name}.yaml judge: missing {sorted(set(declared) - set(top))}, "
                                       f"undeclared {sorted(set(top) - set(declared))}")
    for scale in config.SCALES:
        own = (data.get(scale) or {}).get(config.JUDGE) or {}
        repeated = sorted(k for k, v in own.items() if k in top and v == top[k])
        assert not repeated, f"config/claims/{name}.yaml [{scale}] judge: repeats the scale-free values of {repeated}"
        assert config.thresholds(name, scale) == {**top, **own}


def test_thresholds_merge_the_scale_free_block_then_the_scale_then_overrides(tmp_path, monkeypatch):
    (tmp_path / "claims").mkdir()
    (tmp_path / "schema").mkdir()
    (tmp_path / "claims" / "toy.yaml").write_text(
        "tiny: {n: 1}\ndefault: {n: 2, judge: {b: 5.0}}\npaper: {n: 3}\njudge: {a: 1.0, b: 2.0}\n")
    (tmp_path / "schema" / "toy.schema.yaml").write_text(
        "type: object\nadditionalProperties: false\nproperties:\n  n: {type: integer}\n"
        "  judge:\n    type: object\n    additionalProperties: false\n    default: {}\n"
        "    properties: {a: {type: number}, b: {type: number}}\n")
    monkeypatch.setattr(config, "CONFIG_DIR", tmp_path)
    config._schema.cache_clear()
    try:
        assert config.thresholds("toy", "tiny") == {"a": 1.0, "b": 2.0}
        assert config.thresholds("toy", "default") == {"a": 1.0, "b": 5.0}
        assert config.thresholds("toy", "default", {"toy": {"judge": {"a": 7.0}}}) == {"a": 7.0, "b": 5.0}
        assert config.section("toy", "default") == {"n": 2}
        assert config.validate_thresholds("toy", "default", {"a": 3.0}) == {"a": 3.0, "b": 5.0}
    finally:
        config._schema.cache_clear()
