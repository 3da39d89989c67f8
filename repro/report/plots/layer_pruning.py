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

from . import ResultFiles, headline_figure, legend_outside, published, published_band, published_line, save  # noqa: E402

STACKS = ("encoder", "decoder", "lm")
QUALITY = {"encoder": ("bleu", "BLEU (test subset)"), "decoder": ("bleu", "BLEU (test subset)"),
           "lm": ("valid_ppl", "validation perplexity")}
# published collapse points (percent of layers), read from the registry
GROMOV_KEYS = ("gromov_collapse_qwen", "gromov_collapse_phi2", "gromov_collapse_mistral7b", "gromov_collapse_llama2")


def _col(df: pd.DataFrame, key: str):
    return df["sweep"].map(lambda s: s.get(key))


def _published_band():
    try:
        return {k.removeprefix("gromov_collapse_"): published("layer_pruning", k) for k in GROMOV_KEYS}
    except Exception:  # plots still work without the registry's collapse points
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


def _block_influence_fig(metrics: pd.DataFrame, stacks: list[str], out_dir) -> tuple[str, str] | None:
    """Block Influence per layer, one panel per stack."""
    bi = metrics[metrics["metric"] == "block_influence"].copy()
    if not len(bi):
        return None
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
    return ("block_influence.png", "Block Influence (ShortGPT) per layer on the calibration batches, all "
            f"non-pad tokens; ShortGPT removes the lowest-BI layers (Llama2-7B: {min(removed)}-"
            f"{max(removed)} of {published('layer_pruning', 'shortgpt_llama2_7b_n_layers')}).")


def _angular_fig(metrics: pd.DataFrame, stacks: list[str], out_dir) -> tuple[str, str] | None:
    """Angular distance heatmaps (block size x start layer) with the argmin per block size outlined."""
    ang = metrics[metrics["metric"] == "angular_distance"].copy()
    if not len(ang):
        return None
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
    return ("angular_distance.png", "Gromov's angular distance d(x^l, x^{l+n}) = arccos(cos)/pi per block "
            "size n and start l; red: the argmin l*(n), the block the rule removes.")


def _quality_frame(metrics: pd.DataFrame, stacks: list[str]) -> pd.DataFrame | None:
    """Each stack's quality rows (BLEU; LM: perplexity) with rule, healed, percent removed, stack and axis label."""
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
    return pd.concat(rows) if rows else None


def _quality_panel(ax, d: pd.DataFrame, s: str, rules: list[str], pal: dict, band: dict) -> None:
    """One stack's quality vs % removed: a line per rule (unhealed), healed stars, the control, the collapse
    threshold and Gromov's published collapse points."""
    base = d[(d["rule"] == "none") & ~d["healed"]]["value"].mean()
    # a marker and a dash per rule: two rules that pick the same layers draw the same line, and one hid the other
    style = dict(zip(rules, [("o", "-"), ("s", (0, (5, 2))), ("^", "-."), ("D", ":")] * 2))
    for rule in rules:
        if not ((d["rule"] == rule) & ~d["healed"]).any():
            continue  # a random baseline compared on validation NLL has no BLEU to draw
        u = d[((d["rule"] == rule) | (d["rule"] == "none")) & ~d["healed"]]
        u = u.groupby("percent")["value"].mean().sort_index()
        ax.plot(u.index, u.values, marker=style[rule][0], ms=4, ls=style[rule][1], mfc="none", color=pal[rule],
                label=rule)
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


def _quality_fig(metrics: pd.DataFrame, stacks: list[str], out_dir) -> tuple[str, str] | None:
    """Quality vs fraction of layers removed per rule, one panel per stack."""
    q = _quality_frame(metrics, stacks)
    if q is None:
        return None
    band = _published_band()
    fig, axes = plt.subplots(1, len(stacks), figsize=(4.2 * len(stacks), 3.4), squeeze=False)
    rules = [r for r in ("bi", "angular", "last", "random") if r in set(q["rule"])]
    pal = dict(zip(rules, sns.color_palette("colorblind", len(rules))))
    for ax, s in zip(axes[0], stacks):
        d = q[q["stack"] == s]
        if not len(d):
            ax.set_visible(False)
            continue
        _quality_panel(ax, d, s, rules, pal, band)
    legend_outside(axes[0][-1])
    save(fig, out_dir, "quality_vs_removed.png")
    no_random = [s for s in stacks if s != "lm" and (q["stack"] == s).any()
                 and not ((q["stack"] == s) & (q["rule"] == "random")).any()]
    return ("quality_vs_removed.png", "Quality vs % of layers removed per selection rule (random: mean over "
            "its selections, every distinct one where a stack has few, else seeded draws; lines overlap where rules remove the same layers); stars: after the short healing fine-tune. Black: Gromov's collapse points"
            + _gromov_text() + "."
            + (f" No random line for the {' and '.join(no_random)}: their random selections are compared with the "
               "rules on validation NLL (random_quality) and were not decoded for BLEU." if no_random else ""))


def _healing_fig(metrics: pd.DataFrame, stacks: list[str], out_dir) -> tuple[str, str] | None:
    """Healed vs unhealed validation NLL per healed rule (Gromov Fig 3 analogue)."""
    nll = metrics[metrics["metric"] == "valid_nll"].copy()
    if not (len(nll) and _col(nll, "healed").astype(bool).any()):
        return None
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
    return ("healing.png", "Validation NLL before and after healing (Gromov Fig 3: the healed loss grows "
            "smoothly while the unhealed one climbs steeply); at 0% the unpruned model fine-tuned for the "
            "same steps (control).")


def _figures(metrics: pd.DataFrame, files: ResultFiles, out_dir) -> list[tuple[str, str]]:
    stacks = [s for s in STACKS if ((metrics["metric"] == "n_layers") & (_col(metrics, "stack") == s)).any()]
    if not stacks:
        return []
    figs = (_block_influence_fig(metrics, stacks, out_dir), _angular_fig(metrics, stacks, out_dir),
            _quality_fig(metrics, stacks, out_dir), _healing_fig(metrics, stacks, out_dir))
    return [f for f in figs if f is not None]


def plots(metrics: pd.DataFrame, files: ResultFiles, out_dir) -> list[tuple[str, str]]:
    """The headline first (measured, its interval, the paper's value: :func:`headline_figure`), then the rest."""
    return [*headline_figure(files, out_dir), *_figures(metrics, files, out_dir)]
