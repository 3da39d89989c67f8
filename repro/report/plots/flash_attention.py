"""C7 plots: attention peak memory and time vs sequence length per backend (Dao et al. 2022, Sec. 4 / Fig 3), Table 21's
memory beside the measured values, and the Fig 2 shape / end-to-end step times."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from repro import registry
from . import ResultFiles, headline_figure, PUBLISHED_COLOR, legend_outside, published, save

# Dao et al. Table 21 (registry keys) by backend and sequence length
TABLE21_KEYS = {"math": {1024: "memory_1k_pytorch", 4096: "memory_4k_pytorch"},
                "flash": {1024: "memory_1k_flash", 4096: "memory_4k_flash", 65536: "memory_64k_flash"}}


def _cols(frame, *keys):
    frame = frame.copy()
    for k in keys:
        frame[k] = frame["sweep"].map(lambda s, k=k: s.get(k))
    return frame


def _vs_n(metrics, out_dir, name, ylabel, fname, caption, ref_slopes):
    m = metrics[(metrics["metric"] == name) & metrics["value"].notna()]
    if not len(m):
        return None
    m = _cols(m, "provider", "pass", "causal", "seq_len", "head_dim", "dtype")
    m["causal"] = m["causal"].map({True: "causal", False: "full"})
    g = sns.relplot(data=m, x="seq_len", y="value", hue="provider", style="causal", col="pass", kind="line",
                    marker="o", height=3, aspect=1.1)
    for ax in g.axes.flat:
        ax.set_xscale("log", base=2); ax.set_yscale("log")
        if ref_slopes and len(m):
            x = np.array(sorted(m["seq_len"].unique()), dtype=float)
            y0 = m["value"].median()
            for s, ls in ref_slopes:
                ax.plot(x, y0 * (x / x[len(x) // 2]) ** s, ls=ls, color="gray", lw=1)
    g.set_axis_labels("sequence length N", ylabel)
    g.savefig(out_dir / fname, dpi=110, bbox_inches="tight"); plt.close(g.figure)
    return (fname, caption)


def _table21(metrics, out_dir):
    m = metrics[(metrics["metric"] == "table21_peak_memory") & metrics["value"].notna()]
    if not len(m):
        return None
    m = _cols(m, "backend", "seq_len", "batch", "heads", "head_dim", "dtype")
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    sns.lineplot(data=m, x="seq_len", y="value", hue="backend", marker="o", ax=ax)
    for label, keys, mk in (("paper: PyTorch", TABLE21_KEYS["math"], "X"),
                            ("paper: FlashAttention", TABLE21_KEYS["flash"], "P")):
        ax.scatter(list(keys), [published("flash_attention", k) for k in keys.values()], marker=mk,
                   color=PUBLISHED_COLOR, s=55, label=label, zorder=5)
    ax.set_xscale("log", base=2); ax.set_yscale("log")
    b, h, d = m["batch"].iloc[0], m["heads"].iloc[0], m["head_dim"].iloc[0]
    ax.set_xlabel("sequence length N"); ax.set_ylabel("fwd+bwd peak incl. inputs (MB)")
    paper_setup = registry.published("flash_attention", "memory_1k_flash").get("setup", "")
    ax.set_title(f"measured: batch {b}, {h} heads, d {d}, {m['dtype'].iloc[0]}\npaper: {paper_setup}", fontsize=9)
    legend_outside(ax)
    save(fig, out_dir, "table21_memory.png")
    return ("table21_memory.png", "Peak memory of one forward+backward (q, k, v, dO included) per backend, beside "
            "Dao et al. Table 21 (black markers; their shape may differ from the measured one, see the title).")


def _steps(metrics, out_dir):
    parts = []
    for name, label in (("fig2_time_fwd_bwd", "Fig 2 shape: attention fwd+bwd (ms)"),
                        ("train_step_time", "end-to-end training step (s)"),
                        ("train_step_peak_memory", "end-to-end step peak memory (MiB)")):
        m = metrics[(metrics["metric"] == name) & metrics["value"].notna()]
        if len(m):
            parts.append((_cols(m, "backend"), label))
    if not parts:
        return None
    fig, axes = plt.subplots(1, len(parts), figsize=(3.8 * len(parts), 3.6))
    axes = np.atleast_1d(axes)
    standard, flash = published("flash_attention", "kernel_time")
    for ax, (m, label) in zip(axes, parts):
        ax.bar(m["backend"], m["value"], yerr=m["spread"].fillna(0) / 2, color=sns.color_palette()[0])
        ax.set_title(label, fontsize=10)
        if label.startswith("Fig 2"):
            ax.set_xlabel(f"paper (A100, batch 64): standard {standard:g} ms,\nFlashAttention {flash:g} ms",
                          fontsize=9)
    save(fig, out_dir, "steps.png")
    return ("steps.png", "Fig 2's GPT-2-medium attention shape (fwd+bwd) and an end-to-end training step of a "
            "GPT-2-shaped model per attention backend (bars: IQR/2).")


def _figures(metrics: pd.DataFrame, files: ResultFiles, out_dir) -> list[tuple[str, str]]:
    out = [_vs_n(metrics, out_dir, "attn_peak_memory", "peak memory (MiB)", "memory_vs_n.png",
                 "Peak memory above the inputs vs N per provider (log-log; gray: slopes 1 and 2). Standard attention "
                 "materialises the N x N scores; SDPA and the Triton kernel do not.", [(1, ":"), (2, "--")]),
           _vs_n(metrics, out_dir, "attn_time", "median time (s)", "time_vs_n.png",
                 "Attention time vs N per provider and pass (interleaved, medians).", []),
           _table21(metrics, out_dir), _steps(metrics, out_dir)]
    return [o for o in out if o]


def plots(metrics: pd.DataFrame, files: ResultFiles, out_dir) -> list[tuple[str, str]]:
    """The headline first (measured, its interval, the paper's value: :func:`headline_figure`), then the rest."""
    return [*headline_figure(files, out_dir), *_figures(metrics, files, out_dir)]
