"""Claim pages (reports/<hardware>/<scale>/<claim>.md) and the index (reports/<hardware>/<scale>/index.md)."""
from __future__ import annotations

import importlib
import logging
from pathlib import Path

import pandas as pd

from repro import registry
from repro.bench.records import atomic_write_text, read_json, read_metrics, read_verdict

log = logging.getLogger("repro.report")


def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and pd.isna(v)):
        return ""
    if isinstance(v, float):
        if v == int(v) and abs(v) >= 1000:
            return f"{int(v):,}"
        return f"{v:.4g}"
    return str(v)


def _sweep_text(sweep: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sweep.items())


def _table(frame: pd.DataFrame) -> str:
    return frame.to_markdown(index=False, disable_numparse=True) if len(frame) else "_none_"


def _fingerprint_lines(fp: dict) -> list[str]:
    hw, sw = fp.get("hardware", {}), fp.get("software", {})
    acc = hw.get("accelerator")
    acc_text = f"{acc['name']} x{acc.get('count', 1)} ({acc.get('memory_gib')} GiB, CUDA {acc.get('cuda')}, driver {acc.get('driver')})" if acc else "none"
    git = fp.get("git", {})
    return [f"- Hardware id: `{fp.get('hardware_id')}`; CPU: {hw.get('cpu')} ({hw.get('cores')} cores, {hw.get('memory_gib')} GiB); accelerator: {acc_text}",
            "- Software: " + ", ".join(f"{k} {v}" for k, v in sw.items() if v and k != "os"),
            f"- Commit: `{git.get('commit')}`{' (dirty tree)' if git.get('dirty') else ''}; config hash `{fp.get('config_hash')}`; measured {fp.get('timestamp')}"]


def make_plots(claim: str, metrics: pd.DataFrame, results_dir: Path, fig_dir: Path) -> list[tuple[str, str]]:
    fig_dir.mkdir(parents=True, exist_ok=True)
    try:
        module = importlib.import_module(f"repro.report.plots.{claim}")
    except ModuleNotFoundError as exc:
        if exc.name != f"repro.report.plots.{claim}":
            raise
        return []
    return module.plots(metrics, results_dir, fig_dir)


def claim_page(claim: str, results_dir: str | Path, page: str | Path, fig_dir: str | Path) -> Path:
    """Write the claim's page: verdict, checks, measured vs published, figures, fingerprint."""
    results_dir, page, fig_dir = Path(results_dir), Path(page), Path(fig_dir)
    verdict = read_verdict(results_dir / "verdict.json")  # damaged files raise ResultsError naming the file
    fp = read_json(results_dir / "fingerprint.json")
    metrics = read_metrics(results_dir)  # checked against verdict.json's integrity record (row count, sha256)
    info = registry.claim(claim)
    figures = make_plots(claim, metrics, results_dir, fig_dir)
    lines = [f"# {info['code']} {claim}: {info['title']}", "", f"> {info['statement'].strip()}", "",
             "Sources: " + "; ".join(registry.citation(s) for s in info.get("sources", [])), "",
             f"## Verdict: **{verdict['verdict']}** (scale `{verdict.get('scale')}`, hardware `{verdict.get('hardware')}`)",
             "", verdict["reason"], ""]
    if verdict.get("per_implementation"):
        per = pd.DataFrame([{"implementation": k, "verdict": f"**{v['verdict']}**", "reason": v["reason"]}
                            for k, v in verdict["per_implementation"].items()])
        lines += ["## Verdict per implementation", "", _table(per), ""]
    if verdict.get("checks"):
        checks = pd.DataFrame([{"check": c["name"], "measured": c["measured"], "published / expected": c["expected"],
                                "holds": {True: "yes", False: "**no**", None: "n/a"}[c["passed"]]}
                               for c in verdict["checks"]])
        lines += ["## Checks", "", _table(checks), ""]
    pub = metrics[metrics["published_key"].notna()] if "published_key" in metrics else metrics.iloc[:0]
    if len(pub):
        table = pd.DataFrame({"metric": pub["metric"], "setting": pub["sweep"].map(_sweep_text),
                              "measured": pub["value"].map(_fmt), "published": pub["published_value"].map(_fmt),
                              "unit": pub["unit"], "source": pub["source"]})
        lines += ["## Measured beside published", "", _table(table), ""]
    if figures:
        lines += ["## Figures", ""]
        rel = fig_dir.relative_to(page.parent) if fig_dir.is_relative_to(page.parent) else fig_dir
        for name, caption in figures:
            lines += [f"![{caption}]({rel / name})", "", f"*{caption}*", ""]
    lines += ["## Where these numbers come from", "", *_fingerprint_lines(fp),
              f"- Full results: `{results_dir}/metrics.csv` ({len(metrics)} rows), `verdict.json`, `config.json`",
              f"- Runtime: {verdict.get('runtime_s', '?')} s", ""]
    atomic_write_text(page, "\n".join(lines))
    return page


def index_page(results_root: str | Path, reports_root: str | Path, hardware: str, scale: str, out: str | Path) -> Path:
    """Every registered claim with its verdict on this hardware and scale; a claim without results shows
    ``not run`` when it has a workflow (workflows/<id>.smk) and ``not_implemented`` when it has none."""
    from repro.config import ROOT

    res = Path(results_root) / hardware / scale
    rows = []
    for claim in registry.claim_ids():
        info = registry.claim(claim)
        vpath = res / claim / "verdict.json"
        if vpath.exists():
            v = read_verdict(vpath)
            reason = v["reason"].replace("|", "/").replace("\n", " ")
            rows.append({"id": info["code"], "claim": f"[{claim}]({claim}.md)", "title": info["title"],
                         "verdict": f"**{v['verdict']}**", "reason": reason[:400] + ("..." if len(reason) > 400 else ""),
                         "measured": v.get("timestamp", "")})
        elif (ROOT / "workflows" / f"{claim}.smk").exists():
            rows.append({"id": info["code"], "claim": claim, "title": info["title"], "verdict": "not run",
                         "reason": f"no results for this hardware and scale yet: snakemake claim_{claim} "
                                   f"--config scale={scale}", "measured": ""})
        else:
            rows.append({"id": info["code"], "claim": claim, "title": info["title"], "verdict": "not_implemented",
                         "reason": "no workflow yet", "measured": ""})
    frame = pd.DataFrame(rows)
    counts = frame["verdict"].str.strip("*").value_counts().to_dict()
    lines = [f"# Reproduction index: hardware `{hardware}`, scale `{scale}`", "",
             "Verdicts are computed by each claim's rule from its measured numbers (repro/claims/<id>.py).", "",
             "Summary: " + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())), "", _table(frame), ""]
    out = Path(out)
    atomic_write_text(out, "\n".join(lines))
    return out
