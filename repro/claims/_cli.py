"""The shared command line of every claim module.

``python -m repro.claims.<id> --scale S --out DIR [--params JSON]``: parameters come from ``--params`` (what the
Snakefile passes, already validated) or, when run by hand, from config/claims/<id>.yaml at that scale. The claim's
``run`` returns metrics rows and a verdict; this writes them with the fingerprint (repro.io).
Progress goes to stderr (the rule's log).
"""
from __future__ import annotations

import argparse
import importlib
import json
import logging
import math
import sys
import textwrap
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from repro import config, provenance
from repro.bench.fingerprint import fingerprint, slug
from repro.io import atomic_write_json, read_metrics, remove_stale_temps, write_measurement, write_verdict
from repro.cli import load_params, positive_int, setup_logging  # noqa: F401 (setup_logging: also used by claims)

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
            values[scale] = config.section(claim, scale)
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
    keys = json.loads(args.keys) if args.keys else None
    if args.rejudge:
        rejudge(claim, args.out, args.scale, judge_key=(keys or {}).get("judge"))
        return 0
    params = load_params(parser, claim, args.scale, args.params)
    key_params = json.loads(args.params) if args.params else params  # what the workflow hashed
    params, given = _with_inputs(parser, claim, args, params)
    if keys is None:
        needs = tuple(n["artefact"] for n in config.needed(config.workflow_spec(claim, args.scale), params))
        keys = provenance.claim_keys(claim, key_params, needs)
    if args.hardware and slug(args.hardware) != args.hardware:
        parser.error(f"--hardware: {args.hardware!r} is not a hardware id; use {slug(args.hardware)!r}")
    if args.threads:
        import torch  # lazy: --help and --rejudge need no torch (seconds to import)
        torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    part = getattr(args, "part", None)
    log.info("%s: scale=%s params=%s", claim, args.scale, json.dumps(params))
    if part is not None:
        return _run_part(claim, module, params, args, part)
    remove_stale_temps(args.out)  # left by a killed earlier run (a part job shares the folder: not there)
    return _measure(claim, run, module, params, args, keys, given, started)


def _parser(claim: str, run: Callable, module) -> argparse.ArgumentParser:
    try:
        epilog = parameters_help(claim)
    except Exception as exc:  # the help text must never stop a run
        epilog = f"(parameter list unavailable: {exc})"
    parser = argparse.ArgumentParser(prog=f"python -m repro.claims.{claim}", description=(run.__doc__ or "").strip(),
                                     epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", required=True, choices=config.SCALES,
                        help="which section of config/claims/<claim>.yaml to run (values below)")
    parser.add_argument("--out", required=True, type=Path, help="results folder for this claim")
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
                        help="re-apply this commit's verdict rule (judge) to the measurements already in --out "
                             "(metrics.csv, config.json); nothing is measured again, and verdict.json records both "
                             "the measurement's commit and the judging commit (the workflow's claim_verdict job)")
    parser.add_argument("--measure-only", action="store_true",
                        help="measure and write metrics.csv, config.json, fingerprint.json and measured.json, but no "
                             "verdict.json (the workflow judges in its own job, so a changed judge re-judges without "
                             "measuring again)")
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


def _measure(claim: str, run: Callable, module, params: dict, args, keys: dict, given: dict, started: str) -> int:
    """Run the experiment and write the measurement (and, unless --measure-only, the verdict)."""
    t0 = time.time()
    metrics, verdict = run(params, args.scale, args.out)
    measured = write_measurement(args.out, claim=claim, scale=args.scale, metrics=metrics, config=params,
                                 fingerprint=fingerprint(args.hardware),
                                 artifacts=getattr(module, "ARTIFACTS", ()),  # the claim's other files
                                 keys=keys, context={k: verdict[k] for k in JUDGE_CONTEXT if k in verdict},
                                 inputs=given, started=started)
    if args.measure_only:
        log.info("%s: measured in %.1f s (%d rows); the verdict is the claim_verdict job's", claim,
                 time.time() - t0, measured["integrity"]["metrics.csv"]["rows"])
        return 0
    write_verdict(args.out, verdict, measured, runtime_s=measured["runtime_s"])
    log.info("%s: %s (%s) in %.1f s", claim, verdict["verdict"], verdict["reason"][:300], time.time() - t0)
    return 0


JUDGE_CONTEXT = ("load",)  # what a judge reads beyond the rows and parameters (kept in measured.json)


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _part(text: str) -> tuple[int, int]:
    """``"I-of-N"`` -> (I, N) with 0 <= I < N."""
    try:
        i, n = (int(x) for x in text.split("-of-"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected I-of-N (e.g. 0-of-7), got {text!r}") from None
    if not 0 <= i < n:
        raise argparse.ArgumentTypeError(f"{text!r}: need 0 <= I < N")
    return i, n


def rejudge(claim: str, out: Path, scale: str, judge_key: str | None = None) -> dict:
    """Judge stored measurements with the current rule (the workflow's claim_verdict job, or by hand after a change
    to a judge). The measurement's parameters come from its config.json; keys the current rule needs and the old
    run did not record (new thresholds) come from the current config/claims/<claim>.yaml at that scale.
    metrics.csv, fingerprint.json and measured.json are kept as they are; verdict.json records the measurement's
    commit and time and the judging's (``provenance``), and ``rejudged`` when it replaces an earlier judgement of
    the same measurement. Results from before measured.json existed are re-judged from their verdict.json."""
    out = Path(out)
    verdict, measured, stored = judge_stored(claim, out, scale)
    old = json.loads((out / "verdict.json").read_text()) if (out / "verdict.json").is_file() else None
    if judge_key is None:
        judge_key = provenance.claim_keys(claim, stored["config"])["judge"]
    context = {k: v for k, v in (measured.get("context") or {}).items() if k in JUDGE_CONTEXT}
    extra = {"runtime_s": measured.get("runtime_s"), **context}
    if old is not None and old.get("timestamp") == measured.get("started"):  # a new judgement of the same run
        extra["rejudged"] = {"commit": provenance_commit(), "timestamp": now(),
                             "previous_verdict": old.get("verdict")}
    verdict = write_verdict(out, verdict, measured, judge_key=judge_key, **extra)
    log.info("%s: judged %s (%s)%s", claim, verdict["verdict"], verdict["reason"][:300],
             f"; was {old.get('verdict')}" if old else "")
    return verdict


def judge_stored(claim: str, out: Path, scale: str) -> tuple[dict, dict, dict]:
    """(the checkout's judgement, the measurement record, config.json) of the measurement stored in ``out``;
    nothing is written. The parameters are config.json's, with keys the current judge needs and the old run did
    not record (new thresholds) from config/claims/<claim>.yaml at that scale."""
    out = Path(out)
    for name in ("metrics.csv", "config.json", "fingerprint.json"):
        if not (out / name).is_file():
            raise SystemExit(f"--rejudge: {out / name} is missing: run the claim first")
    stored = json.loads((out / "config.json").read_text())
    if stored.get("claim") != claim or stored.get("scale") != scale:
        raise SystemExit(f"--rejudge: {out}/config.json is for {stored.get('claim')} at {stored.get('scale')}, "
                         f"not {claim} at {scale}")
    params = config.deep_merge(config.section(claim, scale), stored["config"])
    frame = read_metrics(out)
    rows = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
            for r in frame.to_dict("records")]
    old = json.loads((out / "verdict.json").read_text()) if (out / "verdict.json").is_file() else None
    if (out / "measured.json").is_file():
        measured = json.loads((out / "measured.json").read_text())
    elif old is not None:  # measured before measured.json: its verdict.json holds the measurement's record
        measured = {"claim": claim, "scale": scale, "hardware": old.get("hardware"), "commit": old.get("commit"),
                    "dirty": None, "started": old.get("timestamp"), "finished": None, "keys": {}, "inputs": {},
                    "context": {k: old[k] for k in JUDGE_CONTEXT if k in old}, "integrity": old.get("integrity"),
                    "runtime_s": old.get("runtime_s")}
    else:
        raise SystemExit(f"--rejudge: {out / 'measured.json'} is missing: run the claim first")
    module = importlib.import_module(f"repro.claims.{claim}")
    context = {k: v for k, v in (measured.get("context") or {}).items() if k in JUDGE_CONTEXT}
    return module.judge(rows, params, scale, **context), measured, stored


def provenance_commit() -> str | None:
    return provenance.git_commit()["commit"]
