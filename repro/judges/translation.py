"""The translation benchmark's judge: the shared model's own target (not a paper's number).

Test BLEU at least ``target_bleu`` from a model of at least ``min_encoder_layers`` encoder layers and ``min_heads``
heads per layer, beside the copy-the-source baseline; tiny scale is not_applicable (plumbing only).
"""
from __future__ import annotations

from repro.verdicts import Rows, check, numbers, uses, verdict_from_checks

CLAIM = "translation"


def judge(rows: list[dict], thresholds: dict, context: dict) -> dict:
    T, R = thresholds, Rows(rows)
    summary = _summary(R, context)
    test = R.where(split="test")
    test_bleu, copy = test.metric("bleu").value(), test.metric("bleu_copy_baseline").value()
    target = T["target_bleu"]
    checks = [
        check("test BLEU reaches the target", test_bleu >= target,
              f"{test_bleu:.2f} after {summary['train_minutes']:.1f} min ({summary['steps']} updates)",
              f">= {target} (the suite's target, not a paper's number)", headline=True,
              numbers=numbers(test_bleu, "test BLEU", paper_text=f"none (the suite's own model; copying the "
                              f"source scores {copy:.1f})", criterion="suite", rule=f">= {target:g}"),
              thresholds=uses(T, "target_bleu")),
        check("model size as required",
              summary["encoder_layers"] >= T["min_encoder_layers"] and summary["heads"] >= T["min_heads"],
              f"{summary['encoder_layers']} encoder layers, {summary['heads']} heads",
              f">= {T['min_encoder_layers']} layers, >= {T['min_heads']} heads",
              thresholds=uses(T, "min_encoder_layers", "min_heads")),
        check("beats the copy baseline", test_bleu > copy, f"{test_bleu:.2f} vs copy {copy:.2f}", "model > copy"),
    ]
    return verdict_from_checks(CLAIM, checks, context["scale"])


def _summary(R: Rows, context: dict) -> dict:
    """Minutes and updates trained (measured rows), the model's layers and heads (the context the evaluation
    recorded; older measurements recorded none: then the parameters the model was trained with)."""
    model = (context.get("params") or {}).get("model") or {}
    steps = R.metric("train_steps").value()
    return {"train_minutes": R.metric("train_minutes").value(float("nan")),
            "steps": context.get("steps", int(steps) if steps is not None else None),
            "encoder_layers": context.get("encoder_layers", model.get("n_encoder_layers")),
            "heads": context.get("heads", (model.get("block") or {}).get("n_heads"))}
