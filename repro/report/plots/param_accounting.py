"""C1 plots: parameter shares by slot per model, and measured vs published counts."""
from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from . import PUBLISHED_COLOR, ResultFiles, headline_numbers, legend_outside, mark_headline, save

SLOTS = ["attention", "ffn", "router", "norms", "embeddings"]


def _in_unit(value, unit_from, unit_to):
    """A published number in the measured row's unit: a fraction beside a percent x100 (and back); other units
    as they are."""
    a, b = str(unit_from).strip().lower(), str(unit_to).strip().lower()
    if a == "fraction" and b == "percent":
        return value * 100.0
    if a == "percent" and b == "fraction":
        return value / 100.0
    return value


def _headline_quantity(pub: pd.DataFrame, nums: dict) -> str | None:
    """The row the headline reports (its measured value and paper value equal the headline's)."""
    if nums.get("value") is None:
        return None
    hit = pub[(pub["value"] == nums["value"]) & (pub["published_value"] == nums.get("paper"))]
    return hit["quantity"].iloc[0] if len(hit) else None


def plots(metrics: pd.DataFrame, files: ResultFiles, out_dir) -> list[tuple[str, str]]:
    m = metrics.copy()
    m["model"] = m["sweep"].map(lambda s: s.get("model"))
    shares = m[m["metric"].isin([f"share_{s}" for s in SLOTS])].copy()
    shares["slot"] = shares["metric"].str.removeprefix("share_")
    table = shares.pivot_table(index="model", columns="slot", values="value").reindex(columns=SLOTS).fillna(0)
    fig, ax = plt.subplots(figsize=(7, 0.5 + 0.45 * len(table)))
    left = pd.Series(0.0, index=table.index)
    for slot, color in zip(SLOTS, sns.color_palette("deep", len(SLOTS))):
        ax.barh(table.index, table[slot], left=left, label=slot, color=color)
        left += table[slot]
    ax.set_xlabel("share of parameters (%)")
    ax.legend(ncol=5, fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.0))
    fig.tight_layout()
    fig.savefig(out_dir / "shares_by_slot.png", dpi=110)
    plt.close(fig)
    out = [("shares_by_slot.png", "Share of parameters by slot for each configuration (counted on the meta device).")]

    pub = m[m["published_value"].notna()].copy()
    if len(pub):
        pub["published_value"] = pd.to_numeric(pub["published_value"], errors="coerce")
        # the published number in the measured row's unit (a percent beside a fraction: x100)
        pub["published_value"] = [_in_unit(v, pu, u) for v, pu, u in
                                  zip(pub["published_value"], pub["published_unit"], pub["unit"])]
        pub = pub[pub["published_value"].notna() & (pub["published_value"] != 0)]
        pub["measured / published"] = pub["value"] / pub["published_value"]
        pub["quantity"] = pub["model"] + "." + pub["metric"]
        nums = headline_numbers(files) or {}
        head = _headline_quantity(pub, nums)
        fig, ax = plt.subplots(figsize=(7, 0.9 + 0.26 * len(pub)))
        colors = [PUBLISHED_COLOR if q == head else sns.color_palette()[0] for q in pub["quantity"]]
        ax.scatter(pub["measured / published"], pub["quantity"], c=colors, s=28, zorder=3)
        ax.axvline(1.0, color=PUBLISHED_COLOR, ls="--", lw=1.2, label="paper (measured = published)")
        dev = float((pub["measured / published"] - 1).abs().max())
        half = max(0.02, 1.25 * dev)
        ax.set_xlim(1 - half, 1 + half)
        ax.invert_yaxis()
        ax.set_ylabel("")
        ax.set_xlabel("measured / published")
        ax.set_title("Does each counted quantity match the published number?"
                     + (f"\n(black: the headline, {head})" if head else ""), fontsize=9)
        if nums.get("paper"):
            mark_headline(ax, "x", lambda v, p=float(nums["paper"]): v / p, nums)
        legend_outside(ax)
        save(fig, out_dir, "measured_vs_published.png")
        out.append(("measured_vs_published.png", "Measured / published for every published figure, in the "
                    "measured row's unit (1 = exact; the axis spans the largest deviation)."))
    return out
