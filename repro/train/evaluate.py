"""Command line: the suite's translation benchmark -- decode the test set with the trained model and write
BLEU results records (sacrebleu signature, full test, placeholder-free subset, copy baseline, decoding tokens/s,
minutes trained) under ``results/<hw>/<scale>/translation/`` via repro.io.

``python -m repro.train.evaluate --params JSON --scale S --model DIR --out RESULTS_DIR [--lm DIR]``

The verdict (the suite's own target, not a paper's number) is repro/judges/translation.py's, with the thresholds of
config/claims/translation.yaml's ``judge:`` part; ``--rejudge`` judges stored results again (the workflow's
translation_verdict job). The hypotheses are written to ``test.hyp.txt`` so claims and readers can inspect them.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from repro import plan, provenance
from repro.bench.fingerprint import fingerprint
from repro.io import metric, write_measurement
from repro.cli import add_params_arguments, load_keys, load_params, out_folder, setup_logging
from repro.judging import load_thresholds, rejudge
from repro.train.bleu import bleu_report, bootstrap_se
from repro.train.decode import DecodeConfig
from repro.train.loop import evaluate_loss
from repro.train.pipeline import encode_splits, load_data, load_trained, valid_batches

CLAIM = "translation"
log = logging.getLogger("repro.translation")


def evaluate(params: dict, scale: str, model_dir: Path, out: Path, lm_dir: Path | None = None):
    """Decode valid/test, score them, and return (metrics rows, context: the model's summary for the judge)."""
    torch.set_num_threads(int(params.get("threads", torch.get_num_threads())))
    device = params.get("device", "cpu")
    t = load_trained(model_dir, device=device)
    corpus = load_data(params)
    dcfg = DecodeConfig.from_params(params["eval"])
    ck = t.checkpoint
    minutes = float(ck.get("elapsed_s", 0.0)) / 60
    cfg = t.model.cfg
    common = dict(decoder=dcfg.decoder, beam=dcfg.beam if dcfg.decoder == "beam" else 1)
    rows = []
    summary = {"steps": ck.get("step"), "train_minutes": minutes, "stop_reason": ck.get("stop_reason"),
               "encoder_layers": cfg.n_encoder_layers, "decoder_layers": cfg.n_decoder_layers,
               "heads": cfg.block.n_heads, "d_model": cfg.block.d_model, "norm_position": cfg.block.norm_position,
               "parameters": sum(p.numel() for p in t.model.parameters())}
    for split in ("valid", "test"):
        srcs, refs = corpus.sources(split), corpus.references(split)
        log.info("decoding %s: %d sentences (%s)", split, len(srcs), dcfg)
        hyps, st = t.translate_split(corpus, split, dcfg, device=device)
        (out / f"{split}.hyp.txt").write_text("\n".join(hyps) + "\n")
        rep = bleu_report(hyps, refs, srcs, corpus.clean_masks[split])
        summary[split] = rep
        summary[f"{split}_decode"] = st
        for key, name in (("full", "bleu"), ("clean", "bleu_clean"), ("copy_full", "bleu_copy_baseline"),
                          ("copy_clean", "bleu_copy_baseline_clean")):
            rows.append(metric(CLAIM, name, rep[key]["score"], "BLEU", n=rep[key]["n"], split=split,
                               signature=rep[key]["signature"], **common))
        # the sampling error of BLEU over the sentences: the judge's interval of "reaches the target" and of
        # "beats copying" (the confidence level is the judge's threshold)
        se = bootstrap_se(hyps, refs, srcs, int(params["eval"]["bootstrap_samples"]),
                          int(params["eval"]["bootstrap_seed"]))
        boot = dict(n=se["sentences"], split=split, bootstrap_samples=se["samples"], bootstrap_seed=se["seed"],
                    **common)
        rows.append(metric(CLAIM, "bleu_bootstrap_se", se["bleu"], "BLEU", kind="statistic", **boot))
        rows.append(metric(CLAIM, "bleu_minus_copy_bootstrap_se", se["minus_copy"], "BLEU", kind="statistic", **boot))
        rows.append(metric(CLAIM, "decode_tokens_per_s", st["tokens_per_s"], "tokens/s", n=st["sentences"],
                           split=split, **common))
        log.info("%s BLEU %.2f (clean %.2f; copy baseline %.2f / %.2f) %s; %.0f tok/s", split, rep["full"]["score"],
                 rep["clean"]["score"], rep["copy_full"]["score"], rep["copy_clean"]["score"],
                 rep["full"]["signature"], st["tokens_per_s"])
    # validation loss of the final model
    tr = t.params.get("training") or params["training"]
    enc = encode_splits(params, t.tokenizer, corpus, tr["max_len"])
    vl = evaluate_loss(t.model, valid_batches(enc["valid"], tr["max_tokens"]), t.tokenizer.pad_id, device=device)
    rows.append(metric(CLAIM, "valid_nll", vl["nll"], "nats/token", n=vl["tokens"], split="valid"))
    rows.append(metric(CLAIM, "train_minutes", minutes, "min", n=ck.get("step")))
    tok_s = (ck.get("train_tokens") or 0) / max(float(ck.get("elapsed_s") or 0), 1e-9)
    rows.append(metric(CLAIM, "train_tokens_per_s", tok_s, "tokens/s", n=ck.get("step")))
    rows.append(metric(CLAIM, "train_steps", ck.get("step"), "updates"))
    summary["valid_nll"] = vl["nll"]
    summary["train_tokens_per_s"] = tok_s
    if lm_dir is not None:
        lm = load_trained(lm_dir, device=device)
        enc_lm = encode_splits(params, lm.tokenizer, corpus, params["lm"]["training"]["max_len"])
        r = evaluate_loss(lm.model, valid_batches(enc_lm["valid"], params["lm"]["training"]["max_tokens"]),
                          lm.tokenizer.pad_id, device=device)
        rows.append(metric(CLAIM, "lm_valid_ppl", r["ppl"], "perplexity", n=r["tokens"], split="valid"))
        rows.append(metric(CLAIM, "lm_train_minutes", float(lm.checkpoint.get("elapsed_s", 0)) / 60, "min"))
        summary["lm_valid_ppl"] = r["ppl"]
    (out / "bleu.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    return rows, {k: v for k, v in summary.items() if k not in ("valid", "test", "valid_decode", "test_decode")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m repro.train.evaluate", description=__doc__.split("\n")[0])
    add_params_arguments(ap, CLAIM)
    ap.add_argument("--model", type=Path, help="model folder (checkpoint_last.pt)")
    ap.add_argument("--lm", type=Path, default=None, help="LM folder, to report its validation perplexity")
    ap.add_argument("--out", required=True, type=out_folder, help="results folder (a folder, or a path not there yet)")
    ap.add_argument("--thresholds", default=None, metavar="JSON",
                    help="the judge's thresholds (default: the judge: part of config/claims/translation.yaml)")
    ap.add_argument("--measure-only", action="store_true", help="write the measurement, not the verdict")
    ap.add_argument("--rejudge", action="store_true",
                    help="judge the measurement stored in --out again with the current judge and thresholds")
    ap.add_argument("--keys", default=None, metavar="JSON",
                    help="the provenance keys the workflow computed (repro.provenance); default: computed here")
    ap.add_argument("--hardware", default=None,
                    help="the hardware id results are filed under (the workflow passes it; default: detected)")
    a = ap.parse_args(argv)
    setup_logging()
    thresholds = load_thresholds(ap, CLAIM, a.scale, a.thresholds)
    keys = load_keys(ap, a.keys)
    if a.rejudge:
        rejudge(CLAIM, a.out, a.scale, thresholds, judge_key=(keys or {}).get("judge"))
        return 0
    if a.model is None:
        ap.error("--model is required (unless --rejudge)")
    params = load_params(ap, CLAIM, a.scale, a.params)
    a.out.mkdir(parents=True, exist_ok=True)
    t0, started = time.time(), datetime.now(timezone.utc).isoformat(timespec="seconds")
    keys = keys or provenance.artefact_keys(
        "translation_evaluate", json.loads(a.params) if a.params else params, thresholds, plan.block(CLAIM, a.scale))
    rows, context = evaluate(params, a.scale, a.model, a.out, a.lm)
    write_measurement(a.out, claim=CLAIM, scale=a.scale, metrics=rows, config=params, keys=keys, context=context,
                      fingerprint=fingerprint(a.hardware), inputs={"model": a.model, **({"lm": a.lm} if a.lm else {})},
                      started=started, plan=plan.for_measurement(CLAIM, a.scale, keys.get("config"), thresholds))
    log.info("translation: measured in %.1f s", time.time() - t0)
    if not a.measure_only:
        rejudge(CLAIM, a.out, a.scale, thresholds, judge_key=keys.get("judge"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
