"""repro.peers.throughput (issue 18, item 3): the torch.nn.Transformer reference is the suite's model (same logits,
same decoded tokens), the loop's speed-ups keep its losses, and the benchmark writes its files end to end."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from repro.io import check_results, read_metrics
from repro.peers.throughput import (ReferenceTransformer, copy_suite_weights, reference_decode_ids, run)
from repro.data.batching import EncodedCorpus, token_batches
from repro.train.decode import DecodeConfig, decode_ids
from repro.train.loop import OptimConfig, RunConfig, ScheduleConfig, lr_at, smoothed_cross_entropy, train
from repro.train.pipeline import build_model

PAD, BOS, EOS, V = 0, 2, 3, 24


def _model(norm_position="pre", dropout=0.0, seed=0):
    torch.manual_seed(seed)
    mp = {"n_encoder_layers": 2, "n_decoder_layers": 2, "max_seq_len": 64,
          "block": {"d_model": 32, "n_heads": 4, "d_ff": 64, "norm_position": norm_position, "dropout": dropout}}
    return build_model(mp, V, PAD)


def _corpus(n=24, seed=0):
    rng = np.random.default_rng(seed)
    src = [np.append(rng.integers(4, V, size=int(rng.integers(2, 9))), EOS).astype(np.int64) for _ in range(n)]
    tgt = [rng.integers(4, V, size=int(rng.integers(2, 9))).astype(np.int64) for _ in range(n)]
    return EncodedCorpus(src, tgt, np.arange(n), PAD, BOS, EOS, n)


@pytest.mark.parametrize("norm_position", ["pre", "post"])
def test_reference_is_the_same_model_and_decodes_the_same_tokens(norm_position):
    model = _model(norm_position)
    ref = ReferenceTransformer(model.cfg)
    copy_suite_weights(ref, model)
    model.eval(), ref.eval()
    b = next(token_batches(_corpus(), 400, shuffle=False))
    with torch.no_grad():
        a = model(b.src, b.tgt_in, b.src_pad_mask, b.tgt_pad_mask)
        r = ref(b.src, b.tgt_in, b.src_pad_mask, b.tgt_pad_mask)
    real = ~b.tgt_pad_mask
    torch.testing.assert_close(a[real], r[real], atol=1e-5, rtol=1e-5)
    src_ids = [list(s) for s in _corpus(10, seed=1).src]
    for kind in ("greedy", "beam"):
        cfg = DecodeConfig(decoder=kind, beam=3, max_len_a=1.0, max_len_b=4, max_tokens=40)
        suite, _ = decode_ids(model, src_ids, BOS, EOS, PAD, cfg)
        assert reference_decode_ids(ref, src_ids, BOS, EOS, PAD, cfg) == suite, kind


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_one_pass_loss_equals_cross_entropy(eps):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(40, 50, generator=g) * 3
    target = torch.randint(0, 50, (40,), generator=g)
    target[::5] = PAD
    loss, nll = smoothed_cross_entropy(logits, target, eps, PAD)
    torch.testing.assert_close(loss, F.cross_entropy(logits, target, ignore_index=PAD, label_smoothing=eps,
                                                     reduction="sum"))
    torch.testing.assert_close(nll, F.cross_entropy(logits, target, ignore_index=PAD, reduction="sum"))


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_one_pass_loss_gradient_equals_autograds(eps):
    """The written-out gradient of the one-pass loss is autograd's of F.cross_entropy (pad rows get none), to float
    rounding, also scaled by an upstream gradient (the per-token mean of the training loss)."""
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(40, 50, generator=g) * 3
    target = torch.randint(0, 50, (40,), generator=g)
    target[::5] = PAD
    ours = logits.clone().requires_grad_()
    loss, nll = smoothed_cross_entropy(ours, target, eps, PAD)
    (loss / 7.0).backward()
    ref = logits.clone().requires_grad_()
    (F.cross_entropy(ref, target, ignore_index=PAD, label_smoothing=eps, reduction="sum") / 7.0).backward()
    torch.testing.assert_close(ours.grad, ref.grad, atol=1e-7, rtol=1e-5)
    assert not ours.grad[::5].any() and not nll.requires_grad
    with torch.no_grad():  # evaluation: the same values without a graph
        assert torch.equal(smoothed_cross_entropy(logits, target, eps, PAD)[0], loss.detach())


def test_loop_losses_equal_the_plain_loop():
    """train() (one-pass loss, fused Adam) gives the per-step losses of the loop it replaced: two
    F.cross_entropy calls and the per-parameter Adam, same seed, batches, schedule and clipping."""
    enc = _corpus(40)
    batches = list(token_batches(enc, 120, shuffle=True, seed=3))
    opt = OptimConfig(lr=3e-3, clip_norm=1.0, label_smoothing=0.1)
    sched = ScheduleConfig("inverse_sqrt", warmup_steps=3, warmup_init_lr=1e-7)
    steps = min(len(batches), 8)
    suite = _model()
    res = train(suite, lambda e: batches, None, opt, sched, RunConfig(seed=0, max_steps=steps, progress=False))
    plain = _model()
    adam = torch.optim.Adam(plain.parameters(), lr=opt.lr, betas=opt.betas, eps=opt.eps)
    losses = []
    for step, b in zip(range(steps), batches):
        for gr in adam.param_groups:
            gr["lr"] = lr_at(step, opt.lr, sched)
        lo = plain(b.src, b.tgt_in, b.src_pad_mask, b.tgt_pad_mask)
        loss = F.cross_entropy(lo.reshape(-1, V), b.tgt_out.reshape(-1), ignore_index=PAD, label_smoothing=0.1,
                               reduction="sum") / b.ntokens
        losses.append(float(loss.detach()))
        adam.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(plain.parameters(), 1.0)
        adam.step()
    assert [r["loss"] for r in res.curve] == pytest.approx(losses, rel=1e-4)
    assert losses[-1] < losses[0]


def test_benchmark_end_to_end_writes_results_and_report(tmp_path):
    out, report = tmp_path / "throughput", tmp_path / "throughput.md"
    summary = run("tiny", repeats=2, train_steps=1, sentences=4, out=out, report=report, threads=1)
    check_results(out)  # metrics.csv / config / fingerprint / verdict with its integrity record
    m = read_metrics(out / "metrics.csv")
    for task in ("train", "greedy", "beam"):
        rows = m[(m["metric"] == "suite_over_reference") & (m["sweep.task"] == task)]
        assert len(rows) == 1 and rows["value"].iloc[0] > 0 and rows["n"].iloc[0] == 2
        e = summary["tasks"][task]["suite_over_reference"]
        assert e["q25"] <= e["median"] <= e["q75"]
    pad = m[m["metric"] == "padding_fraction"]["value"]
    assert len(pad) == 6 and ((pad >= 0) & (pad < 1)).all()
    assert summary["same_hypotheses"] == {"greedy": True, "beam": True}
    s = json.loads((out / "summary.json").read_text())
    assert s["hardware"] and s["load_before"] and s["config"]["scale"] == "tiny"
    text = report.read_text()
    assert "| train |" in text and "| beam |" in text and "Padding fraction" in text
