"""The shared command line of every claim module.

``python -m repro.claims.<id> --scale S --out DIR [--params JSON]``: parameters come from ``--params`` (what the
Snakefile passes, already validated) or, when run by hand, from config/claims/<id>.yaml at that scale. The claim's
``run(params, scale, out)`` returns its metrics rows and a context (what its judge needs beyond the rows: the device
used, the machine's load...); this writes them with the fingerprint (repro.io) and, unless ``--measure-only``, judges
them: ``repro.judges.<id>.judge(rows, thresholds, context)`` with the thresholds of the section's ``judge:`` part
(``--thresholds`` JSON, or config/claims/<id>.yaml at that scale) and the context :func:`judge_context` builds.
``--rejudge`` judges a stored measurement with the CURRENT thresholds and judge (the same as ``python -m
repro.judging --claim <id> ...``, the workflow's claim_verdict job, which imports no measurement code). Progress goes
to stderr (the rule's log).
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import textwrap
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

from repro import config, plan, provenance
from repro.bench.fingerprint import fingerprint
from repro.errors import FolderBusy
from repro.io import atomic_write_json, remove_stale_temps, start_measurement, write_measurement, writer_lock
from repro.cli import (load_keys, load_params, out_folder, positive_int,  # noqa: F401 (setup_logging: claims')
                       setup_logging)
# the judging machinery (judge-side: a change there re-judges, never re-measures), re-exported for the claims' tests
from repro.judging import (add_thresholds_argument, judge_context, judge_rows, judge_stored,  # noqa: F401
                           load_judge, load_thresholds, now, rejudge, run_and_judge)

log = logging.getLogger("repro")


def _flat_schema(schema: dict, prefix: str = "") -> list[tuple[str, dict]]:
    """(dotted key, property schema) for every leaf parameter of a claim's schema, in the schema's order."""
    out = []
    for key, sub in (schema.get("properties") or {}).items():
        name = f"{prefix}{key}"
        if isinstance(sub, dict) and sub.get("properties"):
            out += _flat_schema(sub, name + ".")
        else:
            out.append((name, sub if isinstance(sub, dict) else {}))
    return out


def _lookup(params: dict | None, dotted: str):
    node = params
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return "-"
        node = node[part]
    text = json.dumps(node, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def parameters_help(claim: str) -> str:
    """The --help epilog: every parameter of the claim with its meaning (config/schema/<claim>.schema.yaml) and its
    value at each scale (config/claims/<claim>.yaml, defaults filled), then example commands."""
    values, problems = {}, []
    for scale in config.SCALES:
        try:
            values[scale] = {**config.section(claim, scale), config.JUDGE: config.thresholds(claim, scale)}
        except config.ConfigError as exc:
            values[scale] = None
            problems.append(f"  {scale}: {exc}")
    schema = config._schema(claim) or {}
    keys = _flat_schema(schema) or [(k, {}) for k in (values.get("default") or {})]
    lines = [f"parameters (meaning: config/schema/{claim}.schema.yaml; values: config/claims/{claim}.yaml):"]
    for key, sub in keys:
        meaning = " ".join(str(sub.get("description", "")).split()) or "(no description)"
        if "enum" in sub:
            meaning = meaning.rstrip(".") + f". One of: {', '.join(map(str, sub['enum']))}."
        lines.append(f"  {key}")
        lines += textwrap.wrap(meaning, 110, initial_indent="      ", subsequent_indent="      ")
        per_scale = [_lookup(values[scale], key) for scale in config.SCALES]
        lines.append("      all scales: " + per_scale[0] if len(set(per_scale)) == 1 else
                     "      " + " | ".join(f"{scale}: {v}" for scale, v in zip(config.SCALES, per_scale)))
    if problems:
        lines += ["scales whose section does not validate as is (paper paths etc. come from overrides):", *problems]
    numeric = [k for k, _ in keys if "." not in k and isinstance((values.get("tiny") or {}).get(k), (int, list))
               and not isinstance((values.get("tiny") or {}).get(k), bool)]
    override = "seeds" if "seeds" in numeric else (numeric[0] if numeric else None)
    example = f"{override}: {_lookup(values.get('tiny'), override)}" if override else ""
    lines += ["", "examples:",
              f"  python -m repro.claims.{claim} --scale tiny --out /tmp/{claim}-tiny      # seconds, no verdict",
              f"  python -m repro.claims.{claim} --scale default --out results/<hardware>/default/{claim}",
              f"  snakemake claim_{claim} --cores all                 # the same through the workflow, with its page",
              f"  snakemake claim_{claim} --cores all --config 'overrides={{{claim}: {{{example}}}}}'"]
    return "\n".join(lines)


def main(claim: str, run: Callable, argv=None) -> int:
    """The command line of claim ``claim`` (its module's ``run`` measures and judges; ``run_part`` trains a part)."""
    module = sys.modules.get(run.__module__)
    parser = _parser(claim, run, module)
    args = parser.parse_args(argv)
    setup_logging()
    started = now()
    keys = load_keys(parser, args.keys)
    if args.hardware:
        try:
            config.check_hardware_id(args.hardware, "--hardware")
        except config.ConfigError as exc:
            parser.error(str(exc))
    thresholds = load_thresholds(parser, claim, args.scale, args.thresholds)
    if args.rejudge:
        with _one_writer(args.out):
            rejudge(claim, args.out, args.scale, thresholds, judge_key=(keys or {}).get("judge"))
        return 0
    params = load_params(parser, claim, args.scale, args.params)
    key_params = json.loads(args.params) if args.params else params  # what the workflow hashed
    key_params = {k: v for k, v in key_params.items() if k != config.JUDGE}
    params, given = _with_inputs(parser, claim, args, params)
    if keys is None:
        needs = tuple(n["artefact"] for n in config.needed(config.workflow_spec(claim, args.scale), params))
        keys = provenance.claim_keys(claim, key_params, needs, thresholds, plan.block(claim, args.scale))
    if args.threads:
        import torch  # lazy: --help and --rejudge need no torch (seconds to import)
        torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    part = getattr(args, "part", None)
    log.info("%s: scale=%s params=%s", claim, args.scale, json.dumps(params))
    # parts of one claim run side by side in its folder, each alone in its own share; the claim job (after them)
    # and re-judging hold the whole folder
    with _one_writer(args.out, None if part is None else f"parts/.lock-{part[0]}-of-{part[1]}"):
        start_measurement(args.out)  # an interrupted measurement leaves a folder that reads as being re-measured
        if part is not None:
            return _run_part(claim, module, params, args, part)
        remove_stale_temps(args.out)  # left by a killed earlier run (a part job shares the folder: not there)
        return _measure(claim, run, module, params, args, keys, given, started, thresholds)


@contextmanager
def _one_writer(out: Path, name: str | None = None):
    """The results folder's writer lock (repro.io.writer_lock; ``name``: a part's own); a second writer of the same
    folder (or part) stops at once, naming the folder and the holder's pid."""
    try:
        with writer_lock(out, name or ".lock"):
            yield
    except FolderBusy as exc:
        raise SystemExit(f"error: {exc}") from None


def _parser(claim: str, run: Callable, module) -> argparse.ArgumentParser:
    try:
        epilog = parameters_help(claim)
    except Exception as exc:  # the help text must never stop a run
        epilog = f"(parameter list unavailable: {exc})"
    parser = argparse.ArgumentParser(prog=f"python -m repro.claims.{claim}", description=(run.__doc__ or "").strip(),
                                     epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", required=True, choices=config.SCALES,
                        help="which section of config/claims/<claim>.yaml to run (values below)")
    parser.add_argument("--out", required=True, type=out_folder,
                        help="results folder for this claim (a folder, or a path not there yet)")
    parser.add_argument("--params", help="JSON parameters, all of them (default: config/claims/<claim>.yaml at "
                                         "--scale; what the Snakefile passes)")
    parser.add_argument("--input", action="append", default=[], metavar="PARAM=PATH",
                        help="a shared artefact's path for parameter PARAM (what the workflow passes for the claim's "
                             "workflow.needs, e.g. model_dir=results/<hw>/<scale>/_models/translation); repeatable")
    parser.add_argument("--threads", type=positive_int, default=None, help="torch intra-op threads (>= 1)")
    parser.add_argument("--hardware", default=None,
                        help="the hardware id results are filed under (the workflow decides it once and passes it; "
                             "default: derived from this machine)")
    parser.add_argument("--rejudge", action="store_true",
                        help="re-apply this commit's judge (repro/judges/<claim>.py) with the current thresholds "
                             "to the measurements already in --out (metrics.csv, config.json, fingerprint.json, "
                             "measured.json); nothing is measured again, and verdict.json records the thresholds "
                             "used, the measurement's commit and the judging commit (the same as python -m "
                             "repro.judging, the workflow's claim_verdict job)")
    parser.add_argument("--measure-only", action="store_true",
                        help="measure and write metrics.csv, config.json, fingerprint.json and measured.json, but no "
                             "verdict.json (the workflow judges in its own job, so a changed judge re-judges without "
                             "measuring again)")
    add_thresholds_argument(parser)
    parser.add_argument("--keys", default=None, metavar="JSON",
                        help="the provenance keys of this measurement (code, config, software, judge, measure: "
                             "repro.provenance), as the workflow computed them; default: computed here")
    if hasattr(module, "run_part"):
        parser.add_argument("--part", type=_part, default=None, metavar="I-of-N",
                            help="train only part I of N of the claim's runs (I counts from 0; the claim's run_part splits them) and write "
                                 "parts/I-of-N.done under --out; the run without --part judges (what the workflow's "
                                 "claim_part jobs do when workflow.parts > 1)")
    return parser


def _with_inputs(parser, claim: str, args, params: dict) -> tuple[dict, dict]:
    """The parameters with the shared artefacts' paths the workflow passed (``--input PARAM=PATH``, for the claim's
    workflow.needs) validated in, and those paths."""
    if not args.input:
        return params, {}
    given = dict(item.split("=", 1) if "=" in item else (item, None) for item in args.input)
    bad = [k for k, v in given.items() if not v]
    if bad:
        parser.error(f"--input {bad[0]}: expected PARAM=PATH")
    try:
        return config.validate_params(claim, args.scale, {**params, **given}), given
    except config.ConfigError as exc:
        parser.error(f"--input: {exc}")


def _run_part(claim: str, module, params: dict, args, part: tuple[int, int]) -> int:
    """Train part ``part`` = (i, n) of the claim's runs and mark it done (parts/<i>-of-<n>.done)."""
    t0 = time.time()
    index, count = part
    (args.out / "parts").mkdir(exist_ok=True)
    done = module.run_part(params, args.scale, args.out, index, count)
    atomic_write_json(args.out / "parts" / f"{index}-of-{count}.done",
                      {"claim": claim, "scale": args.scale, "part": index, "of": count, **(done or {}),
                       "seconds": round(time.time() - t0, 1)})
    log.info("%s: part %d of %d done in %.1f s", claim, index, count, time.time() - t0)
    return 0


def _measure(claim: str, run: Callable, module, params: dict, args, keys: dict, given: dict, started: str,
             thresholds: dict) -> int:
    """Run the experiment and write the measurement (and, unless --measure-only, judge it)."""
    t0 = time.time()
    metrics, context = run(params, args.scale, args.out)
    if not isinstance(context, dict) or "verdict" in context:
        raise TypeError(f"repro.claims.{claim}.run must return (rows, context): the judge is "
                        f"repro.judges.{claim}.judge, not the measurement's")
    # the intra-op threads this process measured with (--threads): the machine's fingerprint cannot know them, and
    # a judge reads them from fingerprint.json, never from its own process (repro.judging.judge_context)
    threads = {"torch_threads": sys.modules["torch"].get_num_threads()} if "torch" in sys.modules else {}
    measured = write_measurement(args.out, claim=claim, scale=args.scale, metrics=metrics, config=params,
                                 fingerprint={**fingerprint(args.hardware), **threads},
                                 artifacts=getattr(module, "ARTIFACTS", ()),  # the claim's other files
                                 keys=keys, context=context, inputs=given, started=started,
                                 plan=plan.for_measurement(claim, args.scale, keys.get("config"), thresholds))
    if args.measure_only:
        log.info("%s: measured in %.1f s (%d rows); the verdict is the claim_verdict job's", claim,
                 time.time() - t0, measured["integrity"]["metrics.csv"]["rows"])
        return 0
    verdict = rejudge(claim, args.out, args.scale, thresholds, judge_key=keys.get("judge"))
    log.info("%s: %s in %.1f s", claim, verdict["verdict"], time.time() - t0)
    return 0


def _part(text: str) -> tuple[int, int]:
    """``"I-of-N"`` -> (I, N) with 0 <= I < N."""
    try:
        i, n = (int(x) for x in text.split("-of-"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected I-of-N (e.g. 0-of-7), got {text!r}") from None
    if not 0 <= i < n:
        raise argparse.ArgumentTypeError(f"{text!r}: need 0 <= I < N")
    return i, n


