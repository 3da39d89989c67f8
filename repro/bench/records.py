"""Results records: long-format metrics.csv, verdict.json, fingerprint.json and config.json per claim.

Layout: ``results/<hardware>/<scale>/<claim>/``. Every file is written atomically (temporary name, then rename)
and verdict.json last, so a folder with a verdict is complete. One metrics row per measured value:
claim, metric, unit, value, spread, n, the sweep variables (a JSON column ``sweep`` and one column each),
and the published value with its citation where the registry has one.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable, Mapping

VERDICTS = ("reproduced", "partially", "not_reproduced", "not_applicable", "not_implemented")
METRIC_COLUMNS = ["claim", "metric", "unit", "value", "spread", "n", "sweep", "published_key", "published_value",
                  "published_unit", "source", "hardware", "scale"]


def atomic_write_text(path: str | Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
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


def metric(claim: str, name: str, value, unit: str = "", *, spread=None, n: int | None = None,
           published_key: str | None = None, published_index: int | None = None, **sweep) -> dict:
    """One metrics row. ``sweep`` holds the sweep variables (layer=3, seed=..., norm="rmsnorm", ...).

    ``published_key`` names the registry value this row is compared with (``published_index`` picks one
    element of a list-valued entry)."""
    value = None if value is None else float(value)
    row = {"claim": claim, "metric": name, "unit": unit, "value": value,
           "spread": None if spread is None else float(spread), "n": n, "sweep": sweep}
    if published_key:
        from repro import registry
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


def check(name: str, passed: bool | None, measured: str, expected: str) -> dict:
    """One verdict criterion: what was measured, what the paper says, and whether it holds."""
    return {"name": name, "passed": None if passed is None else bool(passed), "measured": measured, "expected": expected}


def verdict_from_checks(claim: str, checks: list[dict], scale: str, *, partial_ok: bool = True) -> dict:
    """reproduced if every check passes, not_reproduced if none does, partially otherwise.

    At the ``tiny`` scale no verdict is claimed (not_applicable): tiny runs check shapes and plumbing only.
    """
    decided = [c for c in checks if c["passed"] is not None]
    failed = [c for c in decided if not c["passed"]]
    shown = failed if failed else decided[:3]
    summary = "; ".join(f"{c['name']}: {c['measured']} (paper: {c['expected']}){'' if c['passed'] else ' [fails]'}"
                        for c in shown[:6])
    if len(shown) > 6:
        summary += f"; ... and {len(shown) - 6} more (see checks)"
    if scale == "tiny":
        return verdict(claim, "not_applicable", "tiny scale checks plumbing only; no verdict is claimed. " + summary,
                       checks=checks)
    if not decided:
        return verdict(claim, "not_applicable", "no check could be decided on this hardware/scale", checks=checks)
    n_pass = len(decided) - len(failed)
    status = ("reproduced" if not failed else
              "not_reproduced" if n_pass == 0 or not partial_ok else "partially")
    lead = f"{n_pass}/{len(decided)} checks hold" + ("; failing: " if failed else "; e.g. ")
    return verdict(claim, status, lead + summary, checks=checks)


def _finite(x):
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x


def write_results(out_dir: str | Path, *, claim: str, scale: str, metrics: Iterable[Mapping], verdict: Mapping,
                  config: Mapping, fingerprint: Mapping | None = None) -> Path:
    """Write metrics.csv, config.json, fingerprint.json and (last) verdict.json into ``out_dir``."""
    import pandas as pd
    from .fingerprint import config_hash, fingerprint as make_fingerprint

    out = Path(out_dir)
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
        for k, v in sweep.items():
            row[f"sweep.{k}"] = v
        rows.append(row)
    frame = pd.DataFrame(rows, columns=None if rows else METRIC_COLUMNS)
    atomic_write_text(out / "metrics.csv", frame.to_csv(index=False))
    atomic_write_json(out / "config.json", {"claim": claim, "scale": scale, "config": config})
    atomic_write_json(out / "fingerprint.json", fp)
    atomic_write_json(out / "verdict.json", {**verdict, "scale": scale, "hardware": fp["hardware_id"],
                                             "commit": fp["git"]["commit"], "timestamp": fp["timestamp"]})
    return out


def read_metrics(path: str | Path):
    """Load a metrics.csv (or a folder holding one) with the sweep column parsed back into dicts."""
    import pandas as pd

    path = Path(path)
    frame = pd.read_csv(path / "metrics.csv" if path.is_dir() else path)
    frame["sweep"] = frame["sweep"].map(lambda s: json.loads(s) if isinstance(s, str) else {})
    return frame
