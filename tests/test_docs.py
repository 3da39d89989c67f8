"""README.md and docs/ state no result fact by hand: the claims list (docs/claims.md) and the marked blocks of
README.md and docs/running.md are what repro.report.docs makes of the registry and the committed references
(``python -m repro.report docs`` regenerates them; publish does after writing a reference), they link nothing outside
the repository, and the README stays short."""
from __future__ import annotations

import re
from pathlib import Path

from repro import registry
from repro.report import docs

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
PATH = re.compile(r"`(\.\./[^`\s]*)`")


def test_generated_facts_are_up_to_date():
    for rel, text in docs.generated(ROOT).items():
        assert (ROOT / rel).read_text() == text, f"{rel} is out of date: run python -m repro.report docs"


def test_generated_blocks_follow_the_references(tmp_path):
    """The README's references block is read from matrix.csv and run.json, not typed: another references folder
    gives other rows."""
    refs = tmp_path / "references" / "reports"
    refs.mkdir(parents=True)
    (refs / "matrix.csv").write_text("hardware,scale,source,claim,commit,stale\n"
                                     "box-a,tiny,reference,c1,abcdef0123,False\nbox-a,tiny,reference,c2,abcdef0123,True\n")
    block = docs.references_md(tmp_path / "references")
    assert "| `box-a` | tiny | 2 | 1 | abcdef0 | not recorded |" in block
    assert "cpu-intel-xeon-2c" not in block


def test_docs_link_nothing_outside_the_repository():
    """A relative link or a ``../`` path resolves inside the repository and exists (README pointed to
    ../shared/CLAIMS.md, a file of the project's workspace that a clone lacks)."""
    bad = []
    for page in PAGES:
        text = page.read_text()
        for target in LINK.findall(text) + PATH.findall(text):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue  # a web address or an anchor of the same page
            path = (page.parent / target.split("#")[0]).resolve()
            if not path.is_relative_to(ROOT.resolve()) or not path.exists():
                bad.append(f"{page.relative_to(ROOT)}: {target}")
    assert not bad, bad


def test_readme_is_short_and_names_every_claim():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    assert "docs/claims.md" in text
    assert all(cid in text for cid in registry.claim_ids())
