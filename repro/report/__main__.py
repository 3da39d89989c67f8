"""``python -m repro.report claim|index|rebuild ...``: write a claim page, the index, or rebuild every page from the
results files (``rebuild``: every machine and scale under --results, then the indexes, the verdict matrix and the
hardware comparisons; nothing is measured again: use it after a change to the report code)."""
from __future__ import annotations

import argparse
import sys

from repro.bench.records import ResultsError

from .pages import claim_page, index_page


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m repro.report")
    sub = parser.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("claim", help="one claim's page")
    c.add_argument("--claim", required=True)
    c.add_argument("--results", required=True, help="results/<hw>/<scale>/<claim>")
    c.add_argument("--page", required=True)
    c.add_argument("--figures", required=True)
    i = sub.add_parser("index", help="the index of every registered claim")
    i.add_argument("--results-root", required=True)
    i.add_argument("--reports-root", required=True)
    i.add_argument("--hardware", required=True)
    i.add_argument("--scale", required=True)
    i.add_argument("--out", required=True)
    b = sub.add_parser("rebuild", help="every claim page, index, the matrix and the comparisons, from results only")
    b.add_argument("--results", default="results")
    b.add_argument("--reports", default="reports")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "rebuild":
            rebuild(args.results, args.reports)
        elif args.cmd == "claim":
            claim_page(args.claim, args.results, args.page, args.figures)
        else:
            index_page(args.results_root, args.reports_root, args.hardware, args.scale, args.out)
    except ResultsError as exc:  # a damaged results file: its name and what to do, no traceback; old page kept
        print(f"python -m repro.report {args.cmd}: {exc}", file=sys.stderr)
        return 1
    return 0


def rebuild(results_root: str, reports_root: str) -> None:
    """Every page of every registered claim with a workflow, from ``results_root/<hw>/<scale>/<claim>/``."""
    from pathlib import Path

    from repro import registry

    from .compare import write_compare
    from .matrix import read_cells, write

    cells = read_cells(results_root)
    implemented = set(registry.implemented_claims())  # registered, with a module and a config
    for c in cells:
        if c.claim in implemented:
            page = Path(reports_root) / c.hardware / c.scale / f"{c.claim}.md"
            print(f"{c.hardware}/{c.scale}/{c.claim}", flush=True)
            claim_page(c.claim, c.path.parent, page, page.with_suffix(""))
    for hw, scale in sorted({(c.hardware, c.scale) for c in cells}):
        index_page(results_root, reports_root, hw, scale, Path(reports_root) / hw / scale / "index.md")
    for scale in sorted({c.scale for c in cells}):
        write_compare(results_root, scale, Path(reports_root) / "compare" / scale)
    write(results_root, reports_root, Path(reports_root) / "matrix.md")


if __name__ == "__main__":
    raise SystemExit(main())
