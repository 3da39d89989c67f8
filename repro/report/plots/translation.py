"""The translation benchmark's figure: test and validation BLEU of the shared model beside the copy-the-source
baseline and the suite's target (the benchmark is the suite's own model: no paper number to compare with)."""
from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from . import ResultFiles, headline_numbers, save_headline, with_sweep


def _target(files: ResultFiles) -> float | None:
    """The suite's BLEU target the headline check used (its thresholds in verdict.json)."""
    for c in (files.verdict or {}).get("checks") or []:
        if c.get("headline") and isinstance(c.get("thresholds"), dict) and "target_bleu" in c["thresholds"]:
            return float(c["thresholds"]["target_bleu"])
    return None


def plots(metrics: pd.DataFrame, files: ResultFiles, out_dir) -> list[tuple[str, str]]:
    b = with_sweep(metrics[metrics["metric"].isin(["bleu", "bleu_copy_baseline"])], "split")
    if not len(b):
        return []
    b = b.assign(system=b["metric"].map({"bleu": "model", "bleu_copy_baseline": "copy the source"}))
    splits = [s for s in ("test", "valid") if s in set(b["split"])] or list(dict.fromkeys(b["split"]))
    fig, ax = plt.subplots(figsize=(6.6, 2.6))
    palette = dict(zip(("model", "copy the source"), sns.color_palette(n_colors=2)))
    for k, (system, color) in enumerate(palette.items()):
        sub = b[b["system"] == system].set_index("split").reindex(splits)
        ax.scatter(sub["value"], [i + (k - 0.5) * 0.25 for i in range(len(splits))], color=color, s=45,
                   label=system, zorder=3)
    ax.set_yticks(range(len(splits)), [f"{s} BLEU" for s in splits])
    ax.invert_yaxis()
    target = _target(files)
    shown = list(b["value"].dropna()) + ([target] if target is not None else [])
    nums = headline_numbers(files) or {}
    shown += [nums[k] for k in ("value", "lo", "hi") if nums.get(k) is not None]
    ax.set_xlim(0, max(shown) * 1.15)
    return save_headline(
        fig, ax, out_dir, "bleu.png", "BLEU (sacrebleu, greedy)",
        "Does the shared model translate well beyond copying the source?\n(the suite's own benchmark: no paper value)",
        "BLEU of the shared translation model on the test and validation sets beside copying the "
             "source sentence unchanged, and the suite's target (its own criterion; no paper number: the model "
             "is the suite's, trained at this scale).", nums)
