"""The shared command line of every claim module.

``python -m repro.claims.<id> --scale S --out DIR [--params JSON]``: parameters come from ``--params`` (what the
Snakefile passes, already validated) or, when run by hand, from config/claims/<id>.yaml at that scale. The claim's
``run`` returns metrics rows and a verdict; this writes them with the fingerprint (repro.bench.records).
Progress goes to stderr (the rule's log).
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Callable

log = logging.getLogger("repro")


def setup_logging() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")


def main(claim: str, run: Callable, argv=None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m repro.claims.{claim}", description=(run.__doc__ or "").strip())
    parser.add_argument("--scale", required=True, choices=("tiny", "default", "paper"))
    parser.add_argument("--out", required=True, type=Path, help="results folder for this claim")
    parser.add_argument("--params", help="JSON parameters (default: config/claims/<claim>.yaml at --scale)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    args = parser.parse_args(argv)
    setup_logging()
    from repro import config
    from repro.bench.records import write_results

    if args.params:
        try:
            params = json.loads(args.params)
        except json.JSONDecodeError as exc:
            parser.error(f"--params: not valid JSON ({exc})")
    else:
        params = config.section(claim, args.scale)
    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    log.info("%s: scale=%s params=%s", claim, args.scale, json.dumps(params))
    metrics, verdict = run(params, args.scale, args.out)
    verdict = {**verdict, "runtime_s": round(time.time() - t0, 1)}
    write_results(args.out, claim=claim, scale=args.scale, metrics=metrics, verdict=verdict, config=params)
    log.info("%s: %s (%s) in %.1f s", claim, verdict["verdict"], verdict["reason"][:300], time.time() - t0)
    return 0
