"""C10 plots: perplexity per quantization method beside fp32 (LLM.int8() Table 1, GPTQ Tables 2-4), stored weight
bytes against 16-bit, GPTQ vs RTN layer-wise reconstruction error, and the outlier features per layer (LLM.int8()
Section 4.1)."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns

from . import ResultFiles, published, save as _save, with_sweep as _sweep


def plots(metrics, files: ResultFiles, out_dir) -> list[tuple[str, str]]:
    out = []
    p = _sweep(metrics[metrics["metric"] == "valid_ppl"], "model", "method", "family", "bits", "calibration_seed")
    if len(p):
        models = sorted(set(p["model"]))
        order = list(dict.fromkeys(p["method"]))
        fig, axes = plt.subplots(1, len(models), figsize=(max(6, 0.55 * len(order)) * len(models), 3.8),
                                 squeeze=False)
        for ax, m in zip(axes[0], models):
            sub = p[p["model"] == m]
            sns.barplot(data=sub, x="method", y="value", hue="family", order=order, errorbar="sd", ax=ax,
                        dodge=False)
            sns.stripplot(data=sub[sub["family"] == "gptq"], x="method", y="value", order=order, color="black",
                          size=3, ax=ax)
            fp = sub[sub["method"] == "fp32"]["value"]
            if len(fp):
                ax.axhline(float(fp.iloc[0]), ls=":", color="black", lw=1, label="fp32")
            ax.set(yscale="log", xlabel="", ylabel="validation perplexity", title=m)
            ax.tick_params(axis="x", rotation=60)
            ax.legend(fontsize=7)
        _save(fig, out_dir, "perplexity_by_method.png")
        out.append(("perplexity_by_method.png",
                    "Validation perplexity per method (log scale; dotted: fp32). GPTQ bars: mean over calibration "
                    "seeds (error bar: std; dots: seeds). Paper: LLM.int8() keeps 13B C4 at "
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
        ax.tick_params(axis="x", rotation=60)
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
        axes[0].axhline(6.0, ls=":", color="black", lw=1)
        _save(fig, out_dir, "outliers_per_layer.png")
        out.append(("outliers_per_layer.png", "Outlier features per block (inputs of the attention projections "
                    "and the FFN expansion, calibration sentences): the largest magnitude (dotted: LLM.int8()'s 6.0) "
                    "and the number of feature dimensions reaching it."))
    return out
