"""warmup_stability (C3; Xiong et al. 2020 Sec. 3.2, Nguyen & Salazar 2019): plumbing at tiny scale, FixNorm, and the
verdict rules on constructed rows (a wrong result must flip the verdict)."""
from __future__ import annotations

import copy
import math

import pytest
import torch

from repro import config
from repro.io import metric
from repro.claims import warmup_stability as ws
from repro.claims._cli import judge_rows, run_and_judge
from repro.bench.fingerprint import fingerprint


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    p = config.section("warmup_stability", "tiny")
    out = tmp_path_factory.mktemp("ws")
    rows, verdict = run_and_judge("warmup_stability", ws.run, p, "tiny", out)
    return p, out, rows, verdict


def test_tiny_run_shapes(tiny_run):
    p, out, rows, verdict = tiny_run
    plan = ws.plan_runs(p)
    names = {r["sweep"]["run"] for r in rows} - {"data"}
    assert names == {r["name"] for r in plan}
    data = {r["metric"]: r["value"] for r in rows if r["sweep"]["run"] == "data"}
    assert set(data) == {"unigram_entropy", "train_pairs", "vocab_size", "no_warmup_decay_from"}
    assert data["no_warmup_decay_from"] == ws.warmup_lengths(p)[0]
    assert 0 < data["unigram_entropy"] <= math.log(data["vocab_size"])
    for name in names:
        got = {r["metric"] for r in rows if r["sweep"]["run"] == name}
        assert {"diverged", "final_valid_nll", "bleu", "bleu_copy_baseline", "steps"} <= got
        assert (out / "curves" / f"{name}.csv").exists()
    for r in rows:
        if r["metric"] == "bleu":
            assert 0.0 <= r["value"] <= 100.0
        if r["metric"] == "steps":
            assert r["value"] == p["training"]["max_steps"] or any(
                x["value"] == 1.0 for x in rows if x["metric"] == "diverged" and x["sweep"]["run"] == r["sweep"]["run"])
    assert verdict["verdict"] == "not_applicable"
    assert (out / "runs.json").exists()


def test_tiny_plots(tiny_run, tmp_path):
    from repro.io import read_metrics, write_results
    from repro.report.plots import ResultFiles
    from repro.report.plots.warmup_stability import plots

    p, out, rows, verdict = tiny_run
    write_results(out, fingerprint=fingerprint(), claim="warmup_stability", scale="tiny", metrics=rows, verdict=verdict, config=p,
                  artifacts=ws.ARTIFACTS)  # as the claim's command line writes them: curves declared
    figs = plots(read_metrics(out), ResultFiles.of(out), tmp_path)
    assert {f for f, _ in figs} >= {"loss_curves.png", "bleu.png", "depth.png"}
    for f, _ in figs:
        assert (tmp_path / f).stat().st_size > 0


def test_default_plan_is_c3s_grid_on_confirmation_seeds():
    """The default trains C3's grid at the headline lr (Post-LN and Pre-LN, each with and without warm-up) on
    confirmation seeds only (>= 1000; the pilots' 1-5 are spent): Post-LN without warm-up with the extra seeds; no
    lower lr (the reported-only secondary runs at the paper scale: the budget); no depth sweep (its one decision was
    the 'Pre-LN beats Post-LN' check's). With a lower lr given, Post-LN trains it with and without warm-up on
    secondary_seeds."""
    p = copy.deepcopy(config.section("warmup_stability", "default"))
    plan = ws.plan_runs(p)
    keys = [(r["norm"], r["position"], r["fixnorm"], r["layers"], r["lr"], r["warmup"], r["seed"]) for r in plan]
    assert len(keys) == len(set(keys)) == len({r["name"] for r in plan})
    assert min(r["seed"] for r in plan) >= 1000
    L, hi = p["model"]["n_encoder_layers"], max(p["lrs"])
    assert p["lrs"] == [hi] and {r["layers"] for r in plan} == {L}

    def by_setting(plan):
        seeds = {}
        for r in plan:
            seeds.setdefault((r["position"], bool(r["warmup"]), r["lr"]), set()).add(r["seed"])
        return seeds

    main, extra = set(p["seeds"]), set(p["post_no_warmup_extra_seeds"])
    grid = {("post", False, hi): main | extra, ("post", True, hi): main, ("pre", False, hi): main,
            ("pre", True, hi): main}
    assert by_setting(plan) == grid
    assert not [r for r in plan if "depth" in r["groups"]]  # no sweep: no run labelled for the depth figure
    lo, second = 0.001, {1000, 1001}
    plan2 = ws.plan_runs({**p, "lrs": [hi, lo], "secondary_seeds": sorted(second)})
    assert by_setting(plan2) == {**grid, ("post", False, lo): second, ("post", True, lo): second}
    # the headline's configurations first (a run cut short still has the headline)
    assert all(r["lr"] == hi for r in plan2[: len(main | extra) + 2 * len(main)])


def test_plan_dedupes_depth_runs():
    p = copy.deepcopy(config.section("warmup_stability", "paper"))
    p["depth"]["seeds"] = [7, 8]
    plan = ws.plan_runs(p)
    keys = [(r["norm"], r["position"], r["fixnorm"], r["layers"], r["lr"], r["warmup"], r["seed"]) for r in plan]
    assert len(keys) == len(set(keys)) == len({r["name"] for r in plan})
    L = p["model"]["n_encoder_layers"]
    # the depth sweep's shallower runs train depth.seeds; the main depth's runs keep theirs
    assert {r["seed"] for r in plan if r["layers"] != L} == {7, 8}
    extra = len(p["depth"]["layers"]) * len(p["positions"]) * 2
    p["depth"]["layers"] = [L]  # the main depth: reused from the grid, not retrained
    assert len(ws.plan_runs(p)) == len(plan) - extra
    p["depth"] = {**p["depth"], "layers": [1], "seeds": None}  # null: every depth trains seeds
    assert {r["seed"] for r in ws.plan_runs(p) if r["layers"] == 1} == set(p["seeds"])
    p["depth"]["layers"] = []  # no sweep: the main grid only
    assert {r["layers"] for r in ws.plan_runs(p)} == {L}


def test_extra_seeds_only_at_the_headline_lr():
    p = copy.deepcopy(config.section("warmup_stability", "paper"))
    p["post_no_warmup_extra_seeds"] = [1003]
    runs = [r for r in ws.plan_runs(p) if r["seed"] == 1003]
    assert [(r["position"], r["warmup"], r["lr"], r["layers"]) for r in runs] == \
        [("post", 0, max(p["lrs"]), p["model"]["n_encoder_layers"])]


def test_fixnorm_fixes_embedding_length():
    from repro.train.pipeline import build_model

    p = config.section("warmup_stability", "tiny")
    m = build_model({**p["model"], "block": {**p["model"]["block"], "norm": "scalenorm"}}, 50, 0)
    ws.apply_fixnorm(m, 2.0)
    w = m.encoder.embed.token.weight
    norms = w.norm(dim=-1)
    assert torch.allclose(norms[1:], torch.full_like(norms[1:], 2.0), atol=1e-5)
    assert norms[0] == 0  # pad row
    assert m.decoder.embed.token is m.encoder.embed.token  # tied: the output projection sees the same rows
    src = torch.randint(1, 50, (2, 5))
    out = m(src, src)
    assert out.shape == (2, 5, 50) and torch.isfinite(out).all()
    # logits are bounded by |h| * g with the final ScaleNorm (|h| = its g) and FixNorm rows of length g
    out.sum().backward()
    assert m.encoder.embed.token.parametrizations.weight.original.grad is not None


# ---------------------------------------------------------------------------------------------- judge on constructed rows
H = 6.5  # unigram entropy of the constructed data set
SEEDS = [1, 2, 3]
P = {"model": {"n_encoder_layers": 6, "block": {"d_model": 64, "d_ff": 256, "n_heads": 4}}, "seeds": SEEDS,
     "lrs": [0.0005, 0.001], "warmup_steps": 100, "training": {"max_len": 48, "max_tokens": 1024, "max_steps": 400,
                                                               "betas": [0.9, 0.98]},
     "scalenorm_fixnorm": {"enabled": True, "lrs": [0.0005, 0.001]}, "eval": {"test_sentences": 100},
     "depth": {"layers": [2, 4], "lr": 0.001}}
T = config.thresholds("warmup_stability", "default")  # the judge: section (the constructed rows below assume it)
COPY_BLEU = 9.0


def _judge(rows, params, scale, thresholds=None):
    return judge_rows("warmup_stability", rows, scale=scale, params=params, thresholds=thresholds or T)


def test_a_moved_threshold_changes_the_check_that_names_it():
    """post_gap_nats belongs to the judge: at 100 nats no paper-like gap is 'clearly worse', and the headline names
    the value it was decided with."""
    v = _judge(_rows(_paper_like()), P, "default", thresholds={**T, "post_gap_nats": 100.0})
    c = _by_name(v)["Post-LN needs warm-up at lr 0.001"]
    assert c["passed"] is False and c["thresholds"] == {"post_gap_nats": 100.0}


def _rows(nll: dict, diverged=(), noise=0.02, seed=0, bleu=None) -> list[dict]:
    """Metrics rows of every configuration in ``nll`` (value: the seeds' mean NLL) for each of SEEDS, with a small
    per-seed jitter; ``diverged``: run names (without seed) that diverged; ``bleu``: NLL -> BLEU map."""
    bleu = bleu or (lambda v: max(0.0, 60 - 8 * v))
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for (norm, pos, layers, lr, warmup), v in nll.items():
        fix = norm == "scalenorm"
        base = f"{pos}_{norm}_L{layers}_{lr}_{warmup}"
        groups = []
        if layers == 6 and not fix:
            groups.append("xiong")
        if fix:
            groups.append("nguyen")
        if warmup == 0 and lr == 0.001 and not fix:
            groups.append("depth")
        for s in SEEDS:
            sw = dict(run=f"{base}_s{s}", group="+".join(groups), norm=norm, position=pos, fixnorm=fix,
                      layers=layers, lr=lr, warmup=warmup, seed=s)
            d = base in diverged
            x = v + noise * float(torch.randn((), generator=gen))
            rows += [metric("warmup_stability", "final_valid_nll", math.nan if d else x, "", **sw),
                     metric("warmup_stability", "diverged", float(d), "", **sw),
                     metric("warmup_stability", "bleu", 0.0 if d else bleu(x), "", **sw),
                     metric("warmup_stability", "bleu_copy_baseline", COPY_BLEU, "", **sw)]
    rows += [metric("warmup_stability", "unigram_entropy", H, "", run="data"),
             metric("warmup_stability", "train_pairs", 1000, "", run="data"),
             metric("warmup_stability", "vocab_size", 500, "", run="data")]
    return rows


def _paper_like():
    """The papers' picture: Pre-LN unaffected by warm-up, Post-LN fails without it, worse with depth."""
    return {("layernorm", "post", 6, 0.0005, 100): 3.0, ("layernorm", "post", 6, 0.0005, 0): 3.8,
            ("layernorm", "post", 6, 0.001, 100): 3.1, ("layernorm", "post", 6, 0.001, 0): 5.5,
            ("layernorm", "pre", 6, 0.0005, 100): 3.0, ("layernorm", "pre", 6, 0.0005, 0): 3.05,
            ("layernorm", "pre", 6, 0.001, 100): 3.0, ("layernorm", "pre", 6, 0.001, 0): 3.1,
            ("scalenorm", "pre", 6, 0.0005, 0): 3.0, ("scalenorm", "pre", 6, 0.001, 0): 3.05,
            ("layernorm", "post", 2, 0.001, 0): 3.3, ("layernorm", "pre", 2, 0.001, 0): 3.2,
            ("layernorm", "post", 4, 0.001, 0): 4.0, ("layernorm", "pre", 4, 0.001, 0): 3.1}


def _by_name(v) -> dict:
    return {c["name"]: c for c in v["checks"]}


def test_judge_reproduced_on_paper_like_numbers():
    v = _judge(_rows(_paper_like()), P, "default")
    assert v["verdict"] == "reproduced", v["reason"]
    heads = [c["name"] for c in v["checks"] if c["headline"]]
    assert heads == ["Post-LN needs warm-up at lr 0.001", "Pre-LN without warm-up matches Post-LN with warm-up at lr 0.001"]
    # 2 headline + warm-up makes no difference to Pre-LN at both lrs, Pre beats Post, 2 ScaleNorm, depth trend,
    # Post-LN needs warm-up at the lower lr; the lower lr's three are reported only
    assert len(v["checks"]) == 9
    assert sorted(c["name"] for c in v["checks"] if c.get("counts") is False) == [
        "Post-LN needs warm-up at lr 0.0005 (reported only)",
        "PreNorm + ScaleNorm + FixNorm trains without warm-up at lr 0.0005 (reported only)",
        "warm-up makes no difference to Pre-LN at lr 0.0005 (reported only)"]
    assert "6/6 decided checks hold (0 undecided); 3 reported only" in v["reason"]
    assert all(c["numbers"]["criterion"] == "suite" for c in v["checks"] if c["headline"])
    # the headline in the papers' unit: BLEU over seeds beside Xiong's 8.45 without warm-up, the NLL gap in the rule
    n = v["checks"][0]["numbers"]
    assert n["unit"].startswith("BLEU Post-LN without warm-up, with ") and n["paper"] == 8.45
    assert n["lo"] <= n["value"] <= n["hi"] and n["rule"].startswith("NLL gap +") and "> 0.5" in n["rule"]
    assert all(c.get("power") for c in v["checks"])
    assert all(c["passed"] for c in v["checks"]) and all(c["interval"] for c in v["checks"])
    assert [g["passed"] for g in v["gates"]] == [True, True]
    assert "unigram entropy of the training targets 6.500" in v["gates"][0]["measured"]
    aspects = {r["aspect"]: r for r in v["setup"]}
    assert {"model", "data", "steps", "seeds", "warm-up", "learning rates", "precision", "hardware"} <= set(aspects)
    assert "3 per configuration" in aspects["seeds"]["this_run"]
    assert aspects["model"]["paper"] != "not stated"  # the registry's paper_setup


def test_judge_diverged_post_ln_counts_as_failure():
    rows = _rows(_paper_like(), diverged={"post_layernorm_L6_0.001_0"})
    v = _judge(rows, P, "default")
    assert v["verdict"] == "reproduced", v["reason"]
    assert "3/3 diverged" in _by_name(v)["Post-LN needs warm-up at lr 0.001"]["measured"]


def test_judge_fails_when_post_ln_trains_fine_without_warmup():
    nll = _paper_like()
    for k in list(nll):  # Post-LN as good as Pre-LN everywhere: no instability at this scale
        if k[1] == "post":
            nll[k] = nll.get(("layernorm", "pre", k[2], k[3], k[4]), 3.0)
    v = _judge(_rows(nll), P, "default")
    assert v["verdict"] == "not_reproduced", v["reason"]
    c = _by_name(v)
    assert c["Post-LN needs warm-up at lr 0.001"]["passed"] is False
    assert c["without warm-up Pre-LN beats Post-LN at lr 0.001"]["passed"] is False
    assert c["no warm-up: Post-LN's gap to Pre-LN grows from 2+2 to 6+6 layers"]["passed"] is not True


def test_judge_fails_when_pre_ln_needs_warmup():
    nll = _paper_like()
    nll[("layernorm", "pre", 6, 0.001, 0)] = 4.0
    v = _judge(_rows(nll), P, "default")
    assert _by_name(v)["Pre-LN without warm-up matches Post-LN with warm-up at lr 0.001"]["passed"] is False
    assert _by_name(v)["warm-up makes no difference to Pre-LN at lr 0.001"]["passed"] is False
    assert v["verdict"] == "not_reproduced"  # a half of the headline contrast


def _xiong_only(nll: dict) -> dict:
    """The default grid (warmup_positions [post]): no Pre-LN run with warm-up."""
    return {k: v for k, v in nll.items() if not (k[0] == "layernorm" and k[1] == "pre" and k[4])}


def test_judge_without_pre_ln_warmup_runs():
    """warmup_positions [post] (the default): the headline needs only the Post-LN warm-up baseline; the gates watch
    that control alone; Pre-LN's 'warm-up makes no difference' checks are not made."""
    p = {**P, "warmup_positions": ["post"]}
    v = _judge(_rows(_xiong_only(_paper_like())), p, "default")
    assert v["verdict"] == "reproduced", v["reason"]
    names = _by_name(v)
    assert not any(n.startswith("warm-up makes no difference") for n in names)
    assert "pre-LN" not in v["gates"][0]["measured"] and "post-LN + warm-up" in v["gates"][0]["measured"]
    nll = _xiong_only(_paper_like())
    nll[("layernorm", "pre", 6, 0.001, 0)] = 3.6  # Pre-LN without warm-up 0.5 nats behind the baseline
    v = _judge(_rows(nll), p, "default")
    assert names and _by_name(v)["Pre-LN without warm-up matches Post-LN with warm-up at lr 0.001"]["passed"] is False
    assert v["verdict"] == "not_reproduced"


def test_plan_trains_warmup_only_for_warmup_positions():
    p = copy.deepcopy(config.section("warmup_stability", "default"))
    plan = ws.plan_runs({**p, "warmup_positions": ["post"]})
    assert not [r for r in plan if r["position"] == "pre" and r["warmup"]]
    assert [r for r in plan if r["position"] == "post" and r["warmup"]]
    with pytest.raises(ValueError, match="warmup_positions"):
        ws.plan_runs({**p, "positions": ["post"], "warmup_positions": ["pre"]})


def test_judge_partially_when_a_secondary_fails():
    v = _judge(_rows(_paper_like(), diverged={"pre_scalenorm_L6_0.001_0"}), P, "default")
    assert _by_name(v)["PreNorm + ScaleNorm + FixNorm trains without warm-up at lr 0.001"]["passed"] is False
    assert v["verdict"] == "partially", v["reason"]


def test_judge_undecided_when_seeds_disagree():
    """The same means with a seed spread far wider than the effect: no check may be decided by the mean alone."""
    nll = _paper_like()
    nll[("layernorm", "post", 6, 0.001, 0)] = 3.8  # gap 0.7 > 0.5 nats, but the seeds scatter by ~1 nat
    v = _judge(_rows(nll, noise=1.0, seed=3), P, "default")
    c = _by_name(v)["Post-LN needs warm-up at lr 0.001"]
    assert c["passed"] is None and "straddles" in c["undecided_because"], c
    assert v["verdict"] in ("inconclusive", "not_reproduced")


def _with_extra_seeds(rows: list[dict], values: dict[int, float]) -> list[dict]:
    """``rows`` plus Post-LN without warm-up at the main depth and lr 0.001 for the extra seeds in ``values``
    (seed -> valid NLL), as ``post_no_warmup_extra_seeds`` trains them."""
    base = "post_layernorm_L6_0.001_0"
    out = list(rows)
    for s, x in values.items():
        sw = dict(run=f"{base}_s{s}", group="xiong+depth", norm="layernorm", position="post", fixnorm=False,
                  layers=6, lr=0.001, warmup=0, seed=s)
        out += [metric("warmup_stability", "final_valid_nll", x, "", **sw),
                metric("warmup_stability", "diverged", 0.0, "", **sw),
                metric("warmup_stability", "bleu", max(0.0, 60 - 8 * x), "", **sw),
                metric("warmup_stability", "bleu_copy_baseline", COPY_BLEU, "", **sw)]
    return out


def test_judge_welch_where_post_ln_without_warmup_has_more_seeds():
    """post_no_warmup_extra_seeds: checks against Post-LN without warm-up use all its seeds by Welch's interval of
    the means; checks between configurations with the same seeds stay paired."""
    p = {**P, "post_no_warmup_extra_seeds": [4, 5]}
    v = _judge(_with_extra_seeds(_rows(_paper_like()), {4: 5.45, 5: 5.52}), p, "default")
    assert v["verdict"] == "reproduced", v["reason"]
    c = _by_name(v)
    assert "Welch over 5 / 3 seeds" in c["Post-LN needs warm-up at lr 0.001"]["interval"]
    assert "over 3 paired seeds" in c["Pre-LN without warm-up matches Post-LN with warm-up at lr 0.001"]["interval"]
    assert c["Post-LN needs warm-up at lr 0.001"]["power"]["n"] == 5  # the seeds of the configuration that varies
    seeds = {s["aspect"]: s["this_run"] for s in v["setup"]}["seeds"]
    # the seeds as measured, per configuration (from the rows, not re-read from the parameters)
    assert seeds.startswith("3 per configuration (1, 2, 3), except Post-LN 6+6 without warm-up at lr 0.001: 5 (1, 2, 3, "
                            "4, 5)"), seeds


def test_judge_extra_seeds_that_escape_the_plateau_leave_the_headline_undecided():
    """Negative control: the two extra seeds train fine without warm-up (the failure is not consistent), so the
    5-seed mean gap is wide and its interval straddles the threshold: undecided, never a pass."""
    p = {**P, "post_no_warmup_extra_seeds": [4, 5]}
    v = _judge(_with_extra_seeds(_rows(_paper_like()), {4: 3.1, 5: 3.12}), p, "default")
    c = _by_name(v)["Post-LN needs warm-up at lr 0.001"]
    assert c["passed"] is None and "straddles" in c["undecided_because"]
    assert v["verdict"] == "inconclusive"


def test_judge_one_seed_decides_nothing():
    p = {**P, "seeds": [1]}
    rows = [r for r in _rows(_paper_like()) if r["sweep"].get("seed") in (None, 1)]
    v = _judge(rows, p, "default")
    assert v["verdict"] == "inconclusive", v["reason"]
    assert all(c["passed"] is None for c in v["checks"])


# null data: never reproduced / partially
def test_null_nothing_trained():
    """Every validation NLL equal to the unigram entropy (and BLEU 0): the controls did not learn."""
    nll = {k: H for k in _paper_like()}
    v = _judge(_rows(nll, noise=0.0, bleu=lambda v: 0.0), P, "default")
    assert v["verdict"] == "inconclusive", v["reason"]
    assert [g["passed"] for g in v["gates"]] == [False, False]
    assert all(c["passed"] is None for c in v["checks"])
    # every check is blocked by the gate, except the depth growth, whose gap of exactly 0 is a tie of its own
    assert all("gate" in c["undecided_because"] for c in v["checks"] if "grows" not in c["name"])


@pytest.mark.parametrize("seed", range(5))
def test_null_pure_noise(seed):
    """NLL scattered around the unigram entropy with no structure: nothing learned, nothing to decide."""
    nll = {k: H for k in _paper_like()}
    v = _judge(_rows(nll, noise=0.7, seed=seed), P, "default")
    assert v["verdict"] in ("inconclusive", "not_reproduced"), v["reason"]


def test_null_identical_variants():
    """Every variant learned equally well (warm-up and layout make no difference): the headline must fail."""
    nll = {k: 3.0 for k in _paper_like()}
    v = _judge(_rows(nll, noise=0.03), P, "default")
    assert v["gates"][0]["passed"]
    assert v["verdict"] in ("inconclusive", "not_reproduced"), v["reason"]
    assert _by_name(v)["Post-LN needs warm-up at lr 0.001"]["passed"] is False


def test_control_did_not_learn_makes_everything_undecided():
    """Post-LN with warm-up stuck at the unigram entropy: the paper-like contrast elsewhere must not count."""
    nll = _paper_like()
    nll[("layernorm", "post", 6, 0.001, 100)] = H - 0.2
    v = _judge(_rows(nll), P, "default")
    assert v["verdict"] == "inconclusive"
    assert not v["gates"][0]["passed"]


def test_bleu_gate_below_copy_baseline():
    v = _judge(_rows(_paper_like(), bleu=lambda v: COPY_BLEU - 1.0), P, "default")
    assert v["gates"][1]["passed"] is False and v["verdict"] == "inconclusive"


def test_bleu_gate_margin_null_is_zero():
    """judge: gate_bleu is the margin above the copy baseline; null means a margin of 0 (the gate stays on)."""
    rows = _rows(_paper_like(), bleu=lambda v: COPY_BLEU + 0.5)
    for margin, passed in ((None, True), (0.0, True), (1.0, False)):
        g = _judge(rows, P, "default", thresholds={**T, "gate_bleu": margin})["gates"][1]
        assert g["passed"] is passed and g["thresholds"] == {"gate_bleu": margin}, g
    low = _judge(_rows(_paper_like(), bleu=lambda v: COPY_BLEU - 0.5), P, "default",
                 thresholds={**T, "gate_bleu": None})
    assert low["gates"][1]["passed"] is False


def test_old_single_seed_results_are_inconclusive():
    """Rows as the pre-gate runs recorded them (one seed, no seed column, no unigram entropy): the old default
    (valid NLL 5.65-6.24, BLEU 0-1.6) once read 'partially'; it must now be inconclusive, and not crash."""
    old = {("layernorm", "post", 6, 0.001, 100): 6.166, ("layernorm", "post", 6, 0.001, 0): 6.240,
           ("layernorm", "pre", 6, 0.001, 100): 5.649, ("layernorm", "pre", 6, 0.001, 0): 5.673,
           ("layernorm", "pre", 6, 0.0005, 100): 5.850, ("layernorm", "pre", 6, 0.0005, 0): 5.708,
           ("scalenorm", "pre", 6, 0.001, 0): 5.720, ("layernorm", "post", 2, 0.001, 0): 5.660,
           ("layernorm", "pre", 2, 0.001, 0): 5.323}
    rows = [r for r in _rows(old, noise=0.0) if r["sweep"].get("seed", 1) == 1 and r["sweep"]["run"] != "data"]
    for r in rows:
        del r["sweep"]["seed"]
    v = _judge(rows, P, "default")
    assert v["verdict"] == "inconclusive", v["reason"]
    assert all(c["passed"] is None for c in v["checks"]) and not v["gates"][0]["passed"]
    assert "unigram entropy not recorded" in v["gates"][0]["measured"]


def test_judge_tiny_is_not_applicable():
    assert _judge(_rows(_paper_like()), P, "tiny")["verdict"] == "not_applicable"


def test_t_interval():
    from repro.intervals import sample_interval

    m, lo, hi, sd = sample_interval([1.0, 2.0, 3.0])
    assert (m, sd) == (2.0, 1.0)
    assert math.isclose(hi - m, 4.303 / math.sqrt(3))
    assert sample_interval([1.0])[1:3] == (-math.inf, math.inf)


def test_unigram_entropy():
    import numpy as np

    from repro.data.batching import EncodedCorpus

    enc = EncodedCorpus(src=[np.array([5, 2])] * 2, tgt=[np.array([4, 5]), np.array([4, 6])], index=np.arange(2),
                        pad_id=0, bos_id=1, eos_id=2, n_input=2)
    # targets with eos: 4 4 5 6 2 2 -> p = 1/3, 1/3, 1/6, 1/6
    want = -(2 * (1 / 3) * math.log(1 / 3) + 2 * (1 / 6) * math.log(1 / 6))
    assert math.isclose(ws.unigram_entropy(enc, 8), want)


def test_workers_train_the_same_runs(tiny_run, tmp_path):
    """Two worker processes train the same plan to the same numbers as the sequential run (one torch thread each)."""
    p, out, rows, verdict = tiny_run
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # the job's threads bound the workers
    try:
        rows2, _ = ws.run({**p, "workers": 2}, "tiny", tmp_path)
    finally:
        torch.set_num_threads(before)
    key = lambda r: (r["metric"], r["sweep"]["run"])  # noqa: E731
    a = {key(r): r["value"] for r in rows if r["metric"] in ("final_valid_nll", "steps", "diverged")}
    b = {key(r): r["value"] for r in rows2 if r["metric"] in ("final_valid_nll", "steps", "diverged")}
    assert a.keys() == b.keys()
    for k in a:
        assert a[k] == pytest.approx(b[k], rel=1e-3, abs=1e-4), k


def test_rerun_keeps_finished_runs(tiny_run):
    p, out, rows, verdict = tiny_run
    rows2, _ = ws.run(p, "tiny", out)  # every run is in runs.json with the same parameters: nothing retrained
    key = lambda r: (r["metric"], r["sweep"]["run"])  # noqa: E731
    a = {key(r): r["value"] for r in rows if r["metric"] != "train_seconds"}
    b = {key(r): r["value"] for r in rows2 if r["metric"] != "train_seconds"}
    assert a == b


def test_parts_train_the_same_runs_and_the_judging_job_keeps_them(tiny_run, tmp_path, caplog):
    """workflow.parts: the part jobs (``--part I-of-N`` on the command line) each train their share of the planned runs; the
    judging job then trains nothing and reports the same numbers as one job training everything."""
    import json
    import logging

    from repro.claims._cli import main

    p, out, rows, verdict = tiny_run
    args = ["--scale", "tiny", "--out", str(tmp_path), "--params", json.dumps(p), "--threads", "1"]
    for i in range(2):
        assert main(ws.CLAIM, ws.run, args + ["--part", f"{i}-of-2"]) == 0
        done = json.loads((tmp_path / "parts" / f"{i}-of-2.done").read_text())
        assert done["runs"] == [r["name"] for r in ws.split_runs(ws.plan_runs(p), 2)[i]]
    assert not (tmp_path / "verdict.json").exists()  # a part does not judge
    with caplog.at_level(logging.INFO, logger="repro.warmup_stability"):
        rows2, verdict2 = run_and_judge("warmup_stability", ws.run, p, "tiny", tmp_path)
    n = len(ws.plan_runs(p))
    assert f"{n} runs kept from earlier results, 0 to train" in caplog.text
    assert len(json.loads((tmp_path / "runs.json").read_text())["runs"]) == n  # what the plots read
    key = lambda r: (r["metric"], r["sweep"]["run"])  # noqa: E731
    same = ("final_valid_nll", "steps", "diverged", "bleu", "unigram_entropy")  # not the timings
    a = {key(r): r["value"] for r in rows if r["metric"] in same}
    b = {key(r): r["value"] for r in rows2 if r["metric"] in same}
    assert a.keys() == b.keys() and len(a) > 4 * len(ws.plan_runs(p))
    for k in a:
        assert a[k] == pytest.approx(b[k], rel=1e-3, abs=1e-4), k
    assert verdict2["verdict"] == verdict["verdict"]


def test_split_runs_balances_the_parts():
    """Every planned run in exactly one part; the default plan in the workflow's default parts: the parts within one
    run of each other (round-robin once put three big runs in one part, which then ran alone at the end)."""
    p = config.section("warmup_stability", "default")
    plan = ws.plan_runs(p)
    n = config.workflow_spec("warmup_stability", "default")["parts"]
    parts = ws.split_runs(plan, n)
    names = [r["name"] for part in parts for r in part]
    assert sorted(names) == sorted(r["name"] for r in plan) and len(names) == len(set(names))
    cost = [sum(r["layers"] + 1 for r in part) for part in parts]
    assert max(cost) - min(cost) <= max(r["layers"] + 1 for r in plan), cost
    assert ws.split_runs(plan, n) == parts  # deterministic: every part job computes the same split
    assert [len(x) for x in ws.split_runs(plan[:3], 5)] == [1, 1, 1, 0, 0]


def test_part_argument_is_checked(tmp_path, capsys):
    from repro.claims._cli import main

    for bad in ("2-of-2", "1of2", "x-of-3"):
        with pytest.raises(SystemExit):
            main(ws.CLAIM, ws.run, ["--scale", "tiny", "--out", str(tmp_path), "--part", bad])
        assert "--part" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # nothing ran


def test_rerun_keeps_finished_runs_only_for_the_same_training_code(tiny_run, monkeypatch, caplog):
    """A rerun with the same parameters resumes (keeps every finished run); after a change to the training code the
    runs are trained again (runs trained by older code were reused before: the resume key was the parameters only)."""
    import json
    import logging
    import shutil

    p, out, _, _ = tiny_run
    work = out.parent / "ws_rerun"
    shutil.copytree(out, work)
    n = len(json.loads((work / "runs.json").read_text())["runs"])
    with caplog.at_level(logging.INFO, logger="repro.warmup_stability"):
        ws.run(p, "tiny", work)
    assert f"{n} runs kept from earlier results, 0 to train" in caplog.text
    caplog.clear()
    monkeypatch.setattr(ws, "_training_code_hash", lambda: "changed-code")
    with caplog.at_level(logging.INFO, logger="repro.warmup_stability"):
        ws.run(p, "tiny", work)
    assert f"0 runs kept from earlier results, {n} to train" in caplog.text


def test_the_null_control_keeps_diverged_a_flag_and_reaches_the_headline():
    """tests/test_judge_contract.py's null on the committed reference rows keeps ``diverged`` a flag (at its median,
    0: no difference between configurations), so the gates pass and the tied NLLs fail "Post-LN needs warm-up":
    the null decides. Turned into a number (x 1.37 + 0.37, as the null once did) the flag counts every run as
    diverged, every gate fails and the null decides nothing: the control's assertion fails there."""
    from test_judge_contract import _controls, _judge, _reference, _rows as ref_rows, null_of

    folder, ctl = _reference("warmup_stability"), _controls("warmup_stability")
    tied = null_of(ctl, ref_rows(folder))
    assert {r["value"] for r in tied if r["metric"] == "diverged"} == {0.0}
    v = _judge("warmup_stability", folder, tied)
    assert ctl.null_reaches(v) == [] and all(g["passed"] for g in v["gates"])
    assert v["verdict"] == "not_reproduced", v["reason"]
    moved = [{**r, "value": 0.37} if r["metric"] == "diverged" else r for r in tied]
    v = _judge("warmup_stability", folder, moved)
    assert v["verdict"] == "inconclusive" and not any(g["passed"] for g in v["gates"] if "NLL" in g["name"])
    assert ctl.null_reaches(v)


@pytest.mark.parametrize("lower", [
    {"post_0": 3.0, "pre_100": 3.0, "pre_0": 5.0, "sn": 6.0},   # every lower-lr check fails
    {"post_0": 3.6, "pre_100": 3.0, "pre_0": 3.05, "sn": 3.0},  # Post-LN's gap 0.6 +- noise: held or undecided
    {"post_0": 6.5, "pre_100": 6.5, "pre_0": 6.5, "sn": 6.5},   # nothing learned at the lower lr
])
def test_the_lower_lr_never_changes_the_verdict(lower):
    """The lower learning rate is a pre-stated secondary: whatever its runs show (Post-LN needing warm-up or not,
    Pre-LN failing, nothing learned), the verdict and its headline are those of the highest lr's runs alone."""
    nll = _paper_like()
    base = _judge(_rows(nll), P, "default")
    nll.update({("layernorm", "post", 6, 0.0005, 0): lower["post_0"],
                ("layernorm", "pre", 6, 0.0005, 100): lower["pre_100"],
                ("layernorm", "pre", 6, 0.0005, 0): lower["pre_0"], ("scalenorm", "pre", 6, 0.0005, 0): lower["sn"]})
    v = _judge(_rows(nll), P, "default")
    assert v["verdict"] == base["verdict"] == "reproduced", v["reason"]
    reported = [c for c in v["checks"] if c.get("counts") is False]
    assert reported and all("0.0005" in c["name"] for c in reported)
    assert [c for c in v["checks"] if c.get("counts", True)] == [c for c in base["checks"] if c.get("counts", True)]
    # the same rows without the lower lr at all: the same verdict, no reported-only check
    rows = [r for r in _rows(_paper_like()) if r.get("sweep", {}).get("lr") != 0.0005]
    alone = _judge(rows, {**P, "lrs": [0.001], "scalenorm_fixnorm": {**P["scalenorm_fixnorm"], "lrs": [0.001]}},
                   "default")
    assert alone["verdict"] == "reproduced" and not [c for c in alone["checks"] if c.get("counts") is False]


def test_a_headline_always_counts():
    from repro.verdicts import check

    with pytest.raises(ValueError, match="always counts"):
        check("h", True, "m", "e", headline=True, counts=False)


def test_the_depth_check_decides_the_growth_only():
    """One contrast decides once: Post-LN's gap to Pre-LN at the main depth is the 'Pre-LN beats Post-LN' check; the
    depth check decides only whether that gap grows from the shallowest stack, so a shallow gap as large as the
    deep one fails the depth check alone while 'Pre-LN beats Post-LN' holds."""
    nll = _paper_like()
    nll[("layernorm", "post", 2, 0.001, 0)] = 3.2 + 2.4  # the 2+2 gap 2.4 nats, the 6+6 gap 2.4 nats too
    nll.pop(("layernorm", "post", 4, 0.001, 0))
    nll.pop(("layernorm", "pre", 4, 0.001, 0))
    c = _by_name(_judge(_rows(nll), P, "default"))
    assert c["without warm-up Pre-LN beats Post-LN at lr 0.001"]["passed"] is True
    grow = c["no warm-up: Post-LN's gap to Pre-LN grows from 2+2 to 6+6 layers"]
    assert grow["passed"] is not True and "grows" in grow["name"]
