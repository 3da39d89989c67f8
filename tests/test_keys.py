"""What the provenance keys cover (repro.provenance): every file a measurement loads, its configuration at the scale
and the versions of the libraries it computes with; and nothing that cannot change a result (comments, docstrings,
formatting). Edits are made in a scratch copy of repro/, whose keys are computed from that copy."""
import ast
import json
import shutil
from pathlib import Path

import pytest

from repro import config, provenance, registry
from repro.report.origin import checkout_config_key

ROOT = Path(__file__).resolve().parents[1]
CLAIMS = sorted(registry.implemented_claims())
TRANSLATION_USERS = ("head_pruning", "layer_pruning", "quantization")  # built on the shared translation model / LM


def _needs(claim: str) -> tuple[str, ...]:
    spec = config.workflow_spec(claim, "default")
    return tuple(sorted(n["artefact"] for n in config.needed(spec, config.section(claim, "default"))))


def _all_keys(root: Path) -> dict[str, dict]:
    """{claim or artefact job: its code and judge keys} computed from the source tree ``root``."""
    out = {c: provenance._claim_code(c, _needs(c), root) for c in CLAIMS}
    out.update({f"artefact:{a}": provenance._artefact_code(a, root) for a in provenance.ARTEFACT_CODE})
    return out


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """A copy of repro/ (and the registry file) whose keys tests may change by editing it."""
    root = tmp_path_factory.mktemp("tree")
    shutil.copytree(ROOT / "repro", root / "repro", ignore=shutil.ignore_patterns("__pycache__"))
    return root


def _edited(root: Path, rel: str, edit) -> dict[str, dict]:
    """The keys of ``root`` with ``rel`` changed by ``edit(text) -> text``, the file restored afterwards."""
    path = root / rel
    text = path.read_text()
    path.write_text(edit(text))
    provenance._claim_code.cache_clear()
    provenance._artefact_code.cache_clear()
    provenance._judge_code.cache_clear()
    try:
        return _all_keys(root)
    finally:
        path.write_text(text)
        provenance._claim_code.cache_clear()
        provenance._artefact_code.cache_clear()
        provenance._judge_code.cache_clear()


def _changed(before: dict, after: dict, key: str) -> set[str]:
    return {job for job in before if before[job].get(key) != after[job].get(key)}


def _add_statement(text: str) -> str:
    return text + "\n_edited_by_the_test = 1\n"


def test_the_translation_models_code_holds_the_data_modules_it_loads():
    """The package re-exports are gone: the closure of the training command line holds every data module the
    training loads (it missed corpus.py, batching.py, tokenizer.py and fairseq_io.py when they were re-exported
    through ``import_module``)."""
    files = {p.relative_to(ROOT).as_posix() for p in provenance.module_closure(provenance.ARTEFACT_CODE["translation_model"])}
    assert {"repro/data/corpus.py", "repro/data/batching.py", "repro/data/tokenizer.py", "repro/data/fairseq_io.py",
            "repro/train/loop.py", "repro/train/pipeline.py"} <= files


def test_no_module_loads_repro_code_the_keys_cannot_follow():
    """No module-level ``__getattr__`` (a lazy re-export) and no ``import_module`` of a computed name outside the
    report and the judging machinery (which load plots and judges by name, judge side or no result at all)."""
    allowed = {"repro/report/pages.py", "repro/report/peers.py", "repro/judging.py"}
    found = []
    for path in sorted((ROOT / "repro").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text())
        if any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in tree.body):
            found.append(f"{rel}: module-level __getattr__")
        for n in ast.walk(tree):
            if isinstance(n, ast.Call) and getattr(n.func, "attr", getattr(n.func, "id", None)) == "import_module" \
                    and rel not in allowed:
                found.append(f"{rel}:{n.lineno}: import_module")
    assert not found, found


def test_an_edit_of_each_package_changes_the_keys_of_what_loads_it(scratch):
    before = _all_keys(scratch)
    # a statement in the batching code retrains the translation model and re-measures the claims built on it
    after = _edited(scratch, "repro/data/batching.py", _add_statement)
    changed = _changed(before, after, "code")
    assert {"artefact:translation_model", "artefact:lm", "artefact:translation_evaluate",
            "prepost_gradients", *TRANSLATION_USERS} <= changed, sorted(changed)
    assert "rank_collapse" not in changed and "param_accounting" not in changed
    # one file of every other package: exactly the jobs whose code holds it change, and measurement packages reach
    # at least one job; no judge key moves with measurement code it does not read
    for rel in ("repro/model/block.py", "repro/kernels/norms.py", "repro/train/loop.py", "repro/quant/gptq.py",
                "repro/bench/timing.py", "repro/claims/rank_collapse.py", "repro/io.py"):
        after = _edited(scratch, rel, _add_statement)
        changed = _changed(before, after, "code")
        holders = {job for job, k in before.items() if rel in k["code_files"]}
        assert changed == holders and changed, (rel, sorted(changed), sorted(holders))
    # a judge: its judge key only
    after = _edited(scratch, "repro/judges/rank_collapse.py", _add_statement)
    assert not _changed(before, after, "code")
    assert _changed(before, after, "judge_code") == {"rank_collapse"}


def _rewrap(text: str) -> str:
    """The module's docstring and one function's docstring reworded, comments added, a line re-indented inside
    brackets: nothing the code does."""
    tree = ast.parse(text)
    doc = tree.body[0]
    assert isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant)
    lines = text.splitlines(keepends=True)
    lines[doc.end_lineno - 1] = lines[doc.end_lineno - 1].replace('"""', '\n(rewrapped by the test)\n"""', 1)
    out = "".join(lines)
    return "# a comment the test added\n" + out.replace("\n\n\n", "\n\n\n# another comment\n", 1) + "\n# the end\n"


def test_comments_docstrings_and_formatting_change_no_key(scratch):
    before = _all_keys(scratch)
    for rel in ("repro/judges/flash_attention.py", "repro/model/block.py", "repro/data/batching.py",
                "repro/claims/block_numerics.py"):
        after = _edited(scratch, rel, _rewrap)
        assert not _changed(before, after, "code") and not _changed(before, after, "judge_code"), rel
    # a function's docstring, rewrapped
    def reword(text):
        return text.replace('"""The', '"""The\n    (reworded)', 1)
    after = _edited(scratch, "repro/verdicts.py", reword)
    assert not _changed(before, after, "judge_code")
    # the registry: its content, not its layout
    after = _edited(scratch, "repro/registry/published.yaml", lambda t: "# a comment\n" + t + "\n\n")
    assert not _changed(before, after, "judge_code")


def test_a_changed_constant_changes_the_key(scratch):
    """Stripping docstrings keeps every other string: a changed string constant is a changed key."""
    before = _all_keys(scratch)
    after = _edited(scratch, "repro/vocabulary/block_numerics.py",
                    lambda t: t.replace('"block_numerics"', '"block_numerics2"', 1))
    # the name both sides share: the measurement's key and the judge's
    assert _changed(before, after, "code") == {"block_numerics"} == _changed(before, after, "judge_code")


def test_software_is_what_the_code_imports():
    keys = provenance.claim_keys("head_pruning", {}, ("translation_model",))
    assert {"python", "torch", "sacrebleu", "sentencepiece"} <= set(keys["software"])
    assert "sacrebleu" not in provenance.claim_keys("rank_collapse", {})["software"]
    assert keys["scheme"] == provenance.SCHEME


def test_stale_names_code_config_and_software():
    params = config.job_params("rank_collapse", "default")
    now = provenance.claim_keys("rank_collapse", params)
    fresh = checkout_config_key("rank_collapse", "default")
    assert now["config"] == fresh
    assert provenance.stale_reasons(now, "rank_collapse", fresh) == {}
    # one default value changed: the stored result is stale by its config
    moved = provenance.claim_keys("rank_collapse", {**params, "seeds": params["seeds"][:-1]})
    assert set(provenance.stale_reasons(moved, "rank_collapse", fresh)) == {"config"}
    # another torch: stale by its software, naming the versions
    other = {**now, "software": {**now["software"], "torch": "2.11.0"}}
    reasons = provenance.stale_reasons(other, "rank_collapse", fresh)
    assert set(reasons) == {"software"} and "torch 2.11.0 -> " in reasons["software"]
    # a changed file: by its code, naming it
    old = {**now, "code": "0" * 64, "code_files": {**now["code_files"], "repro/model/block.py": "x"}}
    assert provenance.stale_because(old, "rank_collapse", fresh) == "measurement code changed since: model/block.py"
    # keys of the older scheme (bytes hashed) cannot be compared file by file
    assert set(provenance.stale_reasons({k: v for k, v in now.items() if k != "scheme"}, "rank_collapse")) >= {"code"}
    assert "before provenance keys" in provenance.stale_because({}, "rank_collapse")


@pytest.mark.parametrize("scale", ["tiny", "default"])
def test_the_checkouts_config_key_is_the_workflows(scale):
    """What the report compares a result's config key with is what the workflow's job receives."""
    from repro.workflow import Run

    run = Run({"scale": scale, "hardware": "keys-test"}, ROOT, main_process=False)
    for claim in CLAIMS:
        assert config.job_params(claim, scale) == json.loads(run.params(claim)), claim
        assert checkout_config_key(claim, scale) == provenance.claim_keys(claim, run.params(claim))["config"]


def test_a_judge_key_holds_no_measurement_code():
    """The judge key (what re-judges) covers the judge, the judging command line and what they read, and no file
    of a measurement package: an edit of the model never re-judges by itself (it re-measures, then judges)."""
    for claim in [*CLAIMS, "translation"]:
        files = provenance.current_code(claim)["judge_files"]
        assert {"repro/judging.py", "repro/verdicts.py", "repro/registry/published.yaml"} <= set(files), claim
        assert not [f for f in files if provenance._stopped(f, provenance.MEASUREMENT_PACKAGES)], claim
