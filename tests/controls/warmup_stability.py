"""Negative controls of warmup_stability's judge (tests/test_judge_contract.py; tests/controls/__init__.py).

The reference's warm-up controls translate worse than copying the source (the judge's BLEU gate fails), so every
control here first raises every run's greedy BLEU above the copy baseline (``_translating``): the gates pass and
the judge decides. ``paper_false`` then removes Xiong et al.'s effect: Post-LN without warm-up ends exactly where
Post-LN with warm-up ends (plus a little noise), seed by seed. ``ties`` puts each headline gap, and the BLEU gate,
exactly on its threshold (NLLs chosen dyadic so the paired differences are exact in floating point).
"""
from __future__ import annotations

from controls import edit, values

MAIN = dict(sweep_norm="layernorm", sweep_fixnorm=False, sweep_layers=6, sweep_lr=0.001)


def _copy(rows: list[dict]) -> float:
    return values(rows, "bleu_copy_baseline")[0]


def _translating(rows: list[dict]) -> list[dict]:
    """Every run's BLEU raised by (copy baseline + 5) so both warm-up controls beat copying the source."""
    c = _copy(rows)
    return edit(rows, "bleu", lambda r: r["value"] + c + 5.0)


def _seed(r: dict) -> int:
    return int(r["sweep"]["seed"])


def paper_false(rows: list[dict]) -> list[dict]:
    rows = _translating(rows)
    post_w = {int(r["sweep"]["seed"]): r["value"] for r in rows if r["metric"] == "final_valid_nll"
              and r["sweep"].get("position") == "post" and r["sweep"].get("warmup") == 300
              and r["sweep"].get("layers") == 6 and r["sweep"].get("norm") == "layernorm"}
    rows = edit(rows, "final_valid_nll", lambda r: post_w[_seed(r)] + 0.01 * _seed(r), sweep_position="post",
                sweep_warmup=0, **MAIN)
    rows = edit(rows, "diverged", lambda r: 0.0, sweep_position="post", sweep_warmup=0, **MAIN)
    return rows


def _nll(rows: list[dict], position: str, warmup: int, by_seed: dict[int, float]) -> list[dict]:
    return edit(rows, "final_valid_nll", lambda r: by_seed[_seed(r)], sweep_position=position, sweep_warmup=warmup,
                **MAIN)


def ties(rows: list[dict]) -> list[list[dict]]:
    t = _translating(rows)
    out = []
    # 1. the controls' mean BLEU exactly at the copy baseline (the gate's margin is 0 at default)
    c = _copy(rows)
    out.append(edit(t, "bleu", lambda r: c, sweep_warmup=300, **MAIN))
    # 2. Post-LN's no-warm-up gap exactly 0.5 nats on every seed (the threshold post_gap_nats)
    from controls import default_thresholds

    T = default_thresholds("warmup_stability")
    assert (T["post_gap_nats"], T["pre_tolerance_nats"], T["gate_bleu"]) == (0.5, 0.25, 0.0), \
        "the dyadic NLLs below sit on these thresholds: change them with the thresholds"
    x = _nll(t, "post", 300, {1: 4.0, 2: 4.125, 3: 3.875})
    out.append(_nll(x, "post", 0, {1: 4.5, 2: 4.625, 3: 4.375}))
    # 3. Pre-LN's no-warm-up gap exactly 0.25 nats on every seed (the threshold pre_tolerance_nats)
    y = _nll(t, "pre", 300, {1: 3.5, 2: 3.5, 3: 3.5})
    out.append(_nll(y, "pre", 0, {1: 3.75, 2: 3.75, 3: 3.75}))
    return out


def threshold_rows(rows: list[dict], key: str) -> list[dict] | None:
    """The reference's controls translate worse than copying, so its BLEU gate fails and every check behind it is
    undecided: the thresholds of those checks (and gate_bleu's margin) matter on the translating rows. Pre-LN trained
    better without warm-up there (a negative gap, below any tolerance): for pre_tolerance_nats its no-warm-up runs
    end 0.1 nats above the warm-up runs, seed by seed, which 0.25 accepts and 0 rejects."""
    if key == "gate_nats":
        return None
    rows = _translating(rows)
    if key == "pre_tolerance_nats":
        pre_w = {_seed(r): r["value"] for r in rows if r["metric"] == "final_valid_nll"
                 and r["sweep"].get("position") == "pre" and r["sweep"].get("warmup") == 300
                 and r["sweep"].get("layers") == 6 and r["sweep"].get("norm") == "layernorm"}
        rows = edit(rows, "final_valid_nll", lambda r: pre_w[_seed(r)] + 0.1, sweep_position="pre", sweep_warmup=0,
                    **MAIN)
    return rows
