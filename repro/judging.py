"""Judging stored measurements: the one path from a claim's rows to its verdict.json (docs/verdicts.md).

``judge_stored`` reads a measurement (metrics.csv, config.json, fingerprint.json, measured.json), imports the claim's
judge (``repro.judges.<id>``, by name: no measurement imports its judge) and calls it with one signature,
``judge(rows, thresholds, context)``: ``thresholds`` are the CURRENT ``judge:`` part of config/claims/<id>.yaml (or
what the workflow passes, overrides applied), never values stored with the measurement; ``context`` is
:func:`judge_context`. ``rejudge`` writes verdict.json with the thresholds used.

    python -m repro.judging --claim <id> --scale S --out DIR [--thresholds JSON] [--keys JSON]

is the workflow's claim_verdict job (and ``--rejudge`` of a claim's command line, repro.claims._cli, is the same).
It imports neither torch nor any measurement module: a judge meets the measurement only in its result files
(tests/test_judges_light.py), so the versions and thread counts a verdict names are the ones fingerprint.json
recorded, never the judging process's. The translation benchmark (repro.train.evaluate) and the tests use it too.
Judge-side (repro.provenance.JUDGE_SIDE).
"""
from __future__ import annotations

import argparse
import importlib
import json
import logging
import math
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from repro import config, plan, provenance, registry
from repro.cli import load_json_option, setup_logging
from repro.errors import ConfigError
from repro.io import read_metrics, write_verdict

log = logging.getLogger("repro")


def load_thresholds(parser, claim: str, scale: str, text: str | None) -> dict:
    """The judge's thresholds: ``--thresholds`` JSON (what the workflow passes, overrides applied) checked against
    the schema's ``judge`` part, or the ``judge:`` part of config/claims/<claim>.yaml at ``scale``."""
    return load_json_option(parser, "--thresholds", text, lambda t: config.validate_thresholds(claim, scale, t),
                            lambda: config.thresholds(claim, scale))


def add_thresholds_argument(parser: argparse.ArgumentParser) -> None:
    """``--thresholds JSON`` (read by :func:`load_thresholds`): this command line's and the claims'."""
    parser.add_argument("--thresholds", default=None, metavar="JSON",
                        help="the judge's thresholds (the judge: part of config/claims/<claim>.yaml at --scale, "
                             "which is the default; what the workflow passes, overrides applied)")


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def rejudge(claim: str, out: Path, scale: str, thresholds: dict | None = None, judge_key: str | None = None) -> dict:
    """Judge a stored measurement with the current judge and ``thresholds`` (default: the ``judge:`` part of
    config/claims/<claim>.yaml at that scale): the workflow's claim_verdict job, or by hand after changing a judge or
    a threshold. The measurement's parameters come from its config.json (they describe what was measured).
    metrics.csv, fingerprint.json and measured.json are kept as they are; verdict.json records the thresholds used,
    the measurement's commit and time and the judging's (``provenance``), and ``rejudged`` when it replaces an
    earlier judgement of the same measurement."""
    out = Path(out)
    thresholds = config.thresholds(claim, scale) if thresholds is None else thresholds
    verdict, measured, stored = judge_stored(claim, out, scale, thresholds)
    old = json.loads((out / "verdict.json").read_text()) if (out / "verdict.json").is_file() else None
    if judge_key is None and claim == "translation":  # the translation benchmark: a shared artefact's job
        judge_key = provenance.artefact_keys("translation_evaluate", stored["config"], thresholds)["judge"]
    elif judge_key is None:
        needs = tuple((measured.get("keys") or {}).get("needs") or ())
        judge_key = provenance.claim_keys(claim, stored["config"], needs, thresholds)["judge"]
    extra = {"runtime_s": measured.get("runtime_s"), "thresholds": thresholds,
             **plan_record(claim, scale, measured, stored, thresholds)}
    if old is not None and old.get("timestamp") == measured.get("started"):  # a new judgement of the same run
        extra["rejudged"] = {"commit": provenance_commit(), "timestamp": now(),
                             "previous_verdict": old.get("verdict")}
    verdict = write_verdict(out, verdict, measured, judge_key=judge_key, **extra)
    log.info("%s: judged %s (%s)%s", claim, verdict["verdict"], verdict["reason"][:300],
             f"; was {old.get('verdict')}" if old else "")
    return verdict


def plan_record(claim: str, scale: str, measured: dict, stored: dict, thresholds: dict) -> dict:
    """What verdict.json records of the plan: the checkout's ``plan_key`` (its plan block, the measurement's
    parameters as their recorded config key, these thresholds), the ``plan`` block, and ``plan_measured_key``, the key
    measured.json recorded (None: measured before plans; another key: the thresholds or the plan changed after
    measuring)."""
    params = {k: v for k, v in stored["config"].items() if k != config.JUDGE}
    config_key = (measured.get("keys") or {}).get("config") or provenance.config_key(params)
    return {**plan.record(plan.block(claim, scale), config_key, thresholds),
            "plan_measured_key": measured.get("plan_key")}


def judge_context(scale: str, params: dict, measured: dict, fingerprint: dict | None = None) -> dict:
    """What a judge receives beside the rows and thresholds: the scale, the measured parameters (config.json), the
    hardware id, the device the measurement ran on (None when it did not record one), everything else the
    measurement recorded in measured.json's ``context`` (e.g. the machine's ``load``), and from its fingerprint.json
    the ``software`` it ran with ({package: version}; {} when none is recorded) and ``torch_threads`` (None for a
    result measured before it was recorded), and the ``plan`` it was measured under (measured.json's; None before
    plans): its planned looks are part of the design the numbers were measured for, so a judge applies them only to
    a measurement made under them."""
    recorded, fingerprint = dict(measured.get("context") or {}), fingerprint or {}
    return {**recorded, "scale": scale, "params": params, "hardware": measured.get("hardware"),
            "device": recorded.get("device"), "software": dict(fingerprint.get("software") or {}),
            "torch_threads": fingerprint.get("torch_threads"), "plan": measured.get("plan")}


def load_judge(claim: str) -> Callable:
    """``repro.judges.<claim>.judge`` (imported by name: a measurement never imports its judge)."""
    return importlib.import_module(provenance.judge_module(claim)).judge


def judge_rows(claim: str, rows: list[dict], *, scale: str = "default", params: dict | None = None,
               thresholds: dict | None = None, **context) -> dict:
    """The claim's judge on ``rows`` (tests, notebooks): ``params`` default to config/claims/<claim>.yaml at
    ``scale`` (what the rows were measured with), ``thresholds`` to its ``judge:`` part, and ``context`` adds what a
    measurement records (device, hardware, load, ...) and its fingerprint.json (``software``, ``torch_threads``:
    :func:`judge_context`; ``plan``: the plan they were measured under, default none). The rows' published values
    are read from the registry (repro.registry.with_published), as :func:`judge_stored` reads them through
    repro.io.read_metrics."""
    params = config.section(claim, scale) if params is None else params
    thresholds = config.thresholds(claim, scale) if thresholds is None else thresholds
    ctx = {"device": None, "hardware": None, "software": {}, "torch_threads": None, "plan": None, **context,
           "scale": scale, "params": params}
    return load_judge(claim)(registry.with_published(rows), dict(thresholds), ctx)  # rows carry the key only


def run_and_judge(claim: str, run: Callable, params: dict, scale: str, out, thresholds: dict | None = None,
                  **context) -> tuple[list[dict], dict]:
    """Measure with ``run`` and judge the rows in one process (tests, notebooks): (rows, verdict). Nothing is
    written beyond what ``run`` writes; the software and torch threads are this process's (it measured), as
    fingerprint.json would record them."""
    rows, recorded = run(params, scale, out)
    torch = sys.modules.get("torch")  # loaded by the measurement, if at all: judging never imports it
    here = {"software": provenance.software(), "torch_threads": torch.get_num_threads() if torch else None}
    return rows, judge_rows(claim, rows, scale=scale, params=params, thresholds=thresholds,
                            **{**here, **recorded, **context})


def judge_stored(claim: str, out: Path, scale: str, thresholds: dict | None = None) -> tuple[dict, dict, dict]:
    """(the checkout's judgement with ``thresholds``, the measurement record, config.json) of the measurement
    stored in ``out``; nothing is written."""
    out = Path(out)
    for name in ("metrics.csv", "config.json", "fingerprint.json"):
        if not (out / name).is_file():
            raise SystemExit(f"--rejudge: {out / name} is missing: run the claim first")
    stored = json.loads((out / "config.json").read_text())
    if stored.get("claim") != claim or stored.get("scale") != scale:
        raise SystemExit(f"--rejudge: {out}/config.json is for {stored.get('claim')} at {stored.get('scale')}, "
                         f"not {claim} at {scale}")
    frame = read_metrics(out)
    rows = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
            for r in frame.to_dict("records")]
    old = json.loads((out / "verdict.json").read_text()) if (out / "verdict.json").is_file() else None
    if (out / "measured.json").is_file():
        measured = json.loads((out / "measured.json").read_text())
    elif old is not None:  # measured before measured.json: its verdict.json holds the measurement's record
        measured = {"claim": claim, "scale": scale, "hardware": old.get("hardware"), "commit": old.get("commit"),
                    "dirty": None, "started": old.get("timestamp"), "finished": None, "keys": {}, "inputs": {},
                    "context": {k: old[k] for k in ("load", "device") if k in old}, "integrity": old.get("integrity"),
                    "runtime_s": old.get("runtime_s")}
    else:
        raise SystemExit(f"--rejudge: {out / 'measured.json'} is missing: run the claim first")
    thresholds = config.thresholds(claim, scale) if thresholds is None else thresholds
    params = {k: v for k, v in stored["config"].items() if k != config.JUDGE}
    fingerprint = json.loads((out / "fingerprint.json").read_text())
    verdict = load_judge(claim)(rows, dict(thresholds), judge_context(scale, params, measured, fingerprint))
    return verdict, measured, stored


def provenance_commit() -> str | None:
    return provenance.git_commit()["commit"]


def main(argv=None) -> int:
    """``python -m repro.judging``: judge one stored measurement with the checkout's judge (:func:`rejudge`)."""
    parser = argparse.ArgumentParser(
        prog="python -m repro.judging",
        description="Judge a claim's stored measurement (metrics.csv, config.json, fingerprint.json, measured.json in "
                    "--out) with this checkout's judge (repro/judges/<claim>.py) and the current thresholds, and "
                    "write verdict.json; nothing is measured and neither torch nor the measurement code is imported "
                    "(the workflow's claim_verdict job; the same as python -m repro.claims.<claim> --rejudge).")
    parser.add_argument("--claim", required=True, choices=sorted({*registry.implemented_claims(), "translation"}),
                        help="the claim (or the translation benchmark) whose measurement --out holds")
    parser.add_argument("--scale", required=True, choices=config.SCALES, help="the scale it was measured at")
    parser.add_argument("--out", required=True, type=Path, help="the claim's results folder")
    add_thresholds_argument(parser)
    parser.add_argument("--keys", default=None, metavar="JSON",
                        help="the provenance keys the workflow computed ({\"judge\": ...}: the judge key verdict.json "
                             "records); default: computed here")
    args = parser.parse_args(argv)
    setup_logging()
    keys = load_json_option(parser, "--keys", args.keys, _keys_object, dict)
    thresholds = load_thresholds(parser, args.claim, args.scale, args.thresholds)
    rejudge(args.claim, args.out, args.scale, thresholds, judge_key=keys.get("judge"))
    return 0


def _keys_object(given) -> dict:
    if not isinstance(given, dict):
        raise ConfigError(f"expected a JSON object of provenance keys (e.g. {{\"judge\": ...}}), got {given!r}")
    return given


if __name__ == "__main__":
    raise SystemExit(main())
