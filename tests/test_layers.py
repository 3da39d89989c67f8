"""The floors of docs/architecture.md: every import in repro/ goes down the floors (or stays on its own floor),
read from the source (function-local imports included), except the listed exceptions, each with its reason."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

FLOORS = [
    {"errors", "registry", "provenance", "kinds", "progress", "rows", "yamlload", "vocabulary", "layout"},
    {"config", "io", "verdicts", "intervals", "judging", "judges", "stats", "cli", "plan"},
    {"model", "kernels", "data", "quant"},
    {"bench"},
    {"train", "artefacts"},
    {"peers"},
    {"claims"},
    {"report"},
    {"workflow"},
]
FLOOR = {unit: i for i, units in enumerate(FLOORS) for unit in units}
# (importer, imported): why it may go up
EXCEPTIONS = {
    ("config", "model"): "config validates the model-shape keys with repro.model.config.ModelConfig, the one "
                         "definition of a model's shape (imported lazily: the package imports torch)",
}


def _unit(path: Path) -> str:
    rel = path.relative_to(ROOT / "repro")
    return rel.parts[0].removesuffix(".py") if rel.parts[0] != "__init__.py" else "repro"


def _imported_units(tree) -> set[str]:
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and n.level == 0 and n.module and n.module.split(".")[0] == "repro":
            parts = n.module.split(".")
            out.update([parts[1]] if len(parts) > 1 else [a.name for a in n.names])
        elif isinstance(n, ast.Import):
            out.update(a.name.split(".")[1] for a in n.names if a.name.startswith("repro."))
    return out


def test_every_repro_module_is_on_a_floor():
    units = {_unit(p) for p in (ROOT / "repro").rglob("*.py")} - {"repro"}
    assert units <= set(FLOOR), f"not on a floor of docs/architecture.md: {sorted(units - set(FLOOR))}"


def test_no_import_runs_back_up_the_floors():
    upward = []
    for path in sorted((ROOT / "repro").rglob("*.py")):
        unit = _unit(path)
        if unit == "repro":
            continue
        for target in _imported_units(ast.parse(path.read_text())):
            if target in FLOOR and FLOOR[target] > FLOOR[unit] and (unit, target) not in EXCEPTIONS:
                upward.append(f"{path.relative_to(ROOT)} imports repro.{target}")
    assert not upward, upward


# the measurement: what a judge never imports (it meets measurements only in their result files), named even where
# the floors already forbid it, so that moving a floor cannot open the way
MEASUREMENT = {"claims", "bench", "model", "kernels", "train", "data", "quant", "peers", "artefacts"}
JUDGE_UNITS = {"judges", "judging", "verdicts", "intervals", "plan"}


def test_no_judge_imports_a_measurement_or_torch():
    """The judge side (repro/judges/, repro/judging.py, repro/verdicts.py, repro/intervals.py) imports no measurement
    module and no torch, anywhere in a file (function-local imports included)."""
    found = []
    for path in sorted((ROOT / "repro").rglob("*.py")):
        if _unit(path) not in JUDGE_UNITS:
            continue
        tree = ast.parse(path.read_text())
        found += [f"{path.relative_to(ROOT)} imports repro.{u}" for u in sorted(_imported_units(tree) & MEASUREMENT)]
        found += [f"{path.relative_to(ROOT)}:{n.lineno} imports torch" for n in ast.walk(tree)
                  if isinstance(n, ast.Import) and any(a.name.split(".")[0] == "torch" for a in n.names)
                  or isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "torch"]
    assert not found, found


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_edges(name: str, path: Path, modules) -> set[str]:
    """The repro modules ``name`` imports (function-local imports included): ``from a.b import c`` names the module
    a.b.c where there is one, else a.b; importing a module runs its packages' __init__ first, so those count too
    (except the packages ``name`` itself lives in, which run before it anyway)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, ast.Import):
            names = [a.name for a in n.names]
        elif isinstance(n, ast.ImportFrom):
            base = n.module or ""
            if n.level:
                up = package.split(".")[:len(package.split(".")) - n.level + 1]
                base = ".".join(up + ([n.module] if n.module else []))
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in n.names]
        else:
            continue
        for target in names:
            parts = target.split(".")
            out.update(m for m in (".".join(parts[:i]) for i in range(2, len(parts) + 1))
                       if m in modules and m != name and not name.startswith(m + "."))
    return out


def _a_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (module -> modules it imports) as a path a -> b -> ... -> a, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m):
        state[m] = 1
        path.append(m)
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                return path[path.index(t):] + [t]
            if t not in state and (found := visit(t)):
                return found
        state[m] = 2
        path.pop()
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_the_module_import_graph_has_no_cycle():
    """No repro module imports (at the top or in a function) a module that imports it back, directly or through
    others: each floor's modules load without the ones above, and nothing relies on a half-initialised module."""
    modules = {_module_name(p): p for p in sorted((ROOT / "repro").rglob("*.py"))}
    graph = {m: _import_edges(m, p, modules) for m, p in modules.items()}
    assert "repro.io" in graph["repro.train.loop"] and "repro.model" in graph["repro.config"], "the graph reads imports"
    cycle = _a_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_a_cycle_is_found():
    assert _a_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _a_cycle({"a": {"b"}, "b": set()}) is None


def test_the_architecture_page_names_every_floor():
    text = (ROOT / "docs" / "architecture.md").read_text()
    missing = [u for u in FLOOR if u not in text]
    assert not missing, missing


# ------------------------------------------------------------------------------------------- the code's shape
def _functions():
    for path in sorted((ROOT / "repro").rglob("*.py")):
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield path, n


def test_no_function_over_100_lines():
    long = [f"{p.relative_to(ROOT)}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)"
            for p, n in _functions() if n.end_lineno - n.lineno + 1 > 100]
    assert not long, long


def test_function_local_imports_are_few_and_say_why():
    """At most 40, each with a comment on its line saying why it is lazy (a heavy optional dependency, torch kept
    out of a light command, a cycle)."""
    local = {}
    for path, fn in _functions():
        lines = path.read_text().splitlines()
        for m in ast.walk(fn):
            if isinstance(m, (ast.Import, ast.ImportFrom)):
                local[(path, m.lineno)] = lines[m.lineno - 1]
    assert len(local) <= 40, f"{len(local)} function-local imports (at most 40)"
    silent = [f"{p.relative_to(ROOT)}:{ln}" for (p, ln), text in local.items() if "#" not in text]
    assert not silent, f"function-local imports without a reason: {silent}"


def test_judges_query_rows_instead_of_filtering_by_hand():
    import re

    hand = [f"{p.relative_to(ROOT)}:{i}" for d in ("claims", "judges") for p in sorted((ROOT / "repro" / d).glob("*.py"))
            for i, line in enumerate(p.read_text().splitlines(), 1)
            if re.search(r"""\[["']metric["']\]\s*(==|in\b)|\.get\(["']metric["']\)\s*==""", line)]
    assert not hand, f"filter rows with repro.verdicts.Rows: {hand}"


def test_comments_say_why_not_which_issue():
    import re

    found = [f"{p.relative_to(ROOT)}:{i}" for p in sorted((ROOT / "repro").rglob("*.py"))
             for i, line in enumerate(p.read_text().splitlines(), 1)
             if re.search(r"\bissues? ?#?\d+|\(#\d+\)", line, flags=re.I)]
    assert not found, found


def test_the_hardware_id_is_passed_not_read_from_the_environment():
    found = [str(p.relative_to(ROOT)) for p in (ROOT / "repro").rglob("*.py") if "REPRO_HARDWARE_ID" in p.read_text()]
    assert not found, found


def _claims():
    from repro import registry

    return sorted(registry.implemented_claims())


def test_every_claim_is_a_measurement_and_a_judge():
    """Each registered claim: repro/claims/<id>.py with ``run(params, scale, out)`` (and no judge), and
    repro/judges/<id>.py with ``judge(rows, thresholds, context)``, the one signature."""
    bad = []
    for claim in _claims():
        measure = ast.parse((ROOT / "repro" / "claims" / f"{claim}.py").read_text())
        defs = {n.name: n for n in measure.body if isinstance(n, ast.FunctionDef)}
        if "run" not in defs or [a.arg for a in defs["run"].args.args] != ["params", "scale", "out"]:
            bad.append(f"repro/claims/{claim}.py: no run(params, scale, out)")
        if "judge" in defs:
            bad.append(f"repro/claims/{claim}.py defines judge (it belongs in repro/judges/{claim}.py)")
        path = ROOT / "repro" / "judges" / f"{claim}.py"
        if not path.is_file():
            bad.append(f"repro/judges/{claim}.py is missing")
            continue
        judge = [n for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef) and n.name == "judge"]
        if not judge or [a.arg for a in judge[0].args.args] != ["rows", "thresholds", "context"] or \
                judge[0].args.kwonlyargs or judge[0].args.vararg or judge[0].args.kwarg:
            bad.append(f"repro/judges/{claim}.py: judge must be judge(rows, thresholds, context)")
    assert not bad, bad


def test_no_measurement_reaches_a_judge():
    """A measurement's code (what its key hashes) never imports the judge side (the judges, the judging machinery,
    the verdict contract): a changed judge or threshold re-judges and never re-measures."""
    from repro import provenance

    for claim in _claims():
        files = {p.relative_to(ROOT).as_posix() for p in provenance.module_closure((f"repro.claims.{claim}",),
                                                                                   stop=provenance.NOT_CODE)}
        # the registry is read by repro.io (metric checks the key a row names, read_metrics fills the published
        # value beside the rows it reads): not a decision; the command line (repro.claims._cli) reaches
        # repro/judging.py, which imports a judge by name, when judging; it reaches repro/plan.py to record the plan
        # key in measured.json (the plan block itself is part of the measure key, repro.provenance.keys)
        judge_side = sorted(f for f in files if provenance._stopped(f, provenance.JUDGE_SIDE)
                            and f not in ("repro/registry/__init__.py", "repro/judging.py", "repro/plan.py"))
        assert not judge_side, f"repro/claims/{claim}.py reaches the judge side: {judge_side}"
