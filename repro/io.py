"""Results records: long-format metrics.csv, config.json, fingerprint.json, measured.json and verdict.json per claim.

Layout: ``results/<hardware>/<scale>/<claim>/``. Every file is written atomically (temporary name, then rename);
measured.json closes a measurement (what measured it: commit, time, repro.provenance keys, input hashes, the
integrity record), verdict.json a judgement of it (written last, by the same job or by a re-judging one), so a
folder with a verdict is complete. One metrics row per measured value:
claim, metric, unit, kind (what the row measures: time, memory, ratio_time, quality, ...; repro.kinds),
value, spread, n, the sweep variables (a JSON column ``sweep`` and one column each),
and the key of the registry value the row is compared with (``published_key``, and ``published_index`` for one
element of a list-valued entry): never the published number itself, which :func:`read_metrics` fills from the
registry when the rows are read (repro.registry.with_published), so a corrected paper number reaches every verdict
and page without measuring again.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from filelock import FileLock, Timeout

from repro import registry
from repro.errors import FolderBusy, ResultsError
from repro.kinds import resolve_kind, stored_kind
from repro.layout import CKPT_NAME
from repro.provenance import git_commit

METRIC_COLUMNS = ["claim", "metric", "unit", "kind", "value", "spread", "n", "sweep", "published_key", "published_index",
                  "hardware", "scale"]


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
    atomic_write_text(path, _json_text(obj))


def _json_text(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n"


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

    ``kind`` says what the row measures (repro.kinds.KINDS); it is inferred from the unit where the unit
    says it (s -> time, MiB -> memory, tokens/s -> rate, BLEU -> quality) and must be given for a dimensionless
    unit (ratio, x, percent, fraction): ``ratio_time`` / ``ratio_memory`` for speed-ups and memory ratios, else
    ``statistic``, ``quality`` or ``count``. ``published_key`` names the registry value this row is compared with
    (``published_index`` picks one element of a list-valued entry). The row stores the key only: the value, unit
    and citation are read from the registry when rows are read or judged (repro.registry.with_published)."""

    value = None if value is None else float(value)
    row = {"claim": claim, "metric": name, "unit": unit, "kind": resolve_kind(name, unit, kind), "value": value,
           "spread": None if spread is None else float(spread), "n": n, "sweep": {**(sweep or {}), **variables}}
    if published_key:
        pub = registry.published(claim, published_key)  # a key the registry lacks fails here, when measuring
        if published_index is not None and not (isinstance(pub["value"], list)
                                                and 0 <= published_index < len(pub["value"])):
            raise KeyError(f"claim {claim!r}: published_index {published_index} does not pick an element of "
                           f"{published_key!r} ({pub['value']!r})")
        row.update(published_key=published_key, published_index=published_index)
    return row


def _finite(x):
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x


def start_measurement(out_dir: str | Path) -> None:
    """Before a measurement (or a part of one) changes a claim's folder: remove its verdict.json, then its
    measured.json, so a folder whose measurement is interrupted reads as being re-measured (:func:`remeasuring`),
    never as a finished result whose files have changed (which the workflow refuses as damage)."""
    out = Path(out_dir)
    (out / "verdict.json").unlink(missing_ok=True)
    (out / "measured.json").unlink(missing_ok=True)


def write_measurement(out_dir: str | Path, *, claim: str, scale: str, metrics: Iterable[Mapping], config: Mapping,
                      fingerprint: Mapping, artifacts: Iterable[str] = (), keys: Mapping | None = None,
                      context: Mapping | None = None, inputs: Mapping | None = None,
                      started: str | None = None, plan: Mapping | None = None) -> dict:
    """Write metrics.csv, config.json, fingerprint.json and (last) measured.json into ``out_dir``; returns the
    measurement record (measured.json).

    measured.json says what measured the numbers: the commit (and whether the tree was dirty), when (start and end,
    UTC), the keys of repro.provenance (code, config, software, judge, measure), the sha256 of each input artefact
    file (``inputs``: parameter -> path), the ``context`` the judge needs beyond the rows (e.g. the machine load), and
    the integrity record of every result file: metrics.csv's row count and sha256, and each of the claim's other files
    (``artifacts``: relative paths or glob patterns, e.g. ``curves/*.csv``, the claim module's ``ARTIFACTS``; a pattern
    that matches nothing raises ResultsError). The report reads only the files listed there. ``plan``: the
    confirmatory plan it was measured under (repro.plan.record: ``plan_key`` and the ``plan`` block; both None
    without one)."""
    import pandas as pd  # lazy: pandas costs a second at import, and the Snakefile imports this module

    out = Path(out_dir)
    start_measurement(out)  # the records mark a complete measurement: never beside new metrics
    fp = dict(fingerprint)
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
    integrity = {"metrics.csv": _integrity(csv_text.encode("utf-8"), len(frame))}  # checked by the report
    for name, obj in (("config.json", {"claim": claim, "scale": scale, "config": config}), ("fingerprint.json", fp)):
        text = _json_text(obj)
        atomic_write_text(out / name, text)
        integrity[name] = file_record(text.encode("utf-8"))
    integrity.update(declare_artifacts(out, artifacts))
    record = {"claim": claim, "scale": scale, "hardware": fp["hardware_id"], "commit": fp["git"]["commit"],
              "dirty": fp["git"].get("dirty"), "started": started or fp["timestamp"],
              "finished": _now(), "keys": dict(keys or {}), "inputs": input_hashes(inputs or {}),
              "context": dict(context or {}), "integrity": integrity,
              "plan_key": (plan or {}).get("plan_key"), "plan": (plan or {}).get("plan")}
    record["runtime_s"] = _seconds_between(record["started"], record["finished"])
    atomic_write_json(out / "measured.json", record)
    return record


def write_verdict(out_dir: str | Path, verdict: Mapping, measured: Mapping, judge_key: str | None = None,
                  **extra) -> dict:
    """verdict.json: the judge's verdict on the measurement ``measured`` (measured.json's record), with the
    measurement's commit and time, its integrity record (measured.json's, plus measured.json's own bytes and a record
    of any core file measured before records covered it: :func:`seal_integrity`), and ``provenance``: who measured
    (commit, dirty, start and end, keys) and who judged (commit, dirty, time, judge key)."""
    git = git_commit()
    integrity, sealed = seal_integrity(out_dir, measured.get("integrity"))
    provenance = {"source": "run", "measured": {k: measured.get(k) for k in ("commit", "dirty", "started", "finished",
                                                                             "keys", "inputs")},
                  "judged": {"commit": git["commit"], "dirty": git.get("dirty"), "timestamp": _now(),
                             "judge_key": judge_key or (measured.get("keys") or {}).get("judge")}}
    if sealed:  # recorded now, not when measured: the page says so
        provenance["judged"]["sealed"] = sealed
    record = {**verdict, **extra, "scale": measured["scale"], "hardware": measured["hardware"],
              "commit": measured["commit"], "timestamp": measured["started"], "integrity": integrity,
              "provenance": provenance}
    atomic_write_json(Path(out_dir) / "verdict.json", record)
    return record


def write_results(out_dir: str | Path, *, claim: str, scale: str, metrics: Iterable[Mapping], verdict: Mapping,
                  config: Mapping, fingerprint: Mapping, artifacts: Iterable[str] = (),
                  keys: Mapping | None = None, inputs: Mapping | None = None, started: str | None = None) -> Path:
    """Measurement and verdict in one go (:func:`write_measurement`, then :func:`write_verdict`, last): what a claim
    run by hand, the translation benchmark and the peer benchmarks write."""
    measured = write_measurement(out_dir, claim=claim, scale=scale, metrics=metrics, config=config,
                                 fingerprint=fingerprint, artifacts=artifacts, keys=keys, inputs=inputs,
                                 started=started, context={k: verdict[k] for k in ("load",) if k in verdict})
    write_verdict(out_dir, verdict, measured)
    return Path(out_dir)


def _seconds_between(a: str | None, b: str | None) -> float | None:
    try:
        return round((datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds(), 1)
    except (TypeError, ValueError):
        return None


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def input_hashes(inputs: Mapping) -> dict:
    """{parameter: {path, sha256}} of the input artefacts a claim was given (a folder: its checkpoint or, failing
    that, the sha256 of its files' names, sizes and sha256); files over 4 GiB are recorded by size only."""
    out = {}
    for param, path in inputs.items():
        p = Path(str(path))
        target = p / CKPT_NAME if p.is_dir() and (p / CKPT_NAME).is_file() else p
        if target.is_file():
            size = target.stat().st_size
            digest = file_sha256(target) if size <= 4 * 2**30 else None
            out[param] = {"path": str(p), "file": target.name, "bytes": size, "sha256": digest}
        elif target.is_dir():
            listing = sorted((f.relative_to(target).as_posix(), f.stat().st_size) for f in target.rglob("*")
                             if f.is_file())
            out[param] = {"path": str(p), "listing_sha256": hashlib.sha256(json.dumps(listing).encode()).hexdigest()}
        else:
            out[param] = {"path": str(p), "missing": True}
    return out


def file_sha256(path: str | Path) -> str:
    """sha256 of a file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _integrity(data: bytes, rows: int) -> dict:
    return {"rows": int(rows), "sha256": hashlib.sha256(data).hexdigest()}


def file_record(data: bytes) -> dict:
    """An integrity record of one result file: its size and sha256."""
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def seal_integrity(out_dir: str | Path, integrity: Mapping | None) -> tuple[dict, list[str]]:
    """(the integrity record a verdict.json carries, the core files recorded here rather than when measured):
    measured.json's record (``integrity``) plus measured.json's own bytes (a file cannot hold its own hash), and a
    record of each core file present that the measurement did not record (results measured before their records
    existed: the judging records what it judged). Declared files are the measurement's to name."""
    out = Path(out_dir)
    sealed = dict(integrity or {})
    added = []
    for name in (*MEASURED_FILES, "measured.json"):
        path = out / name
        if name in sealed or not path.is_file():
            continue
        data = path.read_bytes()
        if name == "metrics.csv":
            import pandas as pd  # lazy: pandas costs a second at import, and the Snakefile imports this module

            sealed[name] = _integrity(data, len(pd.read_csv(path, dtype=str)))
        else:
            sealed[name] = file_record(data)
        if name != "measured.json":
            added.append(name)
    return sealed, added


def declare_artifacts(out_dir: str | Path, patterns: Iterable[str]) -> dict:
    """verdict.json ``integrity`` entries (relative path -> bytes, sha256) of the files in ``out_dir`` matching
    ``patterns``; a pattern matching no file raises ResultsError naming it."""
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


CORE_FILES = ("metrics.csv", "verdict.json", "config.json", "fingerprint.json", "measured.json")
MEASURED_FILES = ("metrics.csv", "config.json", "fingerprint.json")  # recorded in measured.json's integrity
# the measuring job's outputs (rule claim): Snakemake removes them to measure again, and a claim's command line
# removes measured.json (and verdict.json) before it measures, so a folder without one is being re-measured
MEASUREMENT_OUTPUTS = ("metrics.csv", "measured.json")


def declared_files(verdict: Mapping) -> list[str]:
    """The result files a claim declared beside the core files (write_results ``artifacts``), from its verdict."""
    return [name for name in (verdict.get("integrity") or {}) if name not in CORE_FILES]


def artifact_path(folder: str | Path, name: str, verdict: Mapping | None = None) -> Path:
    """The path of the declared result file ``name`` of a claim's results ``folder``, checked against the sha256
    its verdict.json records. A file the claim did not declare, a missing or a changed one raises ResultsError
    naming it: the report reads declared files only."""
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


def remeasuring(folder: str | Path) -> list[str]:
    """The measuring job's outputs missing from a claim's results ``folder`` (MEASUREMENT_OUTPUTS): a non-empty
    list means its measurement is being redone (an interrupted re-measurement, a removed output), so whatever its
    old verdict.json records is about to be replaced, not damaged."""
    return [n for n in MEASUREMENT_OUTPUTS if not (Path(folder) / n).is_file()]


def verify_results(folder: str | Path, verdict: Mapping | None = None) -> list[str]:
    """Check every file a claim's verdict.json records (metrics.csv, measured.json, config.json, fingerprint.json,
    the declared files) against its sha256; returns the names checked. A missing or changed file raises
    ResultsError naming it; a verdict without a record checks nothing (returns [], the page says "unverified")."""
    folder = Path(folder)
    verdict = read_verdict(folder) if verdict is None else verdict
    checked = []
    for name, rec in (verdict.get("integrity") or {}).items():
        path = folder / name
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise ResultsError(f"{path}: missing (recorded in {folder / 'verdict.json'}); rerun the claim") from None
        if not isinstance(rec, Mapping) or hashlib.sha256(data).hexdigest() != rec.get("sha256"):
            raise ResultsError(f"{path}: damaged or changed since the run: content does not match the sha256 "
                               f"recorded in verdict.json; rerun the claim")
        checked.append(name)
    return checked


def check_results(folder: str | Path) -> dict | None:
    """A quick check of a claim's results folder before a workflow runs. A folder being re-measured (a measuring
    job's output gone: :func:`remeasuring`) is not checked: the workflow measures and judges it again (None).
    Otherwise verdict.json must be readable and every file it records must match its sha256 (:func:`verify_results`;
    older results without a record: metrics.csv with a readable header). Returns the verdict."""
    folder = Path(folder)
    if remeasuring(folder):
        return None
    v = read_verdict(folder / "verdict.json")
    verify_results(folder, v)
    csv_path = folder / "metrics.csv"
    if (v.get("integrity") or {}).get("metrics.csv"):
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


@contextmanager
def writer_lock(folder: str | Path, name: str = ".lock") -> Iterator[Path]:
    """Hold the one-writer lock of a results ``folder`` (``folder/name``, an OS lock: released when its holder
    exits, however it dies) and record the holder's pid beside it (``<name>.pid``). A second writer fails at once
    with FolderBusy naming the folder and the holder's pid."""
    folder = Path(folder)
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    pid_file = path.with_name(f"{path.name}.pid")
    lock = FileLock(path, blocking=False)
    try:
        lock.acquire()
    except Timeout:
        try:
            holder = pid_file.read_text().strip() or "unknown"
        except OSError:
            holder = "unknown"
        raise FolderBusy(f"{folder}: another process is writing these results (pid {holder}, holding {path}); "
                           f"wait for it to finish or stop it, then rerun") from None
    try:
        atomic_write_text(pid_file, f"{os.getpid()}\n")
        yield path
    finally:
        lock.release()


def read_metrics(path: str | Path, verify: bool = True):
    """Load a metrics.csv (or a folder holding one) with the sweep column parsed back into dicts and each row's
    published value, unit and citation filled from the registry as it is now (repro.registry.with_published: a
    value an older file stored is overridden where its key resolves). With ``verify`` the file is first checked
    against its verdict.json integrity record. Damage raises ResultsError naming the file."""
    import pandas as pd  # lazy: pandas costs a second at import, and the Snakefile imports this module

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
    return registry.with_published(frame)  # the published values as the registry holds them now


def config_hash(config) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:12]
