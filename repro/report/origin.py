"""Where a verdict came from, for every page, index row and matrix cell: this checkout's run (``results/``) or a
committed reference (``references/results/``), which commit measured it and when, which judged it, and whether what measured it has changed since (stale: the checkout would
measure something else; repro.provenance.stale_reasons names which of code, config and software).

The two sources are read side by side and never mixed: :func:`sources` lists them, a column of the matrix or the
hardware comparison is one (source, hardware, scale), and a reference is labelled ``<hardware> (reference)``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from repro import config, plan, provenance

RUN, REFERENCE = "run", "reference"
# Beside a published claim's results when it was measured on a modified tree whose measurement code is the
# publishing commit's (repro.report.publish, --waiver): the recorded reason, shown on its pages.
WAIVER = "published_waiver.json"


@dataclass(frozen=True)
class Source:
    """One results tree: ``results`` (holds <hardware>/<scale>/<claim>/) and the ``reports`` tree its pages are in."""
    kind: str       # RUN or REFERENCE
    results: Path
    reports: Path

    def label(self, hardware: str) -> str:
        return hardware if self.kind == RUN else f"{hardware} (reference)"


def sources(results_root: str | Path | None, reports_root: str | Path | None,
            references_root: str | Path | None = None) -> list[Source]:
    """This checkout's runs (none when ``results_root`` is None: the references' own matrix), then the committed
    references (``references_root/results`` and ``/reports``)."""
    out = [Source(RUN, Path(results_root), Path(reports_root or Path(results_root).parent / "reports"))] \
        if results_root is not None else []
    if references_root is not None and (results_root is None or
                                        Path(references_root).resolve() != Path(results_root).resolve()):
        out.append(Source(REFERENCE, Path(references_root) / "results", Path(references_root) / "reports"))
    return out


def recorded_keys(verdict: dict) -> dict:
    """The provenance keys a verdict.json records for its measurement ({} when it predates them)."""
    prov = verdict.get("provenance") if isinstance(verdict.get("provenance"), dict) else {}
    return dict((prov.get("measured") or {}).get("keys") or {})


@dataclass
class Origin:
    kind: str                      # RUN or REFERENCE
    hardware: str
    commit: str | None             # the commit that measured
    dirty: bool | None
    measured_at: str | None        # start of the measurement (UTC)
    judged_commit: str | None
    judged_at: str | None
    stale: str | None              # why the checkout would measure something else (None: fresh)
    keys: dict
    stale_kinds: tuple = field(default=())  # which of code, config, software differ (provenance.STALE_KINDS)

    def commit_short(self) -> str:
        return (self.commit or "?")[:7] + ("+dirty" if self.dirty else "")

    def date(self) -> str:
        return (self.measured_at or "?").replace("T", " ").replace("+00:00", " UTC")

    def text(self) -> str:
        """One line: 'this checkout's run: measured at commit abc1234 on 2026-12-02 06:10:00 UTC' or
        'reference (committed): measured on cpu-x at commit abc1234 on ...; STALE: ...'."""
        who = "this checkout's run" if self.kind == RUN else f"reference run of `{self.hardware}`, committed"
        line = f"{who}: measured at commit `{self.commit_short()}` on {self.date()}"
        if self.judged_commit and self.judged_commit != self.commit:
            line += f", judged at commit `{self.judged_commit[:7]}`"
        if self.stale:
            line += f"; **stale** ({self.stale_label()}): {self.stale} (the checkout would measure it anew)"
        return line

    def short(self) -> str:
        """A cell's note: 'run abc1234 12-02 06:10' or 'ref abc1234 2026-12-01', with 'stale' when it is."""
        when = (self.measured_at or "")[:16].replace("T", " ")
        text = f"{'run' if self.kind == RUN else 'ref'} {self.commit_short()} {when}".strip()
        return text + (" **stale**" if self.stale else "")  # which kind: on the claim's page and the matrix

    def stale_label(self) -> str:
        """'code', 'config', 'software' or a combination ('code, software'): what makes it stale."""
        return ", ".join(self.stale_kinds) or "code"


def origin_of(verdict: dict, kind: str, claim: str, fingerprint: dict | None = None) -> Origin:
    prov = verdict.get("provenance") if isinstance(verdict.get("provenance"), dict) else {}
    measured, judged = prov.get("measured") or {}, prov.get("judged") or {}
    rejudged = verdict.get("rejudged") if isinstance(verdict.get("rejudged"), dict) else {}
    git = (fingerprint or {}).get("git") or {}
    keys = recorded_keys(verdict)
    scale = str(verdict.get("scale") or "")
    reasons = provenance.stale_reasons(keys, claim, checkout_config_key(claim, scale),
                                       plan_now=checkout_plan_hash(claim, scale))
    return Origin(kind=kind, hardware=str(verdict.get("hardware") or ""),
                  commit=measured.get("commit") or verdict.get("commit") or git.get("commit"),
                  dirty=measured.get("dirty", git.get("dirty")),
                  measured_at=measured.get("started") or verdict.get("timestamp"),
                  judged_commit=judged.get("commit") or rejudged.get("commit"),
                  judged_at=judged.get("timestamp") or rejudged.get("timestamp"),
                  stale=provenance.stale_text(reasons), keys=keys,
                  stale_kinds=tuple(k for k in provenance.STALE_KINDS if k in reasons))


@lru_cache(maxsize=None)
def checkout_config_key(claim: str, scale: str) -> str | None:
    """The config key the checkout's own parameters of ``claim`` at ``scale`` have (no overrides: what
    config/claims/<claim>.yaml says), as the workflow computes it; None when that section does not validate as is
    (paper scale without its data paths): then the config is not compared."""
    try:
        return provenance.config_key(config.job_params(claim, scale))
    except (config.ConfigError, KeyError):
        return None


@lru_cache(maxsize=None)
def checkout_plan_hash(claim: str, scale: str) -> str | None:
    """The hash of the checkout's plan block of ``claim`` at ``scale`` (repro.provenance.plan_hash); None when there
    is none or it does not validate (then the plan is not compared)."""
    try:
        return provenance.plan_hash(plan.block(claim, scale))
    except (config.ConfigError, KeyError):
        return None


def difference(a: dict, b: dict) -> str:
    """What separates two measurements by their recorded keys: 'code' (the measurement code differs, or either
    predates the keys), 'config', 'software', else 'machine' (same code, config and software: only the machine
    differs)."""
    if not a.get("code") or not b.get("code") or a["code"] != b["code"]:
        return "code"
    if a.get("config") != b.get("config"):
        return "config"
    if a.get("software") != b.get("software"):
        return "software"
    return "machine"
