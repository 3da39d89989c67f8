"""Claim pages (reports/<hardware>/<scale>/<claim>.md and .html) and the index (reports/<hardware>/<scale>/index.md).

A page is built once as a list of blocks (:func:`claim_blocks`) and rendered twice: markdown for the repository
(:func:`render_markdown`) and a self-contained HTML page with the figures embedded (:func:`render_html`), which
the Snakemake report shows inline. Every verdict.json field of the verdict contract is rendered when present
(old results lack the newer ones): verdict, reason, ``meaning`` ("What this verdict means"), ``checks`` with
``headline``/``interval``/``undecided_because``, ``gates``, ``setup`` ("Setup beside the paper"), ``load``.
"""
from __future__ import annotations

import base64
import html
import importlib
import json
import logging
import os
import re
from pathlib import Path

import pandas as pd

from repro import config, plan, registry
from repro.report import headline, peers, runtime
from repro.report.origin import RUN, WAIVER, origin_of
from repro.io import (CORE_FILES, atomic_write_text, declared_files, read_json, read_metrics, read_verdict,
                      verify_results)
from repro.verdicts import _meaning, look_text

log = logging.getLogger("repro.report")

HOLDS = {True: "yes", False: "**no**", None: "undecided"}


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


def md_cell(text) -> str:
    """A markdown table cell that cannot break its row: pipes escaped, newlines folded."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _table(frame: pd.DataFrame, compact: bool = False) -> str:
    """A markdown table of ``frame`` whose every row has the header's cell count (pipes in cells escaped);
    ``compact``: cells not padded to their column's width (each line as long as its own cells: the index)."""
    if not len(frame):
        return "_none_"
    safe = frame.map(lambda v: md_cell(v) if isinstance(v, str) else v)
    safe.columns = [md_cell(c) for c in frame.columns]
    if compact:
        rows = [list(safe.columns), ["---"] * len(safe.columns)] + [[_fmt(v) for v in r]
                                                                    for r in safe.itertuples(index=False)]
        return "\n".join("| " + " | ".join(str(c) for c in r) + " |" for r in rows)
    return safe.to_markdown(index=False, disable_numparse=True)


def inline_html(text) -> str:
    """HTML of one line of the pages' markdown: ``**bold**``, ```code```, ``[text](link)``; everything escaped."""
    t = html.escape(str(text).replace("\\|", "|"))
    t = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", t)
    t = re.sub(r"`(.+?)`", r"<code>\1</code>", t)
    return re.sub(r"\[([^\]]+)\]\(([^)\s]+)\)", r'<a href="\2">\1</a>', t)


def read_results(results_dir: str | Path) -> tuple[dict, dict, pd.DataFrame]:
    """verdict.json, fingerprint.json and metrics.csv of one claim's results folder (the pages' only reader)."""
    results_dir = Path(results_dir)
    verdict = read_verdict(results_dir / "verdict.json")  # damaged files raise ResultsError naming the file
    verify_results(results_dir, verdict)  # every file verdict.json records, against its sha256
    fp = read_json(results_dir / "fingerprint.json")
    return verdict, fp, read_metrics(results_dir)  # checked against verdict.json's integrity record (rows, sha256)


def _fingerprint_lines(fp: dict) -> list[str]:
    hw, sw = fp.get("hardware", {}), fp.get("software", {})
    acc = hw.get("accelerator")
    acc_text = f"{acc['name']} x{acc.get('count', 1)} ({acc.get('memory_gib')} GiB, CUDA {acc.get('cuda')}, driver {acc.get('driver')})" if acc else "none"
    git = fp.get("git", {})
    return [f"Hardware id: `{fp.get('hardware_id')}`; CPU: {hw.get('cpu')} ({hw.get('cores')} cores, {hw.get('memory_gib')} GiB); accelerator: {acc_text}",
            "Software: " + ", ".join(f"{k} {v}" for k, v in sw.items() if v and k != "os"),
            f"Commit: `{git.get('commit')}`{' (dirty tree)' if git.get('dirty') else ''}; config hash `{fp.get('config_hash')}`; measured {fp.get('timestamp')}"]


def _waiver_lines(results_dir: Path) -> list[str]:
    """The publishing waiver of a reference measured on a modified tree (repro.report.publish), if it has one."""
    f = Path(results_dir) / WAIVER
    if not f.is_file():
        return []
    w = read_json(f)
    return [f"Published with a waiver: measured on a modified tree (commit `{str(w.get('measured_commit'))[:10]}`, "
            f"dirty) whose measurement code (key `{w.get('code_key')}`) is that of the publishing commit "
            f"`{str(w.get('published_at'))[:10]}`. Reason: {w.get('reason')}"]


def make_plots(claim: str, metrics: pd.DataFrame, results_dir: Path, verdict: dict,
               fig_dir: Path) -> list[tuple[str, str]]:
    """The claim's figures (repro.report.plots.<claim>): from metrics.csv and the files the claim declared."""
    from repro.report.plots import ResultFiles, theme  # lazy: it imports matplotlib; the Snakefile imports pages

    fig_dir.mkdir(parents=True, exist_ok=True)
    theme()  # one visual convention for every claim's figures (repro/report/plots/__init__.py)
    try:
        module = importlib.import_module(f"repro.report.plots.{claim}")
    except ModuleNotFoundError as exc:
        if exc.name != f"repro.report.plots.{claim}":
            raise
        return []
    return module.plots(metrics, ResultFiles(results_dir, verdict), fig_dir)


CELL = 140  # characters of prose a checks-table cell shows; the rest is in the list below the table


def _checks_frame(checks: list[dict]) -> pd.DataFrame:
    """The checks table, short cells: check, headline, holds, measured, paper; the full texts, intervals and
    reasons follow as a list (:func:`_check_details`)."""
    rows = []
    for i, c in enumerate(checks, 1):
        row = {"#": str(i), "check": headline.clip(c["name"], 90)}
        if any("headline" in x for x in checks):
            row["headline"] = "**headline**" if c.get("headline") else ""
        row.update({"holds": HOLDS.get(c.get("passed"), str(c.get("passed"))),
                    "measured": headline.clip(str(c.get("measured")), CELL),
                    "paper / expected": headline.clip(str(c.get("expected")), CELL)})
        if any(x.get("thresholds") for x in checks):
            row["thresholds"] = threshold_text(c.get("thresholds"))
        rows.append(row)
    return pd.DataFrame(rows)


def threshold_text(used: dict | None) -> str:
    """``key=value, ...`` of the judge: thresholds a check decided with (config/claims/<id>.yaml)."""
    return ", ".join(f"`{k}`={json.dumps(v)}" for k, v in (used or {}).items())


def _check_details(checks: list[dict]) -> list[str]:
    """One line per check whose text the table cut, or with an interval or a reason it is undecided."""
    out = []
    for i, c in enumerate(checks, 1):
        long = len(str(c.get("measured"))) > CELL or len(str(c.get("expected"))) > CELL or len(c["name"]) > 90
        if not (long or c.get("interval") or c.get("undecided_because")):
            continue
        parts = [f"**{i}. {c['name']}**"]
        if long:
            parts += [f"measured: {c.get('measured')}", f"paper / expected: {c.get('expected')}"]
        if c.get("interval"):
            parts.append(f"interval: {c['interval']}")
        if c.get("undecided_because"):
            parts.append(f"undecided because: {c['undecided_because']}")
        out.append("; ".join(parts))
    return out


def headline_blocks(verdict: dict) -> list[tuple]:
    """The page's first table, the headline row of the matrix and the index (headline.COLUMNS): the headline in
    the paper's words, the paper's number and where, the measured value with the interval that decided it, the
    comparison and the criterion, and the verdict; the reason follows once (:func:`reason_blocks`)."""
    claim = str(verdict.get("claim") or "")
    row = headline.row(verdict, claim, f"**{verdict['verdict']}**", 100)
    if headline.headline_check(verdict) is None:  # judged before headlines were marked
        row["claim"] = f"{claim}: none marked (judged by an older rule)"
    elif not headline.headline_check(verdict).get("numbers"):
        row["measured [interval]"] = headline.clip(str(headline.headline_check(verdict).get("measured")), 120)
    return [("table", pd.DataFrame([row]))]


def reason_blocks(verdict: dict) -> list[tuple]:
    """The verdict and its reason, once, in full (the page's only copy of it)."""
    reason = " ".join(str(verdict.get("reason", "")).split())
    return [("h2", f"Verdict: **{verdict['verdict']}** (scale `{verdict.get('scale')}`, hardware "
                   f"`{verdict.get('hardware')}`)"), ("p", reason)]


def checks_blocks(verdict: dict) -> list[tuple]:
    """What the verdict means, the checks table (each check's full texts, intervals and reasons collapsed below it),
    the thresholds the judge decided with and the gates."""
    blocks: list[tuple] = []
    if verdict.get("meaning"):
        blocks += [("h2", "What this verdict means"), ("p", _meaning_text(verdict))]
    if verdict.get("checks"):
        blocks += [("h2", "Checks"), ("table", _checks_frame(verdict["checks"]))]
        details = _check_details(verdict["checks"])
        if details:
            blocks += [("details", "Each check in full: its texts, interval and why undecided", details)]
    if verdict.get("thresholds"):
        blocks += [("p", "Thresholds the judge decided with (the `judge:` section of "
                         f"config/claims/{verdict.get('claim')}.yaml; changing one re-judges these rows, it measures "
                         "nothing again): " + threshold_text(verdict["thresholds"]) + ".")]
    if verdict.get("gates"):
        gates = pd.DataFrame([{"gate": g.get("name"), "measured": g.get("measured"), "required": g.get("required"),
                               "holds": HOLDS.get(g.get("passed"), str(g.get("passed"))),
                               **({"thresholds": threshold_text(g.get("thresholds"))}
                                  if any(x.get("thresholds") for x in verdict["gates"]) else {})}
                              for g in verdict["gates"]])
        blocks += [("h2", "Gates (what must hold before the checks mean anything)"), ("table", gates)]
    return blocks


def setup_blocks(verdict: dict) -> list[tuple]:
    """The setup beside the paper and the verdict per implementation."""
    blocks: list[tuple] = []
    if verdict.get("setup"):
        setup = pd.DataFrame([{"aspect": s.get("aspect"), "paper": s.get("paper"), "this run": s.get("this_run")}
                              for s in verdict["setup"]])
        blocks += [("h2", "Setup beside the paper"), ("table", setup)]
    if verdict.get("per_implementation"):
        per = pd.DataFrame([{"implementation": k, "verdict": f"**{v['verdict']}**", "reason": v["reason"]}
                            for k, v in verdict["per_implementation"].items()])
        blocks += [("h2", "Verdict per implementation"), ("table", per)]
    return blocks


def record_blocks(verdict: dict) -> list[tuple]:
    """How the verdict was made: re-judged by a later rule, the machine's load while timing."""
    blocks: list[tuple] = []
    if isinstance(verdict.get("rejudged"), dict):
        r = verdict["rejudged"]
        blocks += [("p", f"Re-judged: this verdict was computed by the rule at commit `{str(r.get('commit'))[:10]}`"
                         f"{' (dirty tree)' if r.get('dirty') else ''} on {r.get('timestamp')} from the measurements "
                         f"of commit `{str(verdict.get('commit'))[:10]}` ({verdict.get('timestamp')}); the verdict "
                         f"before was **{r.get('previous_verdict')}**.")]
    if isinstance(verdict.get("load"), dict) and verdict["load"]:
        blocks += [("p", "Machine load during timing: " + ", ".join(f"{k} {_fmt(v)}" for k, v in
                                                                     verdict["load"].items()))]
    return blocks


def _meaning_text(verdict: dict) -> str:
    """The claim's own meaning line, or, where it is the contract's generic text, a link to the contract."""
    heads = [c for c in verdict.get("checks") or [] if c.get("headline")]
    if verdict["meaning"] == _meaning(heads, str(verdict.get("scale"))):
        names = " and ".join(f"'{c['name']}'" for c in heads) or "its headline"
        return (f"The verdict follows the contract (docs/verdicts.md) on {names}, at this scale and with the setup "
                "below; it is about this setup, not the paper's scale.")
    return verdict["meaning"]


# pages for results that are not registered claims (the shared artefacts' own benchmarks)
ARTEFACT_PAGES = {"translation": {
    "code": "T", "title": "The shared translation model",
    "statement": "The suite's shared encoder-decoder translation model (the model the head-pruning, layer-pruning "
                 "and quantization claims start from) translates its test set well above copying the source: its "
                 "own target, not a paper's claim.", "sources": []}}


def claim_info(claim: str) -> dict:
    return registry.claim(claim) if claim in registry.claim_ids() else ARTEFACT_PAGES[claim]


def _missing(x) -> bool:
    return x is None or (isinstance(x, float) and pd.isna(x)) or str(x).strip() in ("", "nan")


def _vs_published(v, p, u, pu) -> str:
    """A measured value against the published one by the one rule of every comparison (headline.versus: point
    values, with the direction word; '~' is the headline's, from its deciding interval): like quantities only, ''
    where the units differ or either is not a number (a row without a unit is taken in the published one)."""
    same = _missing(u) or _missing(pu) or u == pu
    ok = isinstance(v, (int, float)) and isinstance(p, (int, float)) and not pd.isna(p) and same
    unit = pu if _missing(u) else u
    return headline.versus(v, p, headline.is_percent(unit), unit=str(unit or "")) \
        if ok and (p or headline.is_percent(unit)) else ""


def drop_empty(frame: pd.DataFrame, keep: tuple = ()) -> pd.DataFrame:
    """``frame`` without the columns whose every cell is empty ('', None, NaN), except ``keep``: a column of empty
    cells says nothing."""
    empty = [c for c in frame.columns if c not in keep and all(_missing(x) for x in frame[c])]
    return frame.drop(columns=empty)


def _published_blocks(metrics: pd.DataFrame, verdict: dict | None = None) -> list[tuple]:
    """'Measured beside published': the metrics rows with a published value, each set against it; the headline's own
    row as the headline reads it (its deciding interval's '~', :func:`_headline_mark`); columns with nothing in them
    (no comparable row, no unit) dropped, so a table of empty cells never shows."""
    pub = metrics[metrics["published_key"].notna()] if "published_key" in metrics else metrics.iloc[:0]
    if not len(pub):
        return []
    own = _headline_mark(verdict or {})
    diff = [own(v, p) or _vs_published(v, p, u, pu) for v, p, u, pu in zip(
        pub["value"], pd.to_numeric(pub["published_value"], errors="coerce"), pub["unit"],
        pub.get("published_unit", pub["unit"]))]
    table = pd.DataFrame({"metric": pub["metric"], "setting": pub["sweep"].map(_sweep_text),
                          "measured": pub["value"].map(_fmt), "published": pub["published_value"].map(_fmt),
                          "vs published": diff, "unit": [("" if _missing(u) else u) for u in pub["unit"]],
                          "source": pub["source"]})
    return [("h2", "Measured beside published"),
            ("p", "Point values set against the published ones (a ratio shown as the larger of the two ways, with "
                  "the word of the side that wins; a difference in points for percentages); whether a difference "
                  "lies beyond the noise is decided only by the intervals of the checks above, so only the "
                  "headline's row can read '~' (its interval holds the published value)."),
            ("table", drop_empty(table, keep=("metric", "measured")))]


def _headline_mark(verdict: dict):
    """A function of (measured, published) giving the headline's 'vs paper' mark for the headline's own numbers
    (the same comparison read the same way as in the page's first table), '' for any other row."""
    nums = (headline.headline_check(verdict) or {}).get("numbers") or {}
    mark = headline.compare_parts(nums)[0] if nums else ""

    def same(a, b) -> bool:
        numeric = isinstance(a, (int, float)) and isinstance(b, (int, float)) and not pd.isna(a)
        return numeric and abs(a - b) <= 1e-9 * max(1.0, abs(b))

    return lambda v, p: mark if mark and same(v, nums.get("value")) and same(p, nums.get("paper")) else ""


def claim_blocks(claim: str, verdict: dict, fp: dict, metrics: pd.DataFrame, results_dir: Path,
                 figures: list[tuple[str, str]], fig_dir: Path, kind: str = RUN,
                 page_dir: Path | None = None) -> list[tuple]:
    """A claim page, each fact once: the headline row, the verdict's reason, where it comes from, the plan it was
    judged under, the checks (details collapsed), the figures, the paper's claim and the setup, then what would
    decide it, the rows beside the published numbers and where the numbers come from."""
    info = claim_info(claim)
    blocks: list[tuple] = [("h1", f"{info['code']} {claim}: {info['title']}")] + headline_blocks(verdict)
    blocks += reason_blocks(verdict) + origin_blocks(claim, verdict, fp, kind) + plan_blocks(verdict, page_dir)
    blocks += checks_blocks(verdict)
    if figures:
        blocks += [("h2", "Figures")] + [("figure", fig_dir / name, caption) for name, caption in figures]
    blocks += claim_text_blocks(info) + setup_blocks(verdict) + power_blocks(claim, verdict, results_dir)
    blocks += _published_blocks(metrics, verdict) + record_blocks(verdict)
    blocks += [("h2", "Where these numbers come from"),
               ("list", [*_fingerprint_lines(fp), *_waiver_lines(results_dir),
                         f"Full results: `{results_dir}/metrics.csv` ({len(metrics)} rows), `verdict.json`, "
                         f"`config.json`" + _declared_text(verdict), runtime.claim_time_text(results_dir),
                         *_integrity_lines(verdict)])]
    return blocks


def origin_blocks(claim: str, verdict: dict, fp: dict, kind: str = RUN) -> list[tuple]:
    """Where the verdict comes from (this checkout's run or a committed reference, stale or not), and an
    unverified line where nothing could be checked against the run's bytes."""
    return [("p", "**Where this verdict comes from**: " + origin_of(verdict, kind, claim, fp).text()
             + (". Whether the checkout's code still measures the same is shown in the verdict matrix "
                "(made when it is viewed: reports/matrix.md)." if kind != RUN else "."))] + integrity_blocks(verdict,
                                                                                                          kind)


def claim_text_blocks(info: dict) -> list[tuple]:
    """The paper's claim in its words and its sources."""
    return [("h2", "The paper's claim"), ("quote", info["statement"].strip()),
            ("p", "Sources: " + ("; ".join(registry.citation(s) for s in info.get("sources", []))
                                 or "none (the suite's own benchmark)"))]


def plan_blocks(verdict: dict, page_dir: Path | None = None) -> list[tuple]:
    """The "Plan" block: the confirmatory plan the verdict was judged under (repro.plan): its key, how it was chosen
    (links to the records, relative to ``page_dir``), the confirmatory checks, the looks and which decided, the spent
    seeds; or that none was recorded (a verdict judged before plans, or measured before them)."""
    block, key = verdict.get("plan"), verdict.get("plan_key")
    if not block or not key:
        why = " (measured before plans)" if "plan_key" not in verdict else ""
        return [("h2", "Plan"), ("p", f"{plan.NONE}{why}.")]
    def link(path: str) -> str:
        target = os.path.relpath(config.ROOT / path, page_dir) if page_dir is not None else path
        return f"[{path}]({Path(target).as_posix()})"
    measured = verdict.get("plan_measured_key")
    lines = [f"Plan `{key[:12]}`" + ("" if measured == key else
                                     " (measured before plans)" if measured is None else
                                     f"; measured under plan `{measured[:12]}`: the thresholds or the plan changed "
                                     f"after measuring"),
             f"How chosen: {block['how']} ({', '.join(link(p) for p in block['chosen_by'])})",
             "Confirmatory checks: " + ("all" if block["confirmatory"] == "all" else "; ".join(block["confirmatory"]))]
    looked = [f"{c['name']}: {look_text(c['look'])}" for c in verdict.get("checks") or [] if c.get("look")]
    if block.get("looks"):
        lk = block["looks"]
        lines.append(f"Looks: {lk['param']} at {', '.join(map(str, lk['at']))} ({lk['spending']}); "
                     + ("; ".join(looked) or "no check judged over them"))
    if block.get("spent"):
        lines.append("Spent seeds: " + "; ".join(f"{s['seeds']} ({s['by']})" for s in block["spent"]))
    return [("h2", "Plan"), ("list", lines)]


UNRECORDED = [n for n in CORE_FILES if n != "verdict.json"]  # the files a verdict's integrity record should cover


def integrity_blocks(verdict: dict, kind: str = RUN) -> list[tuple]:
    """An "unverified" line for a verdict.json without an integrity record (results written before records
    existed): nothing on the page could be checked against the run's bytes. Records are made by judging again."""
    if verdict.get("integrity"):
        return []
    how = ("`python -m repro.report rejudge-reference --hardware <hw> --scale <scale>` records them" if kind != RUN
           else "measuring or re-judging the claim records them")
    return [("p", f"**Integrity: unverified**: verdict.json records no sha256 of this result's files, so they "
                  f"were not checked against the run; {how}.")]


def _integrity_lines(verdict: dict) -> list[str]:
    """The page's integrity line: how many files were checked against verdict.json's sha256, which core files it
    does not cover, and which were recorded after the measurement (judged or sealed later)."""
    rec = verdict.get("integrity") or {}
    if not rec:
        return ["Integrity: **unverified** (verdict.json has no integrity record)"]
    text = f"Integrity: {len(rec)} files checked against the sha256 verdict.json records"
    missing = [n for n in UNRECORDED if n not in rec]
    if missing:
        text += "; not recorded: " + ", ".join(f"`{n}`" for n in missing)
    sealed = [*(((verdict.get("provenance") or {}).get("judged") or {}).get("sealed") or []),
              *((verdict.get("integrity_sealed") or {}).get("files") or [])]
    if sealed:
        text += "; recorded after the measurement (when judged or sealed): " + ", ".join(f"`{n}`" for n in sealed)
    return [text]


def _claim_core_minutes(claim: str, results_dir: Path) -> float | None:
    """The core-minutes (CPU time) the claim's measuring jobs took on the machine that measured it: its benchmark
    files (the claim job and its parts) beside the results."""
    hw_dir = results_dir.parent
    frame = runtime.read_benchmarks(hw_dir.parent.parent, hw_dir.parent.name, hw_dir.name) if hw_dir.parent.name else None
    if frame is None or frame.empty:
        return None
    mine = frame[frame["job"].map(lambda j: j == claim or j.startswith(f"{claim}.part")
                                  or (claim == "translation" and j in ("translation_train", "translation_evaluate")))]
    total = float(mine["cpu_s"].fillna(0).sum()) / 60
    return total or None


def _needed_text(pw: dict) -> str:
    """The sample that would decide a check, beside what the data has (``available``, e.g. a test set's size)."""
    need, unit, have = pw.get("n_needed"), pw.get("unit", ""), pw.get("available")
    if need is None:
        return f"never: {pw.get('why')}"
    text = f"{need:,} {unit}"
    if have is not None and need > have:
        text += f" (the data has {have:,}: no size it allows)"
    return text


def _cost_text(pw: dict, minutes: float | None) -> str:
    """What the sample that would decide a check costs on the measuring machine: ``n_needed`` x the measured cost of
    one unit where the judge recorded it from the rows (``unit_s``: a round's step times, a random order's share of
    its stage), else the claim's measured core-minutes scaled by the sample, an upper estimate (the whole claim's
    cost scales with it, its cheap parts included)."""
    need, unit_s = pw.get("n_needed"), pw.get("unit_s")
    if need is None:
        return "-"
    if unit_s:
        return f"~{need * unit_s / 60:,.1f} min ({need:,} {pw.get('unit', '')} x {unit_s:.3g} s each, measured)"
    if minutes is None or not pw.get("n"):
        return "-"
    return f"<= ~{minutes * need / pw['n']:,.0f} core-min (upper estimate: the claim's {minutes:,.1f} scaled)"


def power_blocks(claim: str, verdict: dict, results_dir: Path) -> list[tuple]:
    """"What would decide this": for each undecided check that carries its power numbers (repro.verdicts.power),
    the interval, the threshold, the sample now and the sample that would decide it if the point estimate held, and
    what that would cost on the measuring machine (:func:`_cost_text`: the measured cost of one unit where the judge
    recorded it, else the claim's measured core-minutes scaled by the sample, an upper estimate).
    Computed from the measured rows; a tie says no size decides it."""
    rows = []
    minutes = _claim_core_minutes(claim, Path(results_dir))
    for c in verdict.get("checks") or []:
        pw = c.get("power")
        if c.get("passed") is not None:
            continue
        if not pw:  # not a question of sample size (a CPU standing in for a GPU, a control that did not learn)
            rows.append({"check": headline.clip(c["name"], 70), "measured [interval]": "-", "threshold": "-",
                         "now": "-", "would decide at": headline.clip(c.get("undecided_because") or "-", 160),
                         "cost": "-"})
            continue
        cost = _cost_text(pw, minutes)
        thr = pw.get("threshold")
        thr = f"[{thr[0]:.4g}, {thr[1]:.4g}]" if isinstance(thr, (list, tuple)) else f"{thr:.4g}"
        rows.append({"check": headline.clip(c["name"], 70), "measured [interval]":
                     f"{pw['value']:.4g} [{pw['lo']:.4g}, {pw['hi']:.4g}]", "threshold": thr,
                     "now": f"{pw['n']} {pw['unit']}", "would decide at": _needed_text(pw),
                     "cost": cost})
    if not rows:
        return []
    return [("h2", "What would decide this"),
            ("p", "Each undecided check below: its interval, the threshold, the sample it had and the sample that "
                  "would decide it with 90% power if the point estimate held (the interval narrows as 1/sqrt(n); a "
                  "check of several parts is sized by the part projected to decide it first), with its cost on "
                  "the machine that measured it (docs/results.md, \"Reading a power table\"); a check that no larger "
                  "sample decides says what would (a GPU, a control that learns)."),
            ("table", pd.DataFrame(rows))]


def _declared_text(verdict: dict) -> str:
    """The declared result files beside the core ones, in words (``runs.json, 13 files under curves/``)."""
    names = declared_files(verdict)
    if not names:
        return ""
    top = [n for n in names if "/" not in n]
    sub: dict[str, int] = {}
    for n in names:
        if "/" in n:
            sub[n.split("/")[0]] = sub.get(n.split("/")[0], 0) + 1
    return ", " + ", ".join([f"`{n}`" for n in top] + [f"{k} files under `{d}/`" for d, k in sub.items()])


def render_markdown(blocks: list[tuple], page_dir: Path) -> str:
    lines: list[str] = []
    for kind, *payload in blocks:
        if kind == "h1":
            lines += [f"# {payload[0]}", ""]
        elif kind == "h2":
            lines += [f"## {payload[0]}", ""]
        elif kind == "quote":
            lines += [f"> {payload[0]}", ""]
        elif kind == "p":
            lines += [payload[0], ""]
        elif kind == "table":
            lines += [_table(payload[0]), ""]
        elif kind == "list":
            lines += [f"- {item}" for item in payload[0]] + [""]
        elif kind == "details":  # collapsed where markdown renders HTML (GitHub), a plain list elsewhere
            lines += ["<details>", f"<summary>{html.escape(payload[0])}</summary>", ""]
            lines += [f"- {item}" for item in payload[1]] + ["", "</details>", ""]
        elif kind == "figure":
            path, caption = payload
            rel = path.relative_to(page_dir) if path.is_relative_to(page_dir) else path
            lines += [f"![{caption}]({rel.as_posix()})", "", f"*{caption}*", ""]
    return "\n".join(lines)


CSS = """body{font-family:system-ui,sans-serif;max-width:1150px;margin:1.5em auto;padding:0 1em;line-height:1.45;
color:#222}table{border-collapse:collapse;margin:.5em 0 1.2em;font-size:.9em}th,td{border:1px solid #ccc;
padding:.3em .5em;vertical-align:top;text-align:left}th{background:#f2f2f2}blockquote{color:#555;border-left:4px
solid #ccc;margin:0;padding:.2em 1em}figure{margin:1em 0}figure img{max-width:100%;height:auto}
figcaption{font-size:.9em;color:#444}.verdict{font-size:1.15em}code{background:#f5f5f5;padding:0 .2em}"""


def _data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()


def render_html(blocks: list[tuple], title: str) -> str:
    """A self-contained HTML page (figures embedded as data URIs: the Snakemake report shows it in an iframe)."""
    out = [f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
           f"<style>{CSS}</style></head><body>"]
    for kind, *payload in blocks:
        if kind == "h1":
            out.append(f"<h1>{inline_html(payload[0])}</h1>")
        elif kind == "h2":
            cls = ' class="verdict"' if payload[0].startswith("Verdict: ") else ""
            out.append(f"<h2{cls}>{inline_html(payload[0])}</h2>")
        elif kind == "quote":
            out.append(f"<blockquote>{inline_html(payload[0])}</blockquote>")
        elif kind == "p":
            out.append(f"<p>{inline_html(payload[0])}</p>")
        elif kind == "table":
            frame = payload[0]
            head = "".join(f"<th>{inline_html(c)}</th>" for c in frame.columns)
            body = "".join("<tr>" + "".join(f"<td>{inline_html(_fmt(v))}</td>" for v in row) + "</tr>"
                           for row in frame.itertuples(index=False))
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        elif kind == "list":
            out.append("<ul>" + "".join(f"<li>{inline_html(i)}</li>" for i in payload[0]) + "</ul>")
        elif kind == "details":
            out.append(f"<details><summary>{html.escape(payload[0])}</summary><ul>"
                       + "".join(f"<li>{inline_html(i)}</li>" for i in payload[1]) + "</ul></details>")
        elif kind == "figure":
            path, caption = payload
            out.append(f'<figure><img src="{_data_uri(path)}" alt="{html.escape(caption)}">'
                       f"<figcaption>{inline_html(caption)}</figcaption></figure>")
    out.append("</body></html>")
    return "".join(out)


def caption_rst(text: str) -> str:
    """A report caption file: the caption as raw HTML (no reST or Jinja markup can misfire on measured text)."""
    return ("{% raw %}\n.. raw:: html\n\n   <p>" + html.escape(" ".join(text.split())) + "</p>\n\n{% endraw %}\n")


def claim_page(claim: str, results_dir: str | Path, page: str | Path, fig_dir: str | Path, kind: str = RUN) -> Path:
    """Write the claim's page (``page``, markdown, and the same page as self-contained HTML beside it), its figures
    into ``fig_dir`` and one caption file per figure (``fig_dir/captions/<figure>.rst``, used by the report).
    ``kind``: whether the results are this checkout's run or a committed reference (the page says which)."""
    results_dir, page, fig_dir = Path(results_dir), Path(page), Path(fig_dir)
    verdict, fp, metrics = read_results(results_dir)
    figures = make_plots(claim, metrics, results_dir, verdict, fig_dir)
    blocks = claim_blocks(claim, verdict, fp, metrics, results_dir, figures, fig_dir, kind, page.parent)
    atomic_write_text(page, render_markdown(blocks, page.parent))
    title = f"{claim} on {verdict.get('hardware')} ({verdict.get('scale')}): {verdict['verdict']}"
    atomic_write_text(page.with_suffix(".html"), render_html(blocks, title))
    for name, caption in figures:
        where = f" Measured on `{verdict.get('hardware')}` at scale `{verdict.get('scale')}`; claim verdict: " \
                f"{verdict['verdict']}."
        atomic_write_text(fig_dir / "captions" / f"{Path(name).stem}.rst", caption_rst(caption + where))
    return page


WHY = 64  # characters of a verdict's reason an index cell shows; the claim page has it in full


def why_text(verdict: dict, limit: int = WHY) -> str:
    """The index's why cell, one clause of at most ``limit`` characters ('...' when cut; the claim page has the
    reason in full): for an undecided or failing headline, why (its reason undecided, or its measured text's first
    clause), else the reason's first clause ('26/26 decided checks hold')."""
    def first(text) -> str:
        text = " ".join(str(text or "").split())
        return re.split(r"(?<=[.;])\s", text, maxsplit=1)[0].rstrip(".;")

    def clip(text: str) -> str:  # at most ``limit`` characters as the table shows them (pipes escaped)
        n = limit
        while len(md_cell(headline.clip(text, n))) > limit:
            n -= 1
        return headline.clip(text, n)

    c = headline.headline_check(verdict)
    status = str(verdict.get("verdict"))
    if c is not None and status == "inconclusive" and c.get("passed") is None and c.get("undecided_because"):
        why = first(c["undecided_because"])
        return clip(why if why.startswith("not applicable") else "undecided: " + why)
    if c is not None and status == "not_reproduced" and c.get("passed") is False:
        return clip("fails: " + first(c.get("measured")))
    return clip(first(verdict.get("reason")))


def _name(claim: str) -> str:
    """A claim's headline in the paper's words (repro/registry/headlines.yaml), else its title."""
    return headline.headline_name(claim, {"name": claim_info(claim)["title"]})


def index_page(results_root: str | Path, reports_root: str | Path, hardware: str, scale: str, out: str | Path,
               kind: str = RUN) -> Path:
    """Every registered claim with its headline row (headline.COLUMNS: the same columns in the same order as the
    matrix and the claim pages), a short why (the reason's first clause; the page has it in full) and where it
    came from (this checkout's run or a reference, commit, time, stale); a claim without results shows ``not
    run`` when it is implemented (registry.implemented_claims) and ``not_implemented`` when it has none."""

    res = Path(results_root) / hardware / scale
    rows = []
    when = "measured by"
    implemented = set(registry.implemented_claims())
    for claim in registry.claim_ids() + [c for c in ARTEFACT_PAGES if (res / c / "verdict.json").exists()]:
        info = claim_info(claim)
        vpath = res / claim / "verdict.json"
        if vpath.exists():
            v = read_verdict(vpath)
            row = headline.row(v, f"[{claim}]({claim}.md)", f"**{v['verdict']}**", 56)
            check = headline.headline_check(v)
            if check is not None and not check.get("numbers"):
                row["measured [interval]"] = "-"
            rows.append({"id": info["code"], **row, "why": why_text(v),
                         when: origin_of(v, kind, claim).short()})
        elif claim in implemented:
            rows.append({"id": info["code"], "claim": f"{claim}: {_name(claim)}", "paper": "", "measured [interval]":
                         "", "vs paper": "", "verdict": "not run", "why": f"run: snakemake claim_{claim}"
                         + ("" if scale == "default" else f" (scale={scale})"), when: ""})
        else:
            rows.append({"id": info["code"], "claim": f"{claim}: {_name(claim)}", "paper": "", "measured [interval]":
                         "", "vs paper": "", "verdict": "not_implemented", "why": "no workflow yet", when: ""})
    frame = pd.DataFrame(rows, columns=["id", *headline.COLUMNS, "why", when]).fillna("")
    out = Path(out)
    matrix = os.path.relpath(Path(reports_root) / "matrix.md", out.parent)
    counts = frame["verdict"].str.strip("*").value_counts().to_dict()
    title = "committed reference run" if kind != RUN else "this checkout's run"
    lines = [f"# Reproduction index: hardware `{hardware}`, scale `{scale}` ({title})", "",
             "Each claim's headline row, as in the verdict matrix and on the claim's page (docs/verdicts.md): the "
             "paper's number and where it states it, the measured value with the interval that decided the "
             "verdict, and how the two compare ('~': the paper's value lies within the interval; 'suite: ...': "
             "decided on the suite's own criterion, not a number of the paper's).",
             "`why`: the reason's first clause (the claim's page has it in full). `measured by`: `run` (this "
             "checkout's results/) or `ref` (a committed reference), the commit that measured the claim and when "
             "(UTC); **stale** when the checkout's measurement code differs.",
             f"Every machine and scale side by side: [the verdict matrix]({matrix}).", "",
             "Summary: " + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())), "", _table(frame, compact=True),
             ""]
    lines += peers.index_lines(res)  # the peer throughput benchmarks beside the verdicts, when the run has them
    lines += runtime.time_per_rule_md(results_root, hardware, scale)  # where the run's time went
    atomic_write_text(out, "\n".join(lines))
    return out
