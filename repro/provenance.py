"""What measured a result, by content: the keys a result records and the workflow compares to decide whether a
claim must be measured again, judged again, or can be kept.

A claim is a measurement and a judge in separate files (docs/adding_a_claim.md): ``repro/claims/<id>.py`` runs the
experiment, ``repro/judges/<id>.py`` decides the verdict from its rows. A claim's result is fresh only while these
are what the checkout would use now:

- ``code``: the claim's measurement code: ``repro/claims/<id>.py`` and every ``repro`` module it imports, directly
  or through others (imports read from the source, function-local ones included; each package's ``__init__`` too),
  except the judge side (:data:`JUDGE_SIDE`: the judges, the verdict contract and the registry of published
  numbers), which a measurement never imports. The code of the shared artefacts the claim's config says it needs
  (the translation model, the LM, the tokenizer: :data:`ARTEFACT_CODE`) is part of it too.
- ``config``: the claim's resolved parameters (its section at the scale, overrides applied, with the sections it
  lists, exactly what the job receives; never the ``judge:`` thresholds).
- ``software``: the python version (major.minor) and the versions of the libraries that compute which the code
  imports (:data:`COMPUTE`: torch, triton, numpy, sentencepiece, sacrebleu, ...; read from the imports of the
  files behind ``code``, so a new sacrebleu stales what decodes and scores BLEU and nothing else).
- ``judge``: the judge's files (``repro/judges/<id>.py`` and every repro module it imports), the published numbers
  (``repro/registry/published.yaml``) and the thresholds (the section's ``judge:`` part). A change here re-judges
  the stored measurements; nothing is measured again.

The code keys hash what the code is, not how it is written: each Python file's syntax tree without its docstrings
(comments, formatting and docstrings change no key: a rewrapped docstring re-judges and re-measures nothing), each
YAML file's parsed content. ``scheme`` names this way of hashing; keys of an older scheme cannot be compared file by
file and count as stale.

``measure`` (code + config + software, one hash) is what a measurement records and what the workflow's stamp
file holds (``.snakemake/repro/keys/<hw>/<scale>/<claim>.measure``; :func:`write_stamp`): the stamp is rewritten,
and so becomes newer than the results, only when the key differs from the one it holds, which makes Snakemake rerun
the jobs that take it as input. The report compares a result's recorded keys with the checkout's to mark it stale
(:func:`stale_reasons`: code, config at the result's scale, software), naming which differ.

Reads source files only (no torch import): the Snakefile calls it while the DAG is built.
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import platform
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# judge-side modules: changing them re-judges, never re-measures (their code decides verdicts, it measures nothing);
# a path ending in "/" is a package (every file under it)
JUDGE_SIDE = ("repro/verdicts.py", "repro/judging.py", "repro/intervals.py", "repro/registry/__init__.py",
              "repro/judges/", "repro/plan.py")
# the packages only a measurement loads: the judge side imports none of them (tests/test_layers.py), and the judging
# command line never runs the one function-local path into them (repro.config's model-shape check, which the
# thresholds skip; tests/test_judges_light.py, and the tiny run's record of what each judging job loaded), so a judge
# key does not follow into them
MEASUREMENT_PACKAGES = ("repro/model/", "repro/kernels/", "repro/bench/", "repro/train/", "repro/data/",
                        "repro/quant/", "repro/peers/", "repro/claims/", "repro/artefacts.py")
# neither measurement nor judge: this module (the keys themselves)
NOT_CODE = ("repro/provenance.py",)
PUBLISHED = "repro/registry/published.yaml"
# the modules that build each shared artefact (workflows/translation.smk runs them)
ARTEFACT_CODE = {
    "tokenizer": ("repro.train.prepare",),
    "translation_model": ("repro.train.prepare", "repro.train.train"),
    "lm": ("repro.train.prepare", "repro.train.train"),
    "translation_evaluate": ("repro.train.prepare", "repro.train.train", "repro.train.evaluate"),
}
# the libraries whose version can change a measured number (import name -> distribution name): a key records the
# versions of those its code imports
COMPUTE = {"torch": "torch", "triton": "triton", "numpy": "numpy", "sentencepiece": "sentencepiece",
           "sacrebleu": "sacrebleu", "scipy": "scipy", "safetensors": "safetensors", "bitsandbytes": "bitsandbytes"}
# how the keys are computed (recorded with them): 2 = syntax trees without docstrings, software by imports
SCHEME = 2


def git_commit(root: str | Path | None = None) -> dict:
    """HEAD and whether the code differs from it. Changes under results/ and reports/ (outputs, which Snakemake
    deletes before a rerun) and references/ (the committed references: written by publish, never read by a
    measurement; a GPU node's copy of the checkout travels without them) do not make the code dirty."""
    root = Path(root or ROOT)
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                timeout=10).stdout.strip() or None
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                     ":(exclude)results", ":(exclude)reports", ":(exclude)references"], cwd=root,
                                    capture_output=True, text=True, timeout=10).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        commit, dirty = None, None
    return {"commit": commit, "dirty": dirty}


def _sha(text: str | bytes) -> str:
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


def _module_file(name: str, root: Path) -> Path | None:
    """``repro.model.attention`` -> repro/model/attention.py (or the package's __init__.py); None outside repro."""
    if name != "repro" and not name.startswith("repro."):
        return None
    base = root.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _stat(path: Path) -> tuple[str, int, int]:
    """What identifies a version of a file for the caches below: its path, mtime and size."""
    st = path.stat()
    return str(path), st.st_mtime_ns, st.st_size


@dataclass(frozen=True)
class _Source:
    """What the keys need of one version of a Python file, read in one pass over its syntax tree: its imports
    (anywhere in it: function-local ones too) as (level, module, names), and the digest of its tree without
    docstrings."""
    imports: frozenset
    digest: str


@lru_cache(maxsize=4096)
def _source(version: tuple[str, int, int]) -> _Source:
    """Parsed once per version of the file (the workflow computes every claim's keys each time it starts)."""
    tree = ast.parse(Path(version[0]).read_bytes(), filename=version[0])
    found: set[tuple] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update((0, a.name, ()) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.add((node.level, node.module or "", tuple(a.name for a in node.names)))
        elif isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body  # a docstring is dropped (a body that is only one keeps a pass: it parses the same)
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return _Source(frozenset(found), _sha(ast.dump(tree, annotate_fields=False, include_attributes=False)))


def _package(path: Path, root: Path) -> str:
    """The package a file's relative imports start from (``repro.model`` for repro/model/block.py and for
    repro/model/__init__.py)."""
    package = ".".join(path.relative_to(root).with_suffix("").parts)
    if path.name == "__init__.py":
        return package.rsplit(".", 1)[0] if package.endswith(".__init__") else package
    return package.rsplit(".", 1)[0]


def _imports(path: Path, root: Path) -> set[str]:
    """Every repro module ``path`` imports (anywhere in the file), with the packages that hold them."""
    package, found = _package(path, root), set()
    for level, module, names in _source(_stat(path)).imports:
        if level:
            base = package.split(".")
            module = ".".join(base[: len(base) - level + 1] + ([module] if module else []))
        found.add(module)
        found.update(f"{module}.{n}" for n in names)  # `from repro.model import attention`
    out = set()
    for name in found:
        parts = name.split(".")
        out.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))  # parents run their __init__
    return {n for n in out if _module_file(n, root) is not None}


def module_closure(modules: tuple[str, ...], root: Path = ROOT, stop: tuple[str, ...] = JUDGE_SIDE + NOT_CODE) -> list[Path]:
    """The files of ``modules`` and of every repro module they import, transitively; the modules in ``stop`` (paths
    relative to ``root``) are neither included nor followed."""
    seen: dict[str, Path] = {}
    todo = [".".join(m.split(".")[:i]) for m in modules for i in range(1, m.count(".") + 2)]  # packages run first
    while todo:
        name = todo.pop()
        path = _module_file(name, root)
        if path is None or name in seen or _stopped(path.relative_to(root).as_posix(), stop):
            continue
        seen[name] = path
        todo.extend(_imports(path, root) - set(seen))
    return sorted(set(seen.values()))


def _stopped(rel: str, stop: tuple[str, ...]) -> bool:
    return any(rel == p or (p.endswith("/") and rel.startswith(p)) for p in stop)


def judge_module(claim: str) -> str:
    """The judge of ``claim`` (the translation benchmark's too): ``repro.judges.<claim>``."""
    return f"repro.judges.{claim}"


def content_digest(path: Path) -> str:
    """The sha256 of what a file says rather than how it is written: a Python file's syntax tree without docstrings
    (comments, blank lines, wrapping and docstrings leave it alone), a YAML file's parsed content, other files'
    bytes."""
    if path.suffix == ".py":
        return _source(_stat(path)).digest
    if path.suffix in (".yaml", ".yml"):
        return _yaml_digest(_stat(path))
    return _sha(path.read_bytes())


@lru_cache(maxsize=64)
def _yaml_digest(version: tuple[str, int, int]) -> str:
    import yaml  # lazy: only the registry's YAML is hashed this way

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser: ~50x faster on the registry
    return _sha(json.dumps(yaml.load(Path(version[0]).read_bytes(), Loader=loader), sort_keys=True, default=str))


def _files_digest(paths: list[Path], root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): content_digest(p) for p in paths}


def _third_party(paths: list[Path]) -> tuple[str, ...]:
    """The computing libraries (:data:`COMPUTE`) the files ``paths`` import, anywhere in them."""
    tops = {module.split(".")[0] for p in paths for level, module, _ in _source(_stat(p)).imports if not level}
    return tuple(sorted(tops & set(COMPUTE)))


@lru_cache(maxsize=None)
def _claim_code(claim: str, needs: tuple[str, ...], root: Path = ROOT) -> dict:
    deps = module_closure((f"repro.claims.{claim}",), root)
    for artefact in needs:
        deps += module_closure(ARTEFACT_CODE[artefact], root)
    deps = sorted(set(deps))
    files = _files_digest(deps, root)
    return {"code": _sha(json.dumps(files, sort_keys=True)), "code_files": files, "libraries": _third_party(deps),
            **_judge_code(claim, root)}


@lru_cache(maxsize=None)
def _judge_code(claim: str, root: Path = ROOT) -> dict:
    """The judge's files: repro/judges/<claim>.py and what it imports, the judging machinery that reads the stored
    rows and hands them over (repro/judging.py and its imports), the verdict contract and the published numbers."""
    paths = module_closure((judge_module(claim), "repro.judging", "repro.verdicts", "repro.registry"), root,
                           stop=NOT_CODE + MEASUREMENT_PACKAGES)
    files = _files_digest(paths, root)
    if (root / PUBLISHED).is_file():
        files[PUBLISHED] = content_digest(root / PUBLISHED)
    return {"judge_code": _sha(json.dumps(files, sort_keys=True)), "judge_files": files}


@lru_cache(maxsize=None)
def _artefact_code(artefact: str, root: Path = ROOT) -> dict:
    deps = module_closure(ARTEFACT_CODE[artefact], root)
    files = _files_digest(deps, root)
    judge = _judge_code("translation", root) if artefact == "translation_evaluate" else {"judge_code": None}
    return {"code": _sha(json.dumps(files, sort_keys=True)), "code_files": files, "libraries": _third_party(deps),
            **judge}


def software(libraries: tuple[str, ...] | list[str] = tuple(COMPUTE)) -> dict:
    """The software a measurement depends on beyond the checkout: the python version (major.minor) and the versions
    of ``libraries`` (import names of :data:`COMPUTE`; read from package metadata: no import)."""
    return dict(_versions(tuple(libraries)))


@lru_cache(maxsize=None)
def _versions(libraries: tuple[str, ...]) -> tuple[tuple[str, str | None], ...]:
    """Read once per process: the matrix asks for every cell's software, and the environment does not change."""
    out = [("python", ".".join(platform.python_version_tuple()[:2]))]
    for name in libraries:
        try:
            out.append((name, metadata.version(COMPUTE.get(name, name))))
        except metadata.PackageNotFoundError:
            out.append((name, None))
    return tuple(out)


def judge_key(judge_code: str | None, thresholds: dict | None) -> str | None:
    """The judge key: the judge's code (files and published numbers) with the thresholds it decides with."""
    if judge_code is None:
        return None
    return _sha(json.dumps([judge_code, thresholds or {}], sort_keys=True, default=str))


def keys(code: dict, params: dict | str, thresholds: dict | None = None, plan: dict | None = None) -> dict:
    """The keys of one measurement: code (from ``code``), config (the resolved parameters), software, ``plan`` (the
    hash of the scale's confirmatory plan block, repro.plan; None without one), ``measure`` (the one hash of code,
    config, software and the plan: a changed plan is a changed design, measured again) and ``judge`` (the judge's
    code with ``thresholds``)."""
    text = params if isinstance(params, str) else json.dumps(params, sort_keys=True, default=str)
    config_text = json.loads(text)
    if isinstance(config_text, dict) and "judge" in config_text:
        raise ValueError("provenance.keys: the parameters hold a 'judge' section; thresholds are no measurement "
                         "parameter (pass them as thresholds=)")
    out = {"scheme": SCHEME, "code": code["code"], "judge": judge_key(code.get("judge_code"), thresholds),
           "config": config_key(config_text), "software": software(code.get("libraries", tuple(COMPUTE)))}
    out["plan"] = plan_hash(plan)
    parts = [out["code"], out["config"], out["software"]] + ([out["plan"]] if plan is not None else [])
    out["measure"] = _sha(json.dumps(parts, sort_keys=True))
    return out


def plan_hash(plan: dict | None) -> str | None:
    """The hash of a scale's plan block (repro.plan; None: no plan recorded, which leaves the measure key as it was
    before plans existed)."""
    return None if plan is None else _sha(json.dumps(plan, sort_keys=True, default=str))


def config_key(params: dict) -> str:
    """The config key of resolved parameters (what the job receives, without the judge's thresholds)."""
    return _sha(json.dumps(params, sort_keys=True, default=str))


def claim_keys(claim: str, params: dict | str, needs: tuple[str, ...] = (), thresholds: dict | None = None,
               plan: dict | None = None) -> dict:
    """The keys of claim ``claim`` measured with ``params`` (what the job receives) and the shared artefacts
    ``needs`` (the artefact names of its config's ``workflow.needs``), judged with ``thresholds`` (the section's
    ``judge:`` part), with the files behind the code key (``code_files``: which changed, when a result is stale)
    and ``needs``; ``plan``: the scale's plan block (repro.plan.block)."""
    code = _claim_code(claim, tuple(sorted(needs)))
    return {**keys(code, params, thresholds, plan), "needs": sorted(needs), "code_files": dict(code["code_files"])}


def artefact_keys(artefact: str, params: dict | str, thresholds: dict | None = None, plan: dict | None = None) -> dict:
    """The keys of a shared artefact's build (:data:`ARTEFACT_CODE`) with the translation section ``params`` (the
    translation benchmark's judge, ``translation_evaluate``, with ``thresholds``)."""
    code = _artefact_code(artefact)
    return {**keys(code, params, thresholds, plan), "artefact": artefact, "code_files": dict(code["code_files"])}


def current_code(claim: str, needs: tuple[str, ...] | list[str] | None = None) -> dict:
    """The checkout's code key of a claim (``translation``: the translation benchmark's) for the shared artefacts
    ``needs`` a result recorded: {code, code_files, judge_code, judge_files}."""
    if claim == "translation":
        return dict(_artefact_code("translation_evaluate"))
    return dict(_claim_code(claim, tuple(sorted(needs or ()))))


STALE_KINDS = ("code", "config", "software")  # what can make a result stale, in the order the pages name them


def stale_reasons(recorded: dict | None, claim: str, config_now: str | None = None,
                  software_now: dict | None = None, plan_now: str | None = None) -> dict[str, str]:
    """Why a result whose provenance keys are ``recorded`` is not what the checkout would measure now, by kind
    (:data:`STALE_KINDS`; empty: it is fresh):

    - ``code``: no keys recorded, keys of an older scheme, or the code key differs (naming the files that changed);
    - ``config``: its config key differs from ``config_now``, the checkout's for the result's claim and scale (None:
      not compared), or its plan (:func:`plan_hash`) from ``plan_now`` (None: not compared; a plan is part of the
      design, like the parameters);
    - ``software``: a library its code imports (or python) has another version than ``software_now`` (default: this
      environment's)."""
    if not recorded or not recorded.get("code"):
        return {"code": "measured before provenance keys were recorded"}
    out = {}
    try:
        now = current_code(claim, recorded.get("needs"))
    except (OSError, SyntaxError, KeyError) as exc:
        return {"code": f"its code cannot be compared with the checkout's ({exc})"}
    if recorded.get("scheme") != SCHEME:
        out["code"] = "its keys predate the checkout's way of hashing code (cannot be compared file by file)"
    elif now["code"] != recorded["code"]:
        old, new = recorded.get("code_files") or {}, now["code_files"]
        changed = sorted(f for f in set(old) | set(new) if old.get(f) != new.get(f))
        shown = ", ".join(f.replace("repro/", "") for f in changed[:4]) + (f" and {len(changed) - 4} more"
                                                                             if len(changed) > 4 else "")
        out["code"] = f"measurement code changed since: {shown}" if old else "measurement code changed since"
    if config_now is not None and recorded.get("config") != config_now:
        out["config"] = "measured with other parameters than the checkout's config"
    elif plan_now is not None and recorded.get("plan") != plan_now:
        out["config"] = ("measured before the checkout's confirmatory plan" if recorded.get("plan") is None
                         else "measured under another confirmatory plan than the checkout's")
    then = recorded.get("software") if isinstance(recorded.get("software"), dict) else {}
    now_sw = software_now if software_now is not None else software(now.get("libraries", tuple(COMPUTE)))
    moved = [f"{k} {then.get(k)} -> {v}" for k, v in sorted(now_sw.items()) if then.get(k) != v]
    if moved:
        out["software"] = "other software: " + ", ".join(moved)
    return out


def stale_because(recorded: dict | None, claim: str, config_now: str | None = None,
                  software_now: dict | None = None, plan_now: str | None = None) -> str | None:
    """:func:`stale_reasons` as one sentence (None: fresh)."""
    return stale_text(stale_reasons(recorded, claim, config_now, software_now, plan_now))


def stale_text(reasons: dict[str, str]) -> str | None:
    """The reasons of :func:`stale_reasons` as one sentence in :data:`STALE_KINDS` order (None: fresh)."""
    return "; ".join(reasons[k] for k in STALE_KINDS if k in reasons) or None


def code_files(claim: str, needs: tuple[str, ...] = ()) -> dict[str, str]:
    """{file: sha256} of the measurement code behind ``claim_keys(...)["code"]`` (to say which files changed)."""
    return dict(_claim_code(claim, tuple(sorted(needs)))["code_files"])


def write_stamp(path: str | Path, key: str) -> bool:
    """Write ``key`` to the stamp file ``path`` unless it holds it already (then its mtime is left alone). A
    rewritten stamp is newer than every result built before, so the jobs taking it as input rerun. Returns whether
    it was written."""
    path = Path(path)
    try:
        if path.read_text().strip() == key:
            return False
    except (OSError, UnicodeDecodeError):
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(key + "\n")
    os.replace(tmp, path)
    return True
