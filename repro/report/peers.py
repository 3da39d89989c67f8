"""Pages of the peer throughput benchmarks (``repro.peers``) in a run or a committed reference.

The peers are benchmarks, not claims: ``repro.peers.throughput`` (the suite against ``torch.nn.Transformer``) and
``repro.peers.fairseq`` (against fairseq itself) write ``<results>/<hw>/<scale>/_bench/<name>/`` (summary.json,
fingerprint.json, config.json, metrics.csv, verdict.json). A reference keeps those files under
``references/results/<hw>/<scale>/_bench/<name>/``; its page ``references/reports/<hw>/<scale>/<name>.md`` is
rendered from them by the peer's own ``markdown`` (the same page the benchmark writes), with a note of which commit
and machine measured it: a peer is run after the reference run it decodes with, so its commit or hardware id may
differ from the claims'. The index links the pages with their median ratios (:func:`index_lines`).
"""
from __future__ import annotations

import importlib
import json
from pathlib import Path

from repro.errors import ResultsError
from repro.io import atomic_write_text

BENCH_DIR = "_bench"
# folder name under _bench/ -> (module with markdown(), what the page compares, the peer's key in summary.json)
PEERS = {"throughput": ("repro.peers.throughput", "suite vs torch.nn.Transformer", "reference"),
         "fairseq_peer": ("repro.peers.fairseq", "suite vs fairseq", "fairseq")}
REQUIRED = ("summary.json", "fingerprint.json", "config.json", "metrics.csv", "verdict.json")


def peer_folders(run: Path) -> dict[str, Path]:
    """{name: folder} of the peer benchmarks recorded in the run (or reference) folder ``run`` (``<hw>/<scale>/``)."""
    return {name: run / BENCH_DIR / name for name in PEERS if (run / BENCH_DIR / name).is_dir()}


def read_peer(folder: Path, scale: str) -> tuple[dict, dict, dict]:
    """(summary, fingerprint, benchmark config) of one peer folder measured at ``scale``; ResultsError naming what is
    missing, damaged or measured at another scale."""
    missing = [n for n in REQUIRED if not (folder / n).is_file()]
    if missing:
        raise ResultsError(f"{folder}: not a complete peer benchmark (no {', '.join(missing)}); rerun it "
                        f"(scripts/peers.sh)")
    try:
        summary, fp, cfg = (json.loads((folder / n).read_text()) for n in ("summary.json", "fingerprint.json",
                                                                           "config.json"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{folder}: unreadable summary.json, fingerprint.json or config.json ({exc})") from exc
    if not isinstance((fp.get("git") or {}).get("commit"), str):
        raise ResultsError(f"{folder}: fingerprint.json records no git commit; rerun it from a git checkout")
    cfg = cfg.get("config", cfg)
    if cfg.get("scale") != scale:
        raise ResultsError(f"{folder}: measured at scale {cfg.get('scale')!r}, not {scale!r}")
    return summary, fp, cfg


def measured_by(fp: dict, summary: dict) -> tuple[str, bool, str]:
    """(commit, dirty, hardware id) that measured a peer benchmark, as its fingerprint records them."""
    git = fp.get("git") or {}
    return git.get("commit") or "", bool(git.get("dirty")), str(fp.get("hardware_id") or summary.get("hardware"))


def run_commits(run: Path) -> set[str]:
    """The commits that measured the claims of a run (or reference) folder (verdict.json's provenance)."""
    commits = set()
    for v in run.glob("*/verdict.json"):
        if v.parent.name.startswith(("_", ".")):
            continue
        try:
            prov = json.loads(v.read_text()).get("provenance") or {}
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        commit = (prov.get("measured") or {}).get("commit")
        if commit:
            commits.add(commit)
    return commits


def provenance_note(name: str, folder: Path, hardware: str, fp: dict, summary: dict, commits: set[str]) -> str:
    """The reference page's note: where its files are, the commit and machine that measured it, and how they differ
    from the reference run's (``hardware``, the claims' measuring ``commits``)."""
    commit, dirty, hw = measured_by(fp, summary)
    cpu = (fp.get("hardware") or {}).get("cpu")
    when = str(fp.get("timestamp") or "?").replace("+00:00", " UTC")
    note = (f"Committed reference of `{hardware}` ({BENCH_DIR}/{name}/ beside the claims' results): measured at "
            f"commit `{commit[:10]}`{' (dirty tree)' if dirty else ''} on `{hw}`{f' ({cpu})' if cpu else ''}, {when}.")
    if commits and commit not in commits:
        note += (f" **Another commit than the reference run's claims** (measured at "
                 f"{', '.join(f'`{c[:10]}`' for c in sorted(commits))}).")
    if hw != hardware:
        note += f" **Measured on hardware `{hw}`**, published under `{hardware}`."
    return note


def peer_page(name: str, folder: Path, hardware: str, scale: str, page: Path, commits: set[str]) -> Path:
    """Render one peer's reference page from its results folder (checked: the scale it was measured at, a readable
    summary); ResultsError when it cannot be."""
    summary, fp, cfg = read_peer(folder, scale)
    module = importlib.import_module(PEERS[name][0])
    try:
        text = module.markdown(summary, measured_by(fp, summary)[2], scale, fp, cfg)
    except (KeyError, TypeError, IndexError, ValueError) as exc:
        raise ResultsError(f"{folder}: summary.json lacks what {PEERS[name][0]}'s page needs ({type(exc).__name__}: "
                        f"{exc}); rerun the benchmark with this checkout") from exc
    title, _, rest = text.partition("\n")
    atomic_write_text(page, f"{title}\n\n{provenance_note(name, folder, hardware, fp, summary, commits)}\n{rest}")
    return page


def render_peer_pages(run: Path, reports: Path, hardware: str, scale: str) -> list[Path]:
    """Every peer page of a reference folder ``run`` into ``reports`` (``<name>.md``)."""
    commits = run_commits(run)
    return [peer_page(name, folder, hardware, scale, reports / f"{name}.md", commits)
            for name, folder in peer_folders(run).items()]


def index_lines(run: Path) -> list[str]:
    """The index's lines linking the peer pages of a run folder (``<name>.md`` beside the index) with their median
    suite/peer ratios; none when the run has no peer results."""
    found = peer_folders(run)
    if not found:
        return []
    items = []
    for name, folder in found.items():
        _, what, key = PEERS[name]
        try:
            tasks = json.loads((folder / "summary.json").read_text())["tasks"]
            ratios = ", ".join(f"{t} {e[f'suite_over_{key}']['median']:.3f}" for t, e in tasks.items())
        except (OSError, ValueError, KeyError, TypeError):
            ratios = "no readable summary.json"
        items.append(f"[{what}]({name}.md): {ratios}")
    return ["## Peer throughput", "",
            "Benchmarks, not claims (docs/running.md): training and decoding throughput of the suite against other "
            "implementations on this machine, median suite / peer ratio per task (> 1: the suite is faster). "
            + "; ".join(items) + ".", ""]
