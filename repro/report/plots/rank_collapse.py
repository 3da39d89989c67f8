"""C9 plots: Dong et al.'s residual ratio ||res(X_L)|| / ||res(X_0)|| vs depth per stack and init, beside the
relative residual ||res(X)|| / ||X|| and the residual after LayerNorm (diagnostics), the per-layer map of ln rho
(slope 3 = doubly exponential, slope 1 = at most exponential), and Q/K vs V gradient ratios and token cosine vs depth
with and without 1/sqrt(L) residual scaling (Noci et al. 2022)."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns


from . import ResultFiles, save as _save, with_sweep as _sweep

ORDER = ("attention", "attention_skip", "attention_mlp", "full_post", "full_pre")
MEASURES = {"residual_ratio": "rho = ||res(X_L)|| / ||res(X_0)||", "relative_residual": "||res(X)|| / ||X|| (diagnostic)",
            "layernorm_residual": "residual after LayerNorm (diagnostic)"}


def plots(metrics: pd.DataFrame, files: ResultFiles, out_dir) -> list[tuple[str, str]]:
    out = []
    r = _sweep(metrics[metrics["metric"].isin(list(MEASURES))], "init", "variant", "layer", "seed")
    if len(r):
        r["init"] = r["init"].fillna("xavier (single init)")  # results from before the init sweep
        inits = list(dict.fromkeys(r["init"]))
        measures = {m: label for m, label in MEASURES.items() if m in set(r["metric"])}
        order = [v for v in ORDER if v in set(r["variant"])]
        colors = dict(hue_order=order, palette=dict(zip(order, sns.color_palette(n_colors=len(order)))))
        fig, axes = plt.subplots(len(inits), len(measures), figsize=(4.6 * len(measures), 3.3 * len(inits)),
                                 squeeze=False)
        for i, init in enumerate(inits):
            for j, (m, label) in enumerate(measures.items()):
                sub = r[(r["init"] == init) & (r["metric"] == m)]
                sns.lineplot(data=sub, x="layer", y="value", hue="variant", units="seed", estimator=None, lw=0.8,
                             alpha=0.8, ax=axes[i, j], legend=(i == 0 and j == 0), **colors)
                axes[i, j].set(yscale="log", ylabel=label if j == 0 else label.split(" (")[0],
                               title=f"{init} init: {label}")
                axes[i, j].title.set_fontsize(8)
        _save(fig, out_dir, "residual_vs_depth.png")
        out.append(("residual_vs_depth.png",
                    "Residual vs depth at random init, one row per init, each seed a line (float64; ~1e-16 relative is "
                    "rounding). Left: Dong et al.'s measure, the absolute residual relative to the input's. Middle and "
                    "right: the relative residual and the residual after LayerNorm, which fall when the token-mean "
                    "component grows even while the absolute residual does not."))
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
    g = _sweep(metrics[metrics["metric"].isin(["log_q_over_v_grad", "log_k_over_v_grad"])], "init", "position",
               "depth", "residual_scale")
    if len(g):
        g["ratio"] = np.where(g["metric"] == "log_q_over_v_grad", "Q/V", "K/V")
        g["init"] = g["init"].fillna("xavier (single init)")
        grid = sns.relplot(data=g, x="depth", y="value", hue="residual_scale", style="ratio", col="position",
                           row="init", kind="line", marker="o", height=2.8, aspect=1.2)
        for ax in grid.axes.flat:
            ax.set_xscale("log", base=2)
        grid.set_axis_labels("L", "mean over layers of ln(||dW_Q or K|| / ||dW_V||)")
        grid.figure.savefig(out_dir / "qk_over_v_grads.png", dpi=110, bbox_inches="tight")
        plt.close(grid.figure)
        out.append(("qk_over_v_grads.png", "Query/key vs value gradient norms at init vs depth, residual branches "
                    "scaled by 1 or 1/sqrt(L), per init (Noci et al.: Q/K gradients vanish under rank collapse)."))
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
