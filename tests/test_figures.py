"""Every claim's figures, rendered from its committed reference (references/results/cpu-intel-xeon-2c/default/):
the figure that answers the headline marks its axis (repro.report.plots.mark_headline), and the headline's measured
value, the interval that decided it, the paper's value and the criterion it was held against (a band or a
threshold) lie inside that axis (a passing check plotted off the axis, a paper value or a threshold outside the
view, a zoom that hid the criterion). Rendered into a temporary folder; the references are only read."""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib.figure
import pytest

from repro.report.pages import make_plots, read_results
from repro.report.plots import ResultFiles, criterion, headline_numbers

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "references" / "results" / "cpu-intel-xeon-2c" / "default"
CLAIMS = sorted(p.name for p in REFERENCE.iterdir() if (p / "verdict.json").exists()) if REFERENCE.is_dir() else []


def _render(claim: str, out: Path, monkeypatch) -> tuple[list, list]:
    """The claim's figures as (name, caption) and every Figure object saved while rendering them."""
    saved = []
    original = matplotlib.figure.Figure.savefig

    def capture(fig, *args, **kwargs):
        saved.append(fig)
        return original(fig, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", capture)
    verdict, _, metrics = read_results(REFERENCE / claim)
    return make_plots(claim, metrics, REFERENCE / claim, verdict, out), saved


def _inside(value: float, lim: tuple[float, float]) -> bool:
    lo, hi = sorted(lim)
    return lo <= value <= hi


@pytest.mark.parametrize("claim", CLAIMS)
def test_headline_values_lie_inside_the_marked_axis(claim, tmp_path, monkeypatch):
    figures, saved = _render(claim, tmp_path, monkeypatch)
    assert figures, f"{claim}: no figure"
    for name, caption in figures:
        assert (tmp_path / name).stat().st_size > 1000 and caption, name
    nums = headline_numbers(ResultFiles.of(REFERENCE / claim))
    assert nums and nums.get("value") is not None, f"{claim}: the reference's headline has no numbers"
    marked = [ax for fig in saved for ax in fig.axes if hasattr(ax, "repro_headline")]
    assert marked, f"{claim}: no figure marks the headline (repro.report.plots.mark_headline)"
    wanted = {k: nums.get(k) for k in ("value", "lo", "hi", "paper")}
    wanted = {k: float(v) for k, v in wanted.items() if v is not None and math.isfinite(float(v))}
    for ax in marked:
        axis, to_axis = ax.repro_headline
        lim = ax.get_xlim() if axis == "x" else ax.get_ylim()
        off = {k: to_axis(v) for k, v in wanted.items() if not _inside(to_axis(v), lim)}
        assert not off, f"{claim}: headline numbers {off} outside the {axis} axis {lim} ({ax.get_title()!r})"
        elsewhere = getattr(ax, "repro_criterion_elsewhere", None)
        if elsewhere:  # shown in the paper's unit, decided on another quantity: the title names that criterion
            assert elsewhere in ax.get_title() or elsewhere.split(": ", 1)[-1] in ax.get_title(), (claim, elsewhere)
            continue
        # the criterion the headline was held against is drawn inside the same axis (a band or a threshold)
        span = criterion(nums)
        assert span is not None, f"{claim}: the headline's rule {nums.get('rule')!r} gives no band or threshold"
        drawn = getattr(ax, "repro_criterion", None)
        assert drawn is not None, f"{claim}: the headline's criterion {nums.get('rule')!r} is not drawn"
        assert sorted(drawn) == sorted((to_axis(span[0]), to_axis(span[1]))), (claim, drawn, span)
        assert all(lim[0] < x < lim[1] if lim[0] < lim[1] else lim[1] < x < lim[0] for x in drawn), \
            f"{claim}: criterion {drawn} not inside the {axis} axis {lim}"
        if "paper" not in wanted:  # no paper number in this unit: the figure says so
            text = " ".join([ax.get_title(), ax.figure._suptitle.get_text() if ax.figure._suptitle else ""]
                            + [t.get_text() for t in (ax.get_legend().get_texts() if ax.get_legend() else [])])
            assert "paper" in text.lower() or "suite" in text.lower(), (claim, text)


def _overlapping(labels) -> list[tuple[str, str]]:
    """Pairs of neighbouring tick labels whose drawn boxes overlap."""
    boxes = [(t.get_text(), t.get_window_extent()) for t in labels if t.get_visible() and t.get_text()]
    boxes.sort(key=lambda b: b[1].x0)
    return [(a[0], b[0]) for a, b in zip(boxes, boxes[1:]) if a[1].overlaps(b[1])]


@pytest.mark.parametrize("claim", CLAIMS)
def test_figures_are_legible(claim, tmp_path, monkeypatch):
    """No two x tick labels drawn over each other (long category names are wrapped), whole-number ticks on an axis
    of layers, and one y label per figure row (a facet grid printed its label once per row, over one another)."""
    _, saved = _render(claim, tmp_path, monkeypatch)
    for fig in saved:
        fig.canvas.draw()
        for ax in fig.axes:
            assert not _overlapping(ax.get_xticklabels()), (claim, ax.get_title(), _overlapping(ax.get_xticklabels()))
            if ax.get_xlabel().startswith("layer") and ax.get_xscale() == "linear":
                lo, hi = sorted(ax.get_xlim())
                ticks = [t for t in ax.get_xticks() if lo <= t <= hi]
                assert all(float(t).is_integer() for t in ticks), (claim, ax.get_xlabel(), ticks)
        column = {}  # the y labels of the axes one above the other: the same label twice is a repeat
        for ax in fig.axes:
            if ax.get_ylabel():
                column.setdefault(round(ax.get_position().x0, 2), []).append(ax.get_ylabel())
        assert all(len(v) == len(set(v)) for v in column.values()), (claim, column)


@pytest.mark.parametrize("rule, paper, span", [
    ("34 +- 5%", None, (32.3, 35.7)), ("3 +- 0.5", None, (2.5, 3.5)), ("-1.342 +- 0.0005", None, (-1.3425, -1.3415)),
    ("slope 0.5 +- 0.1", None, (0.4, 0.6)), ("within [0.4, 0.6]", None, (0.4, 0.6)), ("0.3..0.7", None, (0.3, 0.7)), ("within +-1%", None, (-1.0, 1.0)), ("> 0.5 (the deeper half)", None,
    (0.5, 0.5)), ("drop < 0.15 BLEU at every level up to 20%", None, (0.15, 0.15)), (">= 20", None, (20.0, 20.0)),
    ("exact", 7.0, (7.0, 7.0)), ("the paper's direction", None, None)])
def test_criterion_is_read_from_the_headline_rule(rule, paper, span):
    got = criterion({"rule": rule, "paper": paper})
    assert (got is None) == (span is None) and (got is None or all(math.isclose(a, b) for a, b in zip(got, span)))
