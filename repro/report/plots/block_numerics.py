"""C11 plots: activation values measured vs published, and the deep-stack trainability experiment."""
from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from . import ResultFiles, headline_figure, published_points, wrap_ticks


def _figures(metrics: pd.DataFrame, files: ResultFiles, out_dir) -> list[tuple[str, str]]:
    out = []
    act = metrics[metrics["metric"].isin(["relu_output", "gelu_output", "silu_output"])].copy()
    if len(act):
        act["x"] = act["sweep"].map(lambda s: s["x"])
        act["activation"] = act["metric"].str.removesuffix("_output")
        fig, ax = plt.subplots(figsize=(5, 3.5))
        sns.lineplot(data=act, x="x", y="value", hue="activation", marker="o", ax=ax)
        published_points(ax, act["x"], pd.to_numeric(act["published_value"]), "published values")
        ax.legend()
        fig.tight_layout(); fig.savefig(out_dir / "activations.png", dpi=110); plt.close(fig)
        out.append(("activations.png", "ReLU / GELU / SiLU of the suite's FFN (lines) and the published values (black X)."))
    deep = metrics[metrics["metric"] == "copy_task_final_loss_ratio"].copy()
    if len(deep):
        deep["stack"] = deep["sweep"].map(lambda s: f"{s['stack']} ({s['layers']} layers)")
        fig, ax = plt.subplots(figsize=(5, 3.2))
        sns.barplot(data=deep, x="stack", y="value", ax=ax, errorbar=("pi", 100), color=sns.color_palette()[0])
        ax.axhline(1.0, color="gray", ls="--", lw=1)
        ax.set_ylabel("final loss / ln(vocab)")
        ax.set_xlabel("")
        wrap_ticks(ax, "x", 14)
        fig.tight_layout(); fig.savefig(out_dir / "deep_stack.png", dpi=110); plt.close(fig)
        out.append(("deep_stack.png", "Copy task: final training loss relative to chance; 1 = nothing learned."))
    return out


def plots(metrics: pd.DataFrame, files: ResultFiles, out_dir) -> list[tuple[str, str]]:
    """The headline first (measured, its interval, the paper's value: :func:`headline_figure`), then the rest."""
    return [*headline_figure(files, out_dir), *_figures(metrics, files, out_dir)]
