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
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

import jsonschema
import yaml

from repro import registry, yamlload
from repro.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR = ROOT / "config"
SCALES = ("tiny", "default", "paper")


def _load_yaml(path: Path) -> Any:
    try:
        return yamlload.load(path.read_text()) or {}
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
        if isinstance(e.schema, Mapping) and e.schema.get("x-expected"):  # the schema's own words for what fits
            raise ConfigError(f"{where}: {key}: {e.instance!r} is not {e.schema['x-expected']}")
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
                parsed = yamlload.load(value)
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
            parsed = yamlload.load(value)
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


def _mappings(node: Any, path: str = ""):
    """(dotted path with a trailing '.', mapping) for every mapping in a parameter tree, lists' items included."""
    if isinstance(node, Mapping):
        yield path, node
        for k, v in node.items():
            yield from _mappings(v, f"{path}{k}.")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _mappings(v, f"{path}{i}.")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_shapes(params: Mapping, where: str) -> None:
    """Every claim's model shapes, before anything runs: a ``block`` mapping is a repro.model.BlockConfig (checked
    by it: heads dividing the width, known keys, choices), and any other mapping giving ``d_model`` and ``n_heads``
    (the claims' own small stacks) needs whole heads: n_heads dividing d_model (unless head_dim is set), n_kv_heads
    dividing n_heads."""
    for path, node in _mappings(params):
        if path == "block." or path.endswith(".block."):
            from repro.model.config import BlockConfig  # lazy: repro.model imports torch; only for block mappings

            try:
                BlockConfig.from_dict(node, prefix=path)
            except ConfigError as exc:  # the block's own check, given the file and scale here
                raise ConfigError(f"{where}: {exc}") from None
            except TypeError as exc:  # e.g. a size given as a list
                raise ConfigError(f"{where}: {path.rstrip('.')}: {exc}") from None
            continue
        d, h, kv = node.get("d_model"), node.get("n_heads"), node.get("n_kv_heads")
        if _is_int(d) and _is_int(h) and h > 0 and node.get("head_dim") is None and d % h:
            raise ConfigError(f"{where}: {path}n_heads: {h} must divide d_model={d} (each head gets d_model / "
                              f"n_heads dimensions)")
        if _is_int(h) and _is_int(kv) and kv > 0 and h % kv:
            raise ConfigError(f"{where}: {path}n_kv_heads: {kv} must divide n_heads={h}")


def _check_bands(schema: Mapping | None, judge: Any, where: str) -> None:
    """Each threshold band of the judge (a schema property that is a pair of numbers, [lo, hi]) in order."""
    props = (((schema or {}).get("properties") or {}).get(JUDGE) or {}).get("properties") or {}
    for key, sub in props.items():
        band = isinstance(sub, Mapping) and sub.get("type") == "array" and sub.get("minItems") == 2 \
            and sub.get("maxItems") == 2 and (sub.get("items") or {}).get("type") == "number"
        value = judge.get(key) if isinstance(judge, Mapping) else None
        if band and isinstance(value, list) and len(value) == 2 and value[0] > value[1]:
            raise ConfigError(f"{where}: judge.{key}: {value} is not a band [lo, hi]: lo must be <= hi "
                              f"(e.g. {sorted(value)})")


def _check_models(name: str, params: Mapping, where: str) -> None:
    """Model-shape keys checked at configuration time (the Snakefile's DAG / dry run), not when a claim starts
    building its models: every claim's through :func:`_check_shapes`; the translation models (translation.model,
    translation.lm.model) whole, by repro.model.ModelConfig, before the tokenizer is built."""
    if name != "translation":
        _check_shapes(params, where)
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


def section(name: str, scale: str, overrides: Mapping | None = None, check_models: bool = True) -> dict:
    """Validated parameters of claim/artefact ``name`` at ``scale`` (defaults filled, overrides merged), without the
    judge's thresholds (:func:`thresholds`); ``check_models=False`` skips the model-shape checks (which import torch:
    the judge side reads parameters without them)."""
    params = _full_section(name, scale, overrides, models=check_models)
    params.pop(JUDGE, None)
    return params


def thresholds(name: str, scale: str, overrides: Mapping | None = None) -> dict:
    """The judge's thresholds of claim ``name`` at ``scale``: the claim file's top-level ``judge:`` block, then the
    scale section's ``judge:`` (only the values that differ at that scale), then the overrides
    (``overrides: {<id>: {judge: {key: value}}}``). The schema's ``judge`` part gives each threshold's type and
    meaning, no default: the claim file holds every value (tests/test_thresholds.py)."""
    return dict(_full_section(name, scale, overrides, models=False).get(JUDGE) or {})


def validate_thresholds(name: str, scale: str, given: Any) -> dict:
    """Check thresholds given as a whole (``--thresholds`` JSON) against the schema's ``judge`` part, a threshold not
    given taking the claim file's value at ``scale``; raise ConfigError naming the key."""
    sub = ((_schema(name) or {}).get("properties") or {}).get(JUDGE)
    if not isinstance(given, Mapping):
        raise ConfigError(f"{name}.yaml [{scale}] judge: expected a mapping of thresholds, got {given!r}")
    if not sub:
        return dict(given)
    out = dict(validate({**thresholds(name, scale), **given}, sub, f"{name}.yaml [{scale}] judge"))
    _check_bands(_schema(name), out, f"{name}.yaml [{scale}]")
    return out


def _full_section(name: str, scale: str, overrides: Mapping | None = None, models: bool = True) -> dict:
    """The section of ``name`` at ``scale`` with overrides merged, validated (``models``: with the model-shape
    checks, which load repro.model and torch; the thresholds alone skip them, so judging never imports torch)."""
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
    return validate_params(name, scale, params, keep_judge=True, check_models=models)


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


def job_params(name: str, scale: str, overrides: Mapping | None = None, check_models: bool = True) -> dict:
    """What the measuring job of claim (or shared artefact) ``name`` receives at ``scale``: its section (overrides
    applied, no thresholds) with the config sections its ``workflow.sections`` lists under their names. The
    measurement's config key hashes exactly this (repro.provenance.config_key)."""
    params = section(name, scale, overrides, check_models)
    params.update({s: section(s, scale, overrides, check_models) for s in workflow_spec(name, scale)["sections"]})
    return params


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


def validate_params(name: str, scale: str, params: Any, keep_judge: bool = False, check_models: bool = True) -> dict:
    """Check the parameters of ``name`` (e.g. a ``--params`` JSON given by hand) against its schema, filling
    defaults; raise ConfigError naming the key. The ``judge:`` thresholds are validated too and, unless
    ``keep_judge``, left out of what is returned (they are no measurement parameter). ``check_models``: the model
    shapes too (:func:`_check_models`)."""
    where = f"{name}.yaml [{scale}]"
    if not isinstance(params, Mapping):
        raise ConfigError(f"{where}: expected a mapping of parameters, got {type(params).__name__}")
    params = dict(params)
    schema = _schema(name)
    if schema is not None:
        if JUDGE in (schema.get("properties") or {}) and JUDGE not in params:
            params[JUDGE] = {}  # fills the thresholds' defaults
        validate(params, schema, where)
        _check_bands(schema, params.get(JUDGE), where)
    if check_models:
        _check_models(name, params, where)
    if not keep_judge:
        params.pop(JUDGE, None)
    return params


HARDWARE_RULE = "lower-case letters and digits in groups joined by single '-', e.g. node-16-core or gpu-h200-node"
HARDWARE_PATTERN = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")  # the schema's pattern (config.schema.yaml: hardware)


def check_hardware_id(given: Any, key: str = "hardware") -> str:
    """A hardware id given by hand (the workflow's ``hardware``, a claim's ``--hardware``): the folder results are
    filed under and the id inside their files, so the same string both ways; refused naming ``key``, the rule and
    the id to use."""
    if isinstance(given, str) and HARDWARE_PATTERN.fullmatch(given):
        return given
    use = re.sub(r"[^a-z0-9]+", "-", str(given).lower()).strip("-")
    raise ConfigError(f"{key}: {given!r} is not a hardware id ({HARDWARE_RULE})" + (f"; use {use!r}" if use else ""))


OUTPUT_DIRS = ("results_dir", "reports_dir")
_NOT_IN_PATHS = "{}\n\r\0"  # Snakemake reads braces in a file pattern as placeholders; the rest no file name holds


def check_folders(cfg: Mapping) -> None:
    """The run's folders: named, free of what Snakemake cannot take in a path, the output folders never inside
    the references (the committed references are written only by ``python -m repro.report publish``: neither
    references_dir nor the checkout's own references/) and apart from each other (not the same folder, neither
    inside the other). Paths resolved against the working directory, where the jobs use them."""
    for key in (*OUTPUT_DIRS, "references_dir"):
        value = cfg[key]
        if not value.strip():
            raise ConfigError(f"config: {key}: empty; name a folder")
        bad = [c for c in _NOT_IN_PATHS if c in value]
        if bad:
            raise ConfigError(f"config: {key}: {value!r} holds {bad[0]!r}, which a folder name here may not hold "
                              f"(Snakemake reads braces as placeholders); choose another name")
    resolved = {key: Path(cfg[key]).resolve() for key in (*OUTPUT_DIRS, "references_dir")}
    refs = [(resolved["references_dir"], f"references_dir ({cfg['references_dir']!r})"),
            ((ROOT / "references").resolve(), f"the checkout's references ({ROOT / 'references'})")]
    for key in OUTPUT_DIRS:
        for ref, name in refs:
            if resolved[key] == ref or ref in resolved[key].parents:
                raise ConfigError(f"config: {key}: {cfg[key]!r} is inside {name}, which runs never write (only "
                                  f"`python -m repro.report publish` does); choose a folder outside it")
    res, rep = resolved["results_dir"], resolved["reports_dir"]
    if res == rep or res in rep.parents or rep in res.parents:
        raise ConfigError(f"config: reports_dir: {cfg['reports_dir']!r} and results_dir {cfg['results_dir']!r} "
                          f"overlap (the same folder, or one inside the other); keep results and reports apart, "
                          f"e.g. results_dir=results reports_dir=reports")


def check_config_files(paths) -> None:
    """The run's config files (the Snakefile's configfile and any --configfile) read again, strictly: Snakemake's
    own YAML reading keeps the last of a key given twice; here that is refused naming the file and the key."""
    for path in paths:
        _load_yaml(Path(path))


def load_run_config(config: Mapping) -> dict:
    """Validate the top-level run config (as Snakemake's ``config``), filling defaults; checks claim ids, the
    hardware id and the folders too. One claim id given alone (``claims=rank_collapse``) is a one-element list."""
    cfg = coerce(copy.deepcopy(dict(config)), _schema("config"))
    if cfg.get("hardware", "auto") != "auto":
        try:
            check_hardware_id(cfg["hardware"])
        except ConfigError as exc:
            raise ConfigError(f"config: {exc}") from None
    cfg = validate(cfg, _schema("config"), "config")
    if isinstance(cfg["claims"], str) and cfg["claims"] != "all":
        cfg["claims"] = [cfg["claims"]]
    check_folders(cfg)
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
