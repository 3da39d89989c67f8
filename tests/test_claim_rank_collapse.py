"""C9 rank_collapse (Dong et al. 2021; Noci et al. 2022): the tiny run, the residual measures and fits, the verdict
rule on constructed rows, null data (nothing collapses, identical variants, pure noise) and a small real run."""
import copy
import shutil
from pathlib import Path
import math

import numpy as np
import pytest
import torch

from repro import config
from repro.io import metric
from repro.claims import rank_collapse as rc
from repro.judges import rank_collapse as rank_judge
from repro.claims._cli import judge_rows, run_and_judge

CLAIM = rc.CLAIM


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    params = config.section(CLAIM, "tiny")
    rows, verdict = run_and_judge(CLAIM, rc.run, params, "tiny", tmp_path_factory.mktemp("rank"))
    return params, rows, verdict


def test_tiny_run_shapes(tiny):
    params, rows, verdict = tiny
    q = params["dong"]
    res = [r for r in rows if r["metric"] == "residual_ratio"]
    assert len(res) == len(params["inits"]) * len(q["variants"]) * len(params["seeds"]) * (q["depth"] + 1)
    for name in ("relative_residual", "layernorm_residual"):
        assert all(0 <= r["value"] <= 1 + 1e-12 for r in rows if r["metric"] == name)
    # layer 0 is the same input for every init and variant of a seed: rho_0 = 1, the same relative residual
    first = [r for r in rows if r["metric"] in ("residual_ratio", "residual_ratio_1inf") and r["sweep"]["layer"] == 0]
    assert all(r["value"] == pytest.approx(1.0) for r in first)
    rel0 = {(r["sweep"]["seed"], round(r["value"], 12)) for r in rows
            if r["metric"] == "relative_residual" and r["sweep"]["layer"] == 0}
    assert len(rel0) == len(params["seeds"])
    n = params["noci"]
    grads = [r for r in rows if r["metric"] == "attn_weight_grad_norm"]
    per_init = len(n["norm_positions"]) * sum(n["depths"]) * 2 * len(params["seeds"]) * 3
    assert len(grads) == len(params["inits"]) * per_init
    assert all(r["value"] > 0 for r in grads)
    assert verdict["verdict"] == "not_applicable"
    assert {s["aspect"] for s in verdict["setup"]} >= {"model", "init", "seeds", "precision", "measure"}
    assert any(c["headline"] for c in verdict["checks"])


def test_pure_attention_collapses_and_skip_does_not(tiny):
    params, rows, _ = tiny
    final = {(r["sweep"]["init"], r["sweep"]["variant"]): r["value"] for r in rows
             if r["metric"] == "final_residual_ratio"}
    for init in params["inits"]:
        assert final[(init, "attention")] < 1e-10
        for v in rank_judge.SKIP_VARIANTS:
            assert final[(init, v)] > 1e-2, (init, v)


def test_full_variants_are_the_real_block():
    """full_post ends in LayerNorm (zero mean, unit variance per token); full_pre is x + F(LN(x)): both have norms."""
    q = config.section(CLAIM, "tiny")["dong"]
    post = rc.build_stack("full_post", q, 2, 0, "xavier").double()
    pre = rc.build_stack("full_pre", q, 2, 0, "xavier").double()
    assert all(type(b.norm_self).__name__ == "LayerNorm" for b in list(post) + list(pre))
    x = torch.randn(2, q["n_tokens"], q["d_model"], dtype=torch.float64)
    with torch.no_grad():
        y = post[1](post[0](x))
        b = pre[0]
        manual = x + b.self_attn(b.norm_self(x))
        manual = manual + b.ffn(b.norm_ffn(manual))
        assert torch.allclose(pre[0](x), manual)
    assert y.mean(-1).abs().max() < 1e-10
    assert (y.var(-1, unbiased=False) - 1).abs().max() < 1e-3


def test_residual_measures():
    x = torch.randn(3, 5, 1, dtype=torch.float64) * 0 + torch.randn(1, 1, 4, dtype=torch.float64)  # identical rows
    fro, n1 = rc.relative_residual(x)
    assert torch.all(fro < 1e-12) and torch.all(n1 < 1e-12)
    x = torch.tensor([[[1.0, 0.0], [-1.0, 0.0]]], dtype=torch.float64)  # mean 0: everything is residual
    fro, n1 = rc.relative_residual(x)
    assert fro.item() == pytest.approx(1.0) and n1.item() == pytest.approx(1.0)
    x = torch.tensor([[[3.0, 0.0], [1.0, 0.0]]], dtype=torch.float64)  # residual rows +-1, norm sqrt(2) / sqrt(10)
    assert rc.relative_residual(x)[0].item() == pytest.approx(math.sqrt(2 / 10))
    # a growing token-mean component: the relative residual falls, the residual ratio (Dong's) does not move
    x0 = torch.randn(2, 6, 8, dtype=torch.float64)
    grown = x0 + 100 * torch.randn(2, 1, 8, dtype=torch.float64)
    m = rc.measures(grown, rc.residual_norms(x0))
    assert m["residual_ratio"] == pytest.approx(1.0) and m["residual_ratio_1inf"] == pytest.approx(1.0)
    assert m["relative_residual"] < 0.1 * rc.measures(x0, rc.residual_norms(x0))["relative_residual"]
    assert m["layernorm_residual"] < 0.2  # LayerNorm scales each token: it does not remove a shared direction
    assert rc.measures(2 * x0, rc.residual_norms(x0))["residual_ratio"] == pytest.approx(2.0)


def test_per_layer_exponent_and_collapse_depth():
    cubic = [1.0]
    for _ in range(4):
        cubic.append(0.5 * cubic[-1] ** 3)
    r = [min(c, 0.99) for c in cubic]
    a, n = rc.per_layer_exponent(cubic, r, 1e-13, 1e-3)
    assert a == pytest.approx(3.0) and n == 4
    expo = [0.7 ** k for k in range(8)]
    assert rc.per_layer_exponent(expo, expo, 1e-13, 1e-3)[0] == pytest.approx(1.0)
    grow = [1.05 ** k for k in range(8)]  # a growing residual: exponent 1 as well (at most exponential)
    assert rc.per_layer_exponent(grow, [0.9] * 8, 1e-13, 1e-3)[0] == pytest.approx(1.0)
    assert rc.per_layer_exponent([1.0] * 8, [0.9] * 8, 1e-13, 1e-3) == (None, 7)  # did not move: nothing to fit
    floor = [1.0, 1e-2, 1e-6, 1e-17, 1e-17]  # layers at rounding are left out
    assert rc.per_layer_exponent(floor, [1.0, 1e-2, 1e-6, 1e-16, 1e-16], 1e-13, 1e-3)[1] == 2
    assert rc.collapse_depth([1.0, 1e-2, 1e-10], 1e-6, 9) == pytest.approx(1.5)
    assert rc.collapse_depth([1.0, 0.5], 1e-6, 9) == 9


# ------------------------------------------------------------------------------------------------ judge
PARAMS = copy.deepcopy(config.section(CLAIM, "default"))
INITS = PARAMS["inits"]
SEEDS = PARAMS["seeds"]


def _curve_rows(curves) -> list[dict]:
    """Per-layer measure rows from {(init, variant, seed): rho curve} (the relative residual = min(rho, 0.99))."""
    rows = []
    for (init, variant, seed), rho in curves.items():
        for layer, v in enumerate(rho):
            for name, val in (("residual_ratio", v), ("residual_ratio_1inf", v), ("relative_residual", min(v, 0.99)),
                              ("layernorm_residual", min(v, 0.99))):
                rows.append(metric(CLAIM, name, val, init=init, variant=variant, layer=layer, seed=seed))
    return rows


def _paper_curves(rng, depth=12):
    """Pure attention and attention + MLP cubic (ln rho_(L+1) = 3 ln rho_L - c), the skip stacks exponential."""
    out = {}
    for init in INITS:
        for seed in SEEDS:
            c = 1.5 + 0.1 * rng.standard_normal()
            for variant in ("attention", "attention_mlp"):
                lr = [0.0]
                for _ in range(depth):
                    lr.append(max(3 * lr[-1] - c, -40))
                out[(init, variant, seed)] = [math.exp(v) for v in lr]
            for variant, g in (("attention_skip", 0.05), ("full_post", -0.2), ("full_pre", 0.04)):
                g = g + 0.01 * rng.standard_normal()
                out[(init, variant, seed)] = [math.exp(g * L) for L in range(depth + 1)]
    return out


def _noci_rows(plain=-0.8, scaled=-0.05, rise_plain=0.6, rise_scaled=0.01, spread=0.05, rng=None):
    rows = []
    for init in INITS:
        for pos in PARAMS["noci"]["norm_positions"]:
            common = dict(init=init, position=pos)
            jit = (lambda: 0.0) if rng is None else (lambda: float(rng.standard_normal()))
            for m in ("q", "k"):
                for s, value in ((False, plain), (True, scaled)):
                    rows.append(metric(CLAIM, f"{m}_over_v_depth_slope", value + jit(), spread=spread, n=5, scaled=s,
                                       **common))
            for s, rise in ((False, rise_plain), (True, rise_scaled)):
                rows.append(metric(CLAIM, "token_cosine_rise", rise + jit(), spread=spread, n=5, scaled=s,
                                   from_depth=2, to_depth=32, **common))
    return rows


def _judge(curves, noci=None):
    rows = _curve_rows(curves)
    rows += rc.residual_summary(rows, PARAMS)
    return judge_rows(CLAIM, rows + (noci if noci is not None else _noci_rows()), params=PARAMS)


def test_judge_reproduced_on_paper_like_rows():
    v = _judge(_paper_curves(np.random.default_rng(0)))
    assert v["verdict"] == "reproduced", v["reason"]
    heads = [c for c in v["checks"] if c["headline"]]
    assert len(heads) == len(INITS) and all(c["passed"] and c["interval"] for c in heads)
    mlp = [c for c in v["checks"] if c["name"].startswith("MLPs slow")]
    assert mlp and all(c["passed"] is None and "Lipschitz" in c["undecided_because"] for c in mlp)
    assert v["setup"] and v["meaning"]


def _edit(curves, variant, fn):
    return {k: (fn(v) if k[1] == variant else v) for k, v in curves.items()}


@pytest.mark.parametrize("case", ["skip_collapses", "post_cubic", "noci_flat", "noci_scaled_vanish",
                                  "cosine_flat", "cosine_scaled_rises"])
def test_judge_flags_each_wrong_secondary(case):
    rng = np.random.default_rng(1)
    curves, noci = _paper_curves(rng), _noci_rows()
    cubic = curves[(INITS[0], "attention", SEEDS[0])]
    if case == "skip_collapses":  # the skip stack collapses too, but less steeply than pure attention
        curves = _edit(curves, "full_pre", lambda v: [math.exp(-1.5 * (2.6 ** L - 1) / 1.6) for L in range(len(v))])
    elif case == "post_cubic":
        curves = _edit(curves, "full_post", lambda v: cubic)
    else:
        noci = _noci_rows(**{"noci_flat": dict(plain=-0.05), "noci_scaled_vanish": dict(scaled=-0.7),
                             "cosine_flat": dict(rise_plain=0.05), "cosine_scaled_rises": dict(rise_scaled=0.6)}[case])
    v = _judge(curves, noci)
    assert v["verdict"] == "partially", (case, v["reason"])
    assert any(c["passed"] is False for c in v["checks"])


def test_judge_headline_fails_when_attention_decays_exponentially():
    curves = _paper_curves(np.random.default_rng(2))
    curves = _edit(curves, "attention", lambda v: [0.3 ** L for L in range(len(v))])
    v = _judge(curves)
    assert v["verdict"] == "not_reproduced", v["reason"]


# ------------------------------------------------------------------------------------------------ null data
def test_null_nothing_collapses():
    rng = np.random.default_rng(3)
    curves = {(i, var, s): [math.exp(0.002 * rng.standard_normal() * L) for L in range(13)]
              for i in INITS for var in PARAMS["dong"]["variants"] for s in SEEDS}
    v = _judge(curves, _noci_rows(plain=0.0, scaled=0.0, rise_plain=0.0, rise_scaled=0.0))
    assert v["verdict"] in ("inconclusive", "not_reproduced"), v["reason"]


def test_null_identical_variants():
    """Every stack the same doubly exponential curve: the measure does not tell pure attention from the skip
    stacks, so the claim (about pure attention) is not reproduced, never 'partially'."""
    curves = _paper_curves(np.random.default_rng(4))
    curves = {k: curves[(k[0], "attention", k[2])] for k in curves}
    v = _judge(curves, _noci_rows(plain=0.0, scaled=0.0, rise_plain=0.0, rise_scaled=0.0))
    assert v["verdict"] in ("inconclusive", "not_reproduced"), v["reason"]


@pytest.mark.parametrize("seed", range(5))
def test_null_pure_noise(seed):
    rng = np.random.default_rng(100 + seed)
    curves = {(i, var, s): list(np.exp(rng.uniform(-30, 1, 13))) for i in INITS for var in PARAMS["dong"]["variants"]
              for s in SEEDS}
    v = _judge(curves, _noci_rows(plain=0.0, scaled=0.0, rise_plain=0.0, rise_scaled=0.0, spread=1.0, rng=rng))
    assert v["verdict"] in ("inconclusive", "not_reproduced"), v["reason"]


# ------------------------------------------------------------------------------------------------ real rows
def test_small_real_run_reproduces(tmp_path):
    """A small stand-in for the default scale (narrower, shallower; all inits, 5 seeds) gives the intended verdict:
    pure attention cubic, every skip stack exponent ~1, Noci's trends, the MLP statement undecided."""
    p = copy.deepcopy(PARAMS)
    p["dong"].update(d_model=32, n_heads=4, d_ff=64, n_tokens=16, batch=2, depth=8)
    p["noci"].update(d_model=32, n_heads=4, d_ff=64, n_tokens=16, batch=2, depths=[2, 16], classes=16)
    rows, v = run_and_judge(CLAIM, rc.run, p, "default", tmp_path)
    assert v["verdict"] == "reproduced", v["reason"]
    exps = {(r["sweep"]["init"], r["sweep"]["variant"]): r["value"] for r in rows
            if r["metric"] == "per_layer_exponent"}
    for init in p["inits"]:
        assert 2.5 < exps[(init, "attention")] < 3.5
        # a skip stack's exponent is ~1, or absent when its residual did not move by 1% (then judged by rho)
        assert all(exps[(init, v)] is None or 0.5 < exps[(init, v)] < 1.5 for v in rank_judge.SKIP_VARIANTS), exps


def test_old_measurements_are_refused_not_rejudged():
    """Rows of the relative-residual measurement (before issue 12) cannot be judged by the residual-ratio rule."""
    old = [metric(CLAIM, "final_relative_residual", 0.2, variant="attention_skip", depth=12)]
    with pytest.raises(ValueError, match="predate the residual-ratio measurement"):
        judge_rows(CLAIM, old, params=PARAMS)


def test_rejudge_reproduces_the_stored_verdict(tmp_path):
    """--rejudge applies the rule to the stored metrics.csv: the same verdict as the run that measured them."""
    from repro.claims._cli import main

    out = tmp_path / "rank"
    assert main(CLAIM, rc.run, ["--scale", "tiny", "--out", str(out)]) == 0
    import json
    before = json.loads((out / "verdict.json").read_text())
    assert main(CLAIM, rc.run, ["--scale", "tiny", "--out", str(out), "--rejudge"]) == 0
    after = json.loads((out / "verdict.json").read_text())
    assert after["verdict"] == before["verdict"] and after["checks"] == before["checks"]
    assert after["rejudged"]["previous_verdict"] == before["verdict"]


def test_a_threshold_changed_in_the_config_rejudges_with_the_new_value(tmp_path, monkeypatch):
    """The judge: section is read at judging time (never the values stored with the measurement): --rejudge with a
    cubic_tolerance of 0.001 turns the verdict away from the one given at 0.5 and records 0.001."""
    import json
    from repro.claims._cli import main

    folder = Path(__file__).resolve().parents[1] / "references/results/cpu-amd-epyc-2c/default/rank_collapse"
    out = tmp_path / "rank"
    shutil.copytree(folder, out)
    for f in out.iterdir():
        f.chmod(0o644)
    assert main(CLAIM, rc.run, ["--scale", "default", "--out", str(out), "--rejudge"]) == 0
    before = json.loads((out / "verdict.json").read_text())
    tight = {**config.thresholds(CLAIM, "default"), "cubic_tolerance": 0.001}
    assert main(CLAIM, rc.run, ["--scale", "default", "--out", str(out), "--rejudge",
                                "--thresholds", json.dumps(tight)]) == 0
    after = json.loads((out / "verdict.json").read_text())
    assert before["verdict"] == "reproduced" and after["verdict"] == "not_reproduced", after["reason"][:300]
    assert after["thresholds"]["cubic_tolerance"] == 0.001
    head = [c for c in after["checks"] if c["headline"]][0]
    assert head["thresholds"]["cubic_tolerance"] == 0.001
