"""C8 plots: saved bytes term by term beside Korthikanti Eq. 1, memory vs depth and sequence length per checkpoint
policy (Chen et al. 2016), and the time overhead of each policy."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from . import ResultFiles, headline_figure, wrap_ticks, PUBLISHED_COLOR, legend_outside, median_error_bars, published, published_line, published_points, save

# registry keys of Korthikanti Eq. 1's coefficients per (section, kind)
PUBLISHED_KEYS = {("attention", "sbh"): "korthikanti_attention_sbh_coeff", ("mlp", "sbh"): "korthikanti_mlp_sbh_coeff",
                  ("norms", "sbh"): "korthikanti_norm_sbh_coeff", ("total", "sbh"): "korthikanti_total_sbh_coeff",
                  ("total", "score"): "korthikanti_score_coeff", ("attention", "score"): "korthikanti_score_coeff"}


def _col(frame, key):
    return frame["sweep"].map(lambda s: s.get(key))


def _terms(metrics, out_dir):
    m = metrics[(metrics["metric"] == "saved_coeff_16bit")].copy()
    if not len(m):
        return None
    for k in ("backend", "dtype", "dropout", "policy", "section", "kind"):
        m[k] = _col(m, k)
    m = m[(m["policy"] == "none") & (m["section"] != "total") & (m["dtype"] == m["dtype"].iloc[0])]
    m["term"] = m["section"] + np.where(m["kind"] == "score", " (as^2b)", " (sbh)")
    m["setting"] = m["backend"] + ", dropout " + m["dropout"].astype(str)
    fig, ax = plt.subplots(figsize=(7, 3.6))
    sns.barplot(data=m, x="term", y="value", hue="setting", ax=ax)
    for i, label in enumerate(ax.get_xticklabels()):
        sec, kind = label.get_text().split(" (")
        key = PUBLISHED_KEYS.get((sec, "score" if kind.startswith("as") else "sbh"))
        if key is not None:
            pub = published("activation_checkpointing", key)
            ax.plot([i - 0.4, i + 0.4], [pub, pub], color=PUBLISHED_COLOR, lw=2, ls="--",
                    label="paper: Korthikanti Eq. 1" if i == 0 else None)
    ax.set_ylabel("bytes / sbh  or  / as^2b (16-bit convention)")
    ax.set_xlabel(f"term ({m['dtype'].iloc[0]} run)")
    wrap_ticks(ax, "x", 12)
    legend_outside(ax)
    save(fig, out_dir, "terms.png")
    k = {sk: published("activation_checkpointing", key) for sk, key in PUBLISHED_KEYS.items()}
    return ("terms.png", "Per-layer saved activations by term, in the paper's convention (2 bytes per float element, "
            f"1 byte per dropout-mask element), beside Korthikanti's {k[('attention', 'sbh')]:g}sbh + "
            f"{k[('attention', 'score')]:g}as^2b (attention), {k[('mlp', 'sbh')]:g}sbh (MLP), "
            f"{k[('norms', 'sbh')]:g}sbh (norms; black dashed bars). The as^2b term exists only for the math backend.")


def _sweep(metrics, out_dir, axis, name, caption):
    m = metrics[metrics["metric"].isin(["peak_bytes_fwd_bwd", "retained_bytes_after_forward"])].copy()
    m = m[_col(m, "axis") == axis]
    if not len(m):
        return None
    for k in ("backend", "policy", axis):
        m[k] = _col(m, k)
    m["MiB"] = m["value"] / 2**20
    m["measure"] = m["metric"].map({"peak_bytes_fwd_bwd": "peak in fwd+bwd",
                                    "retained_bytes_after_forward": "kept after forward"})
    m["series"] = m["policy"] + (" / " + m["backend"] if m["backend"].nunique() > 1 else "")
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), sharex=True)
    for ax, meas in zip(axes, ("peak in fwd+bwd", "kept after forward")):
        d = m[(m["measure"] == meas) & (m["MiB"] > 0)]
        sns.lineplot(data=d, x=axis, y="MiB", hue="series", marker="o", ax=ax)
        ax.set_xscale("log"); ax.set_yscale("log"); ax.set_title(meas)
        ticks = sorted(m[axis].unique())
        ax.set_xticks(ticks, [str(t) for t in ticks]); ax.minorticks_off()
        if axis == "depth" and len(d):
            x = np.array(sorted(d[axis].unique()), dtype=float)
            y0 = d["MiB"].min()
            ax.plot(x, y0 * (x / x[0]) ** 0.5, ls=":", color="gray", label="slope 1/2")
            ax.plot(x, y0 * (x / x[0]), ls="--", color="gray", label="slope 1")
        ax.legend(fontsize=8)
    save(fig, out_dir, name)
    return (name, caption)


def _time(metrics, out_dir):
    m = metrics[metrics["metric"] == "time_overhead"].copy()
    if not len(m):
        return None
    m["policy"] = _col(m, "policy")
    fig, ax = plt.subplots(figsize=(6, 3.4))
    ax.bar(m["policy"], m["value"], yerr=median_error_bars(m), color=sns.color_palette()[0], label="measured")
    pred = metrics[metrics["metric"] == "predicted_overhead_one_forward"]
    if len(pred):
        ax.axhline(float(pred["value"].iloc[0]), color="gray", ls="--", label="one extra forward (measured t_fwd)")
    pub = m.dropna(subset=["published_value"])
    published_points(ax, pub["policy"], pd.to_numeric(pub["published_value"]), "Korthikanti Table 4 (22B)")
    chen = published("activation_checkpointing", "chen_extra_time")
    published_line(ax, chen, f"Chen ~{chen:g}%", ls=":")
    ax.set_ylabel("fwd+bwd time overhead vs none (%)")
    legend_outside(ax)
    save(fig, out_dir, "time_overhead.png")
    return ("time_overhead.png", "Median paired time overhead of each policy over no checkpointing (bars: its "
            "order-statistic confidence interval, or IQR/2 for rows measured before it), "
            "the one-extra-forward prediction, and the published overheads.")


def _figures(metrics: pd.DataFrame, files: ResultFiles, out_dir) -> list[tuple[str, str]]:
    out = [_terms(metrics, out_dir),
           _sweep(metrics, out_dir, "depth", "memory_vs_depth.png",
                  "Activation memory vs depth n per policy (log-log): peak during forward+backward (left) and what "
                  "the forward keeps (right); dotted slope 1/2 (Chen's sqrt(n)), dashed slope 1."),
           _sweep(metrics, out_dir, "seq_len", "memory_vs_seq.png",
                  "Activation memory vs sequence length per policy and attention backend (log-log): math attention "
                  "keeps the as^2b scores, SDPA does not."),
           _time(metrics, out_dir)]
    return [o for o in out if o]


def plots(metrics: pd.DataFrame, files: ResultFiles, out_dir) -> list[tuple[str, str]]:
    """The headline first (measured, its interval, the paper's value: :func:`headline_figure`), then the rest."""
    return [*headline_figure(files, out_dir), *_figures(metrics, files, out_dir)]
