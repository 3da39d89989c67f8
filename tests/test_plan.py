"""The confirmatory plans (repro/plan.py, config/claims/<id>.yaml `plan:`): exploration seeds never confirm, every
seed of a planned scale is a confirmation or a fixed seed from 1000 on, the plan key follows what it hashes, measured
and judged records carry it, and planned looks spend the error rate by Bonferroni (prepost_gradients' seeds)."""
import csv
import json
import math
import shutil
import statistics
from pathlib import Path

import pytest

from repro import config, judging, plan, provenance
from repro.intervals import _T975, sample_interval_at, t_quantile
from repro.io import metric
from repro.report import pages
from repro.verdicts import decide_interval, look_text, sequential

ROOT = Path(__file__).resolve().parents[1]
PLANNED_SCALES = ("default", "paper")


def _pilot_seeds(node, where: str):
    """(where, value) of every seed in a record: keys named seed, seeds, *_seed, *_seeds, at any depth."""
    if isinstance(node, dict):
        for k, v in node.items():
            if plan.SEED_KEY.match(str(k)):
                for x in v if isinstance(v, list) else [v]:
                    yield f"{where}.{k}", x
            else:
                yield from _pilot_seeds(v, f"{where}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _pilot_seeds(v, f"{where}[{i}]")


def _pilot_records():
    for path in sorted((ROOT / "docs" / "pilots").rglob("*")):
        rel = path.relative_to(ROOT).as_posix()
        if path.suffix == ".json":
            yield from _pilot_seeds(json.loads(path.read_text()), rel)
        elif path.suffix == ".jsonl":
            for i, line in enumerate(path.read_text().splitlines()):
                if line.strip():
                    yield from _pilot_seeds(json.loads(line), f"{rel}:{i + 1}")
        elif path.suffix == ".csv":
            with path.open() as fh:
                for i, row in enumerate(csv.DictReader(fh)):
                    for k, v in row.items():
                        if k and plan.SEED_KEY.match(k.split(".")[-1]) and v not in ("", None):
                            yield f"{rel}:{i + 2}.{k}", int(float(v))


def _planned():
    for claim in config.available_sections():
        for scale in PLANNED_SCALES:
            yield claim, scale


@pytest.mark.parametrize("claim", config.available_sections())
def test_every_claim_has_a_plan_at_default_and_paper(claim):
    assert [s for s in PLANNED_SCALES if plan.block(claim, s) is None] == []


def test_pilot_seeds_are_exploration_seeds():
    seeds = list(_pilot_records())
    assert seeds, "no seed found under docs/pilots/: the walk reads nothing"
    high = [(w, s) for w, s in seeds if not isinstance(s, int) or s >= plan.CONFIRMATION_MIN]
    assert not high, f"pilot seeds at or above {plan.CONFIRMATION_MIN} (confirmation's range): {high[:5]}"
    confirming = {s for claim, scale in _planned() for vals in plan.confirmation_seeds(claim, scale).values()
                  for s in vals}
    assert not [(w, s) for w, s in seeds if s in confirming]


@pytest.mark.parametrize("claim", config.available_sections())
def test_every_seed_of_a_planned_scale_confirms_or_is_fixed(claim):
    for scale in PLANNED_SCALES:
        assert plan.seed_problems(claim, scale) == []
        conf = plan.confirmation_seeds(claim, scale)
        assert all(s >= plan.CONFIRMATION_MIN for vals in conf.values() for s in vals)


def test_seed_rules_catch_a_low_or_unlisted_seed():
    params = {"seeds": [1000, 5], "model": {"init_seed": 3}, "lr": 0.1}
    assert plan.seed_params(params) == {"seeds": [1000, 5], "model.init_seed": 3}


def test_plan_validation_names_file_and_key():
    good = plan.block("rank_collapse", "default")
    with pytest.raises(config.ConfigError, match=r"rank_collapse\.yaml \[plan\.default\]\.colour: unknown key"):
        plan.validate("rank_collapse", "default", {**good, "colour": 1})
    with pytest.raises(config.ConfigError, match=r"confirmation_seeds: 'nope' is not a seed parameter"):
        plan.validate("rank_collapse", "default", {**good, "confirmation_seeds": ["nope"]})
    with pytest.raises(config.ConfigError, match=r"looks.at: the last look must be at the full size"):
        plan.validate("rank_collapse", "default", {**good, "looks": {"param": "seeds", "at": [2, 4]}})
    with pytest.raises(config.ConfigError, match=r"chosen_by: 'docs/nothing.md' is not a file"):
        plan.validate("rank_collapse", "default", {**good, "chosen_by": ["docs/nothing.md"]})


@pytest.fixture
def config_copy(tmp_path, monkeypatch):
    """A copy of config/ the plan key is read from (config.CONFIG_DIR points there)."""
    shutil.copytree(ROOT / "config", tmp_path / "config")
    monkeypatch.setattr(config, "CONFIG_DIR", tmp_path / "config")
    return tmp_path / "config" / "claims" / "rank_collapse.yaml"


def test_plan_key_follows_plan_params_and_thresholds_not_comments(config_copy):
    before = plan.plan_key("rank_collapse", "default")
    assert before and len(before) == 64
    text = config_copy.read_text()

    def key_after(new_text: str) -> str:
        config_copy.write_text(new_text)
        try:
            return plan.plan_key("rank_collapse", "default")
        finally:
            config_copy.write_text(text)

    assert key_after("# a comment changes nothing\n" + text.replace("plan:\n", "plan:  # nor here\n")) == before
    assert key_after(text.replace('how: "Five seeds', 'how: "5 seeds')) != before  # the plan
    assert key_after(text.replace("seeds: [1000, 1001, 1002, 1003, 1004]", "seeds: [1000, 1001, 1002, 1003]",
                                  1)) != before  # a parameter
    assert key_after(text.replace("cubic_tolerance: 0.5,", "cubic_tolerance: 0.6,")) != before  # a threshold
    thresholds = config.thresholds("rank_collapse", "default")
    assert plan.key_of(None, "c", thresholds) is None


def test_measured_and_judged_records_carry_the_plan_key(tmp_path, monkeypatch):
    """A tiny run of the cheapest claim through its command line, under param_accounting's default plan (tiny has
    none): measured.json and verdict.json carry the same key; changed thresholds re-judge under another key and the
    page says so; a verdict without a key (the committed references) reads 'no plan recorded'."""
    from repro.claims import _cli, param_accounting

    block = plan.validate("param_accounting", "tiny", plan.block("param_accounting", "default"))
    monkeypatch.setattr(plan, "block", lambda claim, scale: block)
    out = tmp_path / "pa"
    assert _cli.main("param_accounting", param_accounting.run,
                     ["--scale", "tiny", "--out", str(out), "--hardware", "test-cpu"]) == 0
    measured, verdict = (json.loads((out / n).read_text()) for n in ("measured.json", "verdict.json"))
    assert measured["plan"] == block and verdict["plan"] == block
    thresholds = config.thresholds("param_accounting", "tiny")
    assert measured["plan_key"] == plan.key_of(block, measured["keys"]["config"], thresholds)
    assert verdict["plan_key"] == verdict["plan_measured_key"] == measured["plan_key"]
    assert measured["keys"]["plan"] == provenance.plan_hash(block)
    first = next(iter(thresholds))
    changed = {**thresholds, first: thresholds[first] + 1 if isinstance(thresholds[first], (int, float)) else 1}
    again = judging.rejudge("param_accounting", out, "tiny", changed)
    assert again["plan_key"] != again["plan_measured_key"] == measured["plan_key"]
    text = pages.render_markdown(pages.plan_blocks(again), out)
    assert "changed after measuring" in text and again["plan_key"][:12] in text
    assert "no plan recorded (measured before plans)" in pages.render_markdown(
        pages.plan_blocks({"verdict": "reproduced", "checks": []}), out)


def test_stale_when_the_plan_changed():
    recorded = provenance.claim_keys("rank_collapse", {"a": 1}, plan={"how": "x"})
    assert provenance.stale_reasons(recorded, "rank_collapse", recorded["config"],
                                    plan_now=provenance.plan_hash({"how": "x"})) == {}
    assert set(provenance.stale_reasons(recorded, "rank_collapse", recorded["config"],
                                        plan_now=provenance.plan_hash({"how": "y"}))) == {"config"}
    unplanned = provenance.claim_keys("rank_collapse", {"a": 1})
    assert unplanned["measure"] != recorded["measure"] and unplanned["plan"] is None


# ------------------------------------------------------------------------------------------- planned looks
def test_t_quantile_matches_the_printed_table():
    assert [round(t_quantile(0.95, df), 3) for df in range(1, 31)] == list(_T975)
    assert t_quantile(0.975, 13) > t_quantile(0.95, 13)


def _above_zero(values):
    def decide(n, confidence):
        mean, lo, hi = sample_interval_at(values[:n], confidence)
        return decide_interval(lo, hi, above=0.0), (mean, lo, hi)
    return decide


AT = [14, 28]


def test_a_null_decides_at_no_look():
    null = [(-1) ** i * (1 + 0.1 * (i % 3)) for i in range(28)]
    out = sequential(_above_zero(null), AT)
    assert out["passed"] is None and out["look"]["k"] == 2


def test_a_strong_effect_decides_at_the_first_look():
    strong = [5 + (-1) ** i * 0.5 for i in range(28)]
    out = sequential(_above_zero(strong), AT)
    assert out["passed"] is True and out["look"] == {"k": 1, "of": 2, "n": 14, "confidence": 0.975, "unit": "seeds"}


def test_a_true_effect_decides_only_at_the_last_look():
    effect = [0.5 + (-1) ** i for i in range(28)]
    first = sample_interval_at(effect[:14], 0.975)
    assert first[1] < 0 < first[2]  # undecided at 14 seeds at 97.5%
    out = sequential(_above_zero(effect), AT)
    assert out["passed"] is True and out["look"]["k"] == 2 and out["look"]["n"] == 28


def test_the_level_is_bonferroni_over_the_looks():
    seen = []
    sequential(lambda n, c: (seen.append(c), (None, None))[1], [5, 10, 20, 40])
    assert seen == [1 - 0.05 / 4] * 4
    assert look_text({"k": 1, "of": 2, "n": 14, "confidence": 0.975}) == \
        "decided at look 1 of 2 (14 seeds, 97.5% interval)"


def _prepost_rows(seeds, ratio_exponent, noise):
    """Per-seed final-W2 gradient norms over the depths (Post-LN flat, Pre-LN ~ L^ratio_exponent, a seed's noise on
    its exponent) and the aggregate rows the measurement writes from them."""
    rows, depths, exps = [], [6, 8, 10, 12, 14], {"post": [], "pre": [], "ratio": []}
    for i, seed in enumerate(seeds):
        e = ratio_exponent + noise * (-1) ** i * (1 + i % 3)
        for L in depths:
            rows.append(metric("prepost_gradients", "final_w2_grad_norm", 0.5, "frobenius", norm="layernorm",
                               position="post", depth=L, seed=seed))
            rows.append(metric("prepost_gradients", "final_w2_grad_norm", 0.5 * L ** e, "frobenius",
                               norm="layernorm", position="pre", depth=L, seed=seed))
        exps["post"].append(0.0)
        exps["pre"].append(e)
        exps["ratio"].append(e)
    for kind, vals in exps.items():
        rows.append(metric("prepost_gradients", f"fig3_depth_exponent_{kind}", statistics.fmean(vals),
                           "d ln(norm) / d ln(L)", spread=statistics.stdev(vals), n=len(vals), norm="layernorm"))
    return rows


@pytest.mark.parametrize("noise, look", [(0.02, 1), (0.12, 2)])
def test_prepost_depth_exponent_decided_over_planned_looks(noise, look):
    params = config.section("prepost_gradients", "default", check_models=False)
    rows = _prepost_rows(params["seeds"], -0.5, noise)
    verdict = judging.judge_rows("prepost_gradients", rows, scale="default", params=params,
                                 plan=plan.block("prepost_gradients", "default"))
    ratio = next(c for c in verdict["checks"] if c["name"] == "Fig 3(c,d) full model: depth exponent of the "
                                                              "Pre/Post ratio")
    assert ratio["passed"] is True and ratio["look"]["k"] == look and ratio["look"]["of"] == 2
    assert ratio["look"]["confidence"] == 0.975 and "97.5% interval" in ratio["measured"]
    assert math.isclose(ratio["numbers"]["value"], statistics.fmean(
        -0.5 + noise * (-1) ** i * (1 + i % 3) for i in range(ratio["look"]["n"])), abs_tol=1e-9)


def test_prepost_without_the_plans_seeds_is_judged_once():
    params = {**config.section("prepost_gradients", "default", check_models=False), "seeds": [1000, 1001, 1002]}
    block = plan.block("prepost_gradients", "default")
    verdict = judging.judge_rows("prepost_gradients", _prepost_rows(params["seeds"], -0.5, 0.02), scale="default",
                                 params=params, plan=block)
    assert not any(c.get("look") for c in verdict["checks"])
    full = {**params, "seeds": list(range(1000, 1028))}  # the plan's size, but measured before plans: no plan given
    verdict = judging.judge_rows("prepost_gradients", _prepost_rows(full["seeds"], -0.5, 0.02), scale="default",
                                 params=full)
    assert not any(c.get("look") for c in verdict["checks"])


def test_prepost_layer_slopes_decided_over_planned_looks():
    """Fig 3(a,b) from per-seed gradient norms over the layers: Post-LN growing 0.3 per layer and Pre-LN flat in
    every seed decide at the first look, at 97.5%, from the per-seed slopes (the aggregate rows say otherwise)."""
    params = config.section("prepost_gradients", "default", check_models=False)
    rows = []
    for i, seed in enumerate(params["seeds"]):
        for position, slope in (("post", 0.3 + 0.01 * (-1) ** i), ("pre", 0.002 * (-1) ** i)):
            for layer in range(1, 7):
                rows.append(metric("prepost_gradients", "weight_grad_norm", math.exp(slope * layer), "frobenius",
                                   norm="layernorm", position=position, stack="decoder", layer=layer,
                                   matrix="ffn.fc2", seed=seed, depth=6))
    for position in ("post", "pre"):  # aggregates far from the per-seed rows: the looks read the per-seed rows
        rows.append(metric("prepost_gradients", "ffn_grad_log_slope_per_layer", 0.0, "d ln(norm) / d layer",
                           spread=1.0, n=28, norm="layernorm", position=position, stack="decoder", matrix="ffn.fc2"))
    verdict = judging.judge_rows("prepost_gradients", rows, scale="default", params=params,
                                 plan=plan.block("prepost_gradients", "default"))
    fc2 = next(c for c in verdict["checks"] if c["name"].startswith("Fig 3(a,b) layernorm decoder ffn.fc2"))
    assert fc2["passed"] is True and fc2["look"]["k"] == 1 and fc2["look"]["confidence"] == 0.975
    assert math.isclose(fc2["numbers"]["value"], 0.3, abs_tol=1e-3)
