"""C9 plots: Dong et al.'s residual ratio ||res(X_L)|| / ||res(X_0)|| vs depth per stack and init, beside the
relative residual ||res(X)|| / ||X|| and the residual after LayerNorm (diagnostics), the per-layer map of ln rho
(slope 3 = doubly exponential, slope 1 = at most exponential), and Q/K vs V gradient ratios and token cosine vs depth
with and without 1/sqrt(L) residual scaling (Noci et al. 2022)."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns


from . import (ResultFiles, grid_labels, headline_numbers, legend_outside, published, published_line, save as _save, save_headline,
               with_sweep as _sweep)

ORDER = ("attention", "attention_skip", "attention_mlp", "full_post", "full_pre")
MEASURES = {"residual_ratio": "rho = ||res(X_L)|| / ||res(X_0)||", "relative_residual": "||res(X)|| / ||X|| (diagnostic)",
            "layernorm_residual": "residual after LayerNorm (diagnostic)"}


def _exponents(metrics: pd.DataFrame, files: ResultFiles, out_dir) -> list[tuple[str, str]]:
    """The headline's question: is the per-layer exponent of pure attention the paper's 3 (doubly exponential
    collapse), and do skip connections bring it to 1? One point per stack and init, the bar its spread over seeds."""
    e = _sweep(metrics[metrics["metric"] == "per_layer_exponent"], "init", "variant").dropna(subset=["value"])
    if not len(e):
        return []
    order = [v for v in ORDER if v in set(e["variant"])] + sorted(set(e["variant"]) - set(ORDER))
    inits = list(dict.fromkeys(e["init"].fillna("xavier (single init)")))
    e = e.assign(init=e["init"].fillna("xavier (single init)"))
    fig, ax = plt.subplots(figsize=(7.2, 0.9 + 0.34 * len(order) * len(inits) ** 0.5))
    for k, (init, color) in enumerate(zip(inits, sns.color_palette(n_colors=len(inits)))):
        sub = e[e["init"] == init].set_index("variant").reindex(order)
        y = np.arange(len(order)) + (k - (len(inits) - 1) / 2) * 0.2
        ax.errorbar(sub["value"], y, xerr=sub["spread"].fillna(0), fmt="o", ms=4, capsize=2, color=color,
                    label=f"{init} init")
    ax.set_yticks(range(len(order)), order)
    ax.invert_yaxis()
    paper = float(published("rank_collapse", "dong_rate_exponent_base"))
    published_line(ax, paper, f"exponent {paper:g} (doubly exponential collapse)", axis="v")
    ax.axvline(1.0, color="gray", ls=":", lw=1.2, label="exponent 1 (at most exponential)")
    lo = min(0.0, float(e["value"].min()) - 0.2)
    ax.set_xlim(lo, max(paper, float((e["value"] + e["spread"].fillna(0)).max())) + 0.3)
    return save_headline(
        fig, ax, out_dir, "exponent.png", "per-layer exponent of ln rho (slope of ln rho_(L+1) on ln rho_L)",
        f"Does pure attention collapse doubly exponentially (exponent {paper:g})?", "Per-layer exponent of the residual's collapse per stack and init (mean over seeds, "
             "bar: spread): Dong et al.'s pure attention collapses with exponent 3 (dashed); skip connections "
             "give ~1 (dotted); the headline is pure attention at PyTorch's init; red: the criterion.",
        headline_numbers(files))


def plots(metrics: pd.DataFrame, files: ResultFiles, out_dir) -> list[tuple[str, str]]:
    out = []
    r = _sweep(metrics[metrics["metric"].isin(list(MEASURES))], "init", "variant", "layer", "seed")
    if len(r):
        r["init"] = r["init"].fillna("xavier (single init)")  # results from before the init sweep
        inits = list(dict.fromkeys(r["init"]))
        order = [v for v in ORDER if v in set(r["variant"])]
        colors = dict(hue_order=order, palette=dict(zip(order, sns.color_palette(n_colors=len(order)))))
        rho = r[r["metric"] == "residual_ratio"]
        fig, axes = plt.subplots(1, len(inits), figsize=(4.2 * len(inits) + 1.6, 3.4), squeeze=False, sharey=True)
        for j, init in enumerate(inits):
            ax = axes[0, j]
            sns.lineplot(data=rho[rho["init"] == init], x="layer", y="value", hue="variant", units="seed",
                         estimator=None, lw=0.8, alpha=0.8, ax=ax, legend=(j == len(inits) - 1), **colors)
            ax.set(yscale="log", ylabel=MEASURES["residual_ratio"] if j == 0 else "", title=f"{init} init")
        legend_outside(axes[0, -1])
        fig.suptitle("Does the residual of pure attention collapse with depth, and do skips prevent it?", fontsize=10)
        _save(fig, out_dir, "residual_vs_depth.png")
        out.append(("residual_vs_depth.png",
                    "Dong et al.'s residual ratio rho = ||res(X_L)|| / ||res(X_0)|| vs depth at random init, one "
                    "panel per init, each seed a line (float64; ~1e-16 relative is rounding). The relative residual "
                    "and the residual after LayerNorm (diagnostics) are in metrics.csv."))
        pairs = []
        for (init, variant, seed), sub in r[r["metric"] == "residual_ratio"].groupby(["init", "variant", "seed"]):
            rel = r[(r["metric"] == "relative_residual") & (r["init"] == init) & (r["variant"] == variant)
                    & (r["seed"] == seed)].sort_values("layer")["value"].to_numpy()
            v = sub.sort_values("layer")["value"].to_numpy()
            pairs += [{"init": init, "variant": variant, "ln rho_L": np.log(a), "ln rho_(L+1)": np.log(b)}
                      for a, b, ra, rb in zip(v, v[1:], rel, rel[1:]) if ra > 1e-13 and rb > 1e-13]
        if pairs:
            pf = pd.DataFrame(pairs)
            fig, axes = plt.subplots(1, len(inits), figsize=(4.4 * len(inits), 3.8), squeeze=False)
            for ax, init in zip(axes[0], inits):
                sub = pf[pf["init"] == init]
                sns.scatterplot(data=sub, x="ln rho_L", y="ln rho_(L+1)", hue="variant", ax=ax, s=16,
                                legend=ax is axes[0, 0], **colors)
                x = np.linspace(min(sub["ln rho_L"].min(), -1), 0, 10)
                att = sub[sub["variant"] == "attention"]
                b = float(np.median(att["ln rho_(L+1)"] - 3 * att["ln rho_L"])) if len(att) else 0.0
                ax.plot(x, 3 * x + b, ":", color="black", label="slope 3")
                ax.plot(x, x, "--", color="gray", label="slope 1")
                ax.set_title(f"{init} init: per-layer map of ln rho", fontsize=9)
            axes[0, 0].legend(fontsize=8)
            _save(fig, out_dir, "residual_map.png")
            out.append(("residual_map.png",
                        "ln rho_(L+1) against ln rho_L (layers above float64 rounding, from the input on): Dong et "
                        "al.'s rate is cubic (slope 3) for pure attention; skip connections give slope ~1."))
    out = _exponents(metrics, files, out_dir) + out
    g = _sweep(metrics[metrics["metric"].isin(["log_q_over_v_grad", "log_k_over_v_grad"])], "init", "position",
               "depth", "residual_scale")
    if len(g):
        g["ratio"] = np.where(g["metric"] == "log_q_over_v_grad", "Q/V", "K/V")
        g["init"] = g["init"].fillna("xavier (single init)")
        # K/V a little right of its depth (log axis): it often equals Q/V, and drawn in place it hid it
        g["depth"] = g["depth"].astype(float) * np.where(g["ratio"] == "K/V", 1.12, 1.0)
        grid = sns.relplot(data=g, x="depth", y="value", hue="residual_scale", style="ratio", col="position",
                           row="init", kind="line", markers={"Q/V": "o", "K/V": "X"},
                           dashes={"Q/V": "", "K/V": (4, 2)}, height=2.8, aspect=1.2)
        for ax in grid.axes.flat:
            ax.set_xscale("log", base=2)
        grid_labels(grid, "L", "mean over layers of ln(||dW_Q or K|| / ||dW_V||)")
        grid.figure.savefig(out_dir / "qk_over_v_grads.png", dpi=110, bbox_inches="tight")
        plt.close(grid.figure)
        out.append(("qk_over_v_grads.png", "Query/key vs value gradient norms at init vs depth, residual branches "
                    "scaled by 1 or 1/sqrt(L), per init (Noci et al.: Q/K gradients vanish under rank collapse); K/V (crosses, "
                    "dashed) is drawn a little right of its depth so that it does not hide Q/V where they agree."))
    c = _sweep(metrics[metrics["metric"] == "token_cosine"], "init", "position", "depth", "scaled")
    if len(c):
        c["residual scale"] = np.where(c["scaled"], "1/sqrt(L)", "1")
        c["init"] = c["init"].fillna("xavier (single init)")
        grid = sns.relplot(data=c, x="depth", y="value", hue="residual scale", style="position", col="init",
                           kind="line", marker="o", errorbar="sd", height=3, aspect=1.1)
        for ax in grid.axes.flat:
            ax.set_xscale("log", base=2)
        grid.set_axis_labels("L", "mean pairwise token cosine (output)")
        grid.figure.savefig(out_dir / "token_cosine.png", dpi=110, bbox_inches="tight")
        plt.close(grid.figure)
        out.append(("token_cosine.png", "Token cosine at the output vs depth, per init (Noci et al. Fig 1: rises with "
                    "depth unless adequate residual scaling is used)."))
    return out
