"""C5 head_pruning, Michel et al.'s BERT experiment (repro.claims._heads_mnli): a tiny Hugging Face
BertForSequenceClassification trained here on an MNLI-shaped task (transformers as the test-only reference), read
back through the suite's import, scored, pruned and judged; the judge's rules on constructed rows (paper-true,
null, paper-false, ties); the statistics; and bad input failing with the key named."""
from __future__ import annotations

import json
import random
import shutil

import numpy as np
import pytest
import torch

from repro.bench.fingerprint import fingerprint
from repro.claims import _heads_mnli as mn
from repro.claims import head_pruning as hp
from repro.claims._cli import judge_rows, run_and_judge
from repro import config
from repro.config import ConfigError, needed, section, workflow_spec
from repro.errors import ArtefactError
from repro.io import metric, write_results
from repro.report.pages import claim_page
from repro.verdicts import Rows

transformers = pytest.importorskip("transformers")

WORDS = [f"w{i}" for i in range(40)]
KEY = {"yes": "entailment", "no": "contradiction", "maybe": "neutral"}
ID2LABEL = {0: "contradiction", 1: "entailment", 2: "neutral"}  # not the data's order: read from config.json


def _pairs(n: int, seed: int) -> list[tuple[str, str, str]]:
    """Premise: random words; hypothesis: a keyword that decides the label, then two random words."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.choice(list(KEY))
        out.append((" ".join(rng.choices(WORDS, k=rng.randint(3, 8))), f"{k} " + " ".join(rng.choices(WORDS, k=2)),
                    KEY[k]))
    return out


def _write_tsv(path, pairs, extra_unlabelled: int = 0):
    lines = ["index\tgenre\tsentence1\tsentence2\tgold_label"]
    lines += [f"{i}\tfiction\t{a}\t{b}\t{y}" for i, (a, b, y) in enumerate(pairs)]
    lines += [f"x{i}\tfiction\tw1 w2\tyes w3\t-" for i in range(extra_unlabelled)]  # no gold label: left out
    path.write_text("\n".join(lines) + "\n")
    return path


def _bert_folder(root, train_steps: int, seed: int = 0):
    """A 2-layer, 4-head BERT classifier (trained ``train_steps`` Adam steps on the keyword task) with its
    tokenizer, as save_pretrained writes them."""
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *KEY, *WORDS]
    root.mkdir(parents=True, exist_ok=True)
    (root / "vocab.txt").write_text("\n".join(vocab) + "\n")
    import tokenizers  # comes with transformers

    wordpiece = tokenizers.BertWordPieceTokenizer(str(root / "vocab.txt"), lowercase=True)
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=wordpiece._tokenizer, unk_token="[UNK]",
                                               pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
                                               mask_token="[MASK]")
    cfg = transformers.BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=64, max_position_embeddings=64, type_vocab_size=2, num_labels=3,
                                  id2label=ID2LABEL, label2id={v: k for k, v in ID2LABEL.items()},
                                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(seed)
    model = transformers.BertForSequenceClassification(cfg)
    if train_steps:
        data = _pairs(512, seed + 100)
        opt = torch.optim.Adam(model.parameters(), lr=2e-3)
        model.train()
        for step in range(train_steps):
            batch = [data[(step * 32 + i) % len(data)] for i in range(32)]
            enc = tok([a for a, _, _ in batch], [b for _, b, _ in batch], padding=True, return_tensors="pt")
            labels = torch.tensor([cfg.label2id[y] for _, _, y in batch])
            loss = model(**enc, labels=labels).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval().save_pretrained(root, safe_serialization=True)
    tok.save_pretrained(root)
    return root, model, tok


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("mnli")
    folder, model, tok = _bert_folder(root / "bert", train_steps=120)
    data = _write_tsv(root / "dev_matched.tsv", _pairs(260, 7), extra_unlabelled=3)
    return folder, model, tok, data


def _params(folder, data, **mnli) -> dict:
    p = section("head_pruning", "tiny")
    p.update(hf_model=str(folder), mnli_path=str(data))
    p["mnli"] = {**p["mnli"], "importance_examples": 40, "eval_examples": None, "batch_size": 16, **mnli}
    p["pruning"] = {**p["pruning"], "step_fraction": 0.25, "max_fraction": 0.75, "random_seeds": [0, 1]}
    p["throughput"] = {**p["throughput"], "batch_sizes": [1, 4], "reps": 2, "warmup": 0, "min_seconds": 0.0}
    p["bootstrap_samples"] = 200
    return p


def test_accuracy_matches_transformers_on_the_same_pairs(trained):
    """The suite's import, pair tokenization (token types, [CLS]/[SEP]) and label mapping give the same
    predictions as transformers' own model and tokenizer, example by example."""
    folder, model, tok, data = trained
    S = mn.MnliSetup(_params(folder, data))
    pairs = mn.read_pairs(data)
    assert len(pairs.label) == 260  # the 3 rows without a gold label are left out
    _, imp = mn.split(260, None, 40, 0)
    ev = sorted(set(range(260)) - set(imp))
    enc = tok([pairs.premise[i] for i in ev], [pairs.hypothesis[i] for i in ev], padding=True, truncation=True,
              max_length=128, return_tensors="pt")
    with torch.no_grad():
        pred = model(**enc).logits.argmax(-1).numpy()
    want = pred == np.asarray([model.config.label2id[pairs.label[i]] for i in ev])
    np.testing.assert_array_equal(S.correct(), want)
    assert want.mean() > 0.9  # the keyword task was learned
    scores = mn.importance(S, [], normalize=True)  # the shared head_importance, with the classifier's loss
    assert len(scores) == 8 and all(v >= 0 for v in scores.values())
    assert not S.model.training and not S.view.training  # scoring leaves dropout off for the evaluations
    # a folder with only vocab.txt (older checkpoints) is read as BERT WordPiece: the same predictions
    only_vocab = folder.parent / "vocab_only"
    shutil.copytree(folder, only_vocab)
    (only_vocab / "tokenizer.json").unlink()
    np.testing.assert_array_equal(mn.MnliSetup(_params(only_vocab, data)).correct(), want)


def test_the_claim_runs_on_a_bert_folder_and_judges_it(trained, tmp_path):
    folder, _, _, data = trained
    params = _params(folder, data)
    rows, v = run_and_judge(hp.CLAIM, hp.run, params, "default", tmp_path)
    R = Rows(rows)
    assert v["gates"] and v["gates"][0]["passed"], v["gates"]
    levels = [0] + hp.pruning_levels(8, 0.25, 0.75)
    for order in ("importance", "importance_raw"):
        curve = sorted(R.metric("mnli_pruning_accuracy").where(order=order), key=lambda r: r["sweep"]["pruned"])
        assert [r["sweep"]["pruned"] for r in curve] == levels
        assert all(r["sweep"]["lo"] <= r["sweep"]["delta"] + 1.5 and r["sweep"]["delta"] - 1.5 <= r["sweep"]["hi"]
                   for r in curve[1:])
    assert len(R.metric("mnli_ablation_delta")) == 8 and len(R.metric("mnli_one_head_delta")) == 2
    assert {r["sweep"]["batch"] for r in R.metric("speedup")} == {1, 4}
    names = {c["name"]: c for c in v["checks"]}
    head = [c for c in v["checks"] if c["headline"]]
    assert len(head) == 1 and "40% of BERT's heads" in head[0]["name"]
    assert head[0]["numbers"]["criterion"] == "suite" and "up to 40%" in head[0]["numbers"]["rule"]
    # Michel's protocol as published: his normalised order is the headline at 4 heads per layer too; the
    # unnormalised order is a secondary check beside it
    assert "Michel's l2-per-layer" in head[0]["name"]
    raw = [c for c in v["checks"] if "unnormalised" in c["name"] and "prune" in c["name"]]
    assert len(raw) == 1 and not raw[0]["headline"]
    assert not any("scale artefact" in (c.get("undecided_because") or "") for c in v["checks"])
    speed = names["the pruned model's speed-up grows with batch size"]
    assert speed["passed"] is None and "CPU stand-in" in speed["undecided_because"]
    assert v["verdict"] in ("reproduced", "partially", "not_reproduced", "inconclusive")
    order = json.loads((tmp_path / "pruning_order.json").read_text())
    assert set(order) == {"importance", "importance_raw"} and len(order["importance"]) == 6
    # at the tiny scale no verdict is claimed
    assert judge_rows(hp.CLAIM, rows, scale="tiny", params=params)["verdict"] == "not_applicable"
    # the claim page renders the BERT rows: the headline table and the reason first, the MNLI pruning curve among the
    # figures
    write_results(tmp_path / "res", fingerprint=fingerprint(), claim="head_pruning", scale="default", metrics=rows,
                  verdict=v, config=params)
    page = claim_page("head_pruning", tmp_path / "res", tmp_path / "page.md", tmp_path / "figures")
    text = page.read_text()
    assert "40% of BERT's heads" in text.split("\n## Checks")[0] and "mnli_pruning_curve.png" in text


def test_an_untrained_bert_is_gated(tmp_path):
    """The null control of the real path: a random classifier learned nothing, so no check is decided."""
    folder, _, _ = _bert_folder(tmp_path / "random", train_steps=0, seed=3)
    data = _write_tsv(tmp_path / "dev.tsv", _pairs(200, 8))
    params = _params(folder, data)
    params["one_head"] = "none"
    rows, v = run_and_judge(hp.CLAIM, hp.run, params, "default", tmp_path / "out")
    assert v["verdict"] == "inconclusive" and not v["gates"][0]["passed"]
    assert all(c["passed"] is None for c in v["checks"])


# ------------------------------------------------------------------------------------------- the judge's rules
def _rows(curve_drop, *, acc=84.0, acc_lo=83.2, majority=35.4, hpl=12, one_head=(-0.2, 0.3), random_mean=60.0,
          importance_mean=75.0) -> list[dict]:
    """Rows in the measurement's schema: ``curve_drop(fraction) -> (delta, lo, hi)`` of each pruning level."""
    C, total = "head_pruning", 12 * hpl
    rows = [metric(C, "mnli_accuracy", acc, "percent", kind="quality", n=8815, lo=acc_lo, hi=acc + 0.8,
                   model="unpruned"),
            metric(C, "mnli_majority_baseline", majority, "percent", kind="quality", n=8815, label="entailment"),
            metric(C, "mnli_heads", total, "heads", layers=12, heads_per_layer=hpl)]
    levels = hp.pruning_levels(total, 0.1, 0.9)
    for order in ("importance", "importance_raw", "random"):
        for seed in ([0, 1, 2] if order == "random" else [None]):
            rows.append(metric(C, "mnli_pruning_accuracy", acc, "percent", kind="quality", order=order, seed=seed,
                               pruned=0, fraction=0.0, delta=0.0, lo=0.0, hi=0.0, p_value=1.0))
            for n in levels:
                d, lo, hi = curve_drop(n / total) if order != "random" else (-20.0, -21.0, -19.0)
                rows.append(metric(C, "mnli_pruning_accuracy", acc + d, "percent", kind="quality", order=order,
                                   seed=seed, pruned=n, fraction=n / total, delta=d, lo=lo, hi=hi, p_value=0.5))
            mean = (importance_mean if order != "random" else random_mean + (seed or 0))
            rows.append(metric(C, "mnli_pruning_mean_accuracy", mean, "percent", kind="quality", order=order,
                               seed=seed))
    for layer in range(12):
        rows.append(metric(C, "mnli_one_head_delta", one_head[0], "percent", kind="quality", layer=layer, head=0,
                           lo=one_head[0] - 0.4, hi=one_head[1], p_value=0.5, significant=False))
    return rows


def _paper_true(f):  # no loss up to 40% of the heads, then a collapse past 60%
    return (0.1, -0.4, 0.5) if f < 0.45 else (-3.0, -3.6, -2.4) if f < 0.6 else (-30.0, -31.0, -29.0)


def _judge(rows, **thresholds):
    """The judge at the default scale, with the judge: section's thresholds (``thresholds`` moved)."""
    return judge_rows(hp.CLAIM, rows, params=section("head_pruning", "default"),
                      thresholds={**config.thresholds(hp.CLAIM, "default"), **thresholds})


def test_paper_true_rows_reproduce():
    v = _judge(_rows(_paper_true))
    assert v["verdict"] == "reproduced", v["reason"]
    head = [c for c in v["checks"] if c["headline"]][0]
    # in the paper's unit: the percent of heads prunable without loss, where the lossless run of levels ends (58 of
    # 144 heads, 40.3%), up to the level before the first lossy one, beside Michel's 40%
    nums = head["numbers"]
    assert head["passed"] and nums["value"] == pytest.approx(100 * 58 / 144) == nums["lo"] == nums["hi"]
    assert nums["paper"] == 40 and nums["compare"] == "difference" and nums["unit"].startswith("% of heads prunable")


def test_the_measured_prunable_fraction_may_pass_the_papers():
    """Decided on the levels up to 40%; the headline says where the lossless run of levels ends (60% here)."""
    v = _judge(_rows(lambda f: (0.1, -0.4, 0.5) if f < 0.65 else (-30.0, -31.0, -29.0)))
    head = [c for c in v["checks"] if c["headline"]][0]
    assert v["verdict"] == "reproduced" and round(head["numbers"]["value"]) == 60  # 86 of 144 heads


def test_null_rows_are_inconclusive():
    """Nothing learned (accuracy at the majority class's share): every check undecided, whatever the curves say."""
    v = _judge(_rows(_paper_true, acc=35.0, acc_lo=34.0, majority=35.4))
    assert v["verdict"] == "inconclusive" and not v["gates"][0]["passed"]


def test_paper_false_rows_are_not_reproduced():
    """Pruning 10% of the heads already costs 10 points; importance no better than random."""
    v = _judge(_rows(lambda f: (-10.0, -11.0, -9.0), importance_mean=40.0, one_head=(-5.0, -4.0)))
    assert v["verdict"] == "not_reproduced", v["reason"]
    assert all(c["passed"] is False for c in v["checks"] if c["passed"] is not None)


@pytest.mark.parametrize("case", ["drop_on_tolerance", "gate_on_margin", "curve_stops_short", "straddles"])
def test_ties_and_undecided_levels_never_pass(case):
    tol = 0.96
    rows = {
        # the 40% level's drop interval ends exactly on the tolerance
        "drop_on_tolerance": _rows(lambda f: (0.0, -tol, 0.5) if 0.35 < f < 0.45 else _paper_true(f)),
        # the gate's lower end exactly at the majority class + judge.min_accuracy_over_majority (10 points)
        "gate_on_margin": _rows(_paper_true, majority=35.0,
                                acc_lo=35.0 + config.thresholds(hp.CLAIM, "default")["min_accuracy_over_majority"]),
        "curve_stops_short": [r for r in _rows(_paper_true)
                              if not (r["metric"] == "mnli_pruning_accuracy" and r["sweep"]["fraction"] > 0.35)],
        "straddles": _rows(lambda f: (-0.5, -1.5, 0.5) if f < 0.45 else _paper_true(f)),
    }[case]
    v = _judge(rows)
    assert v["verdict"] == "inconclusive", (case, v["reason"])


def test_the_normalised_order_is_the_headline_at_any_heads_per_layer():
    """No order is swapped in: Michel's normalised order is judged at 12 and at 4 heads per layer, the unnormalised
    order is a decided secondary check (its failure makes the verdict partially, not not_reproduced)."""
    for hpl in (12, 4):
        v = _judge(_rows(_paper_true, hpl=hpl))
        heads = [c for c in v["checks"] if c["headline"]]
        assert len(heads) == 1 and "Michel's l2-per-layer" in heads[0]["name"] and v["verdict"] == "reproduced"
        raw = [c for c in v["checks"] if "unnormalised" in c["name"] and "prune" in c["name"]][0]
        assert raw["passed"] is True and not raw["headline"]


def test_undecided_levels_carry_their_power():
    """A level straddling Michel's 0.96-point tolerance: the headline is undecided and its power says how many
    evaluation pairs would decide it if the estimate held."""
    v = _judge(_rows(lambda f: (-0.5, -1.5, 0.5) if f < 0.45 else _paper_true(f)))
    head = [c for c in v["checks"] if c["headline"]][0]
    assert head["passed"] is None and head["power"]["unit"] == "MNLI pairs" and head["power"]["n"] == 8815
    assert "evaluation pairs would decide it" in head["undecided_because"]
    # a drop of 0.5 [-0.5, 1.5] against the 0.96 tolerance, 0.46 away: at 90% power the 95% half-width 1.0 must
    # shrink to 0.46 x 1.96 / (1.96 + 1.2816) = 0.2781, so 8,815 x (1.0 / 0.2781)^2 = 8,815 x 12.93 ~ 114,000 pairs
    pw = head["power"]
    gap, half = abs(pw["value"] - pw["threshold"]), (pw["hi"] - pw["lo"]) / 2
    assert pw["n_needed"] == pytest.approx(8815 * (half / (gap * 1.959964 / (1.959964 + 1.281552))) ** 2, rel=1e-3)


# ------------------------------------------------------------------------------------------- statistics
def test_no_discordant_pair_is_no_proof_on_few_examples():
    """Identical predictions on 50 pairs: the interval (Agresti-Min) stays wider than Michel's 0.96 points, so
    'no loss' is undecided; on 9,000 pairs it is decided."""
    few = np.array([True] * 40 + [False] * 10)
    r = mn.paired_accuracy(few, few.copy(), 200, 0, 0.01)
    assert r["delta"] == 0 and r["p_value"] == 1.0 and r["hi"] > 0.96 and r["lo"] < -0.96
    many = np.array([True] * 8000 + [False] * 1000)
    r = mn.paired_accuracy(many, many.copy(), 200, 0, 0.01)
    assert 0 < r["hi"] < 0.96 and -0.96 < r["lo"] < 0


def test_paired_accuracy_counts_and_p_value():
    base = np.array([True] * 300 + [False] * 200)
    var = base.copy()
    var[:60] = False  # 60 losses, no gains
    r = mn.paired_accuracy(base, var, 500, 0, 0.01)
    assert (r["gained"], r["lost"]) == (0, 60) and r["delta"] == pytest.approx(-12.0)
    assert r["hi"] < 0 and r["p_value"] == pytest.approx(1 / 500)
    lo, hi = mn.accuracy_interval(base, 0.05)
    assert lo < 60.0 < hi and hi - lo < 10


# ------------------------------------------------------------------------------------------- bad input
def test_bad_input_names_the_key(trained, tmp_path):
    folder, _, _, data = trained
    bad = tmp_path / "bad.tsv"
    bad.write_text("a\tb\tc\nx\ty\tz\n")
    with pytest.raises(ArtefactError, match="head_pruning.mnli_path"):
        mn.read_pairs(bad)
    odd = _write_tsv(tmp_path / "odd.tsv", [("w1 w2", "yes w3", "entails")] * 60)
    with pytest.raises(ConfigError, match=r"head_pruning\.mnli\.labels.*'entails'"):
        mn.MnliSetup(_params(folder, odd))
    with pytest.raises(ConfigError, match="head_pruning.mnli"):
        mn.MnliSetup(_params(folder, data, importance_examples=300))
    p = _params(folder, data)
    p["mnli_path"] = None
    with pytest.raises(ConfigError, match="head_pruning.mnli_path"):
        mn.MnliSetup(p)


def test_a_bert_folder_needs_no_translation_model():
    p = section("head_pruning", "default")
    assert [n["artefact"] for n in needed(workflow_spec("head_pruning", "default"), p)] == ["translation_model"]
    p["hf_model"] = "/models/bert-base-uncased-mnli"
    assert needed(workflow_spec("head_pruning", "default"), p) == []


def test_the_gate_margin_comes_from_the_judge_section():
    """judge.min_accuracy_over_majority: paper-true rows 47.8 points above the majority class fail a 50-point gate."""
    assert _judge(_rows(_paper_true))["gates"][0]["passed"]
    v = _judge(_rows(_paper_true), min_accuracy_over_majority=50.0)
    assert not v["gates"][0]["passed"] and v["verdict"] == "inconclusive"
    assert "50.0 points above" in v["gates"][0]["required"]
    assert v["gates"][0]["thresholds"] == {"min_accuracy_over_majority": 50.0}
