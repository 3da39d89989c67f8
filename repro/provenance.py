"""What measured a result, by content: the keys a result records and the workflow compares to decide whether a
claim must be measured again, judged again, or can be kept.

A claim's result is fresh only while these are what the checkout would use now:

- ``code``: the claim's measurement code. The claim module (``repro/claims/<id>.py``) without its judge-only
  functions (``judge`` and the top-level functions only it reaches), and every ``repro`` module the claim imports,
  directly or through others (imports read from the source, function-local ones included; each package's
  ``__init__`` too), except the judge-side modules (:data:`JUDGE_SIDE`: the verdict contract's home and the
  registry of published numbers). The code of the shared artefacts the claim's config says it needs (the
  translation model, the LM, the tokenizer: :data:`ARTEFACT_CODE`) is part of it too.
- ``config``: the claim's resolved parameters (its section at the scale, overrides applied, with the sections it
  lists, exactly what the job receives).
- ``software``: python, torch and triton versions.
- ``judge``: the judge-only functions of the claim module, the judge-side modules and the published numbers
  (``repro/registry/published.yaml``). A change here re-judges the stored measurements; nothing is measured again.

``measure`` (code + config + software, one hash) is what a measurement records and what the workflow's stamp
file holds (``results/<hw>/<scale>/_keys/<claim>.measure``; :func:`write_stamp`): the stamp is rewritten, and so
becomes newer than the results, only when the key differs from the one it holds, which makes Snakemake rerun the
jobs that take it as input. The report compares a result's recorded ``code`` key with the checkout's to mark it
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

# judge-side modules: changing them re-judges, never re-measures (their code decides verdicts, it measures nothing)
JUDGE_SIDE = ("repro/verdicts.py", "repro/registry/__init__.py")
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
# the functions of a claim module that run its experiment (everything reachable from them is measurement code)
MEASURE_ROOTS = ("run", "run_part")


def git_commit(root: str | Path | None = None) -> dict:
    """HEAD and whether the code differs from it. Changes under results/ and reports/ (outputs, which Snakemake
    deletes before a rerun) do not make the code dirty."""
    root = Path(root or ROOT)
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                timeout=10).stdout.strip() or None
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                     ":(exclude)results", ":(exclude)reports"], cwd=root,
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
        if path is None or name in seen or path.relative_to(root).as_posix() in stop:
            continue
        seen[name] = path
        todo.extend(_imports(path, root) - set(seen))
    return sorted(set(seen.values()))


def split_claim_module(path: Path) -> tuple[str, str]:
    """(measurement source, judge-only source) of a claim module: the top-level functions reachable from
    ``judge`` and from none of :data:`MEASURE_ROOTS` or the module-level statements are judge-only, and so are the
    module-level imports of judge-side modules only; everything else is measurement code (conservatively: a helper
    both use is measurement)."""
    text = path.read_text()
    tree = ast.parse(text)
    defs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}

    def names(node) -> set[str]:
        return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} & set(defs)

    def reach(start: set[str], blocked: set[str]) -> set[str]:
        seen, todo = set(), [s for s in start if s not in blocked]
        while todo:
            d = todo.pop()
            if d in seen:
                continue
            seen.add(d)
            todo.extend(n for n in names(defs[d]) if n not in seen and n not in blocked)
        return seen

    module_level = set().union(*[names(n) for n in tree.body if n not in defs.values()] or [set()])
    measure = reach((module_level | {r for r in MEASURE_ROOTS if r in defs}) - {"judge"}, {"judge"})
    judge_only = reach({"judge"} & set(defs), set()) - measure
    lines = text.splitlines(keepends=True)
    judge_src, keep = [], []
    spans = sorted([(defs[d].lineno - len(defs[d].decorator_list), defs[d].end_lineno, d) for d in judge_only]
                   + [(n.lineno, n.end_lineno, "import") for n in tree.body if _imports_judge_side_only(n)])
    cursor = 0
    for start, end, _ in spans:
        keep.append("".join(lines[cursor:start - 1]))
        judge_src.append("".join(lines[start - 1:end]))
        cursor = end
    keep.append("".join(lines[cursor:]))
    return "".join(keep), "".join(judge_src)


def _imports_judge_side_only(node) -> bool:
    """A module-level import of judge-side modules only (``from repro.verdicts import check``): judge code, so
    importing one more verdict helper re-judges and measures nothing again."""
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        mods = [node.module] if node.module != "repro" else [f"repro.{a.name}" for a in node.names]
    elif isinstance(node, ast.Import):
        mods = [a.name for a in node.names]
    else:
        return False
    side = {p.removesuffix(".py").removesuffix("/__init__").replace("/", ".") for p in JUDGE_SIDE}
    return all(m in side for m in mods)


def _files_digest(paths: list[Path], root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): _sha(p.read_bytes()) for p in paths}


@lru_cache(maxsize=None)
def _claim_code(claim: str, needs: tuple[str, ...], root: Path = ROOT) -> dict:
    module = root / "repro" / "claims" / f"{claim}.py"
    measure_src, judge_src = split_claim_module(module)
    deps = module_closure((f"repro.claims.{claim}",), root)
    for artefact in needs:
        deps += module_closure(ARTEFACT_CODE[artefact], root)
    files = {k: v for k, v in _files_digest(sorted(set(deps)), root).items()
             if k != module.relative_to(root).as_posix()}
    files[module.relative_to(root).as_posix() + " (measurement part)"] = _sha(measure_src)
    judge_files = {p: _sha((root / p).read_bytes()) for p in (*JUDGE_SIDE, PUBLISHED) if (root / p).is_file()}
    judge_files[module.relative_to(root).as_posix() + " (judge part)"] = _sha(judge_src)
    return {"code": _sha(json.dumps(files, sort_keys=True)), "code_files": files,
            "judge": _sha(json.dumps(judge_files, sort_keys=True))}


@lru_cache(maxsize=None)
def _artefact_code(artefact: str, root: Path = ROOT) -> dict:
    files = _files_digest(module_closure(ARTEFACT_CODE[artefact], root), root)
    return {"code": _sha(json.dumps(files, sort_keys=True)), "code_files": files, "judge": None}


def software() -> dict:
    """The software a measurement depends on beyond the checkout (read from package metadata: no import)."""
    out = {"python": platform.python_version()}
    for pkg in SOFTWARE:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def keys(code: dict, params: dict | str) -> dict:
    """The keys of one measurement: code and judge (from ``code``), config (the resolved parameters), software, and
    ``measure``, the one hash of code, config and software."""
    text = params if isinstance(params, str) else json.dumps(params, sort_keys=True, default=str)
    out = {"code": code["code"], "judge": code["judge"], "config": _sha(json.dumps(json.loads(text), sort_keys=True)),
           "software": software()}
    out["measure"] = _sha(json.dumps([out["code"], out["config"], out["software"]], sort_keys=True))
    return out


def claim_keys(claim: str, params: dict | str, needs: tuple[str, ...] = ()) -> dict:
    """The keys of claim ``claim`` measured with ``params`` (what the job receives) and the shared artefacts
    ``needs`` (the artefact names of its config's ``workflow.needs``), with the files behind the code key
    (``code_files``: which changed, when a result is stale) and ``needs``."""
    code = _claim_code(claim, tuple(sorted(needs)))
    return {**keys(code, params), "needs": sorted(needs), "code_files": dict(code["code_files"])}


def artefact_keys(artefact: str, params: dict | str) -> dict:
    """The keys of a shared artefact's build (:data:`ARTEFACT_CODE`) with the translation section ``params``."""
    code = _artefact_code(artefact)
    return {**keys(code, params), "artefact": artefact, "code_files": dict(code["code_files"])}


def current_code(claim: str, needs: tuple[str, ...] | list[str] | None = None) -> dict:
    """The checkout's code key of a claim (``translation``: the translation benchmark's) for the shared artefacts
    ``needs`` a result recorded: {code, judge, code_files}."""
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
