"""Configuration: the only source of parameters.

- ``config/config.yaml``: the run (scale, hardware id, claims, output folders, overrides), validated against
  ``config/schema/config.schema.yaml``.
- ``config/claims/<id>.yaml``: one file per claim (and per shared artefact such as ``translation``), one section
  per scale (tiny, default, paper), validated against ``config/schema/<id>.schema.yaml`` when that schema exists.

``section(name, scale, overrides)`` returns the validated parameters of one claim at one scale with the user's
overrides merged in. Every error names the file and the dotted key.
"""
from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

import yaml

ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR = ROOT / "config"
SCALES = ("tiny", "default", "paper")


class ConfigError(ValueError):
    """Bad configuration; the message names the file and key."""


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
    import jsonschema

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


def section(name: str, scale: str, overrides: Mapping | None = None) -> dict:
    """Validated parameters of claim/artefact ``name`` at ``scale`` (defaults filled, overrides merged)."""
    if scale not in SCALES:
        raise ConfigError(f"scale: {scale!r} is not one of {', '.join(SCALES)}")
    path = CONFIG_DIR / "claims" / f"{name}.yaml"
    if not path.exists():
        raise ConfigError(f"{name}: no such claim or artefact (known: {', '.join(available_sections())})")
    data = _load_yaml(path)
    if scale not in data:
        raise ConfigError(f"{path.name}: {scale}: this scale is not configured for {name}")
    params = deep_merge(data[scale] or {}, (overrides or {}).get(name, {}))
    schema = _schema(name)
    if schema is not None:
        validate(params, schema, f"{path.name} [{scale}]")
    return params


def load_run_config(config: Mapping) -> dict:
    """Validate the top-level run config (as Snakemake's ``config``), filling defaults; checks claim ids too."""
    from repro import registry

    cfg = validate(copy.deepcopy(dict(config)), _schema("config"), "config")
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
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{key}: 'cuda' requested but no CUDA device is available")
    return torch.device(name)
