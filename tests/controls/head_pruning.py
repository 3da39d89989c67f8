"""Negative controls of head_pruning's judge (tests/test_judge_contract.py; tests/controls/__init__.py).

The reference rows carry, per pruned model, the BLEU and the paired-bootstrap p-value of its change (``sweep.p_value``);
the judge recovers each change's interval from them. ``paper_false`` reverses the claim with the gate (the unpruned
model beats copying the source) kept as measured: every pruned model loses most of its BLEU with p = 0 (both orders),
importance pruning is no better than random, every L0 run loses BLEU at any sparsity, and every encoder head matters.
``ties`` starts from a precise paper-true version of the rows (``_true``, which the judge says is reproduced: its
changes are significant gains, as a test set of some 40,000 sentences would measure a true zero drop) and puts one
headline quantity or gate exactly on its threshold (the judge: section of config/claims/head_pruning.yaml).
``paper_true_at_default`` is the paper's effect at the precision the default measurement reaches (each pruned model's
BLEU change as uncertain as the reference's own): the judge cannot say reproduced of it (the 0.15-BLEU margin of
"no loss" is narrower than BLEU's sampling error on any size the corpus allows), and says why.
``threshold_rows`` gives rows on which a threshold the CPU reference cannot reach matters: the BERT experiment's
gate (``min_accuracy_over_majority``) needs MNLI rows (built as tests/test_head_pruning_mnli.py builds them), and
``minority_fraction`` a family of single-head tests small enough for Holm's correction at the reference's 1,000
bootstrap resamples (its p-values are no finer than 0.002: above 0.01 / 24).
"""
from __future__ import annotations

from statistics import NormalDist, median

from controls import _eq, edit, values
from repro import config


def _set(rows: list[dict], metric: str, fn, **where) -> list[dict]:
    """``rows`` with ``fn(row) -> (value, p_value)`` applied to the matching rows (``sweep.p_value`` kept in both the
    nested sweep and its flat column)."""
    out = []
    for r in edit(rows, metric, lambda r: r["value"], **where):
        cond = {k.replace("sweep_", "", 1): v for k, v in where.items()}
        if r.get("metric") == metric and all(_eq(r["sweep"].get(k), v) for k, v in cond.items()) \
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
    # every single head matters (the judge counts them from the ablations' p-values)
    rows = _set(rows, "ablation_bleu_delta", lambda r: (-0.5 * base, 0.0))
    rows = edit(rows, "significant_heads", lambda r: r["n"])
    rows = edit(rows, "significant_heads_fraction", lambda r: 1.0)
    return rows


def _true(rows: list[dict]) -> list[dict]:
    """Paper-true rows: the pruning levels up to 35% of the heads (past
    Michel's 20% whatever the model's level steps: 29% of 48 heads, 30% of 96) gain 1 BLEU with p = 0 in both orders,
    then BLEU collapses; random orders worse; an L0 run keeps 5 of 24 heads (Voita's 10/48) and gains BLEU
    significantly against both references; 2 of 24 encoder heads significant."""
    base = _base(rows)
    for order in ("importance", "importance_raw"):
        rows = _set(rows, "pruning_bleu", lambda r: (r["value"], 1.0) if r["sweep"]["pruned"] == 0 else
                    (base + 1.0, 0.0) if r["sweep"]["fraction"] < 0.35 else (0.1 * base, 0.0), sweep_order=order)
    rnd = values(rows, "pruning_mean_bleu", sweep_order="random")
    rows = edit(rows, "pruning_mean_bleu", lambda r: max(rnd) + 10.0, sweep_order=["importance", "importance_raw"])
    rows = _set(rows, "l0_bleu_delta", lambda r: (1.0, 0.0))
    rows = _set(rows, "l0_bleu_delta_vs_control", lambda r: (1.0, 0.0))
    rows = edit(rows, "significant_heads", lambda r: 2.0, sweep_kind="encoder_self")
    rows = edit(rows, "significant_heads_fraction", lambda r: 2.0 / r["n"], sweep_kind="encoder_self")
    return rows


def _se(rows: list[dict]) -> float:
    """The median standard error of the pruned models' BLEU changes (every order's pruning levels), recovered from
    each level's change and p-value as the judge recovers it (se = |delta| / z(1 - p/2); p = 0 or 1 give none): the
    precision the measurement reached."""
    base, ses = _base(rows), []
    for r in rows:
        p = r.get("sweep.p_value")
        if r.get("metric") != "pruning_bleu" or r.get("value") is None or p is None or not 0 < float(p) < 1:
            continue
        ses.append(abs(float(r["value"]) - base) / NormalDist().inv_cdf(1 - float(p) / 2))
    return median(ses)


def paper_true_at_default(rows: list[dict]) -> list[dict]:
    """The paper's effect at the precision the default measurement reaches: in both orders the pruned models up to
    35% of the heads lose 0.05 BLEU (a true "no loss" within Voita's 0.15) with the reference's own standard error of
    a pruned model's change (the median over its pruning levels, about 1 BLEU on 250 sentences: p ~ 0.96), then BLEU
    collapses; random orders worse;
    an L0 run at Voita's budget loses 0.05 BLEU against both references at that precision. Everything a default run
    can show holds; "no loss" cannot be shown at this precision."""
    base = _base(rows)
    se = _se(rows)
    p_small = 2 * (1 - NormalDist().cdf(0.05 / se))
    for order in ("importance", "importance_raw"):
        rows = _set(rows, "pruning_bleu", lambda r: (r["value"], 1.0) if r["sweep"]["pruned"] == 0 else
                    (base - 0.05, p_small) if r["sweep"]["fraction"] < 0.35 else (0.1 * base, 0.0), sweep_order=order)
    rnd = values(rows, "pruning_mean_bleu", sweep_order="random")
    rows = edit(rows, "pruning_mean_bleu", lambda r: max(rnd) + 10.0, sweep_order=["importance", "importance_raw"])
    rows = _set(rows, "l0_bleu_delta", lambda r: (-0.05, p_small))
    rows = _set(rows, "l0_bleu_delta_vs_control", lambda r: (-0.05, p_small))
    return rows


def _on_tolerance(rows: list[dict]) -> tuple[float, float]:
    """(BLEU, p-value) of a pruned model whose drop's interval, recovered as the judge recovers it (drop -delta,
    half-width z(1 - alpha/2) |delta| / z(1 - p/2)), ends exactly on the tolerance tol = |Voita's drop|, or one float
    past it where no float lands on it: a drop of about tol/2, its p-value (about alpha) stepped float by float."""
    import math

    from repro import registry

    tol = abs(float(registry.published("head_pruning", "voita_wmt_bleu_drop")["value"]))
    alpha = float(config.section("head_pruning", "default")["significance"])
    base = [r["value"] for r in rows if r["metric"] == "pruning_bleu" and r["sweep"].get("order") == "importance"
            and r["sweep"].get("pruned") == 0][0]
    v = base - tol / 2
    d = v - base
    z = NormalDist().inv_cdf(1 - alpha / 2)
    p = 2 * (1 - NormalDist().cdf(z * abs(d) / (tol - abs(d))))

    def end(p):
        return -d + z * abs(d) / NormalDist().inv_cdf(1 - p / 2)

    while end(p) < tol:  # a larger p widens the interval
        p = math.nextafter(p, math.inf)
    while end(below := math.nextafter(p, -math.inf)) >= tol:
        p = below
    return v, p  # on the tolerance, or the first float past it where no float lands on it (controls.on_edge)


def ties(rows: list[dict]) -> list[list[dict]]:
    t = _true(rows)
    out = []
    # 1. at the level that counts as Michel's 20% (the grid's nearest: 10 of 48 heads, 19 of 96, as measured, not
    #    relabelled) the drop's interval ends exactly on the tolerance, every level below lossless, every one after
    #    lossy
    levels = {r["sweep"]["pruned"]: r["sweep"]["fraction"] for r in t if r["metric"] == "pruning_bleu"
              and r["sweep"].get("order") == "importance" and r["sweep"].get("pruned")}
    near = min(levels, key=lambda k: (abs(levels[k] - 0.2), -levels[k]))
    edge = _on_tolerance(t)
    x = _set(t, "pruning_bleu", lambda r: edge if r["sweep"]["pruned"] == near else (0.1 * _base(rows), 0.0)
             if r["sweep"]["pruned"] > near else (r["value"], r["sweep"]["p_value"]), sweep_order="importance")
    out.append(x)
    # 2. the gate exactly at its margin (judge.min_bleu_over_copy, 3 BLEU, above copying the source)
    copy = values(t, "bleu_copy_baseline", sweep_subset="eval")[0]
    margin = config.thresholds("head_pruning", "default")["min_bleu_over_copy"]
    out.append(edit(t, "bleu_unpruned", lambda r: copy + margin, sweep_subset="eval"))
    # 3. every pruned model equal to the unpruned one (no change, p = 1: no interval) and the L0 runs too
    y = _set(t, "pruning_bleu", lambda r: (_base(rows), 1.0), sweep_order=["importance", "importance_raw"])
    y = _set(y, "l0_bleu_delta", lambda r: (0.0, 1.0))
    out.append(_set(y, "l0_bleu_delta_vs_control", lambda r: (0.0, 1.0)))
    return out


def mnli_rows(acc: float = 84.0, acc_lo: float = 83.2, majority: float = 35.4, hpl: int = 12) -> list[dict]:
    """Paper-true rows of Michel's BERT experiment (repro.claims._heads_mnli's schema, 12 layers of ``hpl`` heads):
    no loss up to 40% of the heads, then a collapse past 60%; random orders far worse; every one-head layer within
    the tolerance."""
    from repro.claims._heads import pruning_levels
    from repro.io import metric

    C, total = "head_pruning", 12 * hpl
    rows = [metric(C, "mnli_accuracy", acc, "percent", kind="quality", n=8815, lo=acc_lo, hi=acc + 0.8,
                   model="unpruned"),
            metric(C, "mnli_majority_baseline", majority, "percent", kind="quality", n=8815, label="entailment"),
            metric(C, "mnli_heads", total, "heads", layers=12, heads_per_layer=hpl)]

    def drop(f):
        return (0.1, -0.4, 0.5) if f < 0.45 else (-3.0, -3.6, -2.4) if f < 0.6 else (-30.0, -31.0, -29.0)

    for order in ("importance", "importance_raw", "random"):
        for seed in ([0, 1, 2] if order == "random" else [None]):
            rows.append(metric(C, "mnli_pruning_accuracy", acc, "percent", kind="quality", order=order, seed=seed,
                               pruned=0, fraction=0.0, delta=0.0, lo=0.0, hi=0.0, p_value=1.0))
            for n in pruning_levels(total, 0.1, 0.9):
                d, lo, hi = drop(n / total) if order != "random" else (-20.0, -21.0, -19.0)
                rows.append(metric(C, "mnli_pruning_accuracy", acc + d, "percent", kind="quality", order=order,
                                   seed=seed, pruned=n, fraction=n / total, delta=d, lo=lo, hi=hi, p_value=0.5))
            rows.append(metric(C, "mnli_pruning_mean_accuracy", 75.0 if order != "random" else 60.0 + (seed or 0),
                               "percent", kind="quality", order=order, seed=seed))
    for layer in range(12):
        rows.append(metric(C, "mnli_one_head_delta", -0.2, "percent", kind="quality", layer=layer, head=0, lo=-0.6,
                           hi=0.3, p_value=0.5, significant=False))
    return rows


def threshold_rows(rows: list[dict], key: str) -> list[dict] | None:
    """Rows on which judge.``key`` matters where the CPU reference's rows cannot show it, else None."""
    if key == "min_accuracy_over_majority":  # the BERT experiment's gate: no MNLI rows in the WMT reference
        return mnli_rows()
    if key == "minority_fraction":  # one encoder layer's 4 heads, one of them significant with p = 0 (read 0.002 <
        # 0.01 / 4): 1 of 4 after Holm's correction and uncorrected, 25%, on the default 0.25 (a tie); 0.5 passes it
        keep = [r for r in rows if not (r.get("metric") == "ablation_bleu_delta" and r.get("sweep.kind") ==
                                        "encoder_self" and float(r.get("sweep.layer") or 0) != 0)]
        return _set(keep, "ablation_bleu_delta", lambda r: (r["value"], 0.0 if float(r["sweep"]["head"]) == 2 else
                                                            max(float(r["sweep"]["p_value"]), 0.01)),
                    sweep_kind="encoder_self")
    return None
