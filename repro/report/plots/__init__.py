"""Per-claim plot modules: ``repro.report.plots.<claim_id>.plots(metrics, files, out_dir)``.

Each returns a list of (PNG file name, caption) it wrote into ``out_dir``; the claim page embeds them. A plot reads
the claim's metrics.csv (``metrics``) and, beyond it, only the files the claim declared (its ``ARTIFACTS``, recorded
in verdict.json by ``repro.io.write_results``), through ``files`` (:class:`ResultFiles`); it never opens a
path of the results folder itself.

One visual convention for every figure (also the hardware comparison, repro/report/compare.py):

- the seaborn theme of :func:`theme` (white grid, fonts that read at 100% zoom), applied before any module plots;
- measured values in the seaborn "colorblind" palette;
- published values always in black (:data:`PUBLISHED_COLOR`): a dashed line (:func:`published_line`), a shaded band
  for a published range (:func:`published_band`) or an ``X`` marker (:func:`published_points`), labelled
  "paper: ..."; the numbers come from the registry (:func:`published`), never typed into plot code;
- shared colour and axis scales wherever panels are compared (``sharey``/one ``vmin``/``vmax`` per figure);
- legends outside the data area when they would cover it (:func:`legend_outside`);
- one figure per question; the figure that answers the claim's headline marks its axis and draws the criterion it
  was held against inside it (:func:`mark_headline`, :func:`draw_criterion`: a dark red band or dotted line),
  and a test renders every claim's figures from its committed reference and checks that the headline's measured
  value, its interval, the paper's value and the criterion lie inside that axis (tests/test_figures.py). A claim none of whose
  figures shows the headline draws it with :func:`headline_figure`.
"""
import fnmatch
import json
import re
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # figures go to files only; set before pyplot is imported
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FixedLocator, MaxNLocator, NullFormatter, NullLocator, ScalarFormatter  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from repro import registry  # noqa: E402
from repro.io import artifact_path, declared_files, read_verdict  # noqa: E402

CRITERION_COLOR = "#b2182b"  # the criterion that decided the headline: dark red, apart from the palette and the paper
PUBLISHED_COLOR = "black"
PUBLISHED_STYLE = {"color": PUBLISHED_COLOR, "ls": "--", "lw": 1.2}
BAND_STYLE = {"color": "0.55", "alpha": 0.18, "lw": 0}


class ResultFiles:
    """The declared result files of one claim's results folder: the names its verdict.json records
    (``repro.io.declared_files``), each checked against its recorded sha256 when read. Asking for an
    undeclared file raises ResultsError naming it."""

    def __init__(self, folder, verdict: dict):
        self.folder, self.verdict = Path(folder), verdict

    @classmethod
    def of(cls, folder) -> "ResultFiles":
        """The declared files of a complete results folder (its verdict.json read)."""
        return cls(folder, read_verdict(folder))

    def names(self, pattern: str = "*") -> list[str]:
        """Declared file names (relative to the results folder) matching the glob ``pattern``, sorted."""
        return sorted(n for n in declared_files(self.verdict) if fnmatch.fnmatch(n, pattern))

    def path(self, name: str) -> Path:
        return artifact_path(self.folder, name, self.verdict)

    def read_json(self, name: str):
        return json.loads(self.path(name).read_text())

    def read_csv(self, name: str):
        return pd.read_csv(self.path(name))


def theme() -> None:
    """The suite's plot theme: seaborn whitegrid, 'notebook' context slightly reduced (labels about 10-11 pt)."""
    sns.set_theme(style="whitegrid", context="notebook", palette="colorblind", font_scale=0.85,
                  rc={"figure.dpi": 110, "savefig.dpi": 110, "legend.fontsize": 8.5, "legend.title_fontsize": 9})


def published(claim: str, key: str):
    """A published value from the registry (repro/registry/published.yaml): the number or list of numbers."""
    return registry.published(claim, key)["value"]


def published_line(ax, value: float, label: str, axis: str = "h", **style) -> None:
    """A published value as a black dashed line across the panel (``axis='h'`` horizontal, ``'v'`` vertical)."""
    kw = {**PUBLISHED_STYLE, **style, "label": f"paper: {label}"}
    (ax.axhline if axis == "h" else ax.axvline)(value, **kw)


def published_band(ax, low: float, high: float, label: str, axis: str = "h") -> None:
    """A published range as a grey band (``axis='h'``: between two y values; ``'v'``: between two x values)."""
    (ax.axhspan if axis == "h" else ax.axvspan)(low, high, **BAND_STYLE, label=f"paper: {label}")


def published_points(ax, x, y, label: str, **style) -> None:
    """Published values at given coordinates as black X markers."""
    ax.scatter(x, y, marker="X", s=55, color=PUBLISHED_COLOR, zorder=5, label=f"paper: {label}", **style)


def legend_outside(ax, **kw) -> None:
    """The panel's legend to the right of the axes, so it never covers data or annotations."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False, **kw)


def with_sweep(frame, *keys):
    """A copy of a metrics frame with the named sweep variables as columns (None where a row lacks one)."""
    frame = frame.copy()
    for k in keys:
        frame[k] = frame["sweep"].map(lambda s, k=k: s.get(k))
    return frame


def median_error_bars(frame) -> list:
    """[below, above] error-bar lengths of paired timing-ratio rows: the order-statistic interval of the median the
    measurement recorded (sweep ``ci_below`` / ``ci_above``, repro.bench.timing.ci_fields); rows measured before it,
    or with too few rounds for one: IQR/2 (the caption says which)."""
    f = with_sweep(frame, "ci_below", "ci_above")
    has_ci = f["ci_below"].notna() & f["ci_above"].notna()
    half = f["spread"].fillna(0) / 2
    return [f["ci_below"].where(has_ci, half).astype(float).to_numpy(),
            f["ci_above"].where(has_ci, half).astype(float).to_numpy()]


def headline_numbers(files: "ResultFiles") -> dict | None:
    """The numbers of the check that decided the verdict (repro.report.headline.headline_check): value, lo, hi,
    unit, paper, paper_text; None when the verdict has no headline with numbers."""
    from repro.report.headline import headline_check  # lazy: keeps the plot package free of report imports

    check = headline_check(files.verdict or {})
    return None if check is None else check.get("numbers")


_NUMBER = r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?"
_BAND = re.compile(rf"({_NUMBER})\s*\+-\s*({_NUMBER})\s*(%?)")
_RANGE = re.compile(rf"\[\s*({_NUMBER})\s*,\s*({_NUMBER})\s*\]|^\s*({_NUMBER})\s*\.\.\s*({_NUMBER})\s*$")
_THRESHOLD = re.compile(rf"(>=|<=|>|<)\s*({_NUMBER})")
_P_VALUE = re.compile(r"\bp\s*<")
_WITHIN = re.compile(rf"within\s*\+-\s*({_NUMBER})")  # an equivalence bound around no change: |x| <= w


def criterion(nums: dict | None) -> tuple[float, float] | None:
    """The criterion that decided the headline as the span it puts on the headline's axis: ``(c - w, c + w)`` for a
    band ("34 +- 5%", "3 +- 0.5", "slope 0.5 +- 0.1") or a range
    ("within [0.4, 0.6]", "0.3..0.7"), ``(t, t)`` for a threshold ("> 0.5", "drop < 0.15 BLEU ...", ">= 20"), the
    paper's value for "exact"; read from the headline's ``rule`` (repro.verdicts.numbers, written by the judge from
    its thresholds). None when the headline has no rule in these forms."""
    rule = str((nums or {}).get("rule") or "")
    band, span, within = _BAND.search(rule), _RANGE.search(rule), _WITHIN.search(rule)
    if _P_VALUE.search(rule):  # a test's p-value decided it: no line on the value's own axis
        return None
    if within:  # "within +-1%": the change lies within w of none
        return -abs(float(within.group(1))), abs(float(within.group(1)))
    if span:  # "[a, b]" or a whole rule "a..b"
        lo, hi = (span.group(1), span.group(2)) if span.group(1) is not None else (span.group(3), span.group(4))
        return float(lo), float(hi)
    if band:
        centre, width = float(band.group(1)), float(band.group(2))
        width = abs(centre) * width / 100 if band.group(3) else width
        return centre - width, centre + width
    threshold = _THRESHOLD.search(rule)
    if threshold:
        return float(threshold.group(2)), float(threshold.group(2))
    if rule.strip() == "exact" and (nums or {}).get("paper") is not None:
        return float(nums["paper"]), float(nums["paper"])
    return None


def draw_criterion(ax, axis: str, nums: dict | None, to_axis=None) -> None:
    """The criterion of :func:`criterion` drawn on ``ax`` along ``axis``: a dark red band or dotted line labelled
    with its rule (the suite's or the paper's), the axis widened to hold it with a margin (a figure zoomed on the
    measured value must still show what it was held against). Records the span as ``ax.repro_criterion``."""
    span = criterion(nums)
    if span is None:
        return
    to_axis = to_axis or (lambda v: v)
    lo, hi = sorted((to_axis(span[0]), to_axis(span[1])))
    whose = "the suite's criterion" if nums.get("criterion") == "suite" else "criterion"
    label = f"{whose}: {nums['rule']}"
    if hi > lo:
        (ax.axvspan if axis == "x" else ax.axhspan)(lo, hi, color=CRITERION_COLOR, alpha=0.10, lw=0, label=label)
    else:
        (ax.axvline if axis == "x" else ax.axhline)(lo, color=CRITERION_COLOR, ls=":", lw=1.6, label=label)
    get, set_ = (ax.get_xlim, ax.set_xlim) if axis == "x" else (ax.get_ylim, ax.set_ylim)
    a, b = get()
    flipped = a > b
    a, b = sorted((a, b))
    if lo <= a or hi >= b:  # widened: a margin on both sides, so neither the criterion nor the data touch an edge
        pad = 0.08 * (max(b, hi) - min(a, lo) or abs(hi) or 1.0)
        new = (min(a, lo) - pad, max(b, hi) + pad)
        set_(*(new[::-1] if flipped else new))
    ax.repro_criterion = (lo, hi)


def mark_headline(ax, axis: str, to_axis=None, nums: dict | None = None) -> None:
    """Mark ``ax`` as the panel that shows the claim's headline along ``axis`` ('x' or 'y'); ``to_axis`` maps a
    headline number (value, interval, paper) to where it is drawn on that axis, when the panel shows it in other
    terms (e.g. measured / published). With the headline's ``nums``, its criterion is drawn inside the axis
    (:func:`draw_criterion`). The figure test checks those numbers and the criterion lie inside the axis limits."""
    draw_criterion(ax, axis, nums, to_axis)
    ax.repro_headline = (axis, to_axis or (lambda v: v))


def save_headline(fig, ax, out_dir, name: str, xlabel: str, title: str, caption: str, nums: dict | None = None
                  ) -> list[tuple[str, str]]:
    """Finish and save a figure whose ``ax`` shows the headline along x: labels, the headline mark with its
    criterion (:func:`mark_headline`), the legend outside; returns ``[(name, caption)]`` for the claim page."""
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=9)
    mark_headline(ax, "x", nums=nums)
    legend_outside(ax)
    save(fig, out_dir, name)
    return [(name, caption)]


def plain_log_ticks(ax, axis: str, ticks) -> None:
    """Plain numbers as the ticks of a log axis (``ticks``: the values to label), no overlapping minor labels."""

    target = ax.xaxis if axis == "x" else ax.yaxis
    kept = []
    for t in sorted(set(float(t) for t in ticks if t > 0)):
        if not kept or t / kept[-1] >= 1.25:  # labels at least a quarter apart on the log axis: none overlap
            kept.append(t)
    target.set_major_locator(FixedLocator(kept))
    target.set_major_formatter(ScalarFormatter())
    target.set_minor_locator(NullLocator())
    target.set_minor_formatter(NullFormatter())


def integer_ticks(ax, axis: str = "x", values=None) -> None:
    """Whole-number ticks on an axis of layers, depths or counts (no "1.5 layers"): at ``values`` when given (the
    depths measured), else at most ten integers the axis spans."""
    target = ax.xaxis if axis == "x" else ax.yaxis
    if values is not None:
        target.set_major_locator(FixedLocator(sorted({int(v) for v in values})))
    else:
        target.set_major_locator(MaxNLocator(nbins=10, integer=True))
    target.set_minor_locator(NullLocator())


def grid_labels(grid, xlabel: str, ylabel: str) -> None:
    """A seaborn FacetGrid's axis labels, the y label once for the figure when it has several rows (per row it is
    printed beside each, the same words over one another)."""
    if grid.axes.shape[0] > 1:
        grid.set_axis_labels(xlabel, "")
        grid.figure.supylabel(ylabel, fontsize=10, x=-0.01)  # left of the widest tick labels (log axes)
    else:
        grid.set_axis_labels(xlabel, ylabel)


def wrap_ticks(ax, axis: str = "x", width: int = 14) -> None:
    """Category tick labels broken into lines of at most ``width`` characters, so neighbours never overlap."""
    labels = ax.get_xticklabels() if axis == "x" else ax.get_yticklabels()
    texts = [textwrap.fill(t.get_text(), width, break_long_words=False) for t in labels]
    ticks = ax.get_xticks() if axis == "x" else ax.get_yticks()
    (ax.set_xticks if axis == "x" else ax.set_yticks)(ticks, texts)


def headline_figure(files: "ResultFiles", out_dir, name: str = "headline.png", label: str | None = None,
                    interval: str = "interval that decided") -> list[tuple[str, str]]:
    """The claim's headline as one panel: the measured value with the interval that decided it, beside the paper's
    value (a black dashed line) or, where the paper gives no number in this unit, a title that says so.
    ``interval``: what the drawn interval is, where the headline is shown in the paper's unit but decided on
    another quantity (the title, ``label``, then names the deciding interval and criterion)."""
    from repro.report.headline import fmt_number, headline_check, headline_name  # lazy: as headline_numbers

    nums = headline_numbers(files)
    if not nums or nums.get("value") is None:
        return []
    check = headline_check(files.verdict)
    v, lo, hi, paper = nums["value"], nums.get("lo"), nums.get("hi"), nums.get("paper")
    fig, ax = plt.subplots(figsize=(6.4, 1.9))
    err = None if lo is None or hi is None else [[v - lo], [hi - v]]
    ax.errorbar([v], [0], xerr=err, fmt="o", color=sns.color_palette()[0], capsize=4,
                label="measured" + (f" ({interval})" if err else " (no interval)"))
    shown = [v] + ([lo, hi] if err else [])
    if paper is not None:
        published_line(ax, paper, fmt_number(paper), axis="v")
        shown.append(paper)
    span = (max(shown) - min(shown)) or abs(v) or 1.0
    ax.set_xlim(min(shown) - 0.25 * span, max(shown) + 0.25 * span)
    ax.set_yticks([])
    title = label or headline_name(files.verdict.get("claim"), check)
    if paper is None:
        title += f"\nno paper value in this unit; the claim: {nums.get('paper_text') or 'none stated'}"
    # the criterion is drawn only on the axis of the quantity it decided (a headline shown in the paper's unit but
    # decided on another names its criterion in the title instead)
    drawn = interval == "interval that decided" and criterion(nums) is not None
    if not drawn and nums.get("rule"):
        ax.repro_criterion_elsewhere = nums["rule"]  # named in the title, not on this axis's scale
        if nums["rule"] not in title:
            title += f"\n{'the suite' if nums.get('criterion') == 'suite' else 'the paper'}'s criterion: {nums['rule']}"
    return save_headline(fig, ax, out_dir, name, nums.get("unit") or "", title,
                         f"The headline: the measured value with its {interval}"
                         + ("" if interval == "interval that decided" or not label else f" ({label.splitlines()[-1]})")
                         + (" beside the paper's value (dashed)" if paper is not None else
                            f"; the paper gives no number in this unit ({nums.get('paper_text') or 'none stated'})")
                         + (f"; red: the criterion it was held against ({nums['rule']})." if drawn else "."),
                         nums if drawn else {**nums, "rule": None})


def save(fig, out_dir, name: str) -> None:
    """Tight layout, PNG at 110 dpi into ``out_dir`` (legends outside the axes included), figure closed."""
    fig.tight_layout()
    fig.savefig(out_dir / name, dpi=110, bbox_inches="tight")
    plt.close(fig)
