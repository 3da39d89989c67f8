"""The confirmatory plan of a claim at a scale: what was fixed before measuring (docs/verdicts.md, "The plan").

Each claim file config/claims/<id>.yaml holds a top-level ``plan:`` block, one entry per scale with a confirmatory
design (default and paper; tiny has none): the exploration records the design was chosen on (``chosen_by``), how
(``how``), the dotted parameters holding confirmation seeds (``confirmation_seeds``, every value >= 1000; exploration
uses seeds below 1000), seed parameters that are no replicate (``fixed_seeds``, with the reason), the confirmatory
checks (``confirmatory``: "all" or names), planned looks (``looks``: the first n of a seed parameter's values at each
look, the error rate spent over them by Bonferroni) and the seeds once looked at (``spent``).

The plan key (:func:`plan_key`) hashes the scale's plan block, the measurement's parameters (through their config key,
repro.provenance.config_key of repro.config.job_params) and the judge's thresholds: a measurement records it in
measured.json, a judgement in verdict.json; the two differ when thresholds changed after measuring (a changed plan
block or parameter changes the measurement's config and so its freshness: repro.provenance.keys).

Judge-side (repro.provenance.JUDGE_SIDE): reads config files only, imports no torch and no measurement.
"""
from __future__ import annotations

import copy
import hashlib
import json
import re
from pathlib import Path
from typing import Any, Mapping

from repro import config, provenance
from repro.errors import ConfigError

PLAN = "plan"
KEYS = ("chosen_by", "how", "confirmation_seeds", "fixed_seeds", "confirmatory", "looks", "spent")
REQUIRED = ("chosen_by", "how", "confirmation_seeds", "confirmatory")
LOOK_KEYS = ("param", "at", "spending")
SPENDING = ("bonferroni",)
# confirmation seeds start here; exploration (docs/pilots/, scripts/pilots/, sizing runs) stays below
CONFIRMATION_MIN = 1000
SEED_KEY = re.compile(r"^(seed|seeds|.+_seed|.+_seeds)$")
NONE = "no plan recorded"


def _where(claim: str, scale: str | None = None) -> str:
    return f"{claim}.yaml [plan{'.' + scale if scale else ''}]"


def _raw(claim: str) -> Mapping:
    path = config.CONFIG_DIR / "claims" / f"{claim}.yaml"
    return config._load_yaml(path)


def block(claim: str, scale: str) -> dict | None:
    """The validated plan block of ``claim`` at ``scale`` (None: no plan recorded there)."""
    plans = _raw(claim).get(PLAN)
    if plans is None:
        return None
    if not isinstance(plans, Mapping):
        raise ConfigError(f"{_where(claim)}: expected a mapping of scales, got {plans!r}")
    unknown = [s for s in plans if s not in config.SCALES]
    if unknown:
        raise ConfigError(f"{_where(claim)}: {unknown[0]}: unknown scale (valid: {', '.join(config.SCALES)})")
    if plans.get(scale) is None:
        return None
    return validate(claim, scale, plans[scale])


def validate(claim: str, scale: str, given: Any) -> dict:
    """Check a plan block (known keys and their shapes, parameters that exist at that scale and hold seeds, looks
    inside the listed parameter); raise ConfigError naming the file and the key."""
    where = _where(claim, scale)
    if not isinstance(given, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {given!r}")
    b = copy.deepcopy(dict(given))
    for key in b:
        if key not in KEYS:
            raise ConfigError(f"{where}.{key}: unknown key (valid: {', '.join(KEYS)})")
    for key in REQUIRED:
        if key not in b:
            raise ConfigError(f"{where}.{key}: missing (every plan names {', '.join(REQUIRED)})")
    if not _strings(b["chosen_by"]) or not b["chosen_by"]:
        raise ConfigError(f"{where}.chosen_by: expected a list of paths in the repository, got {b['chosen_by']!r}")
    for path in b["chosen_by"]:
        if not (config.ROOT / path).exists():
            raise ConfigError(f"{where}.chosen_by: {path!r} is not a file of the repository")
    if not isinstance(b["how"], str) or not b["how"].strip():
        raise ConfigError(f"{where}.how: expected a sentence saying how the design was chosen")
    if not (b["confirmatory"] == "all" or _strings(b["confirmatory"])):
        raise ConfigError(f"{where}.confirmatory: expected 'all' or a list of check names")
    params = seed_params(config.section(claim, scale, check_models=False))
    _check_seed_keys(where, "confirmation_seeds", b["confirmation_seeds"], params)
    fixed = b.setdefault("fixed_seeds", {})
    if not isinstance(fixed, Mapping) or not all(isinstance(v, str) for v in fixed.values()):
        raise ConfigError(f"{where}.fixed_seeds: expected a mapping of parameter -> reason")
    _check_seed_keys(where, "fixed_seeds", list(fixed), params)
    if "looks" in b:
        b["looks"] = _check_looks(where, b["looks"], b["confirmation_seeds"], params)
    spent = b.setdefault("spent", [])
    if not isinstance(spent, list) or not all(isinstance(s, Mapping) and set(s) == {"seeds", "by"} for s in spent):
        raise ConfigError(f"{where}.spent: expected a list of {{seeds: ..., by: ...}}")
    return b


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _check_seed_keys(where: str, key: str, given: Any, params: Mapping) -> None:
    if not _strings(given):
        raise ConfigError(f"{where}.{key}: expected a list of dotted parameter names")
    for name in given:
        if name not in params:
            raise ConfigError(f"{where}.{key}: {name!r} is not a seed parameter of this scale "
                              f"(seed parameters: {', '.join(sorted(params)) or 'none'})")


def _check_looks(where: str, looks: Any, confirmation: list[str], params: Mapping) -> dict:
    if not isinstance(looks, Mapping) or set(looks) - set(LOOK_KEYS) or not {"param", "at"} <= set(looks):
        raise ConfigError(f"{where}.looks: expected {{param, at, spending}}, got {looks!r}")
    out = {"spending": "bonferroni", **looks}
    if out["param"] not in confirmation:
        raise ConfigError(f"{where}.looks.param: {out['param']!r} is not one of confirmation_seeds")
    at, n = out["at"], len(_as_list(params[out["param"]]))
    if not (isinstance(at, list) and at and all(isinstance(a, int) and not isinstance(a, bool) and a > 0 for a in at)
            and at == sorted(set(at))):
        raise ConfigError(f"{where}.looks.at: expected increasing positive sizes, got {at!r}")
    if at[-1] != n:
        raise ConfigError(f"{where}.looks.at: the last look must be at the full size ({n} values of "
                          f"{out['param']}), got {at[-1]}")
    if out["spending"] not in SPENDING:
        raise ConfigError(f"{where}.looks.spending: {out['spending']!r} (valid: {', '.join(SPENDING)})")
    return out


def _as_list(value: Any) -> list:
    """A seed parameter's seeds: a list as it is, null as none (a sweep this scale does not run), else the one."""
    return list(value) if isinstance(value, (list, tuple)) else [] if value is None else [value]


def seed_params(params: Mapping, prefix: str = "") -> dict[str, Any]:
    """{dotted key: value} of every seed-valued parameter (a key named seed, seeds, *_seed or *_seeds)."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        if SEED_KEY.match(str(key)):
            out[f"{prefix}{key}"] = value
        elif isinstance(value, Mapping):
            out.update(seed_params(value, f"{prefix}{key}."))
    return out


def confirmation_seeds(claim: str, scale: str, overrides: Mapping | None = None) -> dict[str, list[int]]:
    """{dotted parameter: its values} of the plan's confirmation seeds ({} without a plan)."""
    b = block(claim, scale)
    if b is None:
        return {}
    params = seed_params(config.section(claim, scale, overrides, check_models=False))
    return {name: _as_list(params[name]) for name in b["confirmation_seeds"]}


def seed_problems(claim: str, scale: str) -> list[str]:
    """What breaks the plan's seed rules at ``scale``: a seed parameter neither confirmation nor fixed, or a value
    below :data:`CONFIRMATION_MIN` (empty: none; a scale without a plan is one problem)."""
    b = block(claim, scale)
    if b is None:
        return [f"{_where(claim, scale)}: no plan"]
    params = seed_params(config.section(claim, scale, check_models=False))
    listed = set(b["confirmation_seeds"]) | set(b["fixed_seeds"])
    out = [f"{_where(claim, scale)}: {k} is neither a confirmation seed nor a fixed seed" for k in params
           if k not in listed]
    out += [f"{_where(claim, scale)}: {k} = {v!r} has a value below {CONFIRMATION_MIN}" for k, v in params.items()
            if any(not isinstance(x, int) or x < CONFIRMATION_MIN for x in _as_list(v))]
    return out


def key_of(plan: Mapping | None, config_key: str | None, thresholds: Mapping | None) -> str | None:
    """The plan key: sha256 of the canonical JSON of the plan block, the measurement parameters (their config key)
    and the thresholds (None without a plan)."""
    if plan is None:
        return None
    text = json.dumps({"plan": plan, "params": config_key, "thresholds": dict(thresholds or {})}, sort_keys=True,
                      default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def plan_key(claim: str, scale: str, overrides: Mapping | None = None) -> str | None:
    """The checkout's plan key of ``claim`` at ``scale`` (overrides applied to parameters and thresholds)."""
    params = config.job_params(claim, scale, overrides, check_models=False)
    return key_of(block(claim, scale), provenance.config_key(params), config.thresholds(claim, scale, overrides))


def looks(plan: Mapping | None) -> dict | None:
    """The plan's looks ({param, at, spending}; None: one look at the full size)."""
    return dict(plan["looks"]) if plan and plan.get("looks") else None


def record(plan: Mapping | None, config_key: str | None, thresholds: Mapping | None) -> dict:
    """What measured.json and verdict.json record of the plan: ``plan_key`` and the ``plan`` block."""
    return {"plan_key": key_of(plan, config_key, thresholds), "plan": copy.deepcopy(plan)}


def for_measurement(claim: str, scale: str, config_key: str | None, thresholds: Mapping | None) -> dict:
    """:func:`record` of the checkout's plan of ``claim`` at ``scale`` (a claim without a plan file entry: none)."""
    path = Path(config.CONFIG_DIR / "claims" / f"{claim}.yaml")
    return record(block(claim, scale) if path.is_file() else None, config_key, thresholds)

