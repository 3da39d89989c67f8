"""C10 plots: perplexity per quantization method beside fp32 (LLM.int8() Table 1, GPTQ Tables 3-5), stored weight
bytes against 16-bit, GPTQ vs RTN layer-wise reconstruction error, and the outlier features per layer (LLM.int8()
Section 4.1)."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns

from . import (ResultFiles, headline_numbers, integer_ticks, published, save as _save, save_headline,
               with_sweep as _sweep)


def _gptq_over_rtn(p, files: ResultFiles, out_dir) -> list[tuple[str, str]]:
    """The headline's question: is GPTQ's perplexity below RTN's at the same bits and group size? The change GPTQ
    vs RTN per setting in % (the headline's unit; geometric mean over calibration seeds, the bar their range)
    beside the paper's direction (< 0): as a ratio all four settings sat on the 1.0 line."""
    rows = []
    for (model, meth), g in p[p["family"] == "gptq"].groupby(["model", "method"], sort=False):
        rtn = p[(p["model"] == model) & (p["method"] == "rtn" + meth.removeprefix("gptq"))]["value"]
        if len(rtn):
            r = g["value"].to_numpy() / float(rtn.iloc[0])
            rows.append((f"{model}: {meth.removeprefix('gptq_')}", *(100 * (x - 1) for x in (
                float(np.exp(np.log(r).mean())), r.min(), r.max()))))
    if not rows:
        return []
    fig, ax = plt.subplots(figsize=(6.4, 0.9 + 0.35 * len(rows)))
    for i, (label, mid, lo, hi) in enumerate(rows):
        ax.errorbar([mid], [i], xerr=[[mid - lo], [hi - mid]], fmt="o", color=sns.color_palette()[0], capsize=3)
    ax.set_yticks(range(len(rows)), [r[0] for r in rows])
    ax.invert_yaxis()
    ax.axvline(0.0, color="gray", lw=1)  # the paper's direction is the criterion (< 0), drawn by save_headline
    nums = headline_numbers(files) or {}
    shown = [v for r in rows for v in r[1:]] + [0.0] + [nums[k] for k in ("value", "lo", "hi")
                                                       if nums.get(k) is not None]
    pad = 0.15 * (max(shown) - min(shown) or 0.01)
    ax.set_xlim(min(shown) - pad, max(shown) + pad)
    return save_headline(
        fig, ax, out_dir, "gptq_over_rtn.png", "validation perplexity, GPTQ vs RTN (%, same bits and groups)",
        "Is GPTQ's perplexity below RTN's? (the paper gives a direction, no number)", "Validation perplexity change GPTQ vs RTN per setting (bits, group size), in %: "
             "below 0 GPTQ is better, as the paper reports at 3 and 4 bits (GPTQ Tables 3-5; red: the criterion); "
             "the point is the geometric mean over calibration seeds, the bar their range. The verdict's interval "
             "adds the evaluation tokens' sampling error.", nums)


def plots(metrics, files: ResultFiles, out_dir) -> list[tuple[str, str]]:
    out = []
    p = _sweep(metrics[metrics["metric"] == "valid_ppl"], "model", "method", "family", "bits", "calibration_seed")
    if len(p):
        out += _gptq_over_rtn(p, files, out_dir)
        models = sorted(set(p["model"]))
        order = list(dict.fromkeys(p["method"]))
        fig, axes = plt.subplots(1, len(models), figsize=(max(6, 0.55 * len(order)) * len(models), 3.8),
                                 squeeze=False)
        for ax, m in zip(axes[0], models):
            sub = p[p["model"] == m]
            # points with the range over calibration seeds (a linear axis: the methods differ by a few percent)
            stats = sub.groupby("method", sort=False)["value"].agg(["mean", "min", "max"]).reindex(order).dropna()
            fam = sub.drop_duplicates("method").set_index("method")["family"]
            colors = dict(zip(dict.fromkeys(fam), sns.color_palette(n_colors=fam.nunique())))
            for i, (meth, r) in enumerate(stats.iterrows()):
                ax.errorbar([i], [r["mean"]], yerr=[[r["mean"] - r["min"]], [r["max"] - r["mean"]]], fmt="o",
                            color=colors[fam[meth]], capsize=3, label=fam[meth])
            fp = sub[sub["method"] == "fp32"]["value"]
            if len(fp):
                ax.axhline(float(fp.iloc[0]), ls=":", color="black", lw=1, label="fp32")
            ax.set_xticks(range(len(stats)), stats.index, rotation=90)  # at 60 degrees neighbours overlapped
            ax.set(xlabel="", ylabel="validation perplexity", title=f"{m}: how much does each method raise "
                   "perplexity over fp32?")
            handles, labels = ax.get_legend_handles_labels()
            unique = dict(zip(labels, handles))
            ax.legend(unique.values(), unique.keys(), fontsize=7)
        _save(fig, out_dir, "perplexity_by_method.png")
        out.append(("perplexity_by_method.png",
                    "Validation perplexity per method (linear axis; dotted: fp32). GPTQ: mean over calibration "
                    "seeds, the bar their range. Paper: LLM.int8() keeps 13B C4 at "
                    f"{published('quantization', 'int8_c4_ppl_13b_llm_int8'):g} where absmax int8 gives "
                    f"{published('quantization', 'int8_c4_ppl_13b_absmax'):g}; GPTQ stays near fp16 at "
                    f"{'-'.join(map(str, published('quantization', 'gptq_bits')))} bits where RTN collapses."))
    b = _sweep(metrics[metrics["metric"] == "weight_bytes_vs_fp16"], "model", "method")
    if len(b):
        b = b.drop_duplicates(["model", "method"])
        fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(b)), 3.4))
        sns.barplot(data=b, x="method", y="value", hue="model", ax=ax)
        ax.axhline(0.5, ls=":", color="black", lw=1, label="half of 16-bit")
        ax.set(ylabel="stored weight bytes / 16-bit", xlabel="")
        ax.tick_params(axis="x", rotation=90)  # at 60 degrees the labels sat centred under the next bar
        ax.legend(fontsize=7)
        _save(fig, out_dir, "weight_bytes.png")
        out.append(("weight_bytes.png", "Weight bytes as stored (packed codes, 16-bit scales, zero points, group "
                    "indices; int8: codes and one fp32 scale per output channel) over 16-bit weights of the blocks' "
                    "linear layers."))
    e = _sweep(metrics[metrics["metric"] == "layer_rel_error"], "model", "method", "quantizer", "layer",
               "calibration_seed", "split")
    inputs = "calibration"
    if len(e) and (e["split"] == "held_out").any():  # the errors that decide the check: inputs GPTQ never saw
        e, inputs = e[e["split"] == "held_out"], "held-out"
    elif len(e) and e["split"].notna().any():
        e = e[e["split"] == "calibration"]
    if len(e):
        piv = e.pivot_table(index=["model", "method", "layer", "calibration_seed"], columns="quantizer",
                            values="value").reset_index()
        fig, ax = plt.subplots(figsize=(5, 4.2))
        sns.scatterplot(data=piv, x="rtn", y="gptq", hue="method", style="model", ax=ax, s=18)
        lo, hi = np.nanmin(piv[["rtn", "gptq"]].to_numpy()), np.nanmax(piv[["rtn", "gptq"]].to_numpy())
        ax.plot([lo, hi], [lo, hi], ":", color="black", lw=1)
        ax.set(xscale="log", yscale="log", xlabel="RTN ||WX-QX||^2/||WX||^2", ylabel="GPTQ (same inputs)")
        ax.legend(fontsize=6)
        _save(fig, out_dir, "layer_error_gptq_vs_rtn.png")
        out.append(("layer_error_gptq_vs_rtn.png", f"Layer-wise relative reconstruction error on the {inputs} "
                    "inputs, GPTQ against RTN with the same grid (each point a layer, setting and seed; below the "
                    "diagonal GPTQ is better)" + (": validation inputs GPTQ was not calibrated on." if inputs ==
                                                 "held-out" else "; GPTQ minimises this error by construction.")))
    o = _sweep(metrics[metrics["metric"].isin(["outlier_max_abs", "outlier_dims_ge_threshold"])], "model", "layer")
    if len(o):
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
        for ax, name, lab in zip(axes, ("outlier_max_abs", "outlier_dims_ge_threshold"),
                                 ("largest |x| at the tracked inputs", "feature dims with |x| >= threshold")):
            sns.lineplot(data=o[o["metric"] == name], x="layer", y="value", hue="model", marker="o", ax=ax)
            ax.set(ylabel=lab)
            integer_ticks(ax, "x", o["layer"].dropna())
        axes[1].set_ylim(-0.5, max(axes[1].get_ylim()[1], 2.5))  # a count: from 0, whole numbers even when all 0
        integer_ticks(axes[1], "y")
        axes[0].axhline(6.0, ls=":", color="black", lw=1)
        _save(fig, out_dir, "outliers_per_layer.png")
        out.append(("outliers_per_layer.png", "Outlier features per block (inputs of the attention projections "
                    "and the FFN expansion, calibration sentences): the largest magnitude (dotted: LLM.int8()'s 6.0) "
                    "and the number of feature dimensions reaching it."))
    return out
