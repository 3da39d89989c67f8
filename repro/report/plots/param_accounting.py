"""C1 plots: parameter shares by slot per model, and measured vs published counts."""
from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from . import ResultFiles

SLOTS = ["attention", "ffn", "router", "norms", "embeddings"]


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
        pub = pub[pub["published_value"].notna() & (pub["published_value"] != 0)]
        pub["measured / published"] = pub["value"] / pub["published_value"]
        pub["quantity"] = pub["model"] + "." + pub["metric"]
        fig, ax = plt.subplots(figsize=(7, 0.4 + 0.28 * len(pub)))
        sns.barplot(data=pub, y="quantity", x="measured / published", ax=ax, color=sns.color_palette()[0])
        ax.axvline(1.0, color="black", lw=1)
        ax.set_xlim(0.9, 1.1)
        fig.tight_layout()
        fig.savefig(out_dir / "measured_vs_published.png", dpi=110)
        plt.close(fig)
        out.append(("measured_vs_published.png", "Measured / published for every published figure (1 = exact)."))
    return out
