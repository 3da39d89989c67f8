"""Publish one run as a committed reference: ``python -m repro.report publish --hardware HW --scale S``.

The maintainers' deliberate step (README, "Reference results"): a reference is what a clean checkout measured,
whole, so it refuses

- a dirty work tree (tracked changes or untracked files outside the ignored results/ and reports/),
- a run with mixed commits (its claims measured at more than one commit), judged by another judge than HEAD's
  (its judge key differs, whatever the judging commit) or with other thresholds than the checkout's config (judge
  overrides), or measured or judged on a dirty tree (a run measured at an older commit whose measurement code the
  checkout still has, then re-judged by HEAD's judges, is one run: that is how a judge change reaches the
  references);
  ``--waiver REASON`` accepts a measurement made on a dirty tree, and only that, when its measurement code key is
  HEAD's (not stale; judged here, on a clean tree): a GPU node's copy of the checkout, for one, where the tree had to
  travel without ``references/``. The reason is written beside the claim's results (``published_waiver.json``) and
  its page says so,
- a result the checkout would measure anew (stale: its measurement code key differs; repro.provenance), a result
  without provenance keys, or one measured with other parameters than the scale's config (overrides),
- a run missing a claim that the registry implements, or the translation benchmark the claims are built on.

Then it replaces ``references/results/<hw>/<scale>/`` with the run's result files (each claim folder without its
scratch, and the per-rule benchmark files), renders their pages into ``references/reports/<hw>/<scale>/`` (marked
as a reference), and remakes the references' own matrix and hardware comparison (``references/reports/matrix.md``,
``references/reports/compare/<scale>/``). Nothing under results/ or reports/ changes; no run ever writes into
references/.

The peer throughput benchmarks of the run (``_bench/throughput``, ``_bench/fairseq_peer``: repro.peers, run by
scripts/peers.sh after the run, with its trained model) travel with it when present, without their scratch, and get
their pages (repro.report.peers, naming the commit and machine that measured them; a peer measured on a dirty tree
is refused). ``publish_peers`` (``--peers-only``) adds them to an existing reference without touching its claims.
Nothing else under ``_bench`` is published, nor the run's models, scratch or keys.
"""
from __future__ import annotations

import json
import logging
import shutil
import subprocess
import tempfile
from pathlib import Path

from repro import artefacts, config, provenance, registry
from repro.errors import ResultsError
from repro.io import atomic_write_json, read_json, read_verdict, seal_integrity, verify_results
from repro.judging import now, rejudge
from repro.report import pages
from repro.report.compare import write_compare
from repro.report.matrix import write
from repro.report.origin import REFERENCE, WAIVER, checkout_config_key, recorded_keys
from repro.report.peers import (
    BENCH_DIR,
    peer_folders,
    peer_page,
    read_peer,
    render_peer_pages,
)
from repro.report.runtime import RUN_RECORD

log = logging.getLogger("repro")
SKIP_DIRS = (artefacts.MODELS_DIR, "_work", "_keys", BENCH_DIR)  # never published whole (the peers: _copy_peers)
SKIP_FILES = (".lock",)


class PublishError(Exception):
    """The run cannot become a reference; the message says why and what to do."""


def _git(*args: str) -> str:
    r = subprocess.run(["git", *args], cwd=provenance.ROOT, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise PublishError(f"git {' '.join(args)} failed: {r.stderr.strip()}")
    return r.stdout


def _require_clean(*pathspec: str, then: str) -> None:
    """Refuse a work tree with changed or untracked paths (within ``pathspec``); ``then``: what to do next."""
    dirty = _git("status", "--porcelain", *pathspec).strip()
    if dirty:
        raise PublishError(f"the work tree is not clean ({len(dirty.splitlines())} changed or untracked paths, e.g. "
                           f"{dirty.splitlines()[0].strip()}); commit first{then}")


def _other_thresholds(used, defaults: dict) -> str:
    """The thresholds a verdict was judged with (verdict.json's ``thresholds``) that differ from the checkout's
    defaults, as text ("" when none differ; a verdict that does not record them is left to its judge key)."""
    if not isinstance(used, dict):
        return ""
    keys = sorted(k for k in set(used) | set(defaults) if used.get(k) != defaults.get(k))
    return ", ".join(f"{k}: {used.get(k)!r} instead of {defaults.get(k)!r}" for k in keys)


def check_run(folder: Path, scale: str, head: str, only: list[str] | None = None,
              waiver: str | None = None) -> list[str]:
    """The claims (and the translation benchmark) of one run folder, after checking each can be published;
    ``only``: just these claims (a paper-scale run of some claims); ``waiver``: a reason to accept a measurement
    made on a dirty tree (its code key must still be HEAD's; its judgement must be clean)."""
    claims = sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))
    wanted = set(only) if only else set(registry.implemented_claims()) | {"translation"}
    claims = [c for c in claims if c in wanted]
    missing = sorted(wanted - set(claims))
    if missing:
        raise PublishError(f"{folder}: no results for {', '.join(missing)}; a reference is a whole run "
                           f"(snakemake reproduce_all --config scale={scale})")
    problems, commits = [], {}
    for claim in claims:
        v = read_verdict(folder / claim / "verdict.json")
        prov = v.get("provenance") or {}
        measured, judged = prov.get("measured") or {}, prov.get("judged") or {}
        keys = recorded_keys(v)
        commits.setdefault(str(measured.get("commit"))[:7], []).append(claim)
        judge_now = provenance.judge_key(provenance.current_code(claim, keys.get("needs"))["judge_code"],
                                         config.thresholds(claim, scale))
        other = _other_thresholds(v.get("thresholds"), config.thresholds(claim, scale))
        if other:  # judged with overridden thresholds: whatever the commit, not the checkout's verdict
            problems.append(f"{claim}: judged with other thresholds than config/claims/{claim}.yaml [{scale}] "
                            f"({other}): re-judge it with the defaults (reproduce_all without judge overrides)")
        elif judged.get("judge_key") != judge_now:  # another judge's code or thresholds, at any commit
            problems.append(f"{claim}: judged at {str(judged.get('commit'))[:7]} by another judge than HEAD's "
                            f"({head[:7]}): re-judge it (reproduce_all runs only the claim_verdict jobs)")
        elif judged.get("dirty") or (measured.get("dirty") and not waiver):
            problems.append(f"{claim}: {'judged' if judged.get('dirty') else 'measured'} on a dirty tree"
                            + ("" if judged.get("dirty") else
                               " (--waiver REASON accepts it when its measurement code is HEAD's)"))
        # the measurement code must be HEAD's; its software is the measuring machine's (a GPU node's torch is not
        # this machine's), recorded with it and shown on the matrix
        stale = provenance.stale_reasons(keys, claim, software_now=keys.get("software") or {}).get("code")
        if stale:
            problems.append(f"{claim}: {stale}")
        elif keys.get("config") != checkout_config_key(claim, scale):
            problems.append(f"{claim}: measured with other parameters than config/claims/{claim}.yaml [{scale}] "
                            f"(overrides?)")
    if len(commits) > 1:  # one run, one commit: a measurement kept from another commit is another run
        problems.append("mixed commits: " + "; ".join(f"{c}: {', '.join(names)}" for c, names in sorted(commits.items())))
    if problems:
        raise PublishError(f"{folder} cannot be published: " + "; ".join(problems)
                           + ". Rerun it from a clean checkout of HEAD.")
    return claims


def _copy_files(src: Path, dst: Path, skip_dirs: tuple[str, ...] = ()) -> None:
    """Replace ``dst`` with the result files of ``src`` (no dotfiles, locks or rule records; nothing under a folder
    named in ``skip_dirs``)."""
    if dst.exists():
        shutil.rmtree(dst)
    for f in sorted(src.rglob("*")):
        rel = f.relative_to(src)
        if not f.is_file() or f.name.startswith(".") or f.name in SKIP_FILES or f.name.endswith(".runs.json") \
                or any(part in skip_dirs for part in rel.parts[:-1]):
            continue
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, dst / rel)


def check_peers(folder: Path, hardware: str, scale: str) -> dict[str, Path]:
    """The peer benchmark folders of a run folder, each checked to be publishable (complete, readable, measured
    at ``scale`` on a clean tree at a recorded commit, its page renders); its hardware and commit may differ from
    the run's (the page says so)."""
    peers, problems = peer_folders(folder), []
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in peers.items():
            try:
                _, fp, _ = read_peer(path, scale)
                peer_page(name, path, hardware, scale, Path(tmp) / f"{name}.md", set())
            except ResultsError as exc:
                problems.append(str(exc))
                continue
            if fp["git"].get("dirty"):
                problems.append(f"{path}: measured on a dirty tree (commit {fp['git']['commit'][:10]}); rerun it "
                                f"from a clean checkout (scripts/peers.sh)")
    if problems:
        raise PublishError("peer benchmarks cannot be published: " + "; ".join(problems))
    return peers


def _copy_peers(peers: dict[str, Path], dst: Path) -> None:
    for name, path in peers.items():
        _copy_files(path, dst / BENCH_DIR / name, SKIP_DIRS)


def _copy_run(src: Path, dst: Path, claims: list[str], whole: bool, peers: dict[str, Path]) -> None:
    if whole and dst.exists():
        shutil.rmtree(dst)
    for claim in claims:
        _copy_files(src / claim, dst / claim)
    _copy_peers(peers, dst)
    bench = src / "_benchmarks"
    if bench.is_dir():
        shutil.copytree(bench, dst / "_benchmarks", dirs_exist_ok=True)
    if (src / RUN_RECORD).is_file():  # the run's own wall time and work (the pages read it, never file times)
        shutil.copy2(src / RUN_RECORD, dst / RUN_RECORD)


def _write_waivers(src: Path, dst: Path, claims: list[str], head: str, reason: str) -> None:
    """``published_waiver.json`` beside each published claim measured on a dirty tree (see the module)."""
    for claim in claims:
        v = read_verdict(src / claim / "verdict.json")
        measured = (v.get("provenance") or {}).get("measured") or {}
        if measured.get("dirty"):
            record = {"reason": reason, "measured_commit": measured.get("commit"), "published_at": head,
                      "code_key": recorded_keys(v).get("code")}
            (dst / claim / WAIVER).write_text(json.dumps(record, indent=1) + "\n")


def publish(hardware: str, scale: str, results_root: str | Path = "results",
            references_root: str | Path = "references", check_tree: bool = True,
            claims: list[str] | None = None, waiver: str | None = None) -> Path:
    """Copy ``results_root/<hardware>/<scale>/`` into the references (checked first; see the module) and render
    its pages; returns the reference folder. ``claims``: publish only these (replacing only their folders), for a
    run of some claims (e.g. the speed claims at paper scale on a GPU); ``waiver``: the reason a measurement made on
    a dirty tree (with HEAD's measurement code) may be published, recorded beside it."""
    src = Path(results_root) / hardware / scale
    if not src.is_dir():
        raise PublishError(f"{src}: no such run")
    head = _git("rev-parse", "HEAD").strip()
    if check_tree:
        _require_clean(then=", then rerun the run")
    names = check_run(src, scale, head, claims, waiver)
    peers = check_peers(src, hardware, scale)
    refs = Path(references_root)
    dst = refs / "results" / hardware / scale
    _copy_run(src, dst, names, whole=not claims, peers=peers)
    if waiver:
        _write_waivers(src, dst, names, head, waiver)
    rep = refs / "reports" / hardware / scale
    if rep.exists() and not claims:
        shutil.rmtree(rep)
    render_reference(refs, hardware, scale)
    write(None, refs / "reports", refs / "reports" / "matrix.md", references_root=refs)
    write_compare(None, scale, refs / "reports" / "compare" / scale, reference=f"{hardware} (reference)",
                  references_root=refs)
    return dst


def publish_peers(hardware: str, scale: str, results_root: str | Path = "results",
                  references_root: str | Path = "references", check_tree: bool = True) -> list[Path]:
    """Add the peer benchmarks of ``results_root/<hardware>/<scale>/_bench/`` (throughput, fairseq_peer) to the
    existing reference of that machine and scale, replacing its peer folders of the same names and leaving its
    claims as they are, and render their pages and the reference's index (``--peers-only``). The peers are checked
    as :func:`publish` checks them; their commit or hardware id may differ from the reference run's (their pages
    say so). Refuses a dirty tree outside the references (the pages are HEAD's). Returns the published folders."""
    src = Path(results_root) / hardware / scale
    refs = Path(references_root)
    dst = refs / "results" / hardware / scale
    if not any(dst.glob("*/verdict.json")):
        raise PublishError(f"{dst}: no reference to add peer results to; publish the run first (without "
                           f"--peers-only)")
    if check_tree:
        _require_clean("--", ".", f":(exclude){refs.as_posix()}", then="")
    peers = check_peers(src, hardware, scale)
    if not peers:
        raise PublishError(f"{src / BENCH_DIR}: no peer results (throughput, fairseq_peer); run them first: "
                           f"bash scripts/peers.sh {results_root}")
    _copy_peers(peers, dst)
    rep = refs / "reports" / hardware / scale
    render_peer_pages(dst, rep, hardware, scale)
    pages.index_page(refs / "results", refs / "reports", hardware, scale, rep / "index.md", kind=REFERENCE)
    return [dst / BENCH_DIR / name for name in peers]


def rejudge_reference(hardware: str, scale: str, references_root: str | Path = "references",
                      check_tree: bool = True, claims: list[str] | None = None) -> list[str]:
    """Re-judge a committed reference in place with HEAD's judges, keeping its measurements (the maintainers'
    step after a judge change, for a reference that cannot be measured again here: another machine's, or one whose
    measurement code has changed since). Only verdict.json changes: it records the measurement's commit and HEAD
    as the judging commit, and ``rejudged`` with the previous verdict; its pages, the references' matrix and
    comparison are re-rendered. Returns the re-judged claims. Refuses a dirty tree outside the references (a
    reference's judgement names the commit that judged it)."""
    dst = Path(references_root) / "results" / hardware / scale
    if not dst.is_dir():
        raise PublishError(f"{dst}: no such reference")
    if check_tree:  # the judging code is HEAD's: changes under the references (other re-judged runs) aside
        _require_clean("--", ".", f":(exclude){Path(references_root).as_posix()}", then="")
    implemented = set(registry.implemented_claims()) | {"translation"}  # the benchmark has a judge too
    names = [p.name for p in sorted(dst.iterdir()) if p.name in implemented and (not claims or p.name in claims)
             and (p / "verdict.json").is_file()]
    for claim in names:
        try:
            rejudge(claim, dst / claim, scale)
        except ValueError as exc:  # rows older than a measurement the judge needs: kept as judged
            log.warning("%s: not re-judged (%s)", dst / claim, str(exc)[:200])
    refs = Path(references_root)
    render_reference(refs, hardware, scale)
    write(None, refs / "reports", refs / "reports" / "matrix.md", references_root=refs)
    write_compare(None, scale, refs / "reports" / "compare" / scale, reference=newest_reference(refs, scale),
                  references_root=refs)  # re-judging one machine leaves the reference machine where publish left it
    return names


def seal_reference(references_root: str | Path = "references", hardware: str | None = None, scale: str | None = None,
                   check_tree: bool = True) -> list[Path]:
    """Give a committed reference's verdicts the integrity records they lack (results published before records
    covered every file): each verdict.json gets the sha256 of its metrics.csv, config.json, fingerprint.json and
    measured.json where it has none, and ``integrity_sealed`` (HEAD's commit, the time, the files recorded now);
    nothing is judged again, and a file that fails a record it has already is refused (ResultsError). Every reference
    (or one ``hardware`` / ``scale``); its pages are re-rendered. Returns the verdicts changed."""
    refs = Path(references_root)
    if check_tree:  # the seal names HEAD's commit: changes under the references aside
        _require_clean("--", ".", f":(exclude){refs.as_posix()}", then="")
    changed, runs = [], set()
    for vpath in sorted((refs / "results").glob(f"{hardware or '*'}/{scale or '*'}/*/verdict.json")):
        folder = vpath.parent
        verdict = read_verdict(vpath)
        verify_results(folder, verdict)  # never seal over a file that already fails its record
        integrity, _ = seal_integrity(folder, verdict.get("integrity"))
        if integrity == (verdict.get("integrity") or {}):
            continue
        recorded = sorted(set(integrity) - set(verdict.get("integrity") or {}))
        verdict["integrity"] = integrity
        verdict["integrity_sealed"] = {"commit": provenance.git_commit()["commit"], "timestamp": now(),
                                       "files": recorded}
        atomic_write_json(vpath, verdict)
        changed.append(vpath)
        runs.add((folder.parent.parent.name, folder.parent.name))
    for hw, sc in sorted(runs):
        render_reference(refs, hw, sc)
    return changed


def newest_reference(refs: Path, scale: str) -> str | None:
    """The compare pages' reference machine, as publish left it: the reference whose run (run.json) finished last
    at ``scale``; None (the first machine) where no reference has a run record."""
    runs = [(read_json(f).get("finished") or "", f.parent.parent.name)
            for f in (refs / "results").glob(f"*/{scale}/{RUN_RECORD}")]
    return f"{max(runs)[1]} (reference)" if runs else None


def render_reference(refs: Path, hardware: str, scale: str) -> None:
    """The pages and index of one reference run (``references/reports/<hw>/<scale>/``), marked as a reference."""
    res, rep = refs / "results" / hardware / scale, refs / "reports" / hardware / scale
    implemented = set(registry.implemented_claims()) | set(pages.ARTEFACT_PAGES)
    for cdir in sorted(p for p in res.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))):
        if cdir.name in implemented:
            pages.claim_page(cdir.name, cdir, rep / f"{cdir.name}.md", rep / cdir.name, kind=REFERENCE)
    render_peer_pages(res, rep, hardware, scale)
    pages.index_page(refs / "results", refs / "reports", hardware, scale, rep / "index.md", kind=REFERENCE)
