"""Progress lines for job logs.

Under Snakemake a rule's output goes through ``tee`` into ``logs/<hw>/<scale>/<rule>.log``, where no terminal
progress bar shows.  ``Progress`` writes one log line per meaningful unit of work (a training window, one
sub-experiment of a claim) at a steady cadence, each with the count done, the elapsed time and an ETA, so
``tail -f`` of the log shows where a run stands::

    p = Progress("block_numerics", total=len(configs), unit="config")
    for cfg in configs:
        ...
        p.update(note=cfg["name"])   # "block_numerics: 3/12 config (25%) [pre_ln] 1.2 min elapsed, ETA 3.6 min"
"""
from __future__ import annotations

import logging
import time

log = logging.getLogger("repro.progress")


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


class Progress:
    """Counts units of work and logs a line with an ETA at most every ``every_s`` seconds (0: every unit);
    the first and the last unit are always logged."""

    def __init__(self, label: str, total: int | None = None, unit: str = "step", every_s: float = 0.0,
                 logger: logging.Logger | None = None, done: int = 0):
        self.label, self.total, self.unit, self.every_s = label, total, unit, every_s
        self.log = logger or log
        self.done = self.start = done
        self.t0 = self.last = time.monotonic()
        self.lines = 0

    def eta_s(self) -> float | None:
        """Seconds left at the mean rate of this call so far (None while unknown)."""
        new = self.done - self.start
        if self.total is None or new <= 0:
            return None
        return max(self.total - self.done, 0) * (time.monotonic() - self.t0) / new

    def update(self, n: int = 1, note: str = "", eta_s: float | None = None, force: bool = False) -> bool:
        """Count ``n`` units; log when due. ``eta_s`` overrides the rate-based estimate (e.g. a time budget)."""
        self.done += n
        now = time.monotonic()
        final = self.total is not None and self.done >= self.total
        if not (force or final or self.lines == 0 or now - self.last >= self.every_s):
            return False
        self.last = now
        self.lines += 1
        eta = self.eta_s() if eta_s is None else eta_s
        if self.total:
            count = f"{self.done}/{self.total} {self.unit} ({100 * self.done / self.total:.0f}%)"
        else:
            count = f"{self.done} {self.unit}"
        self.log.info("%s: %s%s, %s elapsed, ETA %s", self.label, count, f" [{note}]" if note else "",
                      fmt_duration(now - self.t0), "done" if final else fmt_duration(eta))
        return True
