"""``python -m repro.report claim|index|rebuild|docs ...``: write a claim page, the index, or rebuild every page from the
results files (``rebuild``: every machine and scale under --results, then the indexes, the verdict matrix and the
hardware comparisons; nothing is measured again: use it after a change to the report code)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from repro import config, registry
from repro.io import ResultsError

from .compare import write_compare
from .docs import ROOT, write_docs
from .matrix import read_cells, write
from .pages import ARTEFACT_PAGES, claim_page, index_page
from .publish import (
    PublishError,
    newest_reference,
    publish,
    publish_peers,
    rejudge_reference,
    render_reference,
    seal_reference,
)


def _parser() -> argparse.ArgumentParser:
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
    b = sub.add_parser("rebuild", help="this checkout's pages, indexes, the matrix and the comparisons, from "
                                       "results only (the references shown beside them)")
    b.add_argument("--results", default="results")
    b.add_argument("--reports", default="reports")
    b.add_argument("--references", default="references")
    r = sub.add_parser("rebuild-references", help="maintainers: re-render the committed references' pages, "
                                                  "matrix and comparisons after a change to the report code")
    r.add_argument("--references", default="references")
    p = sub.add_parser("publish", help="maintainers: make a clean run of HEAD a committed reference (refuses a "
                                       "dirty tree, mixed commits, stale or overridden results)")
    p.add_argument("--hardware", required=True, help="the run's hardware id (results/<hardware>/<scale>/)")
    p.add_argument("--scale", required=True, choices=config.SCALES)
    p.add_argument("--results", default="results")
    p.add_argument("--references", default="references")
    p.add_argument("--claims", nargs="*", default=None, help="only these claims (a run of some claims); default: "
                                                             "the whole run, every claim and the translation")
    p.add_argument("--waiver", default=None, metavar="REASON",
                   help="accept claims measured on a dirty tree whose measurement code is HEAD's (e.g. a GPU node's "
                        "copy of the checkout); the reason is recorded beside them and on their pages")
    p.add_argument("--peers-only", action="store_true",
                   help="only the run's peer throughput benchmarks (_bench/throughput, _bench/fairseq_peer: "
                        "scripts/peers.sh), added to the existing reference; its claims are kept")
    j = sub.add_parser("rejudge-reference", help="maintainers: re-judge a committed reference in place with HEAD's "
                                                 "judges (its measurements kept), then re-render its pages")
    j.add_argument("--hardware", required=True)
    j.add_argument("--scale", required=True, choices=config.SCALES)
    j.add_argument("--references", default="references")
    j.add_argument("--claims", nargs="*", default=None, help="only these claims (default: every claim)")
    s = sub.add_parser("seal-reference", help="maintainers: give committed references' verdicts the integrity "
                                              "records they lack (nothing judged again), then re-render their pages")
    s.add_argument("--references", default="references")
    s.add_argument("--hardware", default=None, help="one machine (default: every reference)")
    s.add_argument("--scale", default=None, choices=config.SCALES, help="one scale (default: every scale)")
    d = sub.add_parser("docs", help="maintainers: regenerate docs/claims.md and the generated blocks of README.md and "
                                    "docs/running.md from the registry and the committed references")
    d.add_argument("--references", default="references")
    return parser


def _docs_after(references: str) -> None:
    """After the committed references changed: the docs' generated facts follow them (only for the checkout's own
    references folder; a scratch folder's facts are not the repository's)."""
    if Path(references).resolve() == (ROOT / "references").resolve():
        for rel in write_docs(ROOT, references):
            print(f"regenerated {rel}; commit it")


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.cmd == "rebuild":
            rebuild(args.results, args.reports, args.references)
        elif args.cmd == "rebuild-references":
            rebuild_references(args.references)
            _docs_after(args.references)
        elif args.cmd == "docs":
            print("\n".join(f"regenerated {rel}" for rel in write_docs(ROOT, args.references)) or "docs up to date")
        elif args.cmd == "publish" and args.peers_only:
            if args.claims is not None or args.waiver is not None:
                raise PublishError("--peers-only publishes no claims: drop --claims and --waiver")
            for dst in publish_peers(args.hardware, args.scale, args.results, args.references):
                print(f"published {dst.name} as {dst}")
            print(f"commit it (git add {args.references})")
        elif args.cmd == "publish":
            dst = publish(args.hardware, args.scale, args.results, args.references, claims=args.claims,
                          waiver=args.waiver)
            print(f"published {args.results}/{args.hardware}/{args.scale} as {dst}; commit it (git add {args.references})")
            _docs_after(args.references)
        elif args.cmd == "rejudge-reference":
            names = rejudge_reference(args.hardware, args.scale, args.references, claims=args.claims)
            print(f"re-judged {len(names)} claims of {args.references}/results/{args.hardware}/{args.scale}; "
                  f"commit it (git add {args.references})")
            _docs_after(args.references)
        elif args.cmd == "seal-reference":
            sealed = seal_reference(args.references, args.hardware, args.scale)
            print(f"sealed {len(sealed)} verdicts under {args.references}/results; commit it (git add {args.references})")
        elif args.cmd == "claim":
            claim_page(args.claim, args.results, args.page, args.figures)
        else:
            index_page(args.results_root, args.reports_root, args.hardware, args.scale, args.out)
    except ResultsError as exc:  # a damaged results file: its name and what to do, no traceback; old page kept
        print(f"python -m repro.report {args.cmd}: {exc}", file=sys.stderr)
        return 1
    except PublishError as exc:  # the run cannot become a reference: why and what to do, no traceback
        print(f"python -m repro.report {args.cmd}: {exc}", file=sys.stderr)
        return 2
    return 0


def rebuild(results_root: str, reports_root: str, references_root: str | None = "references") -> None:
    """Every page of every registered claim with a workflow, from ``results_root/<hw>/<scale>/<claim>/`` (this
    checkout's runs), their indexes, and the matrix and comparisons with the references beside them."""
    refs = references_root if references_root and Path(references_root).is_dir() else None
    cells = read_cells(results_root)
    implemented = set(registry.implemented_claims()) | set(ARTEFACT_PAGES)  # with a module and a config
    for c in cells:
        if c.claim in implemented:
            page = Path(reports_root) / c.hardware / c.scale / f"{c.claim}.md"
            print(f"{c.hardware}/{c.scale}/{c.claim}", flush=True)
            claim_page(c.claim, c.path.parent, page, page.with_suffix(""))
    for hw, scale in sorted({(c.hardware, c.scale) for c in cells}):
        index_page(results_root, reports_root, hw, scale, Path(reports_root) / hw / scale / "index.md")
    for scale in sorted({c.scale for c in cells} | {c.scale for c in read_cells(None, refs)}):
        write_compare(results_root, scale, Path(reports_root) / "compare" / scale, references_root=refs)
    write(results_root, reports_root, Path(reports_root) / "matrix.md", references_root=refs)


def rebuild_references(references_root: str = "references") -> None:
    """Re-render every committed reference's pages and index (marked as references), the references' matrix and
    their hardware comparisons; the reference results themselves are not touched."""
    refs = Path(references_root)
    cells = read_cells(None, refs)
    for hw, scale in sorted({(c.hardware, c.scale) for c in cells}):
        print(f"reference {hw}/{scale}", flush=True)
        render_reference(refs, hw, scale)
    for scale in sorted({c.scale for c in cells}):
        write_compare(None, scale, refs / "reports" / "compare" / scale, references_root=refs,
                      reference=newest_reference(refs, scale))
    write(None, refs / "reports", refs / "reports" / "matrix.md", references_root=refs)


if __name__ == "__main__":
    raise SystemExit(main())
