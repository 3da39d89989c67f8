"""C9 plots: relative residual vs depth for the four stacks (Dong et al. 2021), the cubic per-layer map, and
Q/K vs V gradient ratios and token cosine vs depth with and without 1/sqrt(L) residual scaling (Noci et al. 2022)."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns


from . import save as _save, with_sweep as _sweep


def plots(metrics: pd.DataFrame, results_dir, out_dir) -> list[tuple[str, str]]:
    out = []
    r = _sweep(metrics[metrics["metric"] == "relative_residual"], "variant", "layer", "seed")
    if len(r):
        order = [v for v in ("attention", "attention_skip", "attention_mlp", "full") if v in set(r["variant"])]
        colors = dict(hue_order=order, palette=dict(zip(order, sns.color_palette(n_colors=len(order)))))
        fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
        sns.lineplot(data=r, x="layer", y="value", hue="variant", units="seed", estimator=None, lw=0.8, alpha=0.8,
                     ax=axes[0], **colors)
        axes[0].set(yscale="log", ylabel="||X - 1x^T||_F / ||X||_F", title="relative residual (each seed)")
        # doubly exponential: -ln r grows like 3^L, a straight line of slope ln 3 on a log axis
        above = r[(r["value"] > 1e-13) & (r["value"] < 1.0)].assign(neglog=lambda f: -np.log(f["value"]))
        sns.lineplot(data=above, x="layer", y="neglog", hue="variant", marker="o", errorbar="sd", ax=axes[1],
                     legend=False, **colors)
        att = above[above["variant"] == "attention"].groupby("layer")["neglog"].mean()
        if len(att) >= 2:
            L0 = int(att.index[-1])
            L = np.arange(0, L0 + 1)
            axes[1].plot(L, att.loc[L0] * 3.0 ** (L - L0), ":", color="black", label="3^L (cubic per layer)")
            axes[1].legend(fontsize=7)
        axes[1].set(yscale="log", ylabel="-ln r_L", title="doubly exponential: -ln r vs 3^L (above the float64 floor)")
        axes[1].title.set_fontsize(9)
        pairs = []
        for (variant, seed), sub in r.groupby(["variant", "seed"]):
            v = sub.sort_values("layer")["value"].to_numpy()
            pairs += [{"variant": variant, "ln r_L": np.log(a), "ln r_(L+1)": np.log(b)} for a, b in zip(v, v[1:])
                      if 1e-13 < a <= 0.9 and 1e-13 < b <= 0.9]
        if pairs:
            pf = pd.DataFrame(pairs)
            sns.scatterplot(data=pf, x="ln r_L", y="ln r_(L+1)", hue="variant", ax=axes[2], s=18, **colors)
            x = np.linspace(pf["ln r_L"].min(), 0, 10)
            axes[2].plot(x, 3 * x, ":", color="black", label="slope 3 (cubic)")
            axes[2].plot(x, x, "--", color="gray", label="slope 1")
            axes[2].legend(fontsize=7)
            axes[2].set_title("per-layer map of the residual", fontsize=9)
        _save(fig, out_dir, "residual_vs_depth.png")
        out.append(("residual_vs_depth.png",
                    "Left: relative residual vs depth at random init (float64; ~1e-16 is rounding). Middle: -ln r on a "
                    "log axis against the 3^L line. Right: ln r_(L+1) against ln r_L; Dong et al.'s rate is cubic "
                    "(slope 3) for pure attention, skips give slope ~1."))
    g = _sweep(metrics[metrics["metric"].isin(["log_q_over_v_grad", "log_k_over_v_grad"])], "position", "depth",
               "residual_scale")
    if len(g):
        g["ratio"] = np.where(g["metric"] == "log_q_over_v_grad", "Q/V", "K/V")
        grid = sns.relplot(data=g, x="depth", y="value", hue="residual_scale", style="ratio", col="position",
                           kind="line", marker="o", height=3, aspect=1.2)
        for ax in grid.axes.flat:
            ax.set_xscale("log", base=2)
        grid.set_axis_labels("L", "mean over layers of ln(||dW_Q or K|| / ||dW_V||)")
        grid.figure.savefig(out_dir / "qk_over_v_grads.png", dpi=110, bbox_inches="tight")
        plt.close(grid.figure)
        out.append(("qk_over_v_grads.png", "Query/key vs value gradient norms at init vs depth, residual branches "
                    "scaled by 1 or 1/sqrt(L) (Noci et al.: Q/K gradients vanish under rank collapse)."))
    c = _sweep(metrics[metrics["metric"] == "token_cosine"], "position", "depth", "scaled")
    if len(c):
        c["residual scale"] = np.where(c["scaled"], "1/sqrt(L)", "1")
        fig, ax = plt.subplots(figsize=(5.2, 3.6))
        sns.lineplot(data=c, x="depth", y="value", hue="residual scale", style="position", marker="o", errorbar="sd",
                     ax=ax)
        ax.set(xscale="log", ylabel="mean pairwise token cosine (output)", xlabel="L")
        ax.set_xscale("log", base=2)
        _save(fig, out_dir, "token_cosine.png")
        out.append(("token_cosine.png", "Token cosine at the output vs depth (Noci et al. Fig 1: rises with depth "
                    "unless adequate residual scaling is used)."))
    return out
