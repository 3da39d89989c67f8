"""layer_pruning (Gromov et al. 2025; ShortGPT): BI / angular distance on known states, the selection rules, a tiny
end-to-end run on freshly trained tiny artefacts, and verdict rules that flip when a number is wrong."""
import copy
import itertools
import math

import numpy as np
import pytest
import torch

from repro.artefacts import ArtefactError
from repro import config
from repro.io import metric
from repro.claims import layer_pruning as lp
from repro.claims._cli import judge_rows, run_and_judge
from repro.bench.fingerprint import fingerprint
from repro.verdicts import Rows

C = lp.CLAIM


def test_profile_on_known_states():
    torch.manual_seed(0)
    x0 = torch.randn(2, 5, 8)
    x1 = x0.clone()  # layer 0 is the identity: BI 0, distance 0
    x2 = -x1  # layer 1 flips the sign: cos -1, BI 2, distance 1
    q = torch.randn(2, 5, 8)
    x3 = q - (q * x2).sum(-1, keepdim=True) / (x2 * x2).sum(-1, keepdim=True) * x2  # orthogonal to x2
    mask = torch.zeros(2, 5, dtype=torch.bool)
    mask[1, 3:] = True  # padding is ignored
    x3[1, 3:] = x2[1, 3:]
    for tokens in ("last", "all", "mean"):
        p = lp.Profile(3, tokens)
        p.add([x0, x1, x2, x3], mask)
        bi = p.block_influence()
        assert bi[0] == pytest.approx(0.0, abs=1e-9) and bi[1] == pytest.approx(2.0, abs=1e-9)
        assert bi[2] == pytest.approx(1.0, abs=1e-6)
        a = p.angular()
        assert sorted(a) == [1, 2, 3] and [len(a[n]) for n in (1, 2, 3)] == [3, 2, 1]
        assert a[1][0] == pytest.approx(0.0, abs=1e-6) and a[1][1] == pytest.approx(1.0, abs=1e-6)
        if tokens != "mean":  # the mean of orthogonal rows need not be orthogonal
            assert a[1][2] == pytest.approx(0.5, abs=1e-6)
    assert p.n_tok == 8


def test_selection_rules():
    bi = [0.5, 0.1, 0.3, 0.05, 0.9]
    ang = {1: [0.3, 0.2, 0.25, 0.1, 0.05], 2: [0.4, 0.3, 0.2, 0.35], 3: [0.6, 0.5, 0.55], 4: [0.7, 0.8], 5: [0.9]}
    assert lp.select_layers("bi", 2, 5, bi, ang) == [1, 3]
    assert lp.select_layers("angular", 1, 5, bi, ang) == [4]  # argmin may include the last layer
    assert lp.select_layers("angular", 2, 5, bi, ang) == [2, 3]
    assert lp.select_layers("angular", 3, 5, bi, ang) == [1, 2, 3]
    assert lp.select_layers("last", 2, 5, bi, ang) == [2, 3]  # keeps the final layer
    assert lp.select_layers("last", 4, 5, bi, ang) == [0, 1, 2, 3]
    assert lp.select_layers("bi", 5, 5, bi, ang) == [0, 1, 2, 3, 4]
    r0 = lp.select_layers("random", 3, 5, bi, ang, seed=0)
    assert r0 == lp.select_layers("random", 3, 5, bi, ang, seed=0) and len(set(r0)) == 3
    assert set(lp.select_layers("random", 2, 5, bi, ang, seed=0)) <= set(r0)  # nested removal orders
    with pytest.raises(lp.LayerPruningError, match="rules"):
        lp.select_layers("middle", 1, 5, bi, ang)
    assert lp.removal_counts(6, 1.0) == [1, 2, 3, 4, 5, 6] and lp.removal_counts(6, 0.5) == [1, 2, 3]
    assert lp.heal_counts(6, [0.34, 0.67, 0.0]) == [2, 4] and lp.heal_counts(3, [0.34, 0.67]) == [1, 2]
    assert lp.collapse_point({1: 20.0, 2: 9.0, 3: 1.0}, 20.0, True, 0.5) == 2
    assert lp.collapse_point({1: 30.0, 2: 39.0}, 20.0, False, 2.0) is None
    assert lp.collapse_point({1: 30.0, 2: 41.0}, 20.0, False, 2.0) == 2


def test_missing_models_name_the_key(tmp_path):
    params = config.section(C, "tiny")
    with pytest.raises(ArtefactError, match="layer_pruning.translation_model"):
        lp.resolve_models(params, tmp_path / "layer_pruning")
    with pytest.raises(ArtefactError, match="layer_pruning.fairseq_checkpoint"):
        lp.resolve_models({**params, "fairseq_checkpoint": str(tmp_path / "nope.pt")}, tmp_path / "x")
    with pytest.raises(ArtefactError, match="layer_pruning.lm_model"):
        lp.resolve_models({**params, "stacks": ["lm"]}, tmp_path / "layer_pruning")


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    """A 3+2-layer translation model and a 3-layer LM, trained for a few steps (tiny translation config)."""
    from repro.config import deep_merge
    from repro.data.corpus import load_corpus
    from repro.data.tokenizer import train_sentencepiece
    from repro.train.pipeline import train_from_params

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("lp")
    models = root / "_models"
    p = deep_merge(config.section("translation", "tiny"),
                   {"threads": 1, "model": {"n_encoder_layers": 3, "n_decoder_layers": 2},
                    "lm": {"model": {"n_decoder_layers": 3}}, "training": {"max_steps": 8}})
    c = load_corpus(p["corpus"]["path"], p["corpus"]["direction"])
    texts = [s for pair in c.train[: p["corpus"]["max_train_pairs"]] for s in pair]
    tok = train_sentencepiece(texts, models / "spm", p["tokenizer"]["vocab_size"])
    train_from_params(p, tok.path, models / "translation")
    train_from_params(p, tok.path, models / "lm", kind="lm")
    return root


@pytest.mark.parametrize("quality", ["valid_nll", "bleu"])
def test_tiny_run(tiny_models, quality):
    out = tiny_models / f"layer_pruning_{quality}"
    out.mkdir()
    # healing's paired contrast; the random baseline compared on validation NLL (not decoded) or on BLEU
    params = config.deep_merge(config.section(C, "tiny"), {"heal": {"control": True}, "random_quality": quality})
    rows, verdict = run_and_judge(C, lp.run, params, "tiny", out)
    assert verdict["verdict"] == "not_applicable"
    by = lambda m, **kw: Rows(rows).metric(m).where(**kw)  # noqa: E731
    assert [int(r["value"]) for r in by("n_layers")] == [3, 2, 3]
    for s, L in (("encoder", 3), ("decoder", 2), ("lm", 3)):
        bi = by("block_influence", stack=s)
        assert len(bi) == L and all(0.0 <= r["value"] <= 2.0 for r in bi)
        ang = by("angular_distance", stack=s)
        assert len(ang) == L * (L + 1) // 2 and all(0.0 <= r["value"] <= 1.0 for r in ang)
        assert len(by("angular_argmin_start", stack=s)) == L
        q = "valid_ppl" if s == "lm" else quality
        unhealed = [r for r in by(q, stack=s, healed=False)]
        # base + bi, angular, last at every count 1..L; random: every distinct selection at counts 1..L-1 (at most 3
        # of them: random_all_up_to), the seeded draw at L
        assert len(unhealed) == 1 + 3 * L + (2 ** L - 2) + 1
        rand = by(q, stack=s, rule="random", healed=False)
        for n in range(1, L):
            picks = sorted(r["sweep"]["layers"] for r in rand if r["sweep"]["n_removed"] == n)
            assert picks == sorted(",".join(map(str, c)) for c in itertools.combinations(range(L), n))
            assert {r["sweep"]["sample"] for r in rand if r["sweep"]["n_removed"] == n} == {"all"}
        assert [r["sweep"]["sample"] for r in rand if r["sweep"]["n_removed"] == L] == ["seeded"]
        assert all(math.isfinite(r["value"]) for r in unhealed)
        # random on validation NLL: its selections were not decoded, the rules' were
        if s != "lm" and quality == "valid_nll":
            assert not by("bleu", stack=s, rule="random") and len(by("bleu", stack=s, rule="bi", healed=False)) == L
        n_collapse = 3 if s != "lm" and quality == "valid_nll" else 4  # no BLEU: no random collapse point
        assert len(by("collapse_percent", stack=s) + by("no_collapse_up_to_percent", stack=s)) == n_collapse
    # removing every layer gives the same model whatever the rule
    full = {r["value"] for r in by("valid_ppl", stack="lm", n_removed=3, healed=False)}
    assert len(full) == 1
    # each similarity rule against the mean of the random selections at every count below L, paired over the same
    # sentences
    for s, L in (("encoder", 3), ("decoder", 2), ("lm", 3)):
        pr = by("paired_delta_vs_random_mean", stack=s)
        assert len(pr) == 2 * (L - 1)  # bi and angular x counts 1..L-1
        q = "valid_nll" if s == "lm" else quality
        for r in pr:
            sw = r["sweep"]
            assert sw["lo"] <= sw["hi"] and sw["quality"] == q and sw["random_sample"] == "all"
            assert sw["random_selections"] == math.comb(L, sw["n_removed"]) and sw["own_selection_among"] == 1
            rule = by(q, stack=s, rule=sw["rule"], n_removed=sw["n_removed"], healed=False).value()
            draws = by(q, stack=s, rule="random", n_removed=sw["n_removed"], healed=False).values()
            # the validation NLL from per-sentence sums, BLEU from the per-sentence statistics: the rows' own numbers
            assert r["value"] == pytest.approx(rule - sum(draws) / len(draws), abs=1e-6)
            assert sw["random_mean"] == pytest.approx(sum(draws) / len(draws), abs=1e-6)
            better = sum((rule > d) if q == "bleu" else (rule < d) for d in draws)
            assert sw["better_than"] == better
    healed = by("valid_nll", stack="lm", healed=True)
    assert sorted(r["sweep"]["n_removed"] for r in healed) == [0, 2, 3]  # the control; 0.5 and 1.0 of 3 layers
    # the BI rule's BLEU as a fraction of the unpruned model's, with its paired interval (translation stacks)
    for s, L in (("encoder", 3), ("decoder", 2)):
        ratios = by("bleu_ratio_to_unpruned", stack=s)
        base = by("bleu", stack=s, rule="none", healed=False).value()
        assert len(ratios) == (L if base > 0 else 0)  # no ratio to a BLEU of 0 (a tiny model may score none)
        for r in ratios:
            bleu_n = by("bleu", stack=s, rule="bi", n_removed=r["sweep"]["n_removed"], healed=False).value()
            assert r["value"] == pytest.approx(bleu_n / base, abs=1e-9) and r["sweep"]["lo"] <= r["sweep"]["hi"]
    # healing's gap change (healed - control) - (unhealed - unpruned), paired over the validation sentences
    for s in ("decoder", "lm"):  # the encoder heals at no fraction in the tiny config
        nll = lambda **kw: by("valid_nll", stack=s, **kw).value()  # noqa: E731
        changes = by("healing_gap_change", stack=s)
        assert changes and len(changes) == len(by("valid_nll", stack=s, healed=True)) - 1  # every one but the control
        for r in changes:
            sw = r["sweep"]
            expect = (nll(rule=sw["rule"], n_removed=sw["n_removed"], healed=True) - nll(rule="none", healed=True)
                      - nll(rule=sw["rule"], n_removed=sw["n_removed"], healed=False) + nll(rule="none", healed=False))
            assert r["value"] == pytest.approx(expect, abs=1e-6) and sw["lo"] <= r["value"] <= sw["hi"]
    assert (out / "profiles.json").exists() and (out / "quality.csv").exists()
    # the plots work on the tiny output
    from repro.io import write_results
    from repro.io import read_metrics
    from repro.report.plots import ResultFiles
    from repro.report.plots.layer_pruning import plots

    write_results(out, fingerprint=fingerprint(), claim=C, scale="tiny", metrics=rows, verdict=verdict, config=params)
    figs = plots(read_metrics(out), ResultFiles.of(out), out)
    assert {f for f, _ in figs} == {"headline.png", "block_influence.png", "angular_distance.png",
                                    "quality_vs_removed.png", "healing.png"}


def _rows(lm_ppl, bleu_dec, heal_nll, lm_bi=(0.4, 0.2, 0.1, 0.15), argmin=(2, 1, 0), unigram=300.0):
    """Constructed rows: a 4-layer LM and a 4-layer decoder with the given curves (``unigram``: the LM's unigram
    baseline perplexity, None for rows measured without one)."""
    rows = [metric(C, "n_layers", 4, stack="lm"), metric(C, "n_layers", 4, stack="decoder")]
    if unigram is not None:
        rows.append(metric(C, "unigram_ppl", unigram, stack="lm"))
    rows += [metric(C, "block_influence", b, stack="lm", layer=i) for i, b in enumerate(lm_bi)]
    rows += [metric(C, "angular_argmin_start", l, stack="lm", block=n, excludes_last=l + n - 1 < 3, n_layers=4)
             for n, l in zip((1, 2, 3), argmin)]
    rnd = {0: lm_ppl[0], 1: 40.0, 2: 90.0, 3: 300.0, 4: 900.0}
    rnd_b = {0: bleu_dec[0], 1: 7.0, 2: 3.0, 3: 1.0, 4: 0.5}
    for n in range(5):
        for rule, seed in [("none", None)] if n == 0 else [("bi", None), ("angular", None), ("last", None)] + [
                ("random", s) for s in range(5)]:  # five seeded draws: the rule's rank among them can decide
            ppl = rnd[n] if rule == "random" else lm_ppl[n]
            b = rnd_b[n] if rule == "random" else bleu_dec[n]
            kw = dict(rule=rule, n_removed=n, fraction=n / 4, healed=False, **({"seed": seed} if rule == "random" else {}))
            rows += [metric(C, "valid_ppl", ppl, stack="lm", **kw), metric(C, "valid_nll", math.log(ppl), stack="lm", **kw),
                     metric(C, "bleu", b, stack="decoder", **kw),
                     metric(C, "valid_nll", 5.0 - 0.1 * b, stack="decoder", **kw)]  # ranked as BLEU ranks
    for n, v in heal_nll.items():
        rows.append(metric(C, "valid_nll", v, stack="lm", rule="none" if n == 0 else "angular", n_removed=n,
                           fraction=n / 4, healed=True))
    params = config.section(C, "default")
    for s, curve, hib in (("lm", lm_ppl, False), ("decoder", bleu_dec, True)):
        table = [{"rule": "none", "healed": False, "n_removed": 0, ("valid_ppl" if s == "lm" else "bleu"): curve[0]}]
        for rule in params["rules"]:
            for n in range(1, 5):
                v = (rnd if s == "lm" else rnd_b)[n] if rule == "random" else curve[n]
                table.append({"rule": rule, "healed": False, "n_removed": n, ("valid_ppl" if s == "lm" else "bleu"): v})
        rows += lp.collapse_rows(table, s, 4, params)
    return rows, params


# the default judge: section with a coarser resolution, to place a collapse in the band with 4 layers
T4 = {**config.thresholds(C, "default"), "max_resolution_percent": 25.0}


def _judge(rows, params, scale="default", **thresholds):
    """The verdict of ``rows`` measured with ``params``, judged with :data:`T4` (``thresholds`` changed)."""
    return judge_rows(C, rows, scale=scale, params=params, thresholds={**T4, **thresholds})


def test_judge_flips():
    late_ppl = [20.0, 24.0, 30.0, 38.0, 500.0]  # perplexity doubles only with all 4 layers gone: 100%
    rows, params = _rows(late_ppl, [20.0, 12.0, 5.0, 2.0, 1.0], {0: 2.9, 1: 2.95, 2: 3.0, 3: 3.1})
    v = _judge(rows, params)
    names = {c["name"]: c["passed"] for c in v["checks"]}
    assert names["lm: Gromov's argmin block keeps the last layer"] is True
    assert names["lm: the least influential layers (BI) are deep"] is True
    assert names["similarity-based rules prune better than random"] is True
    assert names["lm: collapse point (angular rule, no healing) in the published band"] is False  # 100%
    assert names["decoder: collapse point (angular rule, no healing) in the published band"] is True  # 50%
    assert names["decoder: BLEU collapses with ~28% of layers removed by BI (no healing)"] is False  # 12 of 20
    assert names["healing recovers the pruning damage (vs the equally fine-tuned control)"] is True
    smooth = [c for c in v["checks"] if c["name"] == "lm/angular: healed loss grows more smoothly than the unhealed loss"]
    assert smooth[0]["passed"] is None and "observation" in smooth[0]["undecided_because"]  # any fine-tune smooths
    assert v["verdict"] == "partially"
    # a collapse at 50% instead passes; a deep last-layer argmin, shallow BI, or a worse-than-random rule fail
    rows2, _ = _rows([20.0, 24.0, 50.0, 60.0, 500.0], [20.0, 8.0, 5.0, 2.0, 1.0], {0: 2.9, 1: 2.95, 2: 3.0, 3: 3.1})
    n2 = {c["name"]: c["passed"] for c in _judge(rows2, params)["checks"]}
    assert n2["lm: collapse point (angular rule, no healing) in the published band"] is True
    assert n2["decoder: BLEU collapses with ~28% of layers removed by BI (no healing)"] is True
    assert _judge(rows2, params)["verdict"] == "reproduced"
    rows3, _ = _rows([20.0, 24.0, 50.0, 60.0, 500.0], [20.0, 8.0, 5.0, 2.0, 1.0], {0: 2.9, 1: 2.95, 2: 3.0, 3: 6.5},
                     lm_bi=(0.1, 0.2, 0.4, 0.5), argmin=(3, 2, 1))
    n3 = {c["name"]: c["passed"] for c in _judge(rows3, params)["checks"]}
    assert n3["lm: Gromov's argmin block keeps the last layer"] is False
    assert n3["lm: the least influential layers (BI) are deep"] is False
    assert n3["lm/angular: healed loss grows more smoothly than the unhealed loss"] is None  # an observation
    worse = copy.deepcopy(rows2)
    for r in worse:
        if r["metric"] in ("valid_ppl", "bleu") and r["sweep"].get("rule") in ("bi", "angular"):
            r["value"] *= 10 if r["metric"] == "valid_ppl" else 0.1
        if r["metric"] == "valid_nll" and r["sweep"]["stack"] == "decoder" and r["sweep"].get("rule") in ("bi", "angular"):
            r["value"] += 10.0
    n4 = {c["name"]: c["passed"] for c in _judge(worse, params)["checks"]}
    assert n4["similarity-based rules prune better than random"] is False  # last of 6 on both stacks: p = 1/36
    tie = copy.deepcopy(rows2)  # the rules exactly as good as the random draw: a tie decides nothing
    rnd = {(r["metric"], r["sweep"]["stack"], r["sweep"]["n_removed"]): r["value"] for r in tie
           if r["sweep"].get("rule") == "random" and r["metric"] in ("valid_ppl", "bleu", "valid_nll")}
    for r in tie:
        if (r["metric"] in ("valid_ppl", "bleu", "valid_nll") and r["sweep"].get("rule") in ("bi", "angular")
                and not r["sweep"].get("healed")):
            r["value"] = rnd[(r["metric"], r["sweep"]["stack"], r["sweep"]["n_removed"])]
    v5 = _judge(tie, params)
    n5 = {c["name"]: c["passed"] for c in v5["checks"]}
    assert n5["similarity-based rules prune better than random"] is None
    assert v5["verdict"] == "inconclusive"
    assert _judge(rows2, params, "tiny")["verdict"] == "not_applicable"
    # headline: the least influential layers are shallow -> not reproduced
    assert _judge(rows3, params)["verdict"] == "not_reproduced"


@pytest.mark.parametrize("unigram", [25.0, None])
def test_lm_checks_need_an_lm_that_learned(unigram):
    """An LM barely below (or without) its unigram baseline decides none of its checks: the headline is undecided."""
    rows, params = _rows([20.0, 24.0, 50.0, 60.0, 500.0], [20.0, 8.0, 5.0, 2.0, 1.0], {0: 2.9, 1: 2.95, 2: 3.0, 3: 3.1},
                         unigram=unigram)
    v = _judge(rows, params)
    lm = [c for c in v["checks"] if c["name"].startswith("lm")]
    assert lm and all(c["passed"] is None for c in lm)
    assert all("lm: the unpruned LM learned" in c["undecided_because"] for c in lm if "observation" not in
               c["undecided_because"])
    assert [g["passed"] for g in v["gates"] if g["name"].startswith("lm:")] == [False]
    assert v["verdict"] == "inconclusive"
    # the same rows with the LM's depth structure reversed still cannot fail on an LM that learned nothing
    rev, _ = _rows([20.0, 24.0, 50.0, 60.0, 500.0], [20.0, 8.0, 5.0, 2.0, 1.0], {0: 2.9, 1: 2.95, 2: 3.0, 3: 3.1},
                   lm_bi=(0.1, 0.2, 0.4, 0.5), argmin=(3, 2, 1), unigram=unigram)
    assert _judge(rev, params)["verdict"] == "inconclusive"


def test_band_check_needs_enough_layers():
    rows, params = _rows([20.0, 24.0, 50.0, 60.0, 500.0], [20.0, 8.0, 5.0, 2.0, 1.0], {0: 2.9, 1: 2.95, 2: 3.0, 3: 3.1})
    # the default (12.5): 8+ layers to place a 20-55% band
    band = [c for c in _judge(rows, params, max_resolution_percent=12.5)["checks"] if "published band" in c["name"]]
    assert band and all(c["passed"] is None and "too few layers" in c["undecided_because"] for c in band)
    assert all(c["thresholds"] == {"max_resolution_percent": 12.5} for c in band)


def test_healing_is_judged_against_the_control_fine_tune():
    """Healed pruned NLL below the unhealed one, but no closer to the equally fine-tuned control: not healed."""
    rows, params = _rows([20.0, 24.0, 50.0, 60.0, 500.0], [20.0, 8.0, 5.0, 2.0, 1.0], {0: 1.0, 1: 3.1, 2: 3.9, 3: 4.1})
    heal = [c for c in _judge(rows, params)["checks"] if c["name"].startswith("healing")][0]
    assert heal["passed"] is False


@pytest.mark.parametrize("intervals, expect", [([(-0.5, -0.1), (-0.3, -0.05), (-0.9, -0.2)], True),
                                               ([(-0.5, -0.1), (-0.02, 0.03), (-0.9, -0.2)], None),
                                               ([(-0.5, -0.1), (0.0, 0.4), (-0.9, -0.2)], None),
                                               ([(-0.5, -0.1), (0.05, 0.4), (-0.9, -0.2)], False)])
def test_healing_is_decided_by_the_paired_gap_change(intervals, expect):
    """With the measured ``healing_gap_change`` rows each healed count is decided by its paired interval: all below
    0 holds; one touching 0 (a tie, or a gap too small to recover) decides nothing, whatever the point values
    say; one above 0 fails."""
    rows, params = _rows([20.0, 24.0, 50.0, 60.0, 500.0], [20.0, 8.0, 5.0, 2.0, 1.0], {0: 1.0, 1: 3.1, 2: 3.9, 3: 4.1})
    for n, (lo, hi) in zip((1, 2, 3), intervals):
        rows.append(metric(C, "healing_gap_change", (lo + hi) / 2, "nats/token", kind="statistic", stack="lm",
                           rule="angular", n_removed=n, healed=True, lo=lo, hi=hi))
    heal = [c for c in _judge(rows, params)["checks"] if c["name"].startswith("healing")][0]
    assert heal["passed"] is expect
    if expect is None:
        assert "lm/angular n=2" in heal["undecided_because"]


def test_judge_null_data_never_reproduces():
    """Every rule equal to random and flat block influence: the headline cannot hold."""
    rows, params = _rows([20.0, 40.0, 90.0, 300.0, 900.0], [20.0, 7.0, 3.0, 1.0, 0.5], {0: 2.9, 1: 2.95, 2: 3.0, 3: 3.1},
                         lm_bi=(0.3, 0.3, 0.3, 0.3))
    for r in rows:
        if r["metric"] in ("valid_ppl", "bleu") and r["sweep"].get("rule") in ("bi", "angular"):
            r["value"] = r["value"] * (1.1 if r["metric"] == "valid_ppl" else 0.9)
    assert _judge(rows, params)["verdict"] in ("not_reproduced", "inconclusive")


def test_paper_path_from_a_fairseq_checkpoint(tmp_path):
    """Paper scale: import a (synthetic, Post-LN IWSLT-shaped) fairseq checkpoint and its data-bin, then prune."""
    from test_paper_path import write_fixture  # tests/ is on sys.path under pytest's default import mode

    torch.set_num_threads(1)
    ck, data_bin = write_fixture(tmp_path)  # 3+2 layers, shared 30-symbol dictionary, train/valid/test de-en
    params = config.section(C, "paper")
    with pytest.raises(ArtefactError, match="layer_pruning.data_path"):
        lp.resolve_models({**params, "fairseq_checkpoint": str(ck)}, tmp_path / "layer_pruning")
    params.update(device="cpu", fairseq_checkpoint=str(ck), data_path=str(data_bin), stacks=["encoder", "decoder"],
                  random_seeds=[0])
    params["calibration"].update(sentences=8, max_tokens=256)
    params["eval"].update(test_sentences=4, valid_sentences=8, decoder="greedy", max_tokens=256)
    params["heal"].update(steps=1, max_tokens=128, rules=["angular"], fractions={"encoder": [0.34], "decoder": []},
                          control=False)
    out = tmp_path / "layer_pruning"
    out.mkdir()
    rows, verdict = run_and_judge(C, lp.run, params, "paper", out)
    assert (out / "imported_model" / "checkpoint_last.pt").exists()
    assert [int(r["value"]) for r in Rows(rows).metric("n_layers")] == [3, 2]
    # base, bi / angular / last at 1..3, random: every selection of 1 or 2 of 3 layers, the seeded draw of all 3;
    # the random selections compared on validation NLL (random_quality), not decoded
    assert len(Rows(rows).metric("valid_nll").where(stack="encoder", healed=False)) == 1 + 3 * 3 + 6 + 1
    assert len(Rows(rows).metric("bleu").where(stack="encoder", healed=False)) == 1 + 3 * 3
    assert len(Rows(rows).metric("valid_nll").where(stack="encoder", healed=True)) == 1
    assert verdict["verdict"] in ("reproduced", "partially", "not_reproduced", "inconclusive")


def test_bleu_checks_undecided_for_a_model_below_the_copy_baseline():
    rows, params = _rows([20.0, 24.0, 50.0, 60.0, 500.0], [20.0, 8.0, 5.0, 2.0, 1.0], {0: 2.9, 1: 2.95, 2: 3.0, 3: 3.1})
    beaten = rows + [metric(C, "bleu_copy_baseline", 18.0, "BLEU", stack="translation", test_set="subset")]
    n = {c["name"]: c["passed"] for c in _judge(beaten, params)["checks"]}
    assert n["decoder: collapse point (angular rule, no healing) in the published band"] is None
    assert n["decoder: BLEU collapses with ~28% of layers removed by BI (no healing)"] is None
    fine = rows + [metric(C, "bleu_copy_baseline", 5.0, "BLEU", stack="translation", test_set="subset")]
    n = {c["name"]: c["passed"] for c in _judge(fine, params)["checks"]}
    assert n["decoder: collapse point (angular rule, no healing) in the published band"] is True


# ------------------------------------- "similarity rules beat random": a permutation test over random layer orderings
BEATS = "similarity-based rules prune better than random"
WEIGHT = (6.0, 5.0, 4.0, 3.0, 2.0, 1.0)  # what removing each layer of a 6-layer encoder costs in BLEU: deep is cheap


def _cost(layers) -> float:
    return 30.0 - sum(WEIGHT[i] for i in layers)


def _stack_rows(rules: dict, L: int = 6, stack: str = "encoder", quality=_cost, seeds=None, nll: bool = False):
    """A stack of ``L`` layers: ``rules`` {rule: {n: (layers, quality)}} at the removal counts 1..L-1, the random
    baseline every distinct selection (``seeds`` None) or seeded draws ({seed: {n: layers}}), its quality
    ``quality(layers)`` (BLEU; perplexity for the LM; ``nll``: a translation stack's validation NLL)."""
    q, unit = (("valid_ppl", "perplexity") if stack == "lm" else ("valid_nll", "nats/token") if nll
               else ("bleu", "BLEU"))
    rows = [metric(C, "n_layers", L, stack=stack),
            metric(C, q, quality(()), unit, stack=stack, rule="none", n_removed=0, healed=False, layers="")]
    if stack == "lm":  # the LM's gate: its unpruned NLL well below the unigram model's
        rows += [metric(C, "unigram_ppl", 1e4, stack="lm"),
                 metric(C, "valid_nll", math.log(quality(())), "nats/token", stack="lm", rule="none", n_removed=0,
                        healed=False, layers="")]
    lay = lambda xs: ",".join(map(str, xs))  # noqa: E731
    for rule, picks in rules.items():
        rows += [metric(C, q, v, unit, stack=stack, rule=rule, n_removed=n, healed=False, layers=lay(ls))
                 for n, (ls, v) in picks.items()]
    for n in range(1, L):
        if seeds is None:
            rows += [metric(C, q, quality(c), unit, stack=stack, rule="random", n_removed=n, healed=False,
                            layers=lay(c), sample="all") for c in itertools.combinations(range(L), n)]
        else:
            rows += [metric(C, q, quality(ls[n]), unit, stack=stack, rule="random", n_removed=n, healed=False,
                            layers=lay(ls[n]), seed=seed, sample="seeded") for seed, ls in seeds.items()]
    return rows


def _deepest(L: int = 6, quality=_cost, bonus: float = 0.0) -> dict:
    return {n: (list(range(L - n, L)), quality(range(L - n, L)) + bonus) for n in range(1, L)}


def _beats(rows, params=None, **thresholds):
    """The headline permutation check on ``rows`` (translation stacks compared in BLEU unless ``params`` say)."""
    v = judge_rows(C, rows, scale="default", params=params or {**config.section(C, "default"), "random_quality": "bleu"},
                   thresholds={**T4, **thresholds})
    return next(c for c in v["checks"] if c["name"] == BEATS), v


def test_beats_random_is_exact_over_every_ordering_of_the_nested_counts():
    """The deepest layers are the cheapest at every count: the nested rule beats every other of the 6! orderings,
    p = 1/720 exactly (an independent sign test over the 5 counts would say 1/32); a rule that is no ordering (the
    angular blocks are not nested) and beats them all: 1/721."""
    c, v = _beats(_stack_rows({"bi": _deepest(), "angular": _deepest()}))
    assert c["passed"] is True and "bi: p = 0.00139 (better)" in c["measured"]  # 1/720
    assert "rank 1 of 720 among the rule and the 720 orderings" in c["measured"]
    assert c["thresholds"] == {"beats_random_alpha": 0.05} and "exact over every ordering" in c["expected"]
    block = {**_deepest(bonus=0.5), 3: ([2, 3, 4], _cost([3, 4, 5]) + 0.5)}  # n=3 drops n=2's layer 5: no ordering
    c, _ = _beats(_stack_rows({"bi": _deepest(), "angular": block}))
    assert f"angular: p = {1 / 721:.3g} (better)" in c["measured"] and c["passed"] is True


def test_beats_random_on_validation_nll_ranks_lower_as_better():
    """``random_quality`` valid_nll: the translation stack's rules and random selections compared in validation NLL
    (lower is better); the same orderings decide as in BLEU, and BLEU rows alone decide nothing."""
    nll = lambda ls: 40.0 - _cost(ls)  # noqa: E731  (deep layers cheap: the lowest NLL)
    deep = _deepest(quality=nll)
    params = config.section(C, "default")
    assert params["random_quality"] == "valid_nll"
    c, _ = _beats(_stack_rows({"bi": deep, "angular": deep}, quality=nll, nll=True), params)
    assert c["passed"] is True and "bi: p = 0.00139 (better)" in c["measured"] and "encoder valid_nll" in c["expected"]
    shallow = {n: (list(range(n)), nll(range(n))) for n in range(1, 6)}
    c, _ = _beats(_stack_rows({"bi": shallow, "angular": shallow}, quality=nll, nll=True), params)
    assert c["passed"] is False
    c, _ = _beats(_stack_rows({"bi": _deepest(), "angular": _deepest()}), params)  # BLEU rows only
    assert c["passed"] is None


def test_beats_random_in_the_middle_of_the_orderings_decides_nothing_and_a_worse_rule_fails():
    order = [0, 5, 4, 1, 3]  # the costliest layer first, then cheap and costly ones: in the middle of the orderings
    mid = {n: (sorted(order[:n]), _cost(order[:n])) for n in range(1, 6)}
    c, v = _beats(_stack_rows({"bi": mid, "angular": mid}))
    assert c["passed"] is None and "decides neither way" in c["undecided_because"]
    assert v["verdict"] != "reproduced"
    shallow = {n: (list(range(n)), _cost(range(n))) for n in range(1, 6)}
    c, _ = _beats(_stack_rows({"bi": shallow, "angular": shallow}))
    assert c["passed"] is False and "bi: p = 1 (better), 0.00139 (worse)" in c["measured"]
    # one rule better, the other no better than random: every rule must beat random
    c, _ = _beats(_stack_rows({"bi": _deepest(), "angular": mid}))
    assert c["passed"] is None
    c, _ = _beats(_stack_rows({"bi": _deepest()}), beats_random_alpha=0.001)  # alpha is the judge's key
    assert c["passed"] is None and "0.00139" in c["measured"]


def test_beats_random_compares_with_the_selections_not_their_mean():
    """The LM's case: at n=1 the rule is beaten by 2 of its 4 single-layer choices though better than their mean
    perplexity (one of them is ruinous): 3/8 of the selections beaten, not a win."""
    ppl = {(): 50.0, (0,): 5000.0, (1,): 57.0, (2,): 55.0, (3,): 58.0}

    def quality(ls):
        return ppl.get(tuple(ls), 60.0 * 2 ** len(ls) + 10 * sum(3 - i for i in ls))  # deep layers cheap

    rule = {1: ([3], 58.0), 2: ([2, 3], quality([2, 3])), 3: ([1, 2, 3], quality([1, 2, 3]))}
    params = {**config.section(C, "default"), "stacks": ["lm"]}
    c, _ = _beats(_stack_rows({"bi": rule, "angular": rule}, L=4, stack="lm", quality=quality), params)
    assert "lm/bi: n=1: better than 1, worse than 2, tied with 1 of 4 (38%)" in c["measured"]
    assert 58.0 < (5000.0 + 57.0 + 55.0 + 58.0) / 4  # better than the random mean: the old rule's win
    assert c["numbers"]["value"] < 100


def test_beats_random_ranks_among_the_seeded_orderings_of_older_rows():
    """Rows measured before every selection was evaluated: the rule is ranked among the seeded orderings (a seed's
    draws nest): best of 3 draws on one stack is p = 1/4, undecided, and says which test the rows allowed."""
    rng = np.random.default_rng(0)
    seeds = {s: {n: sorted(order[:n]) for n in range(1, 6)} for s, order in
             ((s, list(rng.permutation(6))) for s in range(3))}
    c, _ = _beats(_stack_rows({"bi": _deepest(), "angular": _deepest()}, seeds=seeds))
    assert c["passed"] is None and "bi: p = 0.25 (better)" in c["measured"]
    assert "seeded random orderings" in c["measured"] and "rank among the seeded" in c["expected"]
    assert "smallest p-value these orderings allow, 0.25" in c["undecided_because"]
    assert c["power"]["n_needed"] is None and c["power"]["n"] == 4


def test_random_selections_are_every_selection_up_to_the_cap_else_the_seeded_draws():
    picks, sample = lp.random_selections(2, 4, [0, 1], 6)
    assert sample == "all" and [p for _, p in picks] == [list(c) for c in itertools.combinations(range(4), 2)]
    assert all(seed is None for seed, _ in picks)
    picks, sample = lp.random_selections(2, 4, [0, 1], 5)  # C(4, 2) = 6 > 5
    assert sample == "seeded" and [s for s, _ in picks] == [0, 1]
    assert [p for _, p in picks] == [lp.select_layers("random", 2, 4, [], {}, s) for s in (0, 1)]
    assert lp.random_selections(1, 4, [3], 0)[1] == "seeded"  # 0: always the draws
    assert lp.random_selections(4, 4, [3], 64)[1] == "seeded"  # every layer: one selection, the draw


def test_paired_rows_against_the_random_mean():
    """rule - mean of the random selections from the per-sentence units: the observed value is the rows' own
    numbers; seeded draws are resampled with the sentences (a wider interval than the same selections taken as the
    exact baseline); a rule equal to every selection is 0 on [0, 0]."""
    from types import SimpleNamespace

    import numpy as np

    rng = np.random.default_rng(0)
    tok = rng.integers(5, 30, size=120).astype(float)
    nll = {k: tok * (2.0 + s) + rng.normal(0, 2, size=120) for k, s in
           ((("skip", (0,)), 1.0), (("skip", (1,)), 0.0), (("skip", (2,)), 0.2), (("skip", (3,)), 0.1))}
    ev = SimpleNamespace(units={k: np.stack([v, tok], 1) for k, v in nll.items()})
    table = [{"rule": "bi", "healed": False, "n_removed": 1, "layers": [3]}]
    pp = {"samples": 400, "seed": 0, "alpha": 0.05}
    ref = {k: float(v.sum() / tok.sum()) for k, v in nll.items()}
    for sample in ("all", "seeded"):
        rand = [{"rule": "random", "healed": False, "n_removed": 1, "layers": [i], "sample": sample}
                for i in range(4)]
        [r] = lp.paired_rows(table + rand, ev, "lm", 4, pp)
        sw = r["sweep"]
        assert r["value"] == pytest.approx(ref[("skip", (3,))] - np.mean(list(ref.values())), abs=1e-12)
        assert sw["random_sample"] == sample and sw["random_selections"] == 4 and sw["own_selection_among"] == 1
        assert sw["better_than"] == 2 and sw["worse_than"] == 1  # NLL: worse only than removing layer 1
        width = sw["hi"] - sw["lo"]
        if sample == "all":
            exact = width
        else:
            assert width > exact
    same = [{"rule": "random", "healed": False, "n_removed": 1, "layers": [3], "sample": "all"}] * 2
    [r] = lp.paired_rows(table + same, ev, "lm", 4, pp)
    assert r["value"] == 0.0 and r["sweep"]["lo"] == r["sweep"]["hi"] == 0.0


def test_bi_depth_tie_is_undecided():
    rows, params = _rows([20.0, 24.0, 50.0, 60.0, 500.0], [20.0, 8.0, 5.0, 2.0, 1.0], {0: 2.9, 1: 2.95, 2: 3.0, 3: 3.1},
                         lm_bi=(0.4, 0.1, 0.2, 0.2))  # layers 2 and 3 tie at the edge of the lowest half
    c = [c for c in _judge(rows, params)["checks"] if c["name"] == "lm: the least influential layers (BI) are deep"]
    assert c[0]["passed"] is None and "tie" in c[0]["undecided_because"]


def _reference_with_paired(width: float):
    """The committed reference's rows with paired rows added (rule - draw from the point values, +- ``width``), as
    the measurement now records them; (folder, rows)."""
    from test_judge_contract import _reference, _rows as ref_rows

    folder = _reference(C)
    rows = ref_rows(folder)
    q = {}
    for r in rows:
        if r["metric"] in ("bleu", "valid_nll") and r.get("sweep.healed") in (False, "False", 0) and \
                r.get("sweep.rule") in ("bi", "angular", "random"):
            q[(r["metric"], r["sweep.stack"], r["sweep.rule"], r["sweep.n_removed"], r.get("sweep.seed"))] = r
    extra = []
    for (m, s, rule, n, seed), r in q.items():
        if rule == "random" or (m == "bleu") == (s == "lm"):
            continue
        for (m2, s2, rule2, n2, seed2), d in q.items():
            if (m2, s2, rule2, n2) != (m, s, "random", n):
                continue
            delta = float(r["value"]) - float(d["value"])
            w = 0.0 if r["sweep.layers"] == d["sweep.layers"] else width
            sweep = {"stack": s, "rule": rule, "n_removed": n, "seed": seed2, "healed": False, "quality": m,
                     "lo": delta - w, "hi": delta + w}
            extra.append({**metric(C, "paired_delta_vs_random", delta, "BLEU" if m == "bleu" else "nats/token",
                                   kind="statistic", **sweep), **{f"sweep.{k}": v for k, v in sweep.items()}})
    return folder, rows + extra


@pytest.mark.parametrize("width", [None, 0.01])
def test_controls_tie_and_reverse_the_random_comparison(width):
    """The tie control leaves "beats random" undecided (never failed) and the verdict inconclusive; paper-false
    fails it and the claim; on the reference's rows and on them with paired intervals."""
    from test_judge_contract import _controls, _judge as judge_ref, _reference, _rows as ref_rows

    if width is None:
        folder = _reference(C)
        rows = ref_rows(folder)
    else:
        folder, rows = _reference_with_paired(width)
    controls = _controls(C)
    flat, tied = controls.ties(rows)
    for rs in (flat, tied):
        v = judge_ref(C, folder, rs, controlled=True)
        assert v["verdict"] == "inconclusive", v["reason"][:400]
        assert [c["passed"] for c in v["checks"] if c["name"] == "lm: the least influential layers (BI) are deep"] \
            == [None]
    v = judge_ref(C, folder, tied, controlled=True)
    c = next(c for c in v["checks"] if c["name"] == BEATS)
    assert c["passed"] is None, c["measured"][:300]
    v = judge_ref(C, folder, controls.paper_false(rows), controlled=True)
    assert v["verdict"] == "not_reproduced"
    assert [c["passed"] for c in v["checks"] if c["name"] == BEATS] == [False]


def test_ratio_rows_are_paired_bootstrap_ratios_of_the_decodes_made():
    """bleu_ratio_to_unpruned: the BI selection's corpus BLEU over the unpruned model's, and a percentile interval
    from the same resampled sentences; copying the reference (a perfect system) against itself is 1 on [1, 1]."""
    from types import SimpleNamespace

    from repro.train.bleu import corpus_bleu, sentence_stats
    rng = __import__("numpy").random.default_rng(0)
    words = [f"w{i}" for i in range(40)]
    refs = [" ".join(rng.choice(words, 8)) for _ in range(150)]
    worse = [r if i % 2 else " ".join(rng.choice(words, 8)) for i, r in enumerate(refs)]
    ev = SimpleNamespace(units={("skip", ()): sentence_stats(refs, refs), ("skip", (1,)): sentence_stats(worse, refs),
                                ("skip", (0, 1)): sentence_stats(refs, refs)})
    table = [{"rule": "none", "healed": False, "n_removed": 0, "layers": []},
             {"rule": "bi", "healed": False, "n_removed": 1, "layers": [1]},
             {"rule": "bi", "healed": False, "n_removed": 2, "layers": [1, 0]},
             {"rule": "random", "healed": False, "n_removed": 1, "layers": [0]}]
    rows = lp.ratio_rows(table, ev, "decoder", 2, {"samples": 300, "seed": 0, "alpha": 0.05})
    assert [r["sweep"]["n_removed"] for r in rows] == [1, 2]
    one, two = rows
    assert one["value"] == pytest.approx(corpus_bleu(worse, refs).score / 100.0)
    assert one["sweep"]["lo"] < one["value"] < one["sweep"]["hi"] < 1.0
    assert two["value"] == pytest.approx(1.0) and two["sweep"]["lo"] == pytest.approx(1.0) == two["sweep"]["hi"]
    assert lp.ratio_rows(table, ev, "lm", 2, {"samples": 10, "seed": 0, "alpha": 0.05}) == []


@pytest.mark.parametrize("lo, hi, expect", [(0.85, 0.95, False), (0.2, 0.4, True), (0.4, 0.6, None),
                                            (0.3, 0.5, None)])
def test_shortgpt_collapse_is_decided_by_the_ratio_interval(lo, hi, expect):
    """ShortGPT's collapse with 9 of 32 layers (28.1%) removed: the BLEU ratio's interval against the collapse point
    (0.5): wholly above fails, wholly below holds, containing or touching it decides nothing."""
    rows, params = _rows([20.0, 24.0, 50.0, 60.0, 500.0], [20.0, 8.0, 5.0, 2.0, 1.0], {0: 1.0, 1: 3.1, 2: 3.9, 3: 4.1})
    rows.append(metric(C, "bleu_ratio_to_unpruned", (lo + hi) / 2, "ratio", kind="statistic", stack="decoder",
                       rule="bi", n_removed=1, healed=False, lo=lo, hi=hi))
    sg = [c for c in _judge(rows, params)["checks"] if "collapses with" in c["name"]]
    assert len(sg) == 1 and sg[0]["passed"] is expect
