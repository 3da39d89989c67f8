"""C10 quantization (LLM.int8(), Dettmers et al. 2022; GPTQ, Frantar et al. 2023): a tiny end-to-end run on freshly
trained tiny artefacts (module and Snakemake), the outlier criteria and baselines on constructed data, and verdict
rules that flip when a number is wrong."""
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from repro.artefacts import ArtefactError
from repro import config
from repro.io import metric
from repro.claims import quantization as qz
from repro.claims._cli import judge_rows, run_and_judge

C = qz.CLAIM
ROOT = Path(__file__).resolve().parents[1]


# the 3+2-layer translation model and 3-layer LM of the layer_pruning tests (tests/ is on sys.path under pytest)
from test_claim_layer_pruning import tiny_models  # noqa: E402,F401
from repro.verdicts import Rows
from repro.report import headline


def test_tiny_run(tiny_models):
    out = tiny_models / "quantization"
    out.mkdir(exist_ok=True)
    params = config.section(C, "tiny")
    rows, verdict = run_and_judge(C, qz.run, params, "tiny", out)
    assert verdict["verdict"] == "not_applicable"
    meths = qz.methods(params)
    for m in ("lm", "translation"):
        ppl = Rows(rows).metric("valid_ppl").where(model=m)
        assert len(ppl) == len(meths) and all(r["value"] > 1 for r in ppl)
        assert len(Rows(rows).metric("bleu").where(model=m)) == (len(meths) if m == "translation" else 0)
        by = {(r["sweep"]["method"], r["sweep"].get("calibration_seed")): r["value"]
              for r in Rows(rows).metric("weight_bytes_vs_fp16").where(model=m)}
        assert by[("fp32", None)] == 2.0 and 0.5 < by[("llm_int8", None)] <= 0.5 + 2 / 32  # + fp32 scale per row
        assert by[("rtn_w4", None)] < 0.3 and by[("rtn_w3", None)] < by[("rtn_w4", None)]
        v8 = Rows(rows).metric("values_8bit_pct").where(model=m, method="llm_int8")
        assert len(v8) == 1 and 0 <= v8[0]["value"] <= 100
        n_lin = 6 * 3 if m == "lm" else 6 * 3 + 10 * 2  # encoder 3 blocks x 6, decoder 2 blocks x 10 (cross-attention)
        for split in ("calibration", "held_out"):  # GPTQ's own inputs, and validation sentences it never saw
            errs = Rows(rows).metric("layer_rel_error").where(model=m, method="gptq_w3", quantizer="gptq", split=split)
            assert len(errs) == n_lin * len(params["calibration"]["seeds"])
            assert all(math.isfinite(r["value"]) and r["value"] >= 0 and r["sweep"]["tokens"] > 0 for r in errs)
        assert len(Rows(rows).metric("outlier_max_abs").where(model=m)) == (3 if m == "lm" else 5)
    assert json.loads((out / "outliers.json").read_text()).keys() == {"lm", "translation", qz.OUTLIER_MODEL}
    heads = [c for c in verdict["checks"] if c["headline"]]
    assert {c["name"].split(":")[1].strip()[:8] for c in heads} <= {"LLM.int8", "GPTQ's p"}
    # GPTQ vs RTN on the outlier copy (the other models' reported only); LLM.int8()'s equivalence where it can
    # discriminate (or, if nowhere, on every model)
    assert [c["name"].split(":")[0] for c in heads if "GPTQ" in c["name"]] == [qz.OUTLIER_MODEL]
    assert any("LLM.int8" in c["name"] for c in heads)
    assert {c["name"].split(":")[0] for c in verdict["checks"] if c.get("counts") is False
            and "GPTQ's perplexity" in c["name"]} == {"lm", "translation"}
    # the outlier copy: fp32, the int8 methods, RTN and GPTQ at outlier_copy.group_sizes and GPTQ's bits, on the
    # first outlier_copy.sentences, the same function in fp32
    cp = Rows(rows).where(model=qz.OUTLIER_MODEL)
    assert set(cp.metric("valid_ppl").sweep("method")) == {"fp32", "int8_absmax", "int8_vectorwise", "llm_int8",
                                                            "rtn_w4_g16", "rtn_w3_g16", "gptq_w4_g16", "gptq_w3_g16"}
    assert {(r["sweep"]["method"], r["sweep"]["versus"]) for r in cp.metric("paired_nll_diff")} >= {
        ("gptq_4bit", "rtn_4bit"), ("gptq_w3_g16", "rtn_w3_g16")}
    change = cp.metric("outlier_copy_fp32_change").first()
    assert change["value"] <= config.thresholds(C, "tiny")["copy_fp32_tol"]
    assert cp.metric("systematic_outlier_dims").first()["value"] >= 1
    assert {(r["sweep"]["method"], r["sweep"]["versus"]) for r in cp.metric("paired_nll_diff")} >= {
        ("llm_int8", "fp32"), ("int8_vectorwise", "fp32"), ("int8_vectorwise", "llm_int8")}
    # the evaluation's paired sampling error: one row per comparison, the valid sentences as units
    for m in ("lm", "translation"):
        paired = Rows(rows).metric("paired_nll_diff").where(model=m)  # the copy's scored sentences may differ
        assert {(r["sweep"]["method"], r["sweep"]["versus"]) for r in paired} >= {
            ("llm_int8", "fp32"), ("gptq_w4", "rtn_w4"), ("gptq_w3_g16", "rtn_w3_g16"), ("int8_absmax", "llm_int8")}
        n_valid = Rows(rows).metric("valid_ppl").where(model=m, method="fp32")[0]
        pooled = {(r["sweep"]["method"], r["sweep"]["versus"]): r for r in paired if r["sweep"].get("pooled")}
        assert set(pooled) == {("gptq_4bit", "rtn_4bit"), ("gptq_3bit", "rtn_3bit")}
        for (a, b), r in pooled.items():  # the mean of the settings' differences (equal token counts)
            settings = r["sweep"]["pooled"].split(",")
            assert settings == [f"gptq_w{a[5]}", f"gptq_w{a[5]}_g16"]
            per = [paired.where(method=g, versus=g.replace("gptq", "rtn")).first()["value"] for g in settings]
            assert r["value"] == pytest.approx(sum(per) / len(per), abs=1e-9)
        for r in paired.filter(lambda r: not r["sweep"].get("pooled")):
            # the validation sentences and the test sentences scored beside them (eval.ppl_test_sentences)
            assert r["n"] == params["eval"]["valid_sentences"] + params["eval"]["ppl_test_sentences"]
            assert r["sweep"]["units"] == "sentences"
            assert math.isfinite(r["spread"]) and r["spread"] >= 0
            # the difference is the difference of the two methods' validation NLLs (seed-mean for GPTQ)
            a = Rows(rows).metric("valid_nll").where(model=m, method=r["sweep"]["method"]).values()
            b = Rows(rows).metric("valid_nll").where(model=m, method=r["sweep"]["versus"]).values()
            assert r["value"] == pytest.approx(sum(a) / len(a) - sum(b) / len(b), abs=1e-9)
            assert r["sweep"]["seeds"] == len(a)
        assert n_valid["n"] > params["eval"]["valid_sentences"]  # tokens


def test_missing_models_name_the_key(tmp_path):
    params = config.section(C, "tiny")
    with pytest.raises(ArtefactError, match="quantization.lm_model"):
        qz.resolve_models(params, tmp_path / "quantization")
    with pytest.raises(ArtefactError, match="quantization.hf_model"):
        qz.resolve_models({**params, "hf_model": str(tmp_path)}, tmp_path / "quantization")


def test_methods_grid():
    p = config.section(C, "default")
    ms = qz.methods(p)
    names = [m["method"] for m in ms]
    assert names[:4] == ["fp32", "int8_absmax", "int8_vectorwise", "llm_int8"]
    assert {"rtn_w4", "rtn_w3", "rtn_w4_g64", "gptq_w4", "gptq_w3_g64"} <= set(names) and "rtn_w8" not in names
    assert min(p["calibration"]["seeds"]) >= 1000  # confirmation seeds (the plan lists 0-2 as spent)
    assert names.count("gptq_w3") == len(p["calibration"]["seeds"]) and names.count("rtn_w3") == 1


def test_emergence_criteria_on_constructed_counts():
    d = 16
    stats = {}
    for layer in range(4):
        hits = torch.zeros(d, dtype=torch.float64)
        hits[3] = 50 if layer < 2 else 0  # dim 3: large in 2 of 4 layers (50%), in half of the 100 tokens there
        hits[7] = 1  # dim 7: large in every layer but in 1% of tokens: not systematic (< 6%)
        stats[layer] = {"tokens": 100, "hits": hits, "max_abs": 9.0}
    em = qz.emergence(stats, 25, 6)
    assert em["dims"] == [3]
    assert em["layers_affected_pct"] == pytest.approx(50.0)
    assert em["seq_affected_pct"] == pytest.approx((50 + 50 + 0 + 0) / 4)
    assert em["dims_ge_threshold_per_layer"] == [2, 2, 1, 1]
    assert qz.emergence(stats, 75, 6)["dims"] == []


def test_unigram_baseline():
    from repro.data.batching import EncodedCorpus
    import numpy as np

    mk = lambda tg: EncodedCorpus([np.array([2])] * len(tg), [np.array(t) for t in tg], np.arange(len(tg)), 0, 1, 2,
                                  len(tg))
    train, valid = mk([[3, 3, 4]]), mk([[3]])
    # counts with add-one over vocab 5: [1, 1, 1+1(eos), 1+2, 1+1] -> p(3) = 3/9, p(eos) = 2/9
    assert qz.unigram_ppl(train, valid, 5) == pytest.approx(float(np.exp(-(np.log(3 / 9) + np.log(2 / 9)) / 2)))


# ------------------------------------------------------------------------------------------------ judge
PARAMS = {"int8": {"threshold": 6.0}, "eval": {"valid_sentences": 400},
          "calibration": {"sentences": 256, "seeds": [0, 1, 2]}}


def _rows(fp=40.0, llm=40.01, absmax=41.0, vw=40.01, rtn4=44.0, rtn3=80.0, gptq4=(41.0, 41.05, 40.98),
          gptq3=(48.0, 48.05, 47.98), unigram=400.0, dims=0, frac=100.0, bytes_=0.52, layer_gptq=0.01,
          eval_se=0.0005, paired=True, systematic=None):
    """Rows of one LM; ``eval_se``: the standard error (nats/token) over 400 validation sentences of every paired
    comparison (the paired_nll_diff rows; ``paired=False``: rows measured before they were recorded);
    ``systematic``: the outlier features meeting LLM.int8() Section 4.1's criteria (None: rows without the count)."""
    r = [metric(C, "unigram_ppl", unigram, model="lm"), metric(C, "model_parameters", 5.2e6, model="lm"),
         metric(C, "outlier_layers_affected", 0.0, model="lm"), metric(C, "outlier_seq_affected", 0.0, model="lm")]
    if systematic is not None:
        r += [metric(C, "systematic_outlier_dims", systematic, "dims", model="lm", d_model=256),
              metric(C, "outlier_max_abs", 9.0 if systematic else 5.0, "|x|", model="lm", layer=0)]
    ppl = {}
    for meth, fam, v in (("fp32", "fp32", fp), ("llm_int8", "int8", llm), ("int8_absmax", "int8", absmax),
                         ("int8_vectorwise", "int8", vw), ("rtn_w4", "rtn", rtn4), ("rtn_w3", "rtn", rtn3)):
        r.append(metric(C, "valid_ppl", v, model="lm", method=meth, family=fam, bits=4 if "4" in meth else 3))
        ppl[meth] = [v]
    for meth, bits, vs in (("gptq_w4", 4, gptq4), ("gptq_w3", 3, gptq3)):
        ppl[meth] = list(vs)
        for s, v in enumerate(vs):
            r.append(metric(C, "valid_ppl", v, model="lm", method=meth, family="gptq", bits=bits, calibration_seed=s))
            for layer in range(4):
                r.append(metric(C, "layer_rel_error", layer_gptq, model="lm", method=meth, quantizer="gptq",
                                layer=f"l{layer}", calibration_seed=s))
                r.append(metric(C, "layer_rel_error", 0.02, model="lm", method=meth, quantizer="rtn",
                                layer=f"l{layer}", calibration_seed=s))
    if paired:
        pooled = [(f"gptq_{b}bit", f"rtn_{b}bit", p[0]) for b, p in qz.pooled_pairs(list(ppl)).items()]
        for a, b, *one in qz.comparisons(list(ppl)) + pooled:  # one GPTQ setting per bit width: pooled = it
            x, y = (one[0] if one else (a, b))
            d = math.log(sum(ppl[x]) / len(ppl[x])) - math.log(ppl[y][0])
            r.append(metric(C, "paired_nll_diff", d, "nats/token", kind="statistic", spread=eval_se, n=400,
                            model="lm", method=a, versus=b, seeds=len(ppl[x]), units="sentences",
                            identical=ppl[x] == ppl[y]))
    r += [metric(C, "decomposed_dims", dims, model="lm", method="llm_int8"),
          metric(C, "values_8bit_pct", frac, model="lm", method="llm_int8"),
          metric(C, "weight_bytes_vs_fp16", bytes_, model="lm", method="llm_int8")]
    return r


def _status(rows, **thresholds):
    """The verdict with the default scale's judge: section, ``thresholds`` changed."""
    return judge_rows(C, rows, params=PARAMS, thresholds={**config.thresholds(C, "default"), **thresholds})


def _named(v, start):
    return next(c for c in v["checks"] if c["name"].split(": ", 1)[-1].startswith(start))


# outlier features of LLM.int8()'s size that break vector-wise int8 (+7.5%): its headline can discriminate
OUTLIERS = dict(dims=3, systematic=2, vw=43.0)


def test_judge_reproduced_and_flips():
    v = _status(_rows(**OUTLIERS))
    assert v["verdict"] == "reproduced", v["reason"]
    assert _named(v, "the outlier decomposition")["passed"] is True
    assert _named(v, "GPTQ's packed")["passed"] is None
    assert _named(v, "outlier features emerge")["passed"] is None
    # LLM.int8() loses 5%: a headline fails
    assert _status(_rows(llm=42.0, **OUTLIERS))["verdict"] == "not_reproduced"
    # GPTQ no better than RTN at 3 bits: the headline fails
    assert _status(_rows(gptq3=(81.6, 81.7, 81.5), **OUTLIERS))["verdict"] == "not_reproduced"
    # at 4 bits: the default scale's secondary (gptq_rtn_headline_bits [3]), the paper's headline ([3, 4])
    worse4 = _rows(gptq4=(44.5, 45.0, 44.8), **OUTLIERS)
    v = _status(worse4)
    assert v["verdict"] == "partially", v["reason"]
    four = _named(v, "GPTQ's perplexity is below RTN's at 4 bits")
    assert four["passed"] is False and not four["headline"] and four["thresholds"] == {"gptq_rtn_headline_bits": [3]}
    assert _named(v, "GPTQ's perplexity is below RTN's at 3 bits")["headline"]
    assert _status(worse4, gptq_rtn_headline_bits=[3, 4])["verdict"] == "not_reproduced"
    # GPTQ's seeds spread over RTN's number: undecided headline
    v = _status(_rows(gptq3=(70.0, 88.0, 71.0), **OUTLIERS))
    assert v["verdict"] == "inconclusive" and "calibration seeds" in v["reason"]
    # the same spread at 4 bits leaves the default's secondary undecided and decides nothing
    assert _status(_rows(gptq4=(40.0, 48.0, 41.0), **OUTLIERS))["verdict"] == "reproduced"
    # secondary failures: partially
    assert _status(_rows(bytes_=0.7, **OUTLIERS))["verdict"] == "partially"
    # the same 0.52 x fp16 bytes fail a tighter int8_bytes_max (the judge: section is read at judging time)
    v = _status(_rows(**OUTLIERS), int8_bytes_max=0.5)
    assert v["verdict"] == "partially" and _named(v, "LLM.int8() weights")["thresholds"] == {"int8_bytes_max": 0.5}
    # with no outlier dimension, the 8-bit share holds by construction: not applicable, never a pass
    assert _named(_status(_rows(frac=99.0)), "more than 99.9%")["passed"] is None
    # GPTQ's layer error is scored on its own calibration inputs: in-sample, undecided however it compares
    for err in (0.01, 0.03):
        c = _named(_status(_rows(layer_gptq=err)), "GPTQ's layer-wise")
        assert c["passed"] is None and "in-sample" in c["undecided_because"]
    # outliers present and the decomposition did not help
    assert _named(_status(_rows(dims=3, vw=39.0)), "the outlier decomposition")["passed"] is False


def test_judge_gates_on_a_model_that_did_not_learn():
    v = _status(_rows(unigram=60.0))
    assert v["verdict"] == "inconclusive"
    assert v["gates"] and v["gates"][0]["passed"] is False
    assert all(c["passed"] is None for c in v["checks"] if c["headline"])
    assert judge_rows(C, _rows(), scale="tiny", params=PARAMS)["verdict"] == "not_applicable"


def test_translation_gate_margin():
    """The translation model's gate: fp32 BLEU more than ``bleu_gate_margin`` above the copy baseline."""
    rows = _rows()
    tr = [{**r, "sweep": {**r["sweep"], "model": "translation"}} for r in rows]
    tr += [metric(C, "copy_bleu", 10.0, "BLEU", model="translation"),
           metric(C, "bleu", 15.0, "BLEU", model="translation", method="fp32")]
    gate = lambda v: next(g for g in v["gates"] if g["name"].startswith("translation: the fp32 model translates"))  # noqa: E731
    assert gate(_status(rows + tr))["passed"] is True
    v = _status(rows + tr, bleu_gate_margin=6.0)
    assert gate(v)["passed"] is False and v["verdict"] == "inconclusive"


def test_snakemake_claim_quantization_tiny(tiny_models, tmp_path):
    """snakemake claim_quantization at scale tiny on the fixture's models (given by path, so no shared artefact is
    trained here; tests/test_workflow.py builds them in its reproduce_all run): the claim, its page and plots."""
    models = tiny_models / "_models"
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "claim_quantization", "--cores", "2",
           "--directory", str(tmp_path), "--config", "scale=tiny", "hardware=test-hw",
           f"overrides={{quantization: {{models: [lm], lm_model: {models / 'lm'}}}}}"]  # the LM only: fast
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "lm_train" not in r.stderr and "translation_train" not in r.stderr
    res = tmp_path / "results/test-hw/tiny/quantization"
    assert json.loads((res / "verdict.json").read_text())["verdict"] == "not_applicable"
    page = (tmp_path / "reports/test-hw/tiny/quantization.md").read_text()
    assert "LLM.int8()" in page
    assert list((tmp_path / "reports/test-hw/tiny/quantization").glob("*.png"))


def test_judge_on_null_data():
    """Every method scoring like fp32 (nothing quantized, or quantization without effect) cannot show GPTQ beating
    RTN (a tie: undecided, never a pass); a model that learned nothing leaves the headlines undecided."""
    same = _rows(llm=40.0, absmax=40.0, vw=40.0, rtn4=40.0, rtn3=40.0, gptq4=(40.0,) * 3, gptq3=(40.0,) * 3,
                 layer_gptq=0.02)
    v = _status(same)
    assert v["verdict"] not in ("reproduced", "partially")
    assert _named(v, "GPTQ's perplexity")["passed"] is None
    assert _named(v, "GPTQ's layer-wise")["passed"] is None  # every case a tie: nothing to count
    noise = _rows(unigram=41.0, llm=39.0, rtn4=38.0, gptq4=(43.0, 37.0, 40.0))
    assert _status(noise)["verdict"] == "inconclusive"


def test_gptq_vs_rtn_decides_on_both_sources():
    """GPTQ's win over RTN is decided on an interval holding the calibration seeds' spread and the evaluation
    tokens' paired sampling error: tight seeds do not decide when the evaluation sentences cannot tell the two
    apart, and rows without the paired losses decide nothing."""
    tight = dict(gptq4=(43.90, 43.91, 43.89), rtn4=44.0)  # -0.23% with a seed spread of 0.02%
    four = "GPTQ's perplexity is below RTN's at 4"
    assert _named(_status(_rows(**tight, eval_se=0.0002)), four)["passed"] is True
    c = _named(_status(_rows(**tight, eval_se=0.002)), four)
    assert c["passed"] is None and "evaluation sentences" in c["undecided_because"]
    # the seeds would decide at any count, the evaluation sentences at about 8x as many: GPTQ - RTN = -0.2275%, its
    # evaluation half-width 0.3928% over 400 sentences and its seeds' 0.02578% (no sentence count narrows that);
    # at 90% power the half-width may take 1.96 / (1.96 + 1.2816) = 0.6046 of the 0.2275% gap, so
    # n = 400 x 0.3928^2 / ((0.6046 x 0.2275)^2 - 0.02578^2) ~ 3,370 (the 50% size, with the whole gap: ~1,200)
    assert c["power"]["unit"] == "evaluation sentences" and c["power"]["n"] == 400
    assert c["power"]["n_needed"] == pytest.approx(400 * 0.3928 ** 2 / ((0.6046 * 0.2275) ** 2 - 0.02578 ** 2),
                                                   rel=0.01)
    c = _named(_status(_rows(**tight, paired=False)), four)
    assert c["passed"] is None and "paired per-sentence losses" in c["undecided_because"]
    # a wide seed spread: more seeds would decide, and the power table says how many
    c = _named(_status(_rows(gptq4=(43.3, 44.1, 43.5), eval_se=0.0002)), four)
    assert c["passed"] is None and c["power"]["unit"] == "calibration seeds"
    assert c["power"]["n"] == 3 and c["power"]["n_needed"] > 3
    # decided either way: GPTQ above RTN by more than both sources
    assert _named(_status(_rows(gptq4=(44.5, 44.6, 44.55))), four)["passed"] is False


def test_ties_are_undecided():
    """Data exactly on a threshold decides nothing: GPTQ equal to RTN at every seed, LLM.int8() exactly on the
    equivalence tolerance, an exact tie in every layer error, LLM.int8()'s bytes on the bound."""
    from repro import registry
    tol = registry.published(C, "int8_ppl_equivalence_tol")["value"] / 100
    v = _status(_rows(llm=40.0 * (1 + tol), gptq4=(44.0,) * 3, rtn3=48.0, gptq3=(47.9, 48.0, 48.1 + 1e-9),
                      layer_gptq=0.02, bytes_=0.55, eval_se=0.0))
    assert v["verdict"] == "inconclusive", v["reason"]
    assert all(c["passed"] is None for c in v["checks"] if c["headline"])
    assert _named(v, "GPTQ's layer-wise")["passed"] is None
    assert _named(v, "LLM.int8() weights")["passed"] is None
    gptq = _named(v, "GPTQ's perplexity is below RTN's at 4")
    assert gptq["power"]["n_needed"] is None and "tie" in gptq["power"]["why"]


def test_tie_controls_leave_the_headlines_undecided():
    """tests/controls/quantization.py's ties on the committed reference rows: inconclusive, each headline undecided
    (not failed)."""
    from test_judge_contract import _controls, _judge, _reference, _rows as ref_rows

    folder = _reference(C)
    for rows in _controls(C).ties(ref_rows(folder)):
        v = _judge(C, folder, rows, controlled=True)
        assert v["verdict"] == "inconclusive", v["reason"]
        assert all(c["passed"] is None for c in v["checks"] if c["headline"])


def _int8_head(v):
    return next(c for c in v["checks"] if c["headline"] and "int8" in c["name"])


@pytest.mark.parametrize("rows", [dict(dims=0), dict(dims=0, systematic=0), dict(dims=1, systematic=0, absmax=40.014)],
                         ids=["no-decomposed-dims", "no-outlier-features", "one-isolated-pair"])
def test_llm_int8_without_outlier_features_is_not_applicable(rows):
    """Without outlier features of the paper's size (Section 4.1's systematic dimensions; rows without that count:
    no dimension decomposed) vector-wise int8 keeps perplexity too (here LLM.int8() equals it, absmax +0.01%), so
    "LLM.int8() leaves perplexity unchanged" cannot discriminate: not applicable, with that reason, never held; the
    change and its interval are still reported, against the suite's +-1% (never shown as the paper's). With GPTQ
    holding, the claim is inconclusive, not reproduced. The decomposition check stays undecided too."""
    v = _status(_rows(**rows))
    head = _int8_head(v)
    assert head["name"] == "lm: LLM.int8() leaves perplexity unchanged" and head["passed"] is None
    assert head["undecided_because"].startswith("not applicable") and "cannot discriminate" in head["undecided_because"]
    assert head["numbers"]["criterion"] == "suite" and head["numbers"]["rule"] == "within +-1%"
    assert "suite" in head["expected"] and head["numbers"]["lo"] is not None and "power" not in head
    assert headline.compare_text(head["numbers"]).endswith("suite: within +-1%")
    assert _named(v, "GPTQ's perplexity")["passed"] is True and v["verdict"] == "inconclusive", v["reason"]
    assert _named(v, "the outlier decomposition")["passed"] is None


def test_llm_int8_with_outlier_features_is_judged():
    """Outlier features present: vector-wise int8 degrades (+7.5%) where LLM.int8() does not (+0.025%): the
    headline holds inside the suite's +-1% and the decomposition is credited; the same rows with LLM.int8() 5%
    worse fail the headline. Without the outlier count the same numbers are not applicable (the rows decide)."""
    v = _status(_rows(**OUTLIERS))
    head = _int8_head(v)
    assert head["name"] == "lm: LLM.int8() leaves perplexity unchanged" and head["passed"] is True
    assert head["numbers"]["criterion"] == "suite" and v["verdict"] == "reproduced", v["reason"]
    assert _named(v, "the outlier decomposition")["passed"] is True
    assert _int8_head(_status(_rows(llm=42.0, **OUTLIERS)))["passed"] is False
    assert _int8_head(_status(_rows(vw=43.0, dims=3, systematic=0)))["passed"] is None


def test_absmax_degrading_more_is_shown():
    """With outlier features, tensor-wise absmax losing 10% where LLM.int8() keeps perplexity: the absmax check
    holds and the page's measured text shows both perplexities; absmax within the noise of LLM.int8() is undecided."""
    c = _named(_status(_rows(absmax=44.0, **OUTLIERS)), "tensor-wise absmax")
    assert c["passed"] is True and "absmax 44.000 vs LLM.int8() 40.010" in c["measured"]
    assert _named(_status(_rows(absmax=40.01, **OUTLIERS)), "tensor-wise absmax")["passed"] is None


def test_identical_losses_with_outlier_features_cannot_discriminate():
    """Outlier features counted but vector-wise int8 keeps perplexity (here LLM.int8() and vector-wise int8 gave
    identical losses): the equivalence cannot discriminate, so it is not applicable, and the decomposition check,
    one measurement counted once, is not applicable either."""
    v = _status(_rows(dims=3, systematic=2))  # vw = llm = 40.01
    head = _int8_head(v)
    assert head["passed"] is None and "does not measurably degrade" in head["undecided_because"]
    assert head["undecided_because"].startswith("not applicable")
    dec = _named(v, "the outlier decomposition")
    assert dec["passed"] is None and "one measurement" in dec["undecided_because"]


def test_paired_diff_is_the_ratio_estimator():
    """paired_diff: D = sum(dL) / sum(w) and its delta-method standard error over units; identical losses flagged."""
    import numpy as np

    rng = np.random.default_rng(0)
    w = rng.integers(5, 30, size=200)
    la = rng.gamma(2.0, 2.0, size=200) * w
    lb = la + rng.normal(0.05, 0.5, size=200) * w
    p = qz.paired_diff((la, w), (lb, w))
    assert p["diff"] == pytest.approx((la.sum() - lb.sum()) / w.sum())
    r = (la - lb) - p["diff"] * w
    assert p["se"] == pytest.approx(np.std(r, ddof=1) * np.sqrt(200) / w.sum())
    assert p["units"] == 200 and not p["identical"]
    assert qz.paired_diff((la, w), (la.copy(), w))["identical"]
    with pytest.raises(qz.QuantizationError):
        qz.paired_diff((la, w), (lb[:-1], w[:-1]))


def test_deterministic_methods_have_their_own_sentence_noise():
    """LLM.int8(), absmax and vector-wise int8 are deterministic: their intervals are the evaluation sentences'
    paired error (1.96 x se), whatever GPTQ's calibration seeds spread; GPTQ's interval holds both sources."""
    tight, wide = (_status(_rows(gptq4=g, eval_se=0.00009, **OUTLIERS)) for g in ((41.0, 41.05, 40.98),
                                                                                   (38.0, 44.0, 41.0)))
    for v in (tight, wide):
        n = _int8_head(v)["numbers"]
        d = math.log(40.01 / 40.0)
        assert n["lo"] == pytest.approx(100 * (math.exp(d - 1.96 * 0.00009) - 1), rel=1e-3)
        assert n["hi"] == pytest.approx(100 * (math.exp(d + 1.96 * 0.00009) - 1), rel=1e-3)
        assert "deterministic" in _int8_head(v)["interval"] and "seed" not in _int8_head(v)["interval"]
    assert _int8_head(tight)["numbers"] == _int8_head(wide)["numbers"]
    assert _named(tight, "tensor-wise absmax")["interval"] == _named(wide, "tensor-wise absmax")["interval"]
    # GPTQ's own interval widens with its seeds' spread
    g = [_named(v, "GPTQ 4-bit loses")["interval"] for v in (tight, wide)]
    assert g[0] != g[1]


def test_outlier_copy_gate_and_headline_moves_to_the_copy():
    """With the outlier copy measured (model lm_outliers), LLM.int8()'s equivalence is the headline there and the
    LM's own (no outliers) is reported as not applicable, not a headline; a copy whose fp32 differs from the LM's
    beyond float rounding is gated (its checks undecided)."""
    plain = _rows()
    cp = [{**r, "sweep": {**r["sweep"], "model": "lm_outliers"}} for r in _rows(**OUTLIERS)
          if r["sweep"].get("family") not in ("gptq", "rtn") and r["metric"] != "paired_nll_diff"
          or r["metric"] == "paired_nll_diff" and "gptq" not in r["sweep"]["method"]]
    ok = metric(C, "outlier_copy_fp32_change", 2e-6, "nats/token", model="lm_outliers", n=400, dims="1,2", scale=20.0)
    v = _status(plain + cp + [ok])
    heads = {c["name"] for c in v["checks"] if c["headline"]}
    assert "lm_outliers: LLM.int8() leaves perplexity unchanged" in heads
    assert "lm: LLM.int8() leaves perplexity unchanged" not in heads
    assert v["verdict"] == "reproduced", v["reason"]
    share = next(c for c in v["checks"] if c["name"].startswith("lm_outliers: more than"))
    assert share["passed"] is None and "by construction" in share["undecided_because"]
    bad = {**ok, "value": 0.01}
    v = _status(plain + cp + [bad])
    assert _int8_head(v)["passed"] is None and v["verdict"] == "inconclusive"


def test_gptq_vs_rtn_headline_pools_the_group_settings():
    """The headline compares GPTQ and RTN per bit width, pooled over the group settings (GPTQ Tables 3-5): a
    setting that ties on its own leaves the per-setting check undecided while the bit width's pooled interval,
    from the per-seed means and the pooled paired row, decides; a pooled difference above 0 fails the headline."""
    def rows(g4, g4b, rtn4b=44.2, se=0.0003):
        r = [x for x in _rows(gptq4=g4, eval_se=se) if not (x["metric"] == "paired_nll_diff"
                                                            and x["sweep"]["method"] == "gptq_4bit")]
        for s, v in enumerate(g4b):
            r.append(metric(C, "valid_ppl", v, model="lm", method="gptq_w4_g64", family="gptq", bits=4,
                            calibration_seed=s))
        r.append(metric(C, "valid_ppl", rtn4b, model="lm", method="rtn_w4_g64", family="rtn", bits=4))
        d_b = math.log(sum(g4b) / 3) - math.log(rtn4b)
        r.append(metric(C, "paired_nll_diff", d_b, "nats/token", spread=se, n=400, model="lm", method="gptq_w4_g64",
                        versus="rtn_w4_g64", seeds=3, units="sentences", identical=False))
        d_a = math.log(sum(g4) / 3) - math.log(44.0)
        r.append(metric(C, "paired_nll_diff", (d_a + d_b) / 2, "nats/token", spread=se * 0.8, n=400, model="lm",
                        method="gptq_4bit", versus="rtn_4bit", seeds=3, units="sentences", identical=False,
                        pooled="gptq_w4,gptq_w4_g64"))
        return r

    both_bits = dict(gptq_rtn_headline_bits=[3, 4])  # the paper's headline bit widths
    v = _status(rows(g4=(43.99, 44.01, 44.0), g4b=(43.70, 43.72, 43.71)), **both_bits)  # w4 ties; w4_g64 -1.1%
    head, each = _named(v, "GPTQ's perplexity is below RTN's at 3"), _named(v, "GPTQ's perplexity is below RTN's in")
    assert head["headline"] and not each["headline"]
    assert head["passed"] is True and each["passed"] is None
    assert "4-bit" in head["interval"] and head["numbers"]["rule"] == "< 0 at every bit width"
    assert _named(_status(rows(g4=(44.6, 44.7, 44.65), g4b=(44.5, 44.4, 44.45)), **both_bits),
                  "GPTQ's perplexity is below RTN's at 3")["passed"] is False


def _copy_rows(**kw):
    """:func:`_rows` as the LM's outlier copy (model lm_outliers) with the gate's fp32 row: the model GPTQ against
    RTN is decided on when it has GPTQ rows."""
    return [{**r, "sweep": {**r["sweep"], "model": qz.OUTLIER_MODEL}} for r in _rows(**kw)] + [
        metric(C, "outlier_copy_fp32_change", 2e-6, "nats/token", model=qz.OUTLIER_MODEL, n=400, dims="1,2",
               scale=40.0)]


def test_gptq_vs_rtn_headline_moves_to_the_copy():
    """With GPTQ and RTN measured on the outlier copy, GPTQ vs RTN is the headline there and the plain LM's
    comparison is reported only (counts=False, never a headline): the plain LM's tie leaves the claim reproduced,
    its reversal (GPTQ 2% worse than RTN) changes nothing, and the copy's reversal fails the claim. With one setting
    per bit width the per-setting check repeats the headline's intervals, so it is left out."""
    tie = dict(rtn4=41.0, gptq4=(40.99, 41.0, 41.01), gptq3=(79.99, 80.0, 80.01))
    v = _status(_rows(**tie) + _copy_rows(**OUTLIERS))
    heads = {c["name"] for c in v["checks"] if c["headline"]}
    assert "lm_outliers: GPTQ's perplexity is below RTN's at 3 bits" in heads
    plain = next(c for c in v["checks"] if c["name"] == "lm: GPTQ's perplexity is below RTN's at 3 bits")
    assert not plain["headline"] and plain.get("counts") is False and "reported only" in plain["expected"]
    assert v["verdict"] == "reproduced", v["reason"]
    assert not [c for c in v["checks"] if "in every setting" in c["name"]]
    worse = dict(rtn4=41.0, gptq4=(41.9, 41.8, 41.85), gptq3=(81.6, 81.7, 81.5))
    v = _status(_rows(**worse) + _copy_rows(**OUTLIERS))
    assert next(c for c in v["checks"] if c["name"].startswith("lm: GPTQ's perplexity"))["passed"] is False
    assert v["verdict"] == "reproduced", v["reason"]
    v = _status(_rows(**OUTLIERS) + _copy_rows(**worse, **OUTLIERS))
    assert v["verdict"] == "not_reproduced", v["reason"]
    # without the copy's GPTQ rows (the design before) the plain LM's comparison is the headline, as it was
    copy_int8 = [r for r in _copy_rows(**OUTLIERS) if r["sweep"].get("family") not in ("gptq", "rtn")
                 and not (r["metric"] == "paired_nll_diff" and "gptq" in r["sweep"]["method"])]
    v = _status(_rows(**worse) + copy_int8)
    assert _named(v, "GPTQ's perplexity is below RTN's at 3")["headline"] and v["verdict"] == "not_reproduced"


def test_controls_on_rows_of_the_copy_design():
    """tests/controls/quantization.py on rows with GPTQ and RTN on the outlier copy (the default's design; the
    committed references predate it): paper-false and the null never reproduce, ties leave the headlines undecided,
    paper-true and the rows as measured reproduce."""
    from controls.quantization import paper_false, paper_true, ties
    from test_judge_contract import null

    rows = _rows(**OUTLIERS) + _copy_rows(**OUTLIERS)
    flat = [{**r, **{f"sweep.{k}": v for k, v in r["sweep"].items()}} for r in rows]
    assert _status(rows)["verdict"] == "reproduced"
    assert _status(paper_false(flat))["verdict"] == "not_reproduced"
    assert _status(paper_true(flat))["verdict"] == "reproduced"
    assert _status(null(flat))["verdict"] not in ("reproduced", "partially")
    for t in ties(flat):
        v = _status(t)
        assert v["verdict"] == "inconclusive" and all(c["passed"] is None for c in v["checks"] if c["headline"]), \
            v["reason"]


def test_copy_methods_grid():
    """The outlier copy's methods: fp32, the int8 methods, and RTN and GPTQ at outlier_copy.group_sizes (RTN at
    GPTQ's bits only); a group setting the sections do not list is refused naming the key; without rtn and gptq
    in outlier_copy.methods the copy measures fp32 and int8 only (the design before)."""
    default = config.section(C, "default")
    assert {m["family"] for m in qz.copy_methods(default)} == {"fp32", "int8"}  # the default's copy: int8 only
    p = {**default, "outlier_copy": {**default["outlier_copy"], "methods": ["int8", "rtn", "gptq"]}}
    names = [m["method"] for m in qz.copy_methods(p)]
    assert set(names) == {"fp32", "int8_absmax", "int8_vectorwise", "llm_int8", "rtn_w4_g64", "rtn_w3_g64",
                          "gptq_w4_g64", "gptq_w3_g64"}
    assert names.count("gptq_w4_g64") == len(p["calibration"]["seeds"])
    bad = {**p, "outlier_copy": {**p["outlier_copy"], "group_sizes": [32]}}
    with pytest.raises(qz.QuantizationError, match="outlier_copy.group_sizes"):
        qz.copy_methods(bad)
    old = {**p, "outlier_copy": {**p["outlier_copy"], "methods": ["int8"]}}
    assert {m["family"] for m in qz.copy_methods(old)} == {"fp32", "int8"}
