"""C6 plots (Gromov et al. 2025; Men et al. 2025): Block Influence per layer, angular distance d(x^l, x^{l+n})
per block size with its argmin, and quality vs fraction of layers removed per rule (unhealed lines, healed
markers) beside the published collapse points."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from . import ResultFiles, legend_outside, published, published_band, published_line, save  # noqa: E402

STACKS = ("encoder", "decoder", "lm")
QUALITY = {"encoder": ("bleu", "BLEU (test subset)"), "decoder": ("bleu", "BLEU (test subset)"),
           "lm": ("valid_ppl", "validation perplexity")}
# published collapse points (percent of layers), read from the metrics rows when present
GROMOV_KEYS = ("gromov_collapse_qwen", "gromov_collapse_phi2", "gromov_collapse_mistral7b", "gromov_collapse_llama2")


def _col(df: pd.DataFrame, key: str):
    return df["sweep"].map(lambda s: s.get(key))


def _published_band():
    try:
        from repro import registry

        vals = {}
        for k in GROMOV_KEYS:
            v = registry.published("layer_pruning", k)["value"]
            vals[k.removeprefix("gromov_collapse_")] = v
        return vals
    except Exception:  # plots still work without the registry
        return {}


MODEL_NAMES = {"qwen": "Qwen", "phi2": "Phi-2", "mistral7b": "Mistral", "llama2": "Llama-2"}


def _gromov_text() -> str:
    """'(Llama-2 45-55% band; dashed: Qwen 20%, ...)' from the registry's collapse points."""
    band = _published_band()
    if not band:
        return ""
    lo_hi = band.get("llama2")
    head = f"Llama-2 {min(lo_hi):g}-{max(lo_hi):g}% band; " if isinstance(lo_hi, list) else ""
    rest = ", ".join(f"{MODEL_NAMES.get(k, k)} {v:g}%" for k, v in band.items() if isinstance(v, (int, float)))
    return f" ({head}dashed: {rest})"


def plots(metrics: pd.DataFrame, files: ResultFiles, out_dir) -> list[tuple[str, str]]:
    out = []
    stacks = [s for s in STACKS if ((metrics["metric"] == "n_layers") & (_col(metrics, "stack") == s)).any()]
    if not stacks:
        return out
    # 1. Block Influence per layer
    bi = metrics[metrics["metric"] == "block_influence"].copy()
    if len(bi):
        bi["stack"], bi["layer"] = _col(bi, "stack"), _col(bi, "layer")
        fig, axes = plt.subplots(1, len(stacks), figsize=(3.6 * len(stacks), 3), squeeze=False)
        for ax, s in zip(axes[0], stacks):
            d = bi[bi["stack"] == s].sort_values("layer")
            ax.bar(d["layer"], d["value"], color=sns.color_palette()[0])
            ax.set_title(s)
            ax.set_xlabel("layer")
            ax.set_xticks(list(d["layer"]))
        axes[0][0].set_ylabel("BI = 1 - E cos(x_i, x_i+1)")
        fig.tight_layout(); fig.savefig(out_dir / "block_influence.png", dpi=110); plt.close(fig)
        removed = published("layer_pruning", "shortgpt_llama2_7b_layers_removed")
        out.append(("block_influence.png", "Block Influence (ShortGPT) per layer on the calibration batches, all "
                    f"non-pad tokens; ShortGPT removes the lowest-BI layers (Llama2-7B: {min(removed)}-"
                    f"{max(removed)} of {published('layer_pruning', 'shortgpt_llama2_7b_n_layers')})."))
    # 2. angular distance heatmaps
    ang = metrics[metrics["metric"] == "angular_distance"].copy()
    if len(ang):
        ang["stack"], ang["block"], ang["start"] = _col(ang, "stack"), _col(ang, "block"), _col(ang, "start")
        fig, axes = plt.subplots(1, len(stacks), figsize=(3.8 * len(stacks), 3.2), squeeze=False)
        for ax, s in zip(axes[0], stacks):
            d = ang[ang["stack"] == s]
            if not len(d):
                ax.set_visible(False)
                continue
            piv = d.pivot_table(index="block", columns="start", values="value")
            sns.heatmap(piv, ax=ax, cmap="viridis", cbar=True, annot=piv.shape[1] <= 8, fmt=".2f",
                        annot_kws={"size": 7})
            for n, row in piv.iterrows():
                j = int(np.nanargmin(row.values))
                ax.add_patch(plt.Rectangle((j, list(piv.index).index(n)), 1, 1, fill=False, ec="red", lw=1.5))
            tok = d["sweep"].iloc[0].get("tokens")
            ax.set_title(f"{s} ({tok} token{'s' if tok == 'all' else ''})")
            ax.set_xlabel("start layer l")
            ax.set_ylabel("block size n")
        fig.tight_layout(); fig.savefig(out_dir / "angular_distance.png", dpi=110); plt.close(fig)
        out.append(("angular_distance.png", "Gromov's angular distance d(x^l, x^{l+n}) = arccos(cos)/pi per block "
                    "size n and start l; red: the argmin l*(n), the block the rule removes."))
    # 3. quality vs fraction removed
    rows = []
    for s in stacks:
        name, label = QUALITY[s]
        d = metrics[(metrics["metric"] == name) & (_col(metrics, "stack") == s)].copy()
        if not len(d):
            continue
        d["rule"], d["healed"] = _col(d, "rule"), _col(d, "healed").astype(bool)
        d["percent"] = 100 * _col(d, "fraction").astype(float)
        d["stack"], d["label"] = s, label
        rows.append(d)
    if rows:
        q = pd.concat(rows)
        band = _published_band()
        fig, axes = plt.subplots(1, len(stacks), figsize=(4.2 * len(stacks), 3.4), squeeze=False)
        rules = [r for r in ("bi", "angular", "last", "random") if r in set(q["rule"])]
        pal = dict(zip(rules, sns.color_palette("colorblind", len(rules))))
        for ax, s in zip(axes[0], stacks):
            d = q[q["stack"] == s]
            if not len(d):
                ax.set_visible(False)
                continue
            base = d[(d["rule"] == "none") & ~d["healed"]]["value"].mean()
            for rule in rules:
                u = d[((d["rule"] == rule) | (d["rule"] == "none")) & ~d["healed"]]
                u = u.groupby("percent")["value"].mean().sort_index()
                ax.plot(u.index, u.values, marker="o", ms=3, color=pal[rule], label=rule)
                h = d[(d["rule"] == rule) & d["healed"]].sort_values("percent")
                if len(h):
                    ax.plot(h["percent"], h["value"], marker="*", ms=9, ls="--", color=pal[rule],
                            label=f"{rule} healed")
            ctrl = d[(d["rule"] == "none") & d["healed"]]
            if len(ctrl):
                ax.scatter([0], ctrl["value"].iloc[:1], marker="*", s=70, color="black", label="unpruned + heal steps")
            if s == "lm":
                ax.axhline(2 * base, color="gray", ls=":", lw=1, label="2x unpruned ppl")
                ax.set_yscale("log")
            else:
                ax.axhline(0.5 * base, color="gray", ls=":", lw=1, label="half unpruned BLEU")
            if "llama2" in band:
                published_band(ax, min(band["llama2"]), max(band["llama2"]), "Gromov collapse, Llama-2", axis="v")
            others = [v for k, v in band.items() if k != "llama2" and isinstance(v, (int, float))]
            for i, v in enumerate(others):
                published_line(ax, v, "Gromov collapse, other models", axis="v", lw=0.8)
                if i == 0:
                    continue
                ax.lines[-1].set_label(None)
            ax.set_title(s)
            ax.set_xlabel("% of layers removed")
            ax.set_ylabel(d["label"].iloc[0])
        legend_outside(axes[0][-1])
        save(fig, out_dir, "quality_vs_removed.png")
        out.append(("quality_vs_removed.png", "Quality vs % of layers removed per selection rule (random: mean over "
                    "seeds; lines overlap where rules remove the same layers); stars: after the short healing fine-tune. Black: Gromov's collapse points"
                    + _gromov_text() + "."))
    # 4. healed vs unhealed validation NLL (Gromov Fig 3 analogue)
    nll = metrics[metrics["metric"] == "valid_nll"].copy()
    if len(nll) and _col(nll, "healed").astype(bool).any():
        nll["stack"], nll["rule"] = _col(nll, "stack"), _col(nll, "rule")
        nll["healed"] = _col(nll, "healed").astype(bool)
        nll["percent"] = 100 * _col(nll, "fraction").astype(float)
        healed_rules = sorted(set(nll[nll["healed"] & (nll["rule"] != "none")]["rule"]))
        fig, axes = plt.subplots(1, len(stacks), figsize=(3.8 * len(stacks), 3.2), squeeze=False)
        for ax, s in zip(axes[0], stacks):
            d = nll[nll["stack"] == s]
            for rule in healed_rules:
                u = d[((d["rule"] == rule) | (d["rule"] == "none")) & ~d["healed"]].groupby("percent")["value"].mean()
                h = d[((d["rule"] == rule) | (d["rule"] == "none")) & d["healed"]].groupby("percent")["value"].mean()
                ax.plot(u.index, u.values, marker="o", ms=3, label=f"{rule} unhealed")
                if len(h):
                    ax.plot(h.index, h.values, marker="*", ms=8, label=f"{rule} healed")
            ax.set_title(s)
            ax.set_xlabel("% of layers removed")
            ax.set_ylabel("validation NLL (nats/token)")
        axes[0][-1].legend(fontsize=8)
        fig.tight_layout(); fig.savefig(out_dir / "healing.png", dpi=110); plt.close(fig)
        out.append(("healing.png", "Validation NLL before and after healing (Gromov Fig 3: the healed loss grows "
                    "smoothly while the unhealed one climbs steeply); at 0% the unpruned model fine-tuned for the "
                    "same steps (control)."))
    return out
