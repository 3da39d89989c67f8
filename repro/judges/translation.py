"""The translation benchmark's judge: the shared model's own target (not a paper's number).

Test BLEU at least ``target_bleu`` from a model of at least ``min_encoder_layers`` encoder layers and ``min_heads``
heads per layer, beside the copy-the-source baseline; tiny scale is not_applicable (plumbing only). Both BLEU
comparisons are decided by an interval over the test sentences: BLEU +- z * its bootstrap standard error (Koehn
2004; the evaluation's ``bleu_bootstrap_se`` and ``bleu_minus_copy_bootstrap_se`` rows) at the ``confidence`` of the
judge, so a score on the target (a tie) decides nothing. Rows measured before those errors were recorded are
judged on the point values, and the page says so.
"""
from __future__ import annotations

import math
from statistics import NormalDist

from repro.verdicts import Rows, check, decide_interval, numbers, power, uses, verdict_from_checks

CLAIM = "translation"


def judge(rows: list[dict], thresholds: dict, context: dict) -> dict:
    T, R = thresholds, Rows(rows)
    summary = _summary(R, context)
    test = R.where(split="test")
    test_bleu, copy = test.metric("bleu").value(), test.metric("bleu_copy_baseline").value()
    sentences = (test.metric("bleu").first() or {}).get("n")
    z = NormalDist().inv_cdf(0.5 + T["confidence"] / 2)
    target = T["target_bleu"]
    checks = [_target_check(test_bleu, test.metric("bleu_bootstrap_se").value(), target, z, T, summary, copy,
                            sentences),
              check("model size as required",
                    summary["encoder_layers"] >= T["min_encoder_layers"] and summary["heads"] >= T["min_heads"],
                    f"{summary['encoder_layers']} encoder layers, {summary['heads']} heads",
                    f">= {T['min_encoder_layers']} layers, >= {T['min_heads']} heads",
                    thresholds=uses(T, "min_encoder_layers", "min_heads")),
              _copy_check(test_bleu, copy, test.metric("bleu_minus_copy_bootstrap_se").value(), z, T)]
    return verdict_from_checks(CLAIM, checks, context["scale"])


def _interval(value: float, se: float | None, z: float) -> tuple[float, float] | None:
    """value +- z * se, None where the rows hold no standard error (older measurements)."""
    if se is None or not math.isfinite(float(se)):
        return None
    return value - z * float(se), value + z * float(se)


def _target_check(bleu: float, se: float | None, target: float, z: float, T: dict, summary: dict, copy: float,
                  sentences) -> dict:
    name, expected = "test BLEU reaches the target", f">= {target} (the suite's target, not a paper's number)"
    measured = f"{bleu:.2f} after {summary['train_minutes']:.1f} min ({summary['steps']} updates)"
    iv = _interval(bleu, se, z)
    paper_text = f"none (the suite's own model; copying the source scores {copy:.1f})"
    if iv is None:
        return check(name, decide_interval(bleu, bleu, above=target), measured + " (point value: these rows hold no "
                     "bootstrap error)", expected, headline=True,
                     numbers=numbers(bleu, "test BLEU", paper_text=paper_text, criterion="suite",
                                     rule=f">= {target:g}"), thresholds=uses(T, "target_bleu"))
    lo, hi = iv
    passed = decide_interval(lo, hi, above=target)
    n = int(sentences) if sentences is not None and math.isfinite(float(sentences)) else 0
    pw = power(bleu, lo, hi, target, n, "test sentences", confidence=T["confidence"]) if passed is None else None
    why = None
    if passed is None:
        need = pw["n_needed"]
        why = (f"the {T['confidence']:.0%} interval [{lo:.2f}, {hi:.2f}] contains the target {target:g}: "
               + (pw["why"] if need is None else f"~{need:,} test sentences would decide it if the estimate held"
                  + (f" (the test set has {n:,}: train the model longer instead)" if need > n else "")))
    return check(name, passed, measured + f", {T['confidence']:.0%} interval [{lo:.2f}, {hi:.2f}] over {n:,} "
                 "sentences", expected, headline=True,
                 interval=f"BLEU +- {z:.2f} x its bootstrap standard error over the test sentences (Koehn 2004)",
                 undecided_because=why,
                 numbers=numbers(bleu, "test BLEU", lo=lo, hi=hi, paper_text=paper_text, criterion="suite",
                                 rule=f">= {target:g}"),
                 thresholds=uses(T, "target_bleu", "confidence"), power=pw)


def _copy_check(bleu: float, copy: float, se: float | None, z: float, T: dict) -> dict:
    name, expected = "beats the copy baseline", "model > copy"
    iv = _interval(bleu - copy, se, z)
    if iv is None:
        return check(name, decide_interval(bleu, bleu, above=copy),
                     f"{bleu:.2f} vs copy {copy:.2f} (point values: these rows hold no bootstrap error)", expected)
    lo, hi = iv
    passed = decide_interval(lo, hi, above=0.0)
    return check(name, passed, f"{bleu:.2f} vs copy {copy:.2f}: difference {bleu - copy:+.2f} "
                 f"[{lo:+.2f}, {hi:+.2f}]", expected,
                 interval=f"paired difference +- {z:.2f} x its bootstrap standard error (the same resampled sentences)",
                 undecided_because=None if passed is not None else "the interval of the difference contains 0",
                 thresholds=uses(T, "confidence"))


def _summary(R: Rows, context: dict) -> dict:
    """Minutes and updates trained (measured rows), the model's layers and heads (the context the evaluation
    recorded; older measurements recorded none: then the parameters the model was trained with)."""
    model = (context.get("params") or {}).get("model") or {}
    steps = R.metric("train_steps").value()
    return {"train_minutes": R.metric("train_minutes").value(float("nan")),
            "steps": context.get("steps", int(steps) if steps is not None else None),
            "encoder_layers": context.get("encoder_layers", model.get("n_encoder_layers")),
            "heads": context.get("heads", (model.get("block") or {}).get("n_heads"))}
