"""Configuration: the only source of parameters.

- ``config/config.yaml``: the run (scale, hardware id, claims, output folders, overrides), validated against
  ``config/schema/config.schema.yaml``.
- ``config/claims/<id>.yaml``: one file per claim (and per shared artefact such as ``translation``), one section
  per scale (tiny, default, paper), validated against ``config/schema/<id>.schema.yaml`` when that schema exists;
  a top-level ``judge:`` block holds the judge's thresholds once (a scale's ``judge:`` only what differs there).

``section(name, scale, overrides)`` returns the validated parameters of one claim at one scale with the user's
overrides merged in: what the experiment measures with (the measurement key hashes them). ``thresholds(name, scale,
overrides)`` returns the claim's ``judge:`` thresholds at that scale: the values the claim's judge decides with (the
judge key hashes them; changing one re-judges the stored measurement and never re-measures). Every error names the
file and the dotted key.
"""
from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

import jsonschema
import yaml

from repro import registry
from repro.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR = ROOT / "config"
SCALES = ("tiny", "default", "paper")


def _load_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from None


def _key_path(error) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "(top level)"


def _validator_with_defaults(schema: Mapping):
    base = jsonschema.Draft202012Validator

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for key, sub in properties.items():
                if "default" in sub and key not in instance:
                    instance[key] = copy.deepcopy(sub["default"])
        yield from base.VALIDATORS["properties"](validator, properties, instance, schema)

    return jsonschema.validators.extend(base, {"properties": set_defaults})(schema)


def validate(instance: Any, schema: Mapping, where: str) -> Any:
    """Validate ``instance`` in place (filling defaults); raise ConfigError naming ``where`` and the key."""
    errors = sorted(_validator_with_defaults(schema).iter_errors(instance), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        key = _key_path(e)
        if e.validator == "additionalProperties":
            extra = sorted(set(e.instance) - set(e.schema.get("properties", {})))
            key = ".".join(filter(None, [key if key != "(top level)" else "", extra[0] if extra else ""]))
            raise ConfigError(f"{where}: {key}: unknown key (valid: {', '.join(sorted(e.schema.get('properties', {})))})")
        raise ConfigError(f"{where}: {key}: {e.message}")
    return instance


_JSON_TYPES = {"integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
               "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
               "boolean": lambda v: isinstance(v, bool), "null": lambda v: v is None,
               "array": lambda v: isinstance(v, list), "object": lambda v: isinstance(v, Mapping),
               "string": lambda v: isinstance(v, str)}


def _alternatives(schema: Mapping, root: Mapping) -> list[Mapping]:
    """``schema`` and its anyOf/oneOf/allOf branches, with local ``$ref``s resolved."""
    if not isinstance(schema, Mapping):
        return []
    if "$ref" in schema and str(schema["$ref"]).startswith("#/"):
        target = root
        for part in schema["$ref"][2:].split("/"):
            target = target.get(part, {}) if isinstance(target, Mapping) else {}
        return [schema, *_alternatives(target, root)]
    out = [schema]
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in schema.get(key) or []:
            out += _alternatives(sub, root)
    return out


def coerce(value: Any, schema: Mapping | None, root: Mapping | None = None) -> Any:
    """Snakemake parses nested ``--config`` values as strings (``seeds: [0, 1]`` arrives as ['0', '1'], ``null`` as
    'null'): turn a string back into the number, boolean, null or list its schema asks for. Strings the schema
    accepts as strings are left alone; anything else is left for validation to reject (naming the key)."""
    if not isinstance(schema, Mapping):  # no schema below this key (e.g. model.block): plain YAML scalars
        if isinstance(value, str):
            try:
                parsed = yaml.safe_load(value)
            except yaml.YAMLError:
                return value
            return parsed if parsed is None or isinstance(parsed, (bool, int, float)) else value
        if isinstance(value, Mapping):
            return {k: coerce(v, None, root) for k, v in value.items()}
        if isinstance(value, list):
            return [coerce(v, None, root) for v in value]
        return value
    root = schema if root is None else root
    alts = _alternatives(schema, root)
    if isinstance(value, str):
        types: set[str] = set()
        consts = []
        for a in alts:
            t = a.get("type")
            types |= {t} if isinstance(t, str) else set(t or [])
            consts += list(a.get("enum") or []) + ([a["const"]] if "const" in a else [])
        if value in consts or (types <= {"string"} and not consts):
            return value
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:
            return value
        if isinstance(parsed, str) and ("number" in types or "integer" in types):
            try:  # YAML 1.1 reads 1e-4 as a string
                parsed = float(value)
                parsed = int(parsed) if "integer" in types and parsed.is_integer() and "." not in value else parsed
            except ValueError:
                return value
        if isinstance(parsed, str):
            return value
        if any(_JSON_TYPES[t](parsed) for t in types if t in _JSON_TYPES) or parsed in consts:
            return coerce(parsed, schema, root)
        return value
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            sub = None
            for a in alts:
                props = a.get("properties") or {}
                if k in props:
                    sub = props[k]
                    break
                if isinstance(a.get("additionalProperties"), Mapping):
                    sub = a["additionalProperties"]
            out[k] = coerce(v, sub, root)
        return out
    if isinstance(value, list):
        items = next((a["items"] for a in alts if isinstance(a.get("items"), Mapping)), None)
        return [coerce(v, items, root) for v in value]
    return value


def _check_models(name: str, params: Mapping, where: str) -> None:
    """Model-shape keys (translation.model, translation.lm.model) checked by repro.model.ModelConfig here, at
    configuration time (the Snakefile's DAG / dry run), not when training starts after the tokenizer is built."""
    if name != "translation":
        return
    from repro.model.config import ModelConfig  # lazy: repro.model imports torch; keep repro.config light

    vocab = int((params.get("tokenizer") or {}).get("vocab_size") or 32000)  # the tokenizer sets the real size
    for prefix, model in (("model.", params.get("model")), ("lm.model.", (params.get("lm") or {}).get("model"))):
        if model is None:
            continue
        try:
            ModelConfig.from_dict({**dict(model), "vocab_size": vocab, "pad_id": 0}, prefix=prefix)
        except ConfigError as exc:  # the model's check, given the file and scale here
            raise ConfigError(f"{where}: {exc}") from None
        except TypeError as exc:  # e.g. block given as a list
            raise ConfigError(f"{where}: {prefix.rstrip('.')}: {exc}") from None


def available_sections() -> list[str]:
    return sorted(p.stem for p in (CONFIG_DIR / "claims").glob("*.yaml"))


def deep_merge(base: Mapping, override: Mapping) -> dict:
    out = copy.deepcopy(dict(base))
    for k, v in override.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), Mapping) else copy.deepcopy(v)
    return out


@lru_cache(maxsize=None)
def _schema(name: str) -> dict | None:
    path = CONFIG_DIR / "schema" / f"{name}.schema.yaml"
    return _load_yaml(path) if path.exists() else None


JUDGE = "judge"  # the key of a scale section that holds the judge's thresholds (never a measurement parameter)


def section(name: str, scale: str, overrides: Mapping | None = None) -> dict:
    """Validated parameters of claim/artefact ``name`` at ``scale`` (defaults filled, overrides merged), without the
    judge's thresholds (:func:`thresholds`)."""
    params = _full_section(name, scale, overrides)
    params.pop(JUDGE, None)
    return params


def thresholds(name: str, scale: str, overrides: Mapping | None = None) -> dict:
    """The judge's thresholds of claim ``name`` at ``scale``: the claim file's top-level ``judge:`` block, then the
    scale section's ``judge:`` (only the values that differ at that scale), then the overrides
    (``overrides: {<id>: {judge: {key: value}}}``). The schema's ``judge`` part gives each threshold's type and
    meaning, no default: the claim file holds every value (tests/test_thresholds.py)."""
    return dict(_full_section(name, scale, overrides).get(JUDGE) or {})


def validate_thresholds(name: str, scale: str, given: Any) -> dict:
    """Check thresholds given as a whole (``--thresholds`` JSON) against the schema's ``judge`` part, a threshold not
    given taking the claim file's value at ``scale``; raise ConfigError naming the key."""
    sub = ((_schema(name) or {}).get("properties") or {}).get(JUDGE)
    if not isinstance(given, Mapping):
        raise ConfigError(f"{name}.yaml [{scale}] judge: expected a mapping of thresholds, got {given!r}")
    if not sub:
        return dict(given)
    return dict(validate({**thresholds(name, scale), **given}, sub, f"{name}.yaml [{scale}] judge"))


def _full_section(name: str, scale: str, overrides: Mapping | None = None) -> dict:
    if scale not in SCALES:
        raise ConfigError(f"scale: {scale!r} is not one of {', '.join(SCALES)}")
    path = CONFIG_DIR / "claims" / f"{name}.yaml"
    if not path.exists():
        raise ConfigError(f"{name}: no such claim or artefact (known: {', '.join(available_sections())})")
    data = _load_yaml(path)
    if scale not in data:
        raise ConfigError(f"{path.name}: {scale}: this scale is not configured for {name}")
    schema = _schema(name)
    override = (overrides or {}).get(name, {})
    if schema is not None and isinstance(override, Mapping):
        override = coerce(override, schema)
    if not isinstance(override, Mapping):
        raise ConfigError(f"config: overrides.{name}: expected a mapping of keys, got {override!r}")
    params = deep_merge(_with_judge(data, scale), override)
    return validate_params(name, scale, params, keep_judge=True)


def _with_judge(data: Mapping, scale: str) -> dict:
    """The ``scale`` section of a claim file with its thresholds: the file's scale-free ``judge:`` block, then the
    values the scale's own ``judge:`` changes (a threshold is written once, and again only where a scale differs)."""
    params = dict(data[scale] or {})
    if JUDGE in data or JUDGE in params:
        params[JUDGE] = deep_merge(data.get(JUDGE) or {}, params.get(JUDGE) or {})
    return params


def workflow_spec(name: str, scale: str) -> dict:
    """How the workflow runs claim ``name`` at ``scale``: the ``workflow`` section of config/claims/<name>.yaml
    (config/schema/workflow.schema.yaml) with that scale's overrides applied -> ``{threads, parts, priority,
    resources, sections, needs}``. Each need's ``param`` (and ``unless`` / ``when_any`` key) must be a parameter of the claim."""
    path = CONFIG_DIR / "claims" / f"{name}.yaml"
    where = f"{path.name} [workflow]"
    wf = validate(dict((_load_yaml(path) or {}).get("workflow") or {}), _schema("workflow"), where)
    over = wf.get(scale) or {}
    spec = {"threads": int(over.get("threads", wf.get("threads", 1))),
            "parts": int(over.get("parts", wf.get("parts", 1))),
            "priority": int(over.get("priority", wf.get("priority", 0))),
            "resources": {"runtime": 30, "mem_mb": 4000, "gpu": 0, **(wf.get("resources") or {}),
                          **(over.get("resources") or {})},
            "sections": list(wf.get("sections") or []), "needs": list(wf.get("needs") or [])}
    known = set(((_schema(name) or {}).get("properties") or {}))
    for i, need in enumerate(spec["needs"]):
        for key in [need["param"], *need.get("unless", []), *need.get("when_any", {})]:
            if known and key not in known:
                raise ConfigError(f"{where}: needs[{i}]: {key!r} is not a parameter of {name} "
                                  f"(config/schema/{name}.schema.yaml)")
    return spec


def needed(spec: Mapping, params: Mapping) -> list[dict]:
    """The needs of ``spec`` (:func:`workflow_spec`) that these parameters leave to the shared artefacts: not when
    the parameter receiving the path, or one of ``unless``, is set, nor when a ``when_any`` list holds none of its
    values."""
    out = []
    for need in spec["needs"]:
        if params.get(need["param"]) or any(params.get(k) for k in need.get("unless", [])):
            continue
        if any(not set(params.get(k) or []) & set(vals) for k, vals in need.get("when_any", {}).items()):
            continue
        out.append(dict(need))
    return out


def validate_params(name: str, scale: str, params: Any, keep_judge: bool = False) -> dict:
    """Check the parameters of ``name`` (e.g. a ``--params`` JSON given by hand) against its schema, filling
    defaults; raise ConfigError naming the key. The ``judge:`` thresholds are validated too and, unless
    ``keep_judge``, left out of what is returned (they are no measurement parameter)."""
    where = f"{name}.yaml [{scale}]"
    if not isinstance(params, Mapping):
        raise ConfigError(f"{where}: expected a mapping of parameters, got {type(params).__name__}")
    params = dict(params)
    schema = _schema(name)
    if schema is not None:
        if JUDGE in (schema.get("properties") or {}) and JUDGE not in params:
            params[JUDGE] = {}  # fills the thresholds' defaults
        validate(params, schema, where)
    _check_models(name, params, where)
    if not keep_judge:
        params.pop(JUDGE, None)
    return params


def load_run_config(config: Mapping) -> dict:
    """Validate the top-level run config (as Snakemake's ``config``), filling defaults; checks claim ids too."""
    cfg = validate(coerce(copy.deepcopy(dict(config)), _schema("config")), _schema("config"), "config")
    known = registry.claim_ids()
    claims = known if cfg["claims"] == "all" else cfg["claims"]
    bad = [c for c in claims if c not in known]
    if bad:
        raise ConfigError(f"config: claims: unknown claim id {bad[0]!r} (known: {', '.join(known)})")
    cfg["claims"] = list(claims)
    unknown_override = [k for k in cfg["overrides"] if k not in available_sections()]
    if unknown_override:
        raise ConfigError(f"config: overrides.{unknown_override[0]}: no such claim or artefact")
    return cfg


def resolve_device(name: str, key: str = "device"):
    """A torch.device from config: "auto" picks CUDA when present; "cuda" without a GPU fails naming ``key``."""
    import torch  # lazy: keep repro.config light (the workflow imports it)

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{key}: 'cuda' requested but no CUDA device is available")
    return torch.device(name)
