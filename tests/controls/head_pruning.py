"""Negative controls of head_pruning's judge (tests/test_judge_contract.py; tests/controls/__init__.py).

The reference rows carry, per pruned model, the BLEU and the paired-bootstrap p-value of its change (``sweep.p_value``);
the judge recovers each change's interval from them. ``paper_false`` reverses the claim with the gate (the unpruned
model beats copying the source) kept as measured: every pruned model loses most of its BLEU with p = 0 (both orders),
importance pruning is no better than random, every L0 run loses BLEU at any sparsity, and every encoder head matters.
``ties`` starts from a paper-true version of the rows (which the judge says is reproduced) and puts one headline
quantity or gate exactly on its threshold.
"""
from __future__ import annotations

from controls import edit, values


def _set(rows: list[dict], metric: str, fn, **where) -> list[dict]:
    """``rows`` with ``fn(row) -> (value, p_value)`` applied to the matching rows (``sweep.p_value`` kept in both the
    nested sweep and its flat column)."""
    out = []
    for r in edit(rows, metric, lambda r: r["value"], **where):
        cond = {k.replace("sweep_", "", 1): v for k, v in where.items()}
        if r.get("metric") == metric and all(str(r["sweep"].get(k)) == str(v) for k, v in cond.items()) \
                and r.get("value") is not None:
            value, p = fn(r)
            r = {**r, "value": value, "sweep": {**r["sweep"], "p_value": p}, "sweep.p_value": p}
        out.append(r)
    return out


def _base(rows: list[dict]) -> float:
    return values(rows, "bleu_unpruned", sweep_subset="eval")[0]


def paper_false(rows: list[dict]) -> list[dict]:
    base = _base(rows)
    for order in ("importance", "importance_raw", "random"):
        rows = _set(rows, "pruning_bleu", lambda r: (r["value"], 1.0) if r["sweep"]["pruned"] == 0 else
                    (0.02 * base, 0.0), sweep_order=order)
    # importance orders below every random order's mean BLEU
    rnd = values(rows, "pruning_mean_bleu", sweep_order="random")
    rows = edit(rows, "pruning_mean_bleu", lambda r: min(rnd) - 5.0, sweep_order=["importance", "importance_raw"])
    # every L0 run destroys BLEU (against the unpruned model and the unpenalised fine-tune), whatever it keeps
    rows = edit(rows, "l0_heads_kept", lambda r: r["value"] if r["sweep"]["lam"] == 0 else 2.0)
    rows = _set(rows, "l0_bleu_delta", lambda r: (r["value"], r["sweep"]["p_value"]) if r["sweep"]["lam"] == 0
                else (-0.8 * base, 0.0))
    rows = _set(rows, "l0_bleu_delta_vs_control", lambda r: (-0.8 * base, 0.0))
    # every single head matters
    rows = edit(rows, "significant_heads", lambda r: r["n"])
    rows = edit(rows, "significant_heads_fraction", lambda r: 1.0)
    return rows


def _true(rows: list[dict]) -> list[dict]:
    """Paper-true rows: the first three pruning levels (up to 29% of the heads) gain 1 BLEU with p = 0 in both orders,
    then BLEU collapses; random orders worse; an L0 run keeps 5 of 24 heads (Voita's 10/48) and gains BLEU
    significantly against both references; 2 of 24 encoder heads significant."""
    base = _base(rows)
    for order in ("importance", "importance_raw"):
        rows = _set(rows, "pruning_bleu", lambda r: (r["value"], 1.0) if r["sweep"]["pruned"] == 0 else
                    (base + 1.0, 0.0) if r["sweep"]["fraction"] < 0.3 else (0.1 * base, 0.0), sweep_order=order)
    rnd = values(rows, "pruning_mean_bleu", sweep_order="random")
    rows = edit(rows, "pruning_mean_bleu", lambda r: max(rnd) + 10.0, sweep_order=["importance", "importance_raw"])
    rows = _set(rows, "l0_bleu_delta", lambda r: (1.0, 0.0))
    rows = _set(rows, "l0_bleu_delta_vs_control", lambda r: (1.0, 0.0))
    rows = edit(rows, "significant_heads", lambda r: 2.0, sweep_kind="encoder_self")
    rows = edit(rows, "significant_heads_fraction", lambda r: 2.0 / r["n"], sweep_kind="encoder_self")
    return rows


def ties(rows: list[dict]) -> list[list[dict]]:
    t = _true(rows)
    out = []
    # 1. the lossless run ends exactly at Michel's 20% (the 21% level re-labelled 20%), then a lossy level
    x = [({**r, "sweep": {**r["sweep"], "fraction": 0.2}, "sweep.fraction": 0.2}
          if r["metric"] == "pruning_bleu" and r["sweep"].get("pruned") == 10 else r) for r in t]
    x = _set(x, "pruning_bleu", lambda r: (0.1 * _base(rows), 0.0) if 0.25 < r["sweep"]["fraction"] else
             (r["value"], r["sweep"]["p_value"]), sweep_order="importance_raw")
    out.append(x)
    # 2. the gate exactly at its margin (3 BLEU above copying the source)
    copy = values(t, "bleu_copy_baseline", sweep_subset="eval")[0]
    out.append(edit(t, "bleu_unpruned", lambda r: copy + 3.0, sweep_subset="eval"))
    # 3. every pruned model equal to the unpruned one (no change, p = 1: no interval) and the L0 runs too
    y = _set(t, "pruning_bleu", lambda r: (_base(rows), 1.0), sweep_order=["importance", "importance_raw"])
    y = _set(y, "l0_bleu_delta", lambda r: (0.0, 1.0))
    out.append(_set(y, "l0_bleu_delta_vs_control", lambda r: (0.0, 1.0)))
    return out
