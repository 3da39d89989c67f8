"""``python -m repro.report claim|index ...``: write a claim page or the index from results files."""
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
    args = parser.parse_args(argv)
    try:
        if args.cmd == "claim":
            claim_page(args.claim, args.results, args.page, args.figures)
        else:
            index_page(args.results_root, args.reports_root, args.hardware, args.scale, args.out)
    except ResultsError as exc:  # a damaged results file: its name and what to do, no traceback; old page kept
        print(f"python -m repro.report {args.cmd}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
