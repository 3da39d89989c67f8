"""Scaffold a new claim from docs/claim_template/ (docs/adding_a_claim.md).

    python -m repro.claims._new <claim_id> --code C12 --title "What the claim says"

writes the eight files a claim is made of, with a small working example measurement to replace:

- repro/claims/<id>.py              the experiment (``run(params, scale, out) -> (rows, context)``, ``python -m`` entry)
- repro/judges/<id>.py              its judge (``judge(rows, thresholds, context) -> verdict``), checks declared as data
- repro/vocabulary/<id>.py          the names both spell (the claim's id; torch-free: the judge imports no measurement)
- config/claims/<id>.yaml           parameters per scale, the judge's thresholds once (a top-level ``judge:``;
                                    a scale's ``judge:`` only what differs there), and the ``workflow`` section
                                    (threads, resources, needs)
- config/schema/<id>.schema.yaml    every parameter's type and meaning (a threshold's too, without a default)
- repro/registry/published.yaml     the registry entry (code, sources, setup, published values): appended
- tests/test_claim_<id>.py          tiny run and the judge on null data
- tests/controls/<id>.py            the negative controls: paper-false data (and ties) the judge must not pass

The workflow's one claim rule runs it as soon as the files exist (``snakemake claim_<id>``); no .smk file.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from repro import yamlload

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "docs" / "claim_template"
TARGETS = {"claim.py.tmpl": "repro/claims/{id}.py", "judge.py.tmpl": "repro/judges/{id}.py",
           "vocabulary.py.tmpl": "repro/vocabulary/{id}.py",
           "claim.yaml.tmpl": "config/claims/{id}.yaml",
           "claim.schema.yaml.tmpl": "config/schema/{id}.schema.yaml", "test_claim.py.tmpl": "tests/test_claim_{id}.py",
           "controls.py.tmpl": "tests/controls/{id}.py"}
REGISTRY = "repro/registry/published.yaml"


def scaffold(claim: str, code: str, title: str, root: str | Path = ROOT) -> list[Path]:
    """Write the new claim's files under ``root``; refuses an id, code or file that exists."""
    root = Path(root)
    if not re.fullmatch(r"[a-z][a-z0-9_]*", claim):
        raise SystemExit(f"claim id {claim!r}: use snake_case (letters, digits, '_')")
    if not re.fullmatch(r"C[1-9][0-9]*", code):
        raise SystemExit(f"--code {code!r}: use C<number>")
    data = yamlload.load((root / REGISTRY).read_text())
    if claim in data["claims"] or code in {c["code"] for c in data["claims"].values()}:
        raise SystemExit(f"{claim} / {code}: already in the registry")
    fill = {"__CLAIM__": claim, "__CODE__": code, "__TITLE__": title.replace('"', "'")}
    written = []
    for tmpl, target in TARGETS.items():
        dest = root / target.format(id=claim)
        if dest.exists():
            raise SystemExit(f"{dest}: exists")
        text = (TEMPLATE / tmpl).read_text()
        for k, v in fill.items():
            text = text.replace(k, v)
        dest.write_text(text)
        written.append(dest)
    reg = root / REGISTRY
    entry = (TEMPLATE / "registry.yaml.tmpl").read_text()
    for k, v in fill.items():
        entry = entry.replace(k, v)
    text = reg.read_text()
    if list(re.finditer(r"^(\w+):", text, re.M))[-1].group(1) != "claims":
        raise SystemExit(f"{reg}: 'claims' is not the last top-level key; add the entry by hand")
    reg.write_text(text.rstrip("\n") + "\n" + entry)
    written.append(reg)
    return written


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m repro.claims._new", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("claim", help="the new claim's id (snake_case), used everywhere")
    ap.add_argument("--code", required=True, help="its code in CLAIMS.md order, e.g. C12")
    ap.add_argument("--title", required=True, help="one line: what the claim says")
    ap.add_argument("--root", type=Path, default=ROOT, help="repository root (default: this checkout)")
    a = ap.parse_args(argv)
    for p in scaffold(a.claim, a.code, a.title, a.root):
        print(f"wrote {p}", file=sys.stderr)
    print(f"next: edit the files, then `pytest tests/test_claim_{a.claim}.py` and `snakemake claim_{a.claim} "
          f"--config scale=tiny`", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
