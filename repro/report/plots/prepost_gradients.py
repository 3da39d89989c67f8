"""C2 plots (Xiong et al. 2020): Fig 3(a,b) per-layer FFN gradient norms, Fig 3(c,d) final W2 gradient norm vs depth,
Theorem 1's depth exponent in the simplified setting, and Lemma 2's hidden-state norms against the bounds."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from . import ResultFiles, grid_labels, headline_figure, integer_ticks, legend_outside, plain_log_ticks, published, published_line, save as _save, with_sweep as _sweep


def _figures(metrics: pd.DataFrame, files: ResultFiles, out_dir) -> list[tuple[str, str]]:
    return [*_per_layer(metrics, out_dir), *_final_w2_vs_depth(metrics, out_dir), *_pre_over_post(metrics, out_dir),
            *_lemma2(metrics, out_dir)]


def _per_layer(metrics: pd.DataFrame, out_dir) -> list[tuple[str, str]]:
    """Fig 3(a,b): the FFN weights' gradient norm per layer, and every matrix's as a heatmap (LayerNorm)."""
    out = []
    g = metrics[(metrics["metric"] == "weight_grad_norm")]
    g = _sweep(g, "norm", "position", "stack", "layer", "matrix", "seed", "depth")
    ffn = g[g["matrix"].isin(["ffn.fc1", "ffn.fc2"])]
    if len(ffn):
        ffn = ffn.assign(layout=ffn["norm"] + " " + ffn["position"] + "-norm")
        # the norms a little apart along the layer axis, each with its marker and dash: RMSNorm and ScaleNorm
        # coincide at init and drew one line over the other
        norms = sorted(set(ffn["norm"]))
        shift = {n: 0.12 * (i - (len(norms) - 1) / 2) for i, n in enumerate(norms)}
        ffn = ffn.assign(layer=ffn["layer"].astype(float) + ffn["norm"].map(shift))
        marks = dict(zip(norms, ["o", "s", "^", "D"] * 2))
        dashes = dict(zip(norms, ["", (4, 2), (1, 1), (3, 1, 1, 1)] * 2))
        grid = sns.relplot(data=ffn, x="layer", y="value", hue="layout", style="norm", col="matrix", row="stack",
                           kind="line", markers=marks, dashes=dashes, errorbar="sd", height=2.8, aspect=1.3)
        grid.set(yscale="log")
        for ax in grid.axes.flat:
            integer_ticks(ax, "x", ffn["layer"].round())
        grid_labels(grid, "layer", "||grad W||_F")
        grid.figure.suptitle("Fig 3(a,b) analogue: FFN weight gradient norm at init (mean +- sd over seeds)", y=1.02)
        grid.figure.savefig(out_dir / "per_layer_ffn_grads.png", dpi=110, bbox_inches="tight")
        plt.close(grid.figure)
        depth = int(ffn["depth"].iloc[0])
        out.append(("per_layer_ffn_grads.png",
                    f"Gradient norm of the FFN weights per layer of a {depth}-{depth} encoder-decoder at init on one "
                    "real batch; paper (Fig 3(a,b)): grows with the layer index for Post-LN, roughly flat for Pre-LN. "
                    "RMSNorm and ScaleNorm coincide at init (both are sqrt(d) x / ||x|| with unit gains): the norms are set a "
                    "little apart along the layer axis, each with its own marker and dash."))
        out += _heatmap(g, out_dir)
    return out


def _heatmap(g: pd.DataFrame, out_dir) -> list[tuple[str, str]]:
    """log10 gradient norm of every weight matrix per layer (LayerNorm, seed mean), Post-LN beside Pre-LN."""
    allm = g[(g["norm"] == "layernorm")].groupby(["position", "stack", "layer", "matrix"], as_index=False)["value"].mean()
    if not len(allm):
        return []
    # one colour scale for both panels: the figure compares Post-LN with Pre-LN
    logs = np.log10(allm["value"].where(allm["value"] > 0))
    vmin, vmax = float(np.nanmin(logs)), float(np.nanmax(logs))
    fig, axes = plt.subplots(1, 3, figsize=(11, 4.0), gridspec_kw={"width_ratios": [1, 1, 0.05]})
    for ax, pos in zip(axes[:2], ("post", "pre")):
        sub = allm[allm["position"] == pos].copy()
        sub["row"] = sub["stack"] + " " + sub["layer"].astype(str)
        table = sub.pivot_table(index="matrix", columns="row", values="value")
        cols = sorted(table.columns, key=lambda c: (c.split()[0] != "encoder", int(c.split()[1])))
        sns.heatmap(np.log10(table[cols]), ax=ax, cmap="viridis", vmin=vmin, vmax=vmax, cbar=pos == "pre",
                    cbar_ax=axes[2] if pos == "pre" else None,
                    cbar_kws={"label": "log10 ||grad||_F (shared scale)"},
                    yticklabels=pos == "post")
        ax.set_title(f"LayerNorm, {pos.capitalize()}-LN: every weight matrix")
        ax.set_xlabel("")
        ax.set_ylabel("matrix" if pos == "post" else "")
    _save(fig, out_dir, "all_matrices_heatmap.png")
    return [("all_matrices_heatmap.png", "log10 gradient norm of every weight matrix per layer at init (seed "
             f"mean), Post-LN beside Pre-LN on one colour scale ({vmin:.1f} to {vmax:.1f}).")]


def _final_w2_vs_depth(metrics: pd.DataFrame, out_dir) -> list[tuple[str, str]]:
    """Fig 3(c,d): the final decoder FFN's W2 gradient norm against depth."""
    d = _sweep(metrics[metrics["metric"] == "final_w2_grad_norm"], "norm", "position", "depth")
    if not len(d):
        return []
    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    sns.lineplot(data=d, x="depth", y="value", hue="norm", style="position", marker="o", errorbar="sd", ax=ax)
    w2 = published("prepost_gradients", "fig3_postln_final_w2_grad_norm")
    published_line(ax, w2, f"Post-LN ~{w2:g} (IWSLT14)")
    ax.set_xlabel("L (L-L model)")
    ax.set_ylabel("||grad W2 final FFN||_F")
    legend_outside(ax)
    _save(fig, out_dir, "final_w2_vs_depth.png")
    return [("final_w2_vs_depth.png", "Fig 3(c,d) analogue: gradient norm of W2 in the final decoder FFN at "
             "init vs depth (mean +- sd over seeds). Paper: Post-LN flat around "
             f"{published('prepost_gradients', 'fig3_postln_final_w2_grad_norm'):g}, Pre-LN decreasing.")]


def _pre_over_post(metrics: pd.DataFrame, out_dir) -> list[tuple[str, str]]:
    """The Pre/Post ratio of the final W2 gradient norm against depth (full model and Theorem 1's setting)."""
    frames = []
    for name, label in (("final_w2_grad_norm", "full model (Fig 3 c,d)"),
                        ("thm1_final_w2_grad_norm", "simplified setting (Thm 1)")):
        t = _sweep(metrics[metrics["metric"] == name], "norm", "position", "depth", "seed")
        if len(t) and "layernorm" in set(t["norm"]):
            t = t[t["norm"] == "layernorm"].pivot_table(index=["depth", "seed"], columns="position",
                                                        values="value").reset_index()
            t["ratio"] = t["pre"] / t["post"]
            t["setting"] = label
            frames.append(t)
    if not frames:
        return []
    t = pd.concat(frames)
    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    sns.lineplot(data=t, x="depth", y="ratio", hue="setting", marker="o", errorbar="sd", ax=ax)
    for setting, sub in t.groupby("setting"):
        m = sub.groupby("depth")["ratio"].mean()
        L = np.array(sorted(m.index), float)
        ax.plot(L, m.loc[L[0]] * (L / L[0]) ** published("prepost_gradients",
                                                          "thm1_preln_over_postln_depth_exponent"),
                ls=":", color="gray")
    exponent = published("prepost_gradients", "thm1_preln_over_postln_depth_exponent")
    ax.plot([], [], ls=":", color="gray", label=f"paper: L^{exponent:g} (Theorem 1)")
    ax.set(xscale="log", yscale="log", xlabel="L (layers)", ylabel="Pre-LN / Post-LN final W2 grad")
    plain_log_ticks(ax, "x", sorted(set(t["depth"].astype(int))))
    lo, hi = float(t["ratio"].min()), float(t["ratio"].max())
    plain_log_ticks(ax, "y", [v for v in (0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2, 3, 5) if lo / 1.5 <= v <= hi * 1.5])
    ax.set_title(f"Does the Pre/Post gradient ratio fall as L^{exponent:g} with depth?", fontsize=9)
    legend_outside(ax)
    _save(fig, out_dir, "pre_over_post_ratio.png")
    return [("pre_over_post_ratio.png", "Pre/Post ratio of the final-layer W2 gradient norm vs depth (log-log), "
             "with Theorem 1's 1/sqrt(L) slope anchored at the shallowest depth.")]


def _lemma2(metrics: pd.DataFrame, out_dir) -> list[tuple[str, str]]:
    """Lemma 2's hidden-state norms (Monte Carlo) against the published value and bounds."""
    lem = _sweep(metrics[metrics["metric"].isin(["lemma2_postln_sq_norm_over_d", "lemma2_preln_sq_norm_over_d"])],
                 "layer")
    if not len(lem):
        return []
    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    for name, label, color in (("lemma2_postln_sq_norm_over_d", "Post-LN x^{post,5}", "C0"),
                               ("lemma2_preln_sq_norm_over_d", "Pre-LN x_l", "C1")):
        s = lem[lem["metric"] == name]
        ax.errorbar(s["layer"], s["value"], yerr=3 * s["spread"].fillna(0), marker="o", color=color, label=label,
                    capsize=2)
    L = np.arange(0, int(lem["layer"].max()) + 1)
    (a0, a1), (b0, b1) = (published("prepost_gradients", "lemma2_preln_sq_norm_lower"),
                          published("prepost_gradients", "lemma2_preln_sq_norm_upper"))
    ax.plot(L, a0 + a1 * L, "--", color="black", lw=1, label=f"paper: Pre-LN lower bound {a0:g} + {a1:g} l")
    ax.plot(L, b0 + b1 * L, "-.", color="black", lw=1, label=f"paper: Pre-LN upper bound {b0:g} + {b1:g} l")
    post = published("prepost_gradients", "lemma2_postln_sq_norm_over_d")
    published_line(ax, post, f"Post-LN {post:g}", ls=":")
    ax.set(xlabel="layer l", ylabel="E||x||^2 / d")
    legend_outside(ax)
    _save(fig, out_dir, "lemma2.png")
    return [("lemma2.png", "Lemma 2 by Monte Carlo in the simplified setting (error bars: 3 standard errors) "
             f"against the published value {post:g} d and bounds ({a0:g} + {a1:g} l) d, ({b0:g} + {b1:g} l) d.")]


def plots(metrics: pd.DataFrame, files: ResultFiles, out_dir) -> list[tuple[str, str]]:
    """The headline first (measured, its interval, the paper's value: :func:`headline_figure`), then the rest."""
    return [*headline_figure(files, out_dir), *_figures(metrics, files, out_dir)]
