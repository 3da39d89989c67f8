"""Results records: long-format metrics.csv, verdict.json, fingerprint.json and config.json per claim.

Layout: ``results/<hardware>/<scale>/<claim>/``. Every file is written atomically (temporary name, then rename)
and verdict.json last, so a folder with a verdict is complete. One metrics row per measured value:
claim, metric, unit, kind (what the row measures: time, memory, ratio_time, quality, ...; repro.bench.kinds),
value, spread, n, the sweep variables (a JSON column ``sweep`` and one column each),
and the published value with its citation where the registry has one.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable, Mapping

from repro import registry
from repro.bench.fingerprint import config_hash, fingerprint as make_fingerprint
from repro.bench.stats import (both, decide_interval, decide_within, sample_interval,  # noqa: F401 (re-exported)
                               t_interval)
from repro.bench.kinds import resolve_kind, stored_kind
from repro.errors import ResultsError

VERDICTS = ("reproduced", "partially", "not_reproduced", "inconclusive", "not_applicable", "not_implemented")
METRIC_COLUMNS = ["claim", "metric", "unit", "kind", "value", "spread", "n", "sweep", "published_key", "published_value",
                  "published_unit", "source", "hardware", "scale"]


def umask_mode(base: int = 0o666) -> int:
    """``base`` with the process umask applied: the mode ``open()`` would give a new file (``mkstemp`` gives 0600,
    which colleagues on a shared filesystem cannot read)."""
    mask = os.umask(0)
    os.umask(mask)
    return base & ~mask


def atomic_temp(path: Path) -> str:
    """A temporary file beside ``path`` (same filesystem, so ``os.replace`` is atomic) with umask permissions."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    os.chmod(tmp, umask_mode())
    return tmp


def remove_stale_temps(folder: str | Path) -> list[Path]:
    """Delete the hidden ``.<name>.*.tmp`` files that a killed writer left in ``folder`` (and below). Call it
    where one process owns the folder (a claim's results, a training state), before writing."""
    folder = Path(folder)
    gone = [p for p in folder.rglob(".*.tmp") if p.is_file()] if folder.is_dir() else []
    for p in gone:
        p.unlink(missing_ok=True)
    return gone


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to a temporary file, fsync, then rename: a kill leaves the old file or the new one, never
    half of one (the temporary file is hidden, ``.<name>.*.tmp``)."""
    path = Path(path)
    tmp = atomic_temp(path)
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n")


def _json_default(o):
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, (set, tuple)):
        return list(o)
    return str(o)


def metric(claim: str, name: str, value, unit: str = "", *, kind: str | None = None, spread=None, n: int | None = None,
           published_key: str | None = None, published_index: int | None = None, sweep: Mapping | None = None,
           **variables) -> dict:
    """One metrics row. The sweep variables (layer=3, seed=..., norm="rmsnorm", ...) come as keywords, or in
    ``sweep`` for a variable whose name is one of this function's parameters (``sweep={"kind": "enc"}``).

    ``kind`` says what the row measures (repro.bench.kinds.KINDS); it is inferred from the unit where the unit
    says it (s -> time, MiB -> memory, tokens/s -> rate, BLEU -> quality) and must be given for a dimensionless
    unit (ratio, x, percent, fraction): ``ratio_time`` / ``ratio_memory`` for speed-ups and memory ratios, else
    ``statistic``, ``quality`` or ``count``. ``published_key`` names the registry value this row is compared with
    (``published_index`` picks one element of a list-valued entry)."""

    value = None if value is None else float(value)
    row = {"claim": claim, "metric": name, "unit": unit, "kind": resolve_kind(name, unit, kind), "value": value,
           "spread": None if spread is None else float(spread), "n": n, "sweep": {**(sweep or {}), **variables}}
    if published_key:
        pub = registry.published(claim, published_key)
        value_pub = pub.get("value")
        if published_index is not None and isinstance(value_pub, list):
            value_pub = value_pub[published_index]
        row.update(published_key=published_key, published_value=value_pub,
                   published_unit=pub.get("unit"), source=pub.get("citation"))
    return row


def verdict(claim: str, status: str, reason: str, *, checks: list[dict] | None = None, **extra) -> dict:
    if status not in VERDICTS:
        raise ValueError(f"verdict: {status!r} is not one of {VERDICTS}")
    return {"claim": claim, "verdict": status, "reason": reason, "checks": checks or [], **extra}


def check(name: str, passed: bool | None, measured: str, expected: str, *, headline: bool = False,
          interval: str | None = None, undecided_because: str | None = None) -> dict:
    """One verdict criterion: what was measured, what the paper says, and whether it holds.

    ``headline``: the claim's main statement (see ``verdict_from_checks``). ``interval``: the uncertainty that
    decided it (seeds' spread, bootstrap interval), in words. ``passed=None`` means the run could not decide the
    check; ``undecided_because`` says why (the control did not learn, the spread is too wide, a CPU stand-in...)."""
    if passed is None and not undecided_because:
        undecided_because = "not decided by this run"
    return {"name": name, "passed": None if passed is None else bool(passed), "measured": measured,
            "expected": expected, "headline": bool(headline), "interval": interval,
            "undecided_because": None if passed is not None else undecided_because}


def gate(name: str, passed: bool, measured: str, required: str) -> dict:
    """A precondition of the checks on a trained model (e.g. "the control model learned"): when it fails, the
    checks that rest on it are undecided (the run could not decide them), never held or failed."""
    return {"name": name, "passed": bool(passed), "measured": measured, "required": required}


def gated(c: dict, gates: list[dict]) -> dict:
    """``c`` undecided when any of ``gates`` failed (the measured text is kept, the reason names the gate)."""
    failed = [g for g in gates if not g["passed"]]
    if not failed or c["passed"] is None:
        return c
    because = "; ".join(f"gate '{g['name']}' failed: {g['measured']} (required {g['required']})" for g in failed)
    return {**c, "passed": None, "undecided_because": because}


def _check_text(c: dict) -> str:
    tail = ("" if c["passed"] else " [fails]") if c["passed"] is not None else " [undecided]"
    return f"{c['name']}: {c['measured']} (paper: {c['expected']}){tail}"


def verdict_from_checks(claim: str, checks: list[dict], scale: str, *, gates: list[dict] | None = None,
                        setup: list[dict] | None = None, meaning: str | None = None, **extra) -> dict:
    """The verdict contract (docs/verdicts.md).

    Every claim marks its headline check(s) (``headline=True``); the others are secondary.
    - ``reproduced``: every headline holds and every decided secondary holds;
    - ``partially``: every headline holds, a secondary fails;
    - ``not_reproduced``: a decided headline fails;
    - ``inconclusive``: no headline fails but one could not be decided (control did not learn, spread too wide,
      CPU stand-in for a GPU measurement); the reason says why;
    - ``not_applicable``: tiny scale (plumbing only), or nothing this hardware can measure.
    ``gates`` (``gate(...)``) are stated on the page; checks resting on a failed gate are made undecided by the
    claim (``gated``). ``setup`` rows (aspect / paper / this_run) and ``meaning`` go to the page.
    """
    heads = [c for c in checks if c.get("headline")]
    meaning = meaning or _meaning(heads, scale)
    extra = {**extra, "gates": list(gates or []), "setup": list(setup or []),
             "meaning": meaning}
    decided = [c for c in checks if c["passed"] is not None]
    failed = [c for c in decided if not c["passed"]]
    failed_heads = [c for c in heads if c["passed"] is False]
    undecided_heads = [c for c in heads if c["passed"] is None]
    if scale == "tiny":
        return verdict(claim, "not_applicable", "tiny scale checks plumbing only; no verdict is claimed. "
                       + "; ".join(_check_text(c) for c in heads[:3]), checks=checks, **extra)
    if not checks or (not decided and all((c.get("undecided_because") or "").startswith("not applicable")
                                          for c in checks)):
        return verdict(claim, "not_applicable", "no check can be measured on this hardware/scale"
                       + (": " + checks[0]["undecided_because"] if checks else ""), checks=checks, **extra)
    n_pass = len(decided) - len(failed)
    counts = f"{n_pass}/{len(decided)} decided checks hold ({len(checks) - len(decided)} undecided)"
    if failed_heads:
        status, shown = "not_reproduced", failed_heads + [c for c in failed if c not in failed_heads]
        lead = f"headline fails; {counts}. "
    elif not heads:  # the run was too small to make the headline check at all (e.g. a 1-layer stack)
        return verdict(claim, "inconclusive", f"no headline check could be made by this run; {counts}",
                       checks=checks, **extra)
    elif undecided_heads:
        status, shown = "inconclusive", undecided_heads
        lead = f"headline undecided; {counts}. "
        shown_text = "; ".join(f"{c['name']}: {c['undecided_because']}" for c in shown[:4])
        return verdict(claim, status, lead + shown_text, checks=checks, **extra)
    elif failed:
        status, shown = "partially", failed
        lead = f"headline holds, a secondary check fails; {counts}. Failing: "
    else:
        status, shown = "reproduced", heads
        lead = f"{counts}; headline: "
    summary = "; ".join(_check_text(c) for c in shown[:5])
    if len(shown) > 5:
        summary += f"; ... and {len(shown) - 5} more (see checks)"
    return verdict(claim, status, lead + summary, checks=checks, **extra)


def _meaning(heads: list[dict], scale: str) -> str:
    """The page's "What this verdict means" line (the contract, with this claim's headline named)."""
    names = " and ".join(f"'{c['name']}'" for c in heads) or "its headline"
    return (f"At the {scale} scale, with the setup above: reproduced = {names} and every decided secondary check "
            f"held; partially = {names} held, a secondary check failed; not_reproduced = {names} failed with the "
            f"interval shown; inconclusive = this run could not decide {names} (the reason says why). A verdict "
            f"here is about this setup, not the paper's scale.")


def setup_table(claim: str, this_run: Mapping[str, str]) -> list[dict]:
    """The page's "Setup beside the paper" rows: the paper's setup from the registry (``paper_setup`` of the
    claim: model, data, steps, seeds, precision, hardware, ...) beside this run's (``this_run``, built by the claim
    from its config). An aspect known on one side only shows "not stated" on the other."""
    paper = registry.claim(claim).get("paper_setup") or {}
    aspects = list(paper) + [a for a in this_run if a not in paper]
    return [{"aspect": a, "paper": str(paper.get(a, "not stated")), "this_run": str(this_run.get(a, "not stated"))}
            for a in aspects]


def _finite(x):
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x


def write_results(out_dir: str | Path, *, claim: str, scale: str, metrics: Iterable[Mapping], verdict: Mapping,
                  config: Mapping, fingerprint: Mapping | None = None, artifacts: Iterable[str] = ()) -> Path:
    """Write metrics.csv, config.json, fingerprint.json and (last) verdict.json into ``out_dir``.

    ``artifacts``: the claim's other result files in ``out_dir`` (relative paths or glob patterns, e.g.
    ``curves/*.csv``: the claim module's ``ARTIFACTS``). Each file is recorded with its sha256 in verdict.json's
    ``integrity`` beside metrics.csv: that record lists every file of the folder the report may read
    (:func:`declared_files`, :func:`artifact_path`). A pattern that matches nothing raises ResultsError."""
    import pandas as pd  # lazy: keep `import repro.bench.records` light (the workflow and reports import it)

    out = Path(out_dir)
    # verdict.json marks a complete folder: drop the old one first, so a run killed while writing leaves no
    # verdict beside new metrics (and the integrity record below catches any other mismatch)
    (out / "verdict.json").unlink(missing_ok=True)
    fp = dict(fingerprint or make_fingerprint())
    fp["config_hash"] = config_hash(config)
    fp["scale"], fp["claim"] = scale, claim
    rows = []
    for m in metrics:
        row = {c: m.get(c) for c in METRIC_COLUMNS}
        sweep = dict(m.get("sweep") or {})
        row["sweep"] = json.dumps(sweep, sort_keys=True, default=_json_default)
        row["hardware"], row["scale"] = fp["hardware_id"], scale
        row["value"] = _finite(row["value"])
        row["kind"] = stored_kind(row["metric"], row["unit"], row["kind"])
        for k, v in sweep.items():
            row[f"sweep.{k}"] = v
        rows.append(row)
    frame = pd.DataFrame(rows, columns=None if rows else METRIC_COLUMNS)
    csv_text = frame.to_csv(index=False)
    atomic_write_text(out / "metrics.csv", csv_text)
    atomic_write_json(out / "config.json", {"claim": claim, "scale": scale, "config": config})
    atomic_write_json(out / "fingerprint.json", fp)
    integrity = {"metrics.csv": _integrity(csv_text.encode("utf-8"), len(frame)),  # checked by the report
                 **declare_artifacts(out, artifacts)}
    atomic_write_json(out / "verdict.json", {**verdict, "scale": scale, "hardware": fp["hardware_id"],
                                             "commit": fp["git"]["commit"], "timestamp": fp["timestamp"],
                                             "integrity": integrity})
    return out


def _integrity(data: bytes, rows: int) -> dict:
    return {"rows": int(rows), "sha256": hashlib.sha256(data).hexdigest()}


def declare_artifacts(out_dir: str | Path, patterns: Iterable[str]) -> dict:
    """verdict.json ``integrity`` entries (relative path -> bytes, sha256) of the files in ``out_dir`` matching
    ``patterns``; a pattern matching no file raises ResultsError naming it."""
    import hashlib

    out = Path(out_dir)
    entries = {}
    for pattern in patterns:
        found = sorted(p for p in out.glob(pattern) if p.is_file() and not p.name.startswith("."))
        if not found:
            raise ResultsError(f"{out / pattern}: declared as a result file of {out} but no such file was written")
        for p in found:
            data = p.read_bytes()
            entries[p.relative_to(out).as_posix()] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    return entries


CORE_FILES = ("metrics.csv", "verdict.json", "config.json", "fingerprint.json")


def declared_files(verdict: Mapping) -> list[str]:
    """The result files a claim declared beside the core files (write_results ``artifacts``), from its verdict."""
    return [name for name in (verdict.get("integrity") or {}) if name not in CORE_FILES]


def artifact_path(folder: str | Path, name: str, verdict: Mapping | None = None) -> Path:
    """The path of the declared result file ``name`` of a claim's results ``folder``, checked against the sha256
    its verdict.json records. A file the claim did not declare, a missing or a changed one raises ResultsError
    naming it: the report reads declared files only."""
    import hashlib

    folder = Path(folder)
    verdict = read_verdict(folder) if verdict is None else verdict
    rec = (verdict.get("integrity") or {}).get(name)
    if rec is None or name in CORE_FILES:
        raise ResultsError(f"{folder / name}: not a declared result file of {folder} (declared: "
                           f"{', '.join(declared_files(verdict)) or 'none'}); the claim lists its files in ARTIFACTS")
    path = folder / name
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ResultsError(f"{path}: missing (declared in {folder / 'verdict.json'}); rerun the claim") from None
    if hashlib.sha256(data).hexdigest() != rec["sha256"]:
        raise ResultsError(f"{path}: damaged or changed since the run: content does not match the sha256 recorded "
                           f"in verdict.json; rerun the claim")
    return path


def read_json(path: str | Path) -> dict:
    """A results JSON file (verdict.json, fingerprint.json, ...); a missing or damaged file raises ResultsError
    naming it."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ResultsError(f"{path}: missing (rerun the claim)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{path}: damaged, not valid JSON ({exc}); rerun the claim") from None
    if not isinstance(data, dict):
        raise ResultsError(f"{path}: damaged, expected a JSON object, got {type(data).__name__}; rerun the claim")
    return data


def read_verdict(path: str | Path) -> dict:
    """verdict.json (or the folder holding it), checked for the keys every page needs."""
    path = Path(path)
    path = path / "verdict.json" if path.is_dir() else path
    v = read_json(path)
    missing = [k for k in ("verdict", "reason") if k not in v]
    if missing:
        raise ResultsError(f"{path}: damaged, no {missing[0]!r} entry; rerun the claim")
    return v


def check_integrity(path: str | Path, verdict: Mapping | None = None) -> None:
    """Compare metrics.csv with the row count and sha256 its verdict.json recorded (results written before the
    record existed are not checked). Raises ResultsError naming the file on a mismatch, e.g. a truncated file."""
    path = Path(path)
    csv_path = path / "metrics.csv" if path.is_dir() else path
    if verdict is None:
        vpath = csv_path.parent / "verdict.json"
        if not vpath.exists():
            return
        verdict = read_json(vpath)
    rec = (verdict.get("integrity") or {}).get("metrics.csv")
    if not rec:
        return
    try:
        data = csv_path.read_bytes()
    except FileNotFoundError:
        raise ResultsError(f"{csv_path}: missing (its verdict.json records {rec['rows']} rows); rerun the claim") \
            from None
    if hashlib.sha256(data).hexdigest() != rec["sha256"]:
        raise ResultsError(f"{csv_path}: damaged or changed since the run: content does not match the sha256 "
                           f"recorded in verdict.json ({rec['rows']} rows recorded); rerun the claim")


REQUIRED_COLUMNS = ("claim", "metric", "value", "sweep")


def _missing_columns(csv_path: Path, columns) -> None:
    missing = [c for c in REQUIRED_COLUMNS if c not in columns]
    if missing:
        raise ResultsError(f"{csv_path}: damaged, no {missing[0]!r} column (has: {', '.join(map(str, columns))})"
                           "; rerun the claim")


def check_results(folder: str | Path) -> dict:
    """A quick check of a claim's results folder before a workflow runs: verdict.json readable, metrics.csv
    matching its integrity record (older results without one: a readable header). Returns the verdict."""
    folder = Path(folder)
    v = read_verdict(folder / "verdict.json")
    csv_path = folder / "metrics.csv"
    if (v.get("integrity") or {}).get("metrics.csv"):
        check_integrity(csv_path, v)
        return v
    try:
        with open(csv_path, encoding="utf-8") as fh:
            header = fh.readline().strip()
    except FileNotFoundError:
        raise ResultsError(f"{csv_path}: missing (rerun the claim)") from None
    except UnicodeDecodeError as exc:
        raise ResultsError(f"{csv_path}: damaged, not text ({exc}); rerun the claim") from None
    _missing_columns(csv_path, header.split(",") if header else [])
    return v


def read_metrics(path: str | Path, verify: bool = True):
    """Load a metrics.csv (or a folder holding one) with the sweep column parsed back into dicts. With ``verify``
    the file is first checked against its verdict.json integrity record. Damage raises ResultsError naming the
    file."""
    import pandas as pd  # lazy: keep `import repro.bench.records` light (the workflow and reports import it)

    path = Path(path)
    csv_path = path / "metrics.csv" if path.is_dir() else path
    if verify:
        check_integrity(csv_path)
    try:
        frame = pd.read_csv(csv_path)
    except FileNotFoundError:
        raise ResultsError(f"{csv_path}: missing (rerun the claim)") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{csv_path}: damaged, not a readable CSV ({exc}); rerun the claim") from None
    _missing_columns(csv_path, list(frame.columns))

    def sweep(s):
        if not isinstance(s, str):
            return {}
        try:
            return json.loads(s)
        except json.JSONDecodeError:
            raise ResultsError(f"{csv_path}: damaged sweep value {s[:60]!r}; rerun the claim") from None

    frame["sweep"] = frame["sweep"].map(sweep)

    kinds = frame["kind"] if "kind" in frame else [None] * len(frame)  # files from before the kind column
    unit = frame["unit"] if "unit" in frame else [""] * len(frame)
    frame["kind"] = [stored_kind(m, u, k) for m, u, k in zip(frame["metric"], unit, kinds)]
    return frame
