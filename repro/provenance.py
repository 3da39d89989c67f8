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
- ``software``: python, torch and triton versions.
- ``judge``: the judge's files (``repro/judges/<id>.py`` and every repro module it imports), the published numbers
  (``repro/registry/published.yaml``) and the thresholds (the section's ``judge:`` part). A change here re-judges
  the stored measurements; nothing is measured again.

``measure`` (code + config + software, one hash) is what a measurement records and what the workflow's stamp
file holds (``.snakemake/repro/keys/<hw>/<scale>/<claim>.measure``; :func:`write_stamp`): the stamp is rewritten,
and so becomes newer than the results, only when the key differs from the one it holds, which makes Snakemake rerun
the jobs that take it as input. The report compares a result's recorded ``code`` key with the checkout's to mark it
stale (:func:`claim_keys` at the result's scale).

Reads source files only (no torch import): the Snakefile calls it while the DAG is built.
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import platform
import subprocess
from functools import lru_cache
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# judge-side modules: changing them re-judges, never re-measures (their code decides verdicts, it measures nothing);
# a path ending in "/" is a package (every file under it)
JUDGE_SIDE = ("repro/verdicts.py", "repro/judging.py", "repro/intervals.py", "repro/registry/__init__.py",
              "repro/judges/")
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
SOFTWARE = ("torch", "triton")


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


def _imports(path: Path, root: Path) -> set[str]:
    """Every repro module ``path`` imports (anywhere in the file), with the packages that hold them."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = ".".join(path.relative_to(root).with_suffix("").parts)
    if path.name == "__init__.py":
        package = package.rsplit(".", 1)[0] if package.endswith(".__init__") else package
    else:
        package = package.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            found.add(mod)
            found.update(f"{mod}.{a.name}" for a in node.names)  # `from repro.model import attention`
    out = set()
    for name in found:
        parts = name.split(".")
        out.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))  # parents run their __init__
    return {n for n in out if _module_file(n, root) is not None}


def module_closure(modules: tuple[str, ...], root: Path = ROOT, stop: tuple[str, ...] = JUDGE_SIDE + NOT_CODE) -> list[Path]:
    """The files of ``modules`` and of every repro module they import, transitively; the modules in ``stop`` (paths
    relative to ``root``) are neither included nor followed."""
    seen: dict[str, Path] = {}
    todo = list(modules)
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


def _files_digest(paths: list[Path], root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): _sha(p.read_bytes()) for p in paths}


@lru_cache(maxsize=None)
def _claim_code(claim: str, needs: tuple[str, ...], root: Path = ROOT) -> dict:
    deps = module_closure((f"repro.claims.{claim}",), root)
    for artefact in needs:
        deps += module_closure(ARTEFACT_CODE[artefact], root)
    files = _files_digest(sorted(set(deps)), root)
    return {"code": _sha(json.dumps(files, sort_keys=True)), "code_files": files, **_judge_code(claim, root)}


@lru_cache(maxsize=None)
def _judge_code(claim: str, root: Path = ROOT) -> dict:
    """The judge's files: repro/judges/<claim>.py and what it imports (measurement modules too: a judge may read a
    claim's constants), the verdict contract and the published numbers."""
    paths = module_closure((judge_module(claim), "repro.verdicts", "repro.registry"), root, stop=NOT_CODE)
    files = _files_digest(paths, root)
    if (root / PUBLISHED).is_file():
        files[PUBLISHED] = _sha((root / PUBLISHED).read_bytes())
    return {"judge_code": _sha(json.dumps(files, sort_keys=True)), "judge_files": files}


@lru_cache(maxsize=None)
def _artefact_code(artefact: str, root: Path = ROOT) -> dict:
    files = _files_digest(module_closure(ARTEFACT_CODE[artefact], root), root)
    judge = _judge_code("translation", root) if artefact == "translation_evaluate" else {"judge_code": None}
    return {"code": _sha(json.dumps(files, sort_keys=True)), "code_files": files, **judge}


def software() -> dict:
    """The software a measurement depends on beyond the checkout (read from package metadata: no import)."""
    out = {"python": platform.python_version()}
    for pkg in SOFTWARE:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def judge_key(judge_code: str | None, thresholds: dict | None) -> str | None:
    """The judge key: the judge's code (files and published numbers) with the thresholds it decides with."""
    if judge_code is None:
        return None
    return _sha(json.dumps([judge_code, thresholds or {}], sort_keys=True, default=str))


def keys(code: dict, params: dict | str, thresholds: dict | None = None) -> dict:
    """The keys of one measurement: code (from ``code``), config (the resolved parameters), software, ``measure``
    (the one hash of code, config and software) and ``judge`` (the judge's code with ``thresholds``)."""
    text = params if isinstance(params, str) else json.dumps(params, sort_keys=True, default=str)
    config_text = json.loads(text)
    if isinstance(config_text, dict) and "judge" in config_text:
        raise ValueError("provenance.keys: the parameters hold a 'judge' section; thresholds are no measurement "
                         "parameter (pass them as thresholds=)")
    out = {"code": code["code"], "judge": judge_key(code.get("judge_code"), thresholds),
           "config": _sha(json.dumps(config_text, sort_keys=True)), "software": software()}
    out["measure"] = _sha(json.dumps([out["code"], out["config"], out["software"]], sort_keys=True))
    return out


def claim_keys(claim: str, params: dict | str, needs: tuple[str, ...] = (), thresholds: dict | None = None) -> dict:
    """The keys of claim ``claim`` measured with ``params`` (what the job receives) and the shared artefacts
    ``needs`` (the artefact names of its config's ``workflow.needs``), judged with ``thresholds`` (the section's
    ``judge:`` part), with the files behind the code key (``code_files``: which changed, when a result is stale)
    and ``needs``."""
    code = _claim_code(claim, tuple(sorted(needs)))
    return {**keys(code, params, thresholds), "needs": sorted(needs), "code_files": dict(code["code_files"])}


def artefact_keys(artefact: str, params: dict | str, thresholds: dict | None = None) -> dict:
    """The keys of a shared artefact's build (:data:`ARTEFACT_CODE`) with the translation section ``params`` (the
    translation benchmark's judge, ``translation_evaluate``, with ``thresholds``)."""
    code = _artefact_code(artefact)
    return {**keys(code, params, thresholds), "artefact": artefact, "code_files": dict(code["code_files"])}


def current_code(claim: str, needs: tuple[str, ...] | list[str] | None = None) -> dict:
    """The checkout's code key of a claim (``translation``: the translation benchmark's) for the shared artefacts
    ``needs`` a result recorded: {code, code_files, judge_code, judge_files}."""
    if claim == "translation":
        return dict(_artefact_code("translation_evaluate"))
    return dict(_claim_code(claim, tuple(sorted(needs or ()))))


def stale_because(recorded: dict | None, claim: str) -> str | None:
    """Why a result whose provenance keys are ``recorded`` was not measured by the checkout's code (None: it was):
    no keys recorded, or the code key differs, naming the files that changed."""
    if not recorded or not recorded.get("code"):
        return "measured before provenance keys were recorded"
    try:
        now = current_code(claim, recorded.get("needs"))
    except (OSError, SyntaxError, KeyError) as exc:
        return f"its code cannot be compared with the checkout's ({exc})"
    if now["code"] == recorded["code"]:
        return None
    old, new = recorded.get("code_files") or {}, now["code_files"]
    changed = sorted(f for f in set(old) | set(new) if old.get(f) != new.get(f))
    if not old:
        return "measurement code changed since"
    shown = ", ".join(f.replace("repro/", "") for f in changed[:4]) + (f" and {len(changed) - 4} more"
                                                                         if len(changed) > 4 else "")
    return f"measurement code changed since: {shown}"


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
