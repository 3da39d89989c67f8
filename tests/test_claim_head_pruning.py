"""C5 head_pruning: the tiny end-to-end run on a freshly trained tiny translation model, the head tools against
references (importance = finite-difference gate gradient, physical removal = masking, Hard-Concrete P(g != 0)),
and the verdict rules on constructed rows."""
from __future__ import annotations

import math
from statistics import NormalDist

import pytest
import torch

from repro.artefacts import ArtefactError
from repro.claims import head_pruning as hp
from repro.judges import head_pruning as hp_judge
from repro.claims._cli import judge_rows, run_and_judge
from repro.claims._heads import (Head, HardConcreteGates, all_heads, head_importance, pruned_copy, pruning_levels,
                                 set_pruned)
from repro import config
from repro.config import section
from repro.bench.fingerprint import fingerprint

CLAIM = hp.CLAIM


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from repro.data.tokenizer import train_sentencepiece
    from repro.train.pipeline import load_data, train_from_params

    d = tmp_path_factory.mktemp("hp_model")
    params = section("translation", "tiny")
    torch.set_num_threads(1)
    corpus = load_data(params)
    tk = params["tokenizer"]
    train_sentencepiece([s for pair in corpus.train for s in pair], d / "spm", tk["vocab_size"],
                        model_type=tk["model_type"], character_coverage=tk["character_coverage"], seed=tk["seed"])
    train_from_params(params, d / "spm.model", d / "model")
    return d / "model"


def test_tiny_run(tiny_model, tmp_path):
    from repro.io import read_metrics, write_results
    from repro.report.plots import ResultFiles
    from repro.report.plots.head_pruning import plots

    params = section("head_pruning", "tiny")
    params["model_dir"] = str(tiny_model)
    rows, verdict = run_and_judge(CLAIM, hp.run, params, "tiny", tmp_path)
    assert verdict["verdict"] == "not_applicable"
    by = lambda name: [r for r in rows if r["metric"] == name]
    n_heads = len(by("ablation_bleu_delta"))
    assert n_heads == 6  # 1 encoder + 1 decoder layer, 2 heads: encoder self, decoder self, cross
    assert all(0.0 <= r["sweep"]["p_value"] <= 1.0 for r in by("ablation_bleu_delta"))
    total = [r for r in by("heads_total") if r["sweep"]["kind"] == "all"][0]
    assert total["value"] == n_heads
    imp = [r for r in by("head_importance") if r["sweep"]["order"] == "importance"]
    assert len(imp) == n_heads and all(r["value"] >= 0 for r in imp)
    assert len(by("head_importance")) == 2 * n_heads  # also the unnormalised order
    for kind in ("encoder_self", "decoder_self", "cross"):  # l2-normalised per layer
        v = [r["value"] for r in imp if r["sweep"]["kind"] == kind]
        assert math.isclose(math.sqrt(sum(x * x for x in v)), 1.0, rel_tol=1e-5) or max(v) == 0
    curve = [r for r in by("pruning_bleu") if r["sweep"]["order"] == "importance"]
    assert [r["sweep"]["pruned"] for r in curve] == [0] + pruning_levels(n_heads, 0.34, 1.0)
    assert {r["sweep"]["batch"] for r in by("speedup")} == set(params["throughput"]["batch_sizes"])
    assert all(r["value"] > 0 for r in by("examples_per_s"))
    assert len(by("l0_heads_kept")) == len(params["l0"]["lambdas"])
    assert {r["sweep"]["order"] for r in by("prunable_fraction")} == {"importance", "importance_raw"}
    assert all(0 <= r["value"] <= 100 for r in by("prunable_fraction"))
    write_results(tmp_path, fingerprint=fingerprint(), claim="head_pruning", scale="tiny", metrics=rows, verdict=verdict, config=params)
    figs = plots(read_metrics(tmp_path), ResultFiles.of(tmp_path), tmp_path)
    assert {f for f, _ in figs} == {"headline.png", "ablation.png", "pruning_curve.png", "l0_budgets.png", "speedup.png"}
    assert all((tmp_path / f).stat().st_size > 0 for f, _ in figs)


def _small_model(heads=4, layers=2):
    from repro.model import BlockConfig, ModelConfig
    from repro.model.models import EncoderDecoder

    torch.manual_seed(0)
    cfg = ModelConfig(block=BlockConfig(d_model=32, n_heads=heads, d_ff=64), vocab_size=50, n_encoder_layers=layers,
                      n_decoder_layers=layers, max_seq_len=32, positional="sinusoidal")
    return EncoderDecoder(cfg).eval()


def _batch():
    from repro.data.batching import Batch

    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, 50, (3, 7), generator=g)
    tgt = torch.randint(4, 50, (3, 6), generator=g)
    mask_s = torch.zeros(3, 7, dtype=torch.bool); mask_s[0, 5:] = True
    mask_t = torch.zeros(3, 5, dtype=torch.bool); mask_t[1, 4:] = True
    tgt_out = tgt[:, 1:].clone(); tgt_out[mask_t] = 0
    return Batch(src, tgt[:, :-1], tgt_out, mask_s, mask_t, torch.arange(3))


def test_importance_is_the_gate_gradient():
    """Unnormalised I_h equals sum |dL/d xi_h| / tokens by central finite differences: per batch, and per
    sentence (each sentence alone, summed) for the default granularity."""
    import torch.nn.functional as F
    from repro.data.batching import Batch

    def loss_sum(model, b):  # summed NLL in float64 (model_loss casts logits to float32)
        logits = model(b.src, b.tgt_in, b.src_pad_mask, b.tgt_pad_mask)
        return float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), b.tgt_out.reshape(-1), ignore_index=0,
                                     reduction="sum"))

    def fd(model, h, b):
        gate = model.attention_modules()[h.kind][h.layer].head_gate
        vals = []
        for eps in (1e-4, -1e-4):
            set_pruned(model)
            with torch.no_grad():
                gate[h.head] += eps
                vals.append(loss_sum(model, b))
        set_pruned(model)
        return (vals[0] - vals[1]) / 2e-4

    model, b = _small_model().double(), _batch()
    per_batch = head_importance(model, [b], pad_id=0, normalize=False, granularity="batch")
    per_sent = head_importance(model, [b], pad_id=0, normalize=False)
    ntok = b.ntokens
    one = lambda i: Batch(b.src[i:i + 1], b.tgt_in[i:i + 1], b.tgt_out[i:i + 1], b.src_pad_mask[i:i + 1],
                          b.tgt_pad_mask[i:i + 1], b.index[i:i + 1])
    for h in [Head("encoder_self", 1, 2), Head("decoder_self", 0, 1), Head("cross", 1, 3)]:
        whole = abs(fd(model, h, b)) / ntok
        assert whole > 1e-6
        assert per_batch[h] == pytest.approx(whole, rel=1e-3)
        sent = sum(abs(fd(model, h, one(i))) for i in range(3)) / ntok
        assert per_sent[h] == pytest.approx(sent, rel=1e-3)
        assert per_sent[h] >= per_batch[h] * (1 - 1e-6)  # sum of |.| >= |sum|
    # normalised: unit l2 norm per layer; a pruned head is left out
    imp = head_importance(model, [b], pad_id=0, pruned=[Head("cross", 0, 1)])
    assert Head("cross", 0, 1) not in imp
    v = [imp[Head("cross", 0, h)] for h in (0, 2, 3)]
    assert math.sqrt(sum(x * x for x in v)) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="granularity"):
        head_importance(model, [b], pad_id=0, granularity="token")


def test_physical_removal_equals_masking():
    model, b = _small_model(), _batch()
    drop = [Head("encoder_self", 0, 1), Head("encoder_self", 0, 3), Head("cross", 1, 0), Head("decoder_self", 1, 2),
            *[Head("cross", 0, h) for h in range(4)]]  # a whole layer removed too
    small = pruned_copy(model, drop).eval()
    assert len(all_heads(small)) == len(all_heads(model)) - len(drop)
    set_pruned(model, drop)
    with torch.no_grad():
        ref = model(b.src, b.tgt_in, b.src_pad_mask, b.tgt_pad_mask)
        got = small(b.src, b.tgt_in, b.src_pad_mask, b.tgt_pad_mask)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    set_pruned(model)
    with torch.no_grad():
        full = model(b.src, b.tgt_in, b.src_pad_mask, b.tgt_pad_mask)
    assert (full - ref).abs().max() > 1e-3  # masking changed something, so the comparison above means something


def test_encoder_cache_reuses_only_an_unchanged_encoder():
    """Decoding through EncoderCache gives the hypotheses of decoding without it; the encoder output is reused
    while only decoder heads are gated, computed again after an encoder gate or weight changes, and never taken
    from the cache with a gate module installed."""
    from repro.claims._heads import EncoderCache
    from repro.train.decode import DecodeConfig, decode_ids, length_batches

    model = _small_model()
    g = torch.Generator().manual_seed(2)
    src_ids = [torch.randint(4, 50, (n,), generator=g).tolist() + [2] for n in (3, 5, 8, 4, 6, 9)]
    cfg = DecodeConfig(max_tokens=24)
    n = len(list(length_batches(src_ids, cfg.max_tokens, 32, 2)))
    assert n > 1
    cache = EncoderCache(model)

    def decode(pruned):
        set_pruned(model, pruned)
        plain, _ = decode_ids(model, src_ids, 1, 2, 0, cfg)
        cached, _ = decode_ids(model, src_ids, 1, 2, 0, cfg, encode=cache)
        assert cached == plain
        return cache.hits, cache.misses

    assert decode([]) == (0, n)
    assert decode([Head("decoder_self", 0, 1)]) == (n, n)
    assert decode([Head("cross", 1, 2)]) == (2 * n, n)
    assert decode([Head("encoder_self", 1, 0)]) == (2 * n, 2 * n)
    assert decode([Head("cross", 0, 0)]) == (2 * n, 3 * n)
    with torch.no_grad():
        model.encoder.layers.layers[0].ffn.fc1.weight.mul_(1.5)
    assert decode([]) == (2 * n, 4 * n)
    model.encoder.layers.layers[0].self_attn.gate_module = HardConcreteGates(4, 2.0, 2 / 3, (-0.1, 1.1)).eval()
    assert decode([]) == (2 * n, 4 * n)


def test_hard_concrete_gates():
    torch.manual_seed(0)
    g = HardConcreteGates(3, 0.0, 2 / 3, (-0.1, 1.1))
    with torch.no_grad():
        g.log_alpha.copy_(torch.tensor([-3.0, 0.0, 2.0]))
    g.train()
    samples = torch.stack([g() for _ in range(20000)])
    assert samples.min() >= 0 and samples.max() <= 1
    torch.testing.assert_close((samples > 0).float().mean(0), g.p_open().detach(), atol=0.015, rtol=0)
    assert (samples == 0).any() and (samples == 1).any()  # rectified: exact zeros and ones occur
    g.eval()
    det = g()
    expect = (torch.sigmoid(g.log_alpha) * 1.2 - 0.1).clamp(0, 1)
    torch.testing.assert_close(det, expect)
    with pytest.raises(ValueError, match="stretch"):
        HardConcreteGates(2, 0.0, 0.5, (0.0, 1.1))


def test_decode_keys_override_the_recorded_eval_section():
    """head_pruning.decode sets single keys over the checkpoint's eval section (the default: max_tokens only)."""
    recorded = {"decoder": "beam", "beam": 5, "max_len_a": 1.2, "max_tokens": 8000, "bootstrap_samples": 1000}
    assert hp.decode_section({"max_tokens": 2000}, recorded) == {**recorded, "max_tokens": 2000}
    assert hp.decode_section(None, recorded) == recorded
    assert hp.decode_section({"decoder": "greedy"}, None) == {"decoder": "greedy"}
    assert hp.decode_section(None, None) == {}
    assert section("head_pruning", "default")["decode"] == {"max_tokens": 2000}


def test_pruning_levels():
    assert pruning_levels(48, 0.1, 0.9) == [5, 10, 14, 19, 24, 29, 34, 38, 43]
    assert pruning_levels(6, 0.34, 1.0) == [2, 4]
    assert pruning_levels(4, 0.1, 1.0) == [1, 2, 3, 4]


def test_paper_scale_needs_the_checkpoint(tmp_path):
    params = section("head_pruning", "paper")
    with pytest.raises(hp.ClaimParamError, match="head_pruning.fairseq_checkpoint"):
        hp.resolve_model(params, tmp_path)
    params = section("head_pruning", "default")
    with pytest.raises(ArtefactError, match="head_pruning.model_dir"):
        hp.resolve_model(params, tmp_path / "head_pruning")


# ------------------------------------------------------------------------------------------------ judge
# Synthetic rows in the measurement's schema (repro.claims.head_pruning.run): per pruning order a `pruning_bleu`
# curve (pruned=0 at the unpruned BLEU with p = 1, then each level's BLEU and the paired-bootstrap p-value of its
# change), L0 runs with the p-value of each BLEU change, single-head ablations by kind/layer/head with theirs. With
# significance 0.01, the judge rebuilds the drop's 99% interval as -delta +- 2.576 |delta| / z(1 - p/2) (p = 0 read
# as 2 / bootstrap_samples), and "no loss" means its upper end < 0.15 BLEU.
#
# Two precisions. DEFAULT: every change as uncertain as the default measurement makes it (SE = 0.75 BLEU on 250
# sentences, the reference's own; a p-value follows from the change, p = 2 (1 - Phi(|delta| / SE)), and reads 0
# below the bootstrap's resolution 2 / 20,000). PRECISE: the "no loss" levels as a test set some 25 times larger in
# standard error (~40,000+ sentences, more than any corpus here has) would measure them, so the rules' pass side
# can be exercised at all: a default run can never show "no loss" within 0.15 BLEU (see
# test_paper_true_rows_at_default_precision_cannot_reproduce).
_BASE, _TOTAL, _N_TEST = 30.0, 24, 1341
_LEVELS = pruning_levels(_TOTAL, 0.1, 0.9)  # the default config's levels: 2, 5, 7, 10, ... of 24 heads
SE = 0.75                 # the default measurement's standard error of a BLEU change (250 sentences)
_B = section("head_pruning", "default")["bootstrap_samples"]


def _p(delta, se=SE):
    """The two-sided bootstrap p-value of a change ``delta`` measured with standard error ``se`` (0 below the
    bootstrap's resolution)."""
    p = 2 * (1 - NormalDist().cdf(abs(delta) / se))
    return 0.0 if p < 2 / _B else round(p, 4)


LOSSLESS = (-0.02, 0.5)   # PRECISE: drop's interval [-0.06, +0.10]: upper end < 0.15, lossless (SE 0.03)
LOSSY = (-8.0, 0.0)       # drop's interval [+1.3, +14.7] (at the bootstrap's resolution 1e-4: [+2.7, +13.3]): lossy
STRADDLE = (-0.3, 0.5)    # not significant, but the drop's interval [-0.85, +1.45] straddles 0.15: undecided
NO_INTERVAL = (0.0, 1.0)  # no change, p = 1: no interval, undecided
AT_DEFAULT = (-0.05, _p(0.05))  # DEFAULT: a true "no loss" (0.05 BLEU) as the default run measures it: undecided


def paper_curve(fr):
    """Lossless up to 29% of the heads (above Michel's 20%), then BLEU collapses."""
    return LOSSLESS if fr < 0.3 else LOSSY


def default_curve(fr):
    """The paper's curve at the default precision: a 0.05-BLEU loss up to 29%, then BLEU collapses."""
    return AT_DEFAULT if fr < 0.3 else LOSSY


def early_loss_curve(fr):
    """Lossless at 8% only, lossy from 21% on: prunable fraction 8% (below Michel's 20%)."""
    return LOSSLESS if fr < 0.1 else LOSSY


def _curve_rows(order, curve, seed=None):
    from repro.io import metric as m

    c, sig = "head_pruning", 0.01
    rows = [m(c, "pruning_bleu", _BASE, "BLEU", order=order, seed=seed, pruned=0, fraction=0.0, p_value=1.0)]
    ok = 0.0
    for n in _LEVELS:
        d, p = curve(n / _TOTAL)
        rows.append(m(c, "pruning_bleu", _BASE + d, "BLEU", order=order, seed=seed, pruned=n, fraction=n / _TOTAL,
                      p_value=p, significant_loss=bool(p < sig and d < 0)))
    for n in _LEVELS:  # the measurement's own prunable_fraction: before the first SIGNIFICANT loss (not read)
        d, p = curve(n / _TOTAL)
        if p < sig and d < 0:
            break
        ok = n / _TOTAL
    rows.append(m(c, "prunable_fraction", 100 * ok, "percent", n=_TOTAL, kind="statistic", order=order))
    return rows


_NOISE = (-0.3, 0.2, -0.1, 0.3, 0.0, -0.2, 0.1, -0.4)  # changes no test tells from 0 at SE 0.75 (p >= 0.59)


def _ablation(sig=2, up=1, cross=-2.0, decoder=-0.5):
    """Single-head changes by kind (4 heads per layer): 24 encoder heads, ``sig`` of them changing BLEU by 3 (p = 0 at
    the default precision, significant after Holm's correction), ``up`` of those raising it, the rest noise; 12
    decoder and 12 cross-attention heads around ``decoder`` / ``cross``."""
    enc = [3.0] * up + [-3.0] * (sig - up) + [_NOISE[i % 8] for i in range(24 - sig)]
    return {"encoder_self": enc, "decoder_self": [decoder + _NOISE[i % 8] for i in range(12)],
            "cross": [cross + _NOISE[(i + 3) % 8] for i in range(12)]}


def _rows(sig=2, up=1, means=(20.0, 20.0), rnd_mean=(15.0, 14.0, 14.5), curves=(paper_curve, paper_curve),
          l0=((5, 24, -0.05, 0.001), (20, 24, 0.1, 0.01)), l0_control=(0.2, 0.01),
          speed=((1, 1.0), (16, 10.0), (64, 15.0)), ablation=None):
    """Paper-true by default (PRECISE "no loss"): 2 of 24 encoder heads significant (after Holm's correction); both
    importance orders above the random orders' 95% interval ([13.3, 15.7]) and lossless up to 29%; an L0 run keeping
    5 of 24 heads (within Voita's 10/48) loses 0.05 BLEU with drop's interval [0.01, 0.09] against the unpruned model
    and gains against the unpenalised fine-tune; speed-up growing with the batch; enc-dec attention most sensitive.
    ``curves``/``means``: (Michel's normalised order, the unnormalised one). ``l0``: (kept, gated, delta, p) per
    lambda > 0 run; ``l0_control``: (delta, p) against the lambda-0 fine-tune, or None. ``ablation``: kind ->
    single-head changes (4 heads per layer; p-values at the default precision), else :func:`_ablation`."""
    ablation = _ablation(sig, up) if ablation is None else dict(ablation)
    from repro.io import metric as m

    c = "head_pruning"
    rows = []
    for order, mean, curve in zip(("importance", "importance_raw"), means, curves):
        rows += _curve_rows(order, curve)
        rows.append(m(c, "pruning_mean_bleu", mean, "BLEU", order=order, seed=None))
    for i, v in enumerate(rnd_mean):
        rows += _curve_rows("random", lambda fr: LOSSY, seed=i)
        rows.append(m(c, "pruning_mean_bleu", v, "BLEU", order="random", seed=i))
    rows += [m(c, "l0_heads_kept", _TOTAL, n=_TOTAL, lam=0.0),  # the unpenalised fine-tune (not judged)
             m(c, "l0_bleu_delta", 0.3, "BLEU", lam=0.0, heads_kept=_TOTAL, p_value=0.2)]
    for lam, (k, n, d, p) in zip((0.02, 0.08, 0.16), l0):
        rows += [m(c, "l0_heads_kept", k, n=n, lam=lam),
                 m(c, "l0_bleu_delta", d, "BLEU", lam=lam, heads_kept=k, p_value=p)]
        if l0_control is not None:
            rows.append(m(c, "l0_bleu_delta_vs_control", l0_control[0], "BLEU", lam=lam, heads_kept=k,
                          p_value=l0_control[1]))
    rows += [m(c, "speedup", v, "percent", kind="ratio_time", batch=b) for b, v in speed]
    rows += [m(c, "ablation_bleu_delta", d, "BLEU", sweep={"kind": k}, layer=i // 4, head=i % 4, p_value=_p(d))
             for k, ds in ablation.items() for i, d in enumerate(ds)]
    return rows


def _learned(rows, base=_BASE, copy=12.0):
    from repro.io import metric as m

    return rows + [m("head_pruning", "bleu_unpruned", base, "BLEU", n=250, subset="eval"),
                   m("head_pruning", "bleu_unpruned", base - 0.5, "BLEU", n=_N_TEST, subset="full_test"),
                   m("head_pruning", "bleu_copy_baseline", copy, "BLEU", n=250, subset="eval")]


def _check(v, *words):
    hits = [c for c in v["checks"] if all(w in c["name"] for w in words)]
    assert len(hits) == 1, (words, [c["name"] for c in v["checks"]])
    return hits[0]


def _reference_rows():
    """The committed reference's rows (real schema) and tests/controls/head_pruning.py's paper-true / paper-false
    versions of them."""
    import test_judge_contract as contract

    folder = contract._reference("head_pruning")
    controls = contract._controls("head_pruning")
    return contract._rows(folder), controls, folder


def test_judge_leaves_bleu_checks_undecided_below_the_copy_baseline():
    params = section("head_pruning", "default")
    good = judge_rows(CLAIM, _learned(_rows()), params=params)
    assert good["gates"][0]["passed"] and good["verdict"] == "reproduced", good["reason"]
    # decided: every BLEU check (both orders: Michel's the headline, the unnormalised one secondary); the CPU
    # speed-up is a stand-in
    undecided = {c["name"] for c in good["checks"] if c["passed"] is None}
    assert undecided == {_check(good, "speed-up")["name"]}, undecided
    decided = [c["name"] for c in good["checks"] if c["passed"] is not None]
    assert len(decided) == 7 and all(c["passed"] for c in good["checks"] if c["passed"] is not None)
    # below the copy baseline, above it by less than the gate's margin (3 BLEU), and exactly at it (strict)
    for base in (10.0, 13.0, 15.0):
        v = judge_rows(CLAIM, _learned(_rows(), base=base), params=params)
        assert [c["name"] for c in v["checks"] if c["passed"] is not None] == [], base
        assert all("learned to translate" in c["undecided_because"] for c in v["checks"] if c["name"] in decided)
        assert v["verdict"] == "inconclusive" and not v["gates"][0]["passed"], base
    # the gate reads bleu_unpruned, not the curves: a failing curve is not decided below the copy baseline either
    v = judge_rows(CLAIM, _learned(_rows(curves=(early_loss_curve, early_loss_curve)), base=10.0), params=params)
    assert v["verdict"] == "inconclusive" and not any(c["passed"] is False for c in v["checks"])


def test_judge_speedup_is_a_stand_in_on_cpu_and_decided_on_gpu():
    p = section("head_pruning", "default")
    shrinking = ((1, 5.0), (16, 3.0), (64, 2.0))
    for speed in ((1, 1.0), (16, 10.0), (64, 15.0)), shrinking:
        v = judge_rows(CLAIM, _learned(_rows(speed=speed)), params=p)
        sp = _check(v, "speed-up")
        assert sp["passed"] is None and "stand-in" in sp["undecided_because"]
        assert v["verdict"] == "reproduced", v["reason"]  # a CPU stand-in decides nothing either way
    v = judge_rows(CLAIM, _learned(_rows()), params=p, device="cuda")
    assert v["verdict"] == "reproduced" and _check(v, "speed-up")["passed"] is True, v["reason"]
    for speed in (shrinking, ((1, -5.0), (64, -1.0))):  # shrinking; growing but a slow-down at the largest batch
        v = judge_rows(CLAIM, _learned(_rows(speed=speed)), params=p, device="cuda")
        assert v["verdict"] == "partially", (speed, v["reason"])
        assert [c["name"] for c in v["checks"] if c["passed"] is False] == [_check(v, "speed-up")["name"]]


def test_holm():
    assert hp_judge._holm([0.001, 0.02, 0.004, 0.5], 0.01) == [True, False, False, False]  # 0.004 > 0.01/3
    assert hp_judge._holm([0.001, 0.003, 0.004], 0.01) == [True, True, True]  # 0.001 < .0033, .003 < .005, .004 < .01
    assert hp_judge._holm([0.0025, 0.5, 0.5, 0.5], 0.01) == [False] * 4  # on Holm's first step: strict
    assert hp_judge._holm([], 0.01) == []


def test_judge_minority_is_corrected_for_multiple_testing():
    """Michel counts heads at p < 0.01 one by one; over 24 heads chance alone gives one with probability 21%, so the
    judge counts them with Holm's correction: nominally significant heads that do not survive it are no evidence."""
    p = section("head_pruning", "default")
    v = judge_rows(CLAIM, _learned(_rows(sig=0, up=0)), params=p)
    minority = _check(v, "minority")
    assert minority["passed"] is None and "beyond chance" in minority["undecided_because"]
    # one head at p = 0.002 (the reference): significant uncorrected, not after Holm (0.01 / 24 = 0.00042)
    rows = _rows(sig=0, up=0)
    rows = [({**r, "value": -2.5, "sweep": {**r["sweep"], "p_value": 0.002}}
             if r["metric"] == "ablation_bleu_delta" and r["sweep"]["kind"] == "encoder_self"
             and (r["sweep"]["layer"], r["sweep"]["head"]) == (0, 0) else r) for r in rows]
    v = judge_rows(CLAIM, _learned(rows), params=p)
    minority = _check(v, "minority")
    assert minority["passed"] is None and "0 of 24 significant after Holm" in minority["measured"]
    assert "1 at p<0.01 uncorrected" in minority["measured"] and "21%" in minority["measured"], minority
    # 2 of 24 after the correction: a minority; 13 of 24: more than a quarter matter, beyond chance
    assert _check(judge_rows(CLAIM, _learned(_rows()), params=p), "minority")["passed"] is True
    assert _check(judge_rows(CLAIM, _learned(_rows(sig=13)), params=p), "minority")["passed"] is False
    # a resolution too coarse for the correction: 1,000 resamples give p >= 0.002, no head passes 0.01 / 24
    v = judge_rows(CLAIM, _learned(_rows()), params={**p, "bootstrap_samples": 1000})
    minority = _check(v, "minority")
    assert minority["passed"] is None and "more than 4,800 samples" in minority["undecided_because"]


def test_judge_sensitivity_is_decided_by_intervals_not_means():
    """Enc-dec attention most sensitive: the Welch interval of the difference of the kinds' mean single-head change,
    heads as the sample; a lower mean inside the spread decides nothing, and a tie neither."""
    p = section("head_pruning", "default")
    sens = lambda abl: _check(judge_rows(CLAIM, _learned(_rows(ablation=abl)), params=p), "enc-dec")
    assert sens(_ablation())["passed"] is True
    # cross's mean lowest by 0.1 BLEU, heads spread by +-0.4: a point-mean rule would pass it
    close = sens(_ablation(cross=-0.6, decoder=-0.5))
    assert close["passed"] is None and "cross - decoder_self" in close["measured"]
    # at 90% power: n x ((1.96 + 1.2816) x se / gap)^2 with se = half-width / 1.96 (the Welch interval's), gap the
    # 0.1-BLEU difference of means: 2.74 times the 50% size n x (half-width / gap)^2
    pw = close["power"]
    se, gap = (pw["hi"] - pw["lo"]) / 2 / 1.959964, abs(pw["value"])
    assert pw["unit"] == "heads per kind" and pw["power"] == 0.9 and pw["n_needed"] > 12
    assert pw["n_needed"] == pytest.approx(pw["n"] * ((1.959964 + 1.281552) * se / gap) ** 2, rel=1e-3, abs=1)
    # equal means: a tie
    tie = sens(_ablation(cross=-0.5, decoder=-0.5))
    assert tie["passed"] is None
    # identical heads on every kind (no spread): a zero-width interval on 0, still a tie
    flat = {"encoder_self": [-1.0] * 24, "decoder_self": [-1.0] * 12, "cross": [-1.0] * 12}
    assert sens(flat)["passed"] is None
    assert sens(_ablation(cross=-0.2, decoder=-2.0))["passed"] is False


def test_judge_reproduced_and_each_rule_can_fail():
    p = section("head_pruning", "default")

    def judge(rows, scale="default"):  # timed on a GPU: the speed-up check is decided
        return judge_rows(CLAIM, rows, scale=scale, params=p, device="cuda")

    good = judge(_learned(_rows()))
    assert good["verdict"] == "reproduced", good["reason"]
    assert len(good["checks"]) == 8  # minority, enc-dec, random x 2 orders, prunable x 2 orders, L0, speed-up
    assert all(c["passed"] for c in good["checks"])
    # Michel's protocol as published: his normalised order is the headline's, the unnormalised one secondary
    assert {c["name"] for c in good["checks"] if c["headline"]} == {
        _check(good, "Michel's", "prunes")["name"], _check(good, "L0")["name"]}
    secondary = {
        "minority": (_rows(sig=13), "minority"),
        "random": (_rows(means=(20.0, 12.0)), "random"),  # the unnormalised order below the random orders' interval
        "speed-up": (_rows(speed=((1, 5.0), (16, 3.0), (64, 2.0))), "speed-up"),
        "enc-dec most sensitive": (_rows(ablation=_ablation(cross=-0.2, decoder=-2.0)), "enc-dec"),
        "unnormalised prunable": (_rows(curves=(paper_curve, early_loss_curve)), "unnormalised"),
    }
    headline = {
        "prunable": (_rows(curves=(early_loss_curve, paper_curve)), "Michel's"),
        # the run at Voita's budget loses 2 BLEU; the lossless run keeps 20 of 24 heads (above the budget)
        "l0 budget": (_rows(l0=((5, 24, -2.0, 0.0), (20, 24, -0.05, 0.001))), "L0"),
        "l0 vs control": (_rows(l0_control=(-2.0, 0.0)), "L0"),
    }
    for name, (rows, word) in {**secondary, **headline}.items():
        v = judge(_learned(rows))
        assert v["verdict"] == ("partially" if name in secondary else "not_reproduced"), (name, v["reason"])
        failed = [c["name"] for c in v["checks"] if c["passed"] is False]
        assert len(failed) == 1 and word in failed[0], (name, failed)
    # 'no loss' is equivalence, not 'no significant loss': the measurement's prunable_fraction (first significant
    # loss) says 29% for both curves below, but the judge leaves the headline undecided
    for curve, why in ((lambda fr: STRADDLE if fr < 0.3 else LOSSY, "straddles"),
                       (lambda fr: NO_INTERVAL if fr < 0.3 else LOSSY, "no interval")):
        rows = _rows(curves=(curve, paper_curve))
        assert [r["value"] for r in rows if r["metric"] == "prunable_fraction"
                and r["sweep"]["order"] == "importance"][0] > 20
        v = judge(_learned(rows))
        pr = _check(v, "Michel's", "prunes")
        assert pr["passed"] is None and why in pr["undecided_because"] and v["verdict"] == "inconclusive", why
    # a lossy level at or below Michel's 20% fails the check whatever the undecided levels before it
    v = judge(_learned(_rows(curves=(lambda fr: STRADDLE if fr < 0.1 else LOSSY, paper_curve))))
    assert _check(v, "Michel's", "prunes")["passed"] is False and v["verdict"] == "not_reproduced"
    # no L0 run within Voita's budget (6 of 24 kept > 10/48): the lambdas chose the sparsity, undecided
    v = judge(_learned(_rows(l0=((6, 24, -0.05, 0.001),))))
    l0 = _check(v, "L0")
    assert l0["passed"] is None and "budget" in l0["undecided_because"] and v["verdict"] == "inconclusive"
    none = judge(_learned(_rows(sig=20, means=(1.0, 1.0), curves=(early_loss_curve, early_loss_curve),
                                l0=((5, 24, -3.0, 0.0),), speed=((1, 5.0), (64, -1.0)),
                                ablation=_ablation(sig=20, cross=-0.2, decoder=-2.0))))
    assert none["verdict"] == "not_reproduced"
    assert sum(c["passed"] is False for c in none["checks"]) == 8 and not any(c["passed"] for c in none["checks"])
    assert judge(_rows(), scale="tiny")["verdict"] == "not_applicable"
    # no order is swapped in: Michel's order fails the headline at any heads per layer (4 here, 8 below)
    eight = {k: v * 2 for k, v in _ablation().items()}  # 8 heads per layer
    normalised_fails = dict(means=(1.0, 20.0), curves=(early_loss_curve, paper_curve))
    raw_fails = dict(means=(20.0, 1.0), curves=(paper_curve, early_loss_curve))
    for abl in (None, eight):
        v = judge(_learned(_rows(ablation=abl, **normalised_fails)))
        assert v["verdict"] == "not_reproduced", v["reason"]
        assert {c["name"] for c in v["checks"] if c["passed"] is False} == {
            _check(v, "Michel's", "random")["name"], _check(v, "Michel's", "prunes")["name"]}
        v = judge(_learned(_rows(ablation=abl, **raw_fails)))
        assert v["verdict"] == "partially", v["reason"]
        assert not any("scale artefact" in (c.get("undecided_because") or "") for c in v["checks"])
    # the committed reference's rows, made paper-true (precise) / paper-false by tests/controls/head_pruning.py
    ref, controls, _ = _reference_rows()
    assert judge(controls._true(ref))["verdict"] == "reproduced"
    assert judge(controls.paper_false(ref))["verdict"] == "not_reproduced"


def test_paper_true_rows_at_default_precision_cannot_reproduce():
    """The paper's effect measured as precisely as the default run measures it (every change's SE 0.75 BLEU on 250
    sentences): what a default run can show holds (a minority of heads after correction, enc-dec most sensitive,
    both orders beat random), but "no loss" within Voita's 0.15 BLEU needs the drop's 99% interval (+-1.9 BLEU here)
    inside 0.15: even a true zero drop needs ~40,000 sentences and the corpus's test set has 1,341, so the two
    headline checks (Michel's prunable fraction, the L0 budget) and the unnormalised prunable fraction cannot reach
    reproduced at default, and say so. A loss is still decided at default (early_loss_curve: not_reproduced)."""
    p = section("head_pruning", "default")
    rows = _rows(curves=(default_curve, default_curve), l0=((5, 24, -0.05, _p(0.05)),),
                 l0_control=(-0.05, _p(0.05)))
    v = judge_rows(CLAIM, _learned(rows), params=p, device="cuda")
    assert v["verdict"] == "inconclusive", v["reason"]
    cannot = {c["name"]: c for c in v["checks"] if c["passed"] is None}
    assert set(cannot) == {_check(v, "Michel's", "prunes")["name"], _check(v, "unnormalised", "prunes")["name"],
                           _check(v, "L0")["name"]}, set(cannot)
    assert all(c["passed"] is True for c in v["checks"] if c["name"] not in cannot)
    for c in cannot.values():
        assert "no size this corpus allows" in c["undecided_because"] and "1,341" in c["undecided_because"], c
        pw = c["power"]
        assert pw["unit"] == "test sentences" and pw["n"] == 250 and pw["available"] == _N_TEST
        assert pw["zero_drop_n"] > 30 * _N_TEST and (pw["n_needed"] is None or pw["n_needed"] > _N_TEST), pw
    # the same rows on the reference's schema (tests/controls/head_pruning.py) say the same
    ref, controls, folder = _reference_rows()
    import test_judge_contract as contract

    v = contract._judge("head_pruning", folder, controls.paper_true_at_default(ref), controlled=True)
    assert v["verdict"] == "inconclusive"
    assert all(c["passed"] is None and "no size this corpus allows" in c["undecided_because"]
               for c in v["checks"] if c["headline"])
    # a loss is decided at the default precision: the headline can fail
    v = judge_rows(CLAIM, _learned(_rows(curves=(early_loss_curve, default_curve))), params=p)
    assert v["verdict"] == "not_reproduced" and _check(v, "Michel's", "prunes")["passed"] is False


@pytest.mark.parametrize("total, at", [(96, 19), (48, 10), (24, 5)])
def test_michels_20_percent_is_the_grid_level_nearest_it(total, at):
    """Michel's own 96-head grid prunes 10, 19, 29, ... heads: 19/96 = 19.8% is his 20%. Paper-true rows (lossless
    through it, lossy from the next level on) hold; a lossy level at it fails; a drop interval touching the tolerance
    there decides nothing (at the judge's own arithmetic)."""
    from repro.judges import head_pruning as hp  # local: the judge's private rule, read by this test only

    eq = hp._Equivalence(0.01, 20_000, 0.15)
    levels = pruning_levels(total, 0.1, 0.9)

    def curve(state):
        rows = [{"metric": "pruning_bleu", "value": _BASE, "sweep": {"pruned": 0, "fraction": 0.0, "p_value": 1.0}}]
        for n in levels:
            d, p = state(n)
            rows.append({"metric": "pruning_bleu", "value": _BASE + d,
                         "sweep": {"pruned": n, "fraction": n / total, "p_value": p}})
        return hp._levels(rows, eq)

    assert hp._paper_level(curve(lambda n: LOSSLESS), 0.2) == at / total
    passed, _, ok, deciding = hp._prunable_decision(curve(lambda n: LOSSLESS if n <= at else LOSSY), 0.15)
    assert passed is True and ok == at / total and deciding[-1][0] == at / total
    passed, *_ = hp._prunable_decision(curve(lambda n: LOSSLESS if n < at else LOSSY), 0.15)
    assert passed is False
    passed, why, *_ = hp._prunable_decision(curve(lambda n: LOSSLESS if n < at else STRADDLE if n == at else LOSSY),
                                            0.15)
    assert passed is None and "straddles" in why


def test_ties_decide_nothing():
    """tests/controls/head_pruning.py's ties (the drop's interval at the level nearest Michel's 20% ends exactly on
    the tolerance; the gate exactly at its
    margin; pruned models equal to the unpruned one) leave the headline undecided: the verdict is inconclusive, no
    check fails on a tie."""
    import test_judge_contract as contract

    ref, controls, folder = _reference_rows()
    for i, rows in enumerate(controls.ties(ref)):
        v = contract._judge("head_pruning", folder, rows, controlled=True)
        assert v["verdict"] == "inconclusive", (i, v["reason"])
        assert any(c["passed"] is None for c in v["checks"] if c["headline"]), i
        assert not any(c["passed"] is False for c in v["checks"] if c["headline"]), i
    tie = controls.ties(ref)[0]
    v = contract._judge("head_pruning", folder, tie, controlled=True)
    assert "touches" in _check(v, "Michel's", "prunes")["undecided_because"]
    # the tie sits on the real grid: the level nearest 20% keeps its measured fraction (10 of 48, 19 of 96)
    fr = {r["sweep"]["fraction"] for r in tie if r["metric"] == "pruning_bleu"}
    assert 0.2 not in fr and fr == {r["sweep"]["fraction"] for r in ref if r["metric"] == "pruning_bleu"}
    # the random orders' interval edge exactly at the importance order's mean: undecided, not failed
    p = section("head_pruning", "default")
    from repro.intervals import sample_interval

    _, _, hi, _ = sample_interval([15.0, 14.0, 14.5])
    v = judge_rows(CLAIM, _learned(_rows(means=(hi, 20.0))), params=p)
    assert _check(v, "Michel's", "random")["passed"] is None
    # the minority count exactly on judge.minority_fraction (6 of 24 = 25%): undecided
    v = judge_rows(CLAIM, _learned(_rows(sig=6)), params=p)
    assert _check(v, "minority")["passed"] is None


def test_judge_null_data_never_reproduces():
    """Pruning changes nothing measurable (every order equal, no pruned model's change gives an interval, the gates
    keep every head)."""
    p = section("head_pruning", "default")
    flat = _rows(sig=0, up=0, means=(15.0, 15.0), rnd_mean=(15.0, 15.0, 15.0),
                 curves=(lambda fr: NO_INTERVAL, lambda fr: NO_INTERVAL), l0=((24, 24, 0.0, 1.0),),
                 l0_control=(0.0, 1.0), ablation={"encoder_self": [0.0] * 8, "cross": [0.0] * 8})
    v = judge_rows(CLAIM, _learned(flat), params=p)
    assert v["verdict"] in ("not_reproduced", "inconclusive")
    assert not any(c["passed"] for c in v["checks"] if c["headline"])
    assert judge_rows(CLAIM, _learned(_rows(), base=12.0), params=p)["verdict"] == "inconclusive"  # nothing learned


def test_judge_reads_its_thresholds_from_the_judge_section():
    """The judge: keys decide (config/claims/head_pruning.yaml), and the checks name the ones they decide with."""
    p = section("head_pruning", "default")
    T = config.thresholds(CLAIM, "default")
    assert set(T) == {"minority_fraction", "min_bleu_over_copy", "min_accuracy_over_majority"}
    good = judge_rows(CLAIM, _learned(_rows()), params=p)
    assert _check(good, "minority")["thresholds"] == {"minority_fraction": T["minority_fraction"]}
    # 2 of 24 significant after the correction (8%): more than a 5% minority
    v = judge_rows(CLAIM, _learned(_rows()), params=p, thresholds={**T, "minority_fraction": 0.05})
    assert _check(v, "minority")["passed"] is False and v["verdict"] == "partially", v["reason"]
    assert _check(v, "minority")["thresholds"] == {"minority_fraction": 0.05}
    # the unpruned model 18 BLEU above copying the source: a gate asking for 20 leaves every BLEU check undecided
    v = judge_rows(CLAIM, _learned(_rows()), params=p, thresholds={**T, "min_bleu_over_copy": 20.0})
    assert not v["gates"][0]["passed"] and v["verdict"] == "inconclusive"
    assert v["gates"][0]["thresholds"] == {"min_bleu_over_copy": 20.0}


def test_shared_bootstrap_equals_paired_bootstrap():
    """The measurement's bootstrap (resample counts and the reference's resampled BLEU computed once per run) gives
    repro.train.bleu.paired_bootstrap's numbers exactly, for a changing reference system too."""
    import numpy as np

    from repro.train.bleu import paired_bootstrap, sentence_stats

    rng = np.random.default_rng(0)
    words = "the a cat dog sat on mat house red blue".split()
    refs = [" ".join(rng.choice(words, 8)) for _ in range(60)]
    hyp = lambda: [" ".join(w if rng.random() > 0.3 else str(rng.choice(words)) for w in r.split()) for r in refs]
    a, b, c = (sentence_stats(hyp(), refs) for _ in range(3))
    shared = hp._SharedBootstrap()
    for x, y, n in ((a, b, 300), (a, c, 300), (b, c, 300), (a, b, 300), (a, b, 200)):
        assert shared(x, y, n, 0, 0.01) == paired_bootstrap(x, y, n, 0, 0.01)


_TIMED = ("time", "rate", "ratio_time")  # timings (stage seconds, examples/s, speed-ups): never the same twice


def _measured(rows: list[dict]) -> list[tuple]:
    """Every row but the timings and the decode count: (metric, sweep without seconds, value), in order."""
    return [(r["metric"], {k: v for k, v in r["sweep"].items() if k != "seconds"}, r["value"]) for r in rows
            if r["kind"] not in _TIMED and r["metric"] != "decode_calls"]


def _same_rows(a: list[dict], b: list[dict]) -> None:
    ma, mb = _measured(a), _measured(b)
    assert [(m, s) for m, s, _ in ma] == [(m, s) for m, s, _ in mb]  # the same rows in the same order
    for (m, s, x), (_, _, y) in zip(ma, mb):
        assert x == y or math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12), (m, s, x, y)
    timed = lambda rows: [(r["metric"], r["sweep"].get("stage"), r["sweep"].get("batch")) for r in rows
                          if r["kind"] in _TIMED and r["sweep"].get("stage") != "part_setup"]
    assert timed(a) == timed(b)  # the same timings too (a run that kept part jobs' groups adds their set-up's)


def _decodes(rows: list[dict]) -> dict:
    return next(r for r in rows if r["metric"] == "decode_calls")


def test_parts_give_the_rows_of_one_run(tiny_model, tmp_path):
    """The stage groups measured by part jobs (run_part) and then kept by run() give the rows of one run() alone, in
    the same order, with the same files; the decodes are summed (each part decodes the unpruned model once more);
    an interrupted run keeps the groups it recorded."""
    params = section("head_pruning", "tiny")
    params["model_dir"] = str(tiny_model)
    one, _ = hp.run(params, "tiny", tmp_path / "one")
    split = tmp_path / "split"
    assert hp.split_groups(2) == [["ablation", "pruning"], ["l0", "random_orders"]]
    for i in range(2):
        hp.run_part(params, "tiny", split, i, 2)
    assert sorted(f.name for f in (split / "parts").glob("*.rows.json")) == sorted(f"{g}.rows.json"
                                                                                  for g in hp.GROUPS)
    for name in ("ablation.json", "pruning_order.json"):
        (split / name).unlink()  # rewritten by run() from the parts' records
    two, _ = hp.run(params, "tiny", split)
    _same_rows(one, two)
    for name in ("ablation.json", "pruning_order.json"):
        assert (split / name).read_text() == (tmp_path / "one" / name).read_text()
    assert _decodes(two)["sweep"]["groups_kept"] == len(hp.GROUPS) and _decodes(one)["sweep"]["groups_kept"] == 0
    assert _decodes(two)["value"] == _decodes(one)["value"] + 2  # the two parts' own unpruned decodes
    jobs = {r["sweep"]["stage"]: r["sweep"]["job"] for r in two if r["metric"] == "stage_seconds"}
    assert jobs == {"baseline": "claim", "ablation": "part 0-of-2", "one_head": "part 0-of-2",
                    "pruning": "part 0-of-2", "throughput": "part 0-of-2", "l0": "part 1-of-2",
                    "random_orders": "part 1-of-2", "part_setup": "parts"}
    # a run interrupted after three groups (their records written) measures only the fourth again
    (tmp_path / "one" / "parts" / "l0.rows.json").unlink()
    again, _ = hp.run(params, "tiny", tmp_path / "one")
    _same_rows(one, again)
    assert _decodes(again)["sweep"]["groups_kept"] == len(hp.GROUPS) - 1


def test_parts_are_not_kept_for_other_parameters_or_code(tiny_model, tmp_path, monkeypatch):
    """A group recorded with other parameters, another model checkpoint or other measuring code is measured again
    (run() keeps groups by the same test: test_parts_give_the_rows_of_one_run)."""
    params = section("head_pruning", "tiny")
    params["model_dir"] = str(tiny_model)
    mine = ["l0", "random_orders"]  # part 1 of 2: the cheap groups at tiny scale
    assert hp.run_part(params, "tiny", tmp_path, 1, 2)["measured"] == mine
    assert hp.run_part(params, "tiny", tmp_path, 1, 2)["measured"] == []  # a rerun of the part keeps its groups
    changed = {**params, "bootstrap_seed": 1}
    assert hp.run_part(changed, "tiny", tmp_path, 1, 2)["measured"] == mine
    monkeypatch.setattr(hp, "file_sha256", lambda path: "another checkpoint")
    assert hp.run_part(changed, "tiny", tmp_path, 1, 2)["measured"] == mine
    monkeypatch.setattr(hp.provenance, "code_files", lambda claim: {"repro/claims/head_pruning.py": "changed"})
    assert hp.run_part(changed, "tiny", tmp_path, 1, 2)["measured"] == mine
    assert hp.run_part(changed, "tiny", tmp_path, 1, 2)["measured"] == []


def test_parts_split_and_mnli_parts_do_nothing(tmp_path):
    """Every group in exactly one part, whatever the count; with hf_model (the MNLI experiment) a part is a no-op
    (the claim job measures it all)."""
    for n in range(1, 7):
        parts = hp.split_groups(n)
        assert len(parts) == n and sorted(g for p in parts for g in p) == sorted(hp.GROUPS)
    assert sorted(g for gs in hp.GROUPS.values() for g in gs) == sorted(hp.STAGES[1:])
    assert hp.run_part({"hf_model": str(tmp_path / "bert")}, "tiny", tmp_path, 0, 2) == {"groups": []}
    assert not (tmp_path / "parts").exists()
