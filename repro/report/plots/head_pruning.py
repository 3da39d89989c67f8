"""C5 head_pruning plots: single-head ablation map (Michel Table 1), pruning curves (Fig. 3: BLEU, or MNLI accuracy
for an imported BERT classifier), L0 budgets (Voita Sec. 6) and the speed-up of the pruned model by batch size
(Michel Table 4), measured beside published."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from . import (ResultFiles, headline_figure, PUBLISHED_COLOR, legend_outside, published, published_line, published_points, save,
               with_sweep)

VOITA_ENCODER_HEADS = 48  # Voita et al.'s Transformer-base encoder: 6 layers x 8 heads (the model, not a result)
SWEEP = ("kind", "layer", "head", "order", "seed", "fraction", "significant", "batch", "lam", "model")


def _sel(m: pd.DataFrame, name: str) -> pd.DataFrame:
    """The rows of metric ``name`` with this claim's sweep variables as columns."""
    return with_sweep(m[m["metric"] == name], *SWEEP)


def _figures(metrics: pd.DataFrame, files: ResultFiles, out_dir) -> list[tuple[str, str]]:
    out = []
    for figure in (_ablation, _pruning_curve, _mnli_curve, _l0_budgets, _speedup):
        out += figure(metrics, out_dir)
    return out


def _ablation(metrics: pd.DataFrame, out_dir) -> list[tuple[str, str]]:
    abl = _sel(metrics, "ablation_bleu_delta")
    if not len(abl):
        return []
    kinds = list(dict.fromkeys(abl["kind"]))
    fig, axes = plt.subplots(1, len(kinds), figsize=(3.2 * len(kinds), 3.2), squeeze=False)
    lim = max(float(abl["value"].abs().max()), 0.1)
    for ax, kind in zip(axes[0], kinds):
        d = abl[abl["kind"] == kind]
        grid = d.pivot_table(index="layer", columns="head", values="value")
        sig = d.pivot_table(index="layer", columns="head", values="significant", aggfunc="max")
        annot = np.where(sig.to_numpy().astype(bool), "*", "")
        sns.heatmap(grid, ax=ax, cmap="RdBu", vmin=-lim, vmax=lim, annot=annot, fmt="", cbar=ax is axes[0][-1],
                    cbar_kws={"label": "BLEU change"})
        ax.set_title(kind)
    sig_pub, total_pub = (published("head_pruning", "michel_significant_heads"),
                          published("head_pruning", "michel_heads_total"))
    fig.suptitle(f"Ablating one head (* = p < 0.01); Michel: {sig_pub} of {total_pub} encoder heads significant")
    save(fig, out_dir, "ablation.png")
    return [("ablation.png", "BLEU change when one head is masked, per attention type, layer and head; "
                             "* marks a paired-bootstrap p < 0.01 (Michel et al. 2019, Table 1).")]


def _pruning_curve(metrics: pd.DataFrame, out_dir) -> list[tuple[str, str]]:
    pr = _sel(metrics, "pruning_bleu")
    if not len(pr):
        return []
    names = {"importance": "importance (Michel, l2 per layer)", "importance_raw": "importance (unnormalised)"}
    pr["curve"] = pr.apply(lambda r: names.get(r["order"], r["order"]) if r["order"] != "random"
                           else f"random (seed {int(r['seed'])})", axis=1)
    pr["percent"] = 100 * pr["fraction"].astype(float)
    fig, ax = plt.subplots(figsize=(6.0, 3.8))
    sns.lineplot(data=pr, x="percent", y="value", hue="curve", marker="o", ax=ax)
    base = pr[pr["percent"] == 0]["value"]
    if len(base):
        ax.axhline(float(base.iloc[0]), color="gray", lw=0.8, ls=":")
    prunable, drop = published("head_pruning", "michel_prunable_wmt"), published("head_pruning",
                                                                               "michel_sharp_drop_fraction")
    published_line(ax, prunable, f"Michel WMT {prunable:g}% prunable", axis="v")
    published_line(ax, drop, f"Michel sharp drop ~{drop:g}%", axis="v", ls=":")
    pf = _sel(metrics, "prunable_fraction")
    pf = pf[pf["order"] == "importance"]
    if len(pf):
        ax.axvline(float(pf["value"].iloc[0]), color="tab:green", lw=1.5, alpha=0.6, label="measured prunable")
    ax.set_xlabel("heads pruned (%)"); ax.set_ylabel("BLEU (test subset)")
    legend_outside(ax)
    save(fig, out_dir, "pruning_curve.png")
    step = published("head_pruning", "michel_prune_step")
    return [("pruning_curve.png", f"BLEU vs fraction of heads pruned ({step:g}% per step), lowest Michel importance "
                                  "first vs random orders; dashed: Michel et al.'s WMT figures (Fig. 3).")]


def _mnli_curve(metrics: pd.DataFrame, out_dir) -> list[tuple[str, str]]:
    """Michel Fig. 3's BERT curve: MNLI accuracy vs heads pruned, each level with its matched-pairs interval."""
    pr = with_sweep(metrics[metrics["metric"] == "mnli_pruning_accuracy"], "order", "seed", "fraction", "lo", "hi")
    if not len(pr):
        return []
    names = {"importance": "importance (Michel, l2 per layer)", "importance_raw": "importance (unnormalised)"}
    fig, ax = plt.subplots(figsize=(6.0, 3.8))
    for (order, seed), d in pr.groupby(["order", "seed"], dropna=False, sort=False):
        d = d.sort_values("fraction")
        x, y = 100 * d["fraction"].astype(float), d["value"].astype(float)
        label = names.get(order, order) if order != "random" else f"random (seed {int(seed)})"
        if order == "random":
            ax.plot(x, y, "o-", alpha=0.5, label=label)
        else:  # the change's interval around the unpruned accuracy
            base = float(y.iloc[0])
            ax.errorbar(x, y, yerr=[(y - base - d["lo"].astype(float)).clip(lower=0),
                                    (base + d["hi"].astype(float) - y).clip(lower=0)], marker="o", capsize=2,
                        label=label)
    prunable = published("head_pruning", "michel_prunable_bert")
    published_line(ax, prunable, f"Michel BERT {prunable:g}% prunable", axis="v")
    ax.set_xlabel("heads pruned (%)"); ax.set_ylabel("MNLI accuracy (%)")
    legend_outside(ax)
    save(fig, out_dir, "mnli_pruning_curve.png")
    return [("mnli_pruning_curve.png", "MNLI accuracy vs fraction of BERT's heads pruned, lowest importance first, "
                                       "vs random orders; bars: each level's matched-pairs interval of the change; "
                                       "dashed: Michel et al.'s BERT figure (Fig. 3).")]

def _l0_budgets(metrics: pd.DataFrame, out_dir) -> list[tuple[str, str]]:
    kept = _sel(metrics, "l0_heads_kept")
    delta = _sel(metrics, "l0_bleu_delta")
    if not (len(kept) and len(delta)):
        return []
    d = kept[["lam", "value", "n"]].merge(delta[["lam", "value"]], on="lam", suffixes=("_kept", "_delta"))
    d["kept_pct"] = 100 * d["value_kept"] / d["n"].astype(float)
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot(d["kept_pct"], d["value_delta"], "o-", label="measured (L0 gates)")
    for _, r in d.iterrows():
        ax.annotate(f"λ={r['lam']:g}", (r["kept_pct"], r["value_delta"]), fontsize=8, xytext=(3, 3),
                    textcoords="offset points")
    n = VOITA_ENCODER_HEADS
    wmt_kept = n - published("head_pruning", "voita_wmt_heads_pruned")
    wmt_drop = published("head_pruning", "voita_wmt_bleu_drop")
    os_kept, os_drop = (published("head_pruning", "voita_opensubs_heads_kept"),
                        published("head_pruning", "voita_opensubs_bleu_drop"))
    published_points(ax, [100 * wmt_kept / n], [wmt_drop], f"Voita WMT {wmt_kept} of {n} kept, {wmt_drop:+g}")
    published_points(ax, [100 * os_kept / n], [os_drop], f"Voita OpenSubtitles {os_kept} of {n}, {os_drop:+g}",
                     alpha=0.5)
    ax.axhline(0, color="gray", lw=0.8)
    ax.set_xlabel("gated heads kept (%)"); ax.set_ylabel("BLEU change vs unpruned")
    legend_outside(ax)
    save(fig, out_dir, "l0_budgets.png")
    return [("l0_budgets.png", "Hard-Concrete L0 gates fine-tuned from the trained model, one run per "
                               "lambda: BLEU change vs heads kept, beside Voita et al. (2019).")]


def _speedup(metrics: pd.DataFrame, out_dir) -> list[tuple[str, str]]:
    sp = _sel(metrics, "speedup")
    if not len(sp):
        return []
    sp = sp.sort_values("batch")
    fig, ax = plt.subplots(figsize=(5, 3.4))
    ax.errorbar(sp["batch"].astype(int), sp["value"], yerr=sp["spread"].fillna(0) / 2, marker="o",
                label="measured (interleaved medians)")
    pub = sp.dropna(subset=["published_value"])
    if len(pub):
        ax.plot(pub["batch"].astype(int), pd.to_numeric(pub["published_value"]), "X--", color=PUBLISHED_COLOR,
                label="paper: Michel Table 4 (BERT, GTX 1080Ti)")
    ax.set_xscale("log", base=2)
    ax.axhline(0, color="gray", lw=0.8)
    ax.set_xlabel("batch size (sentences)"); ax.set_ylabel("speed-up with 50% of heads removed (%)")
    legend_outside(ax)
    save(fig, out_dir, "speedup.png")
    return [("speedup.png", "Forward-pass examples/s gain with half the heads physically removed, by batch "
                            "size (bars: inter-quartile range of the paired ratios), beside Michel Table 4.")]


def plots(metrics: pd.DataFrame, files: ResultFiles, out_dir) -> list[tuple[str, str]]:
    """The headline first (measured, its interval, the paper's value: :func:`headline_figure`), then the rest."""
    return [*headline_figure(files, out_dir), *_figures(metrics, files, out_dir)]
