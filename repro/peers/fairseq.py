"""Training and decoding throughput of the suite against fairseq itself.

``python -m repro.peers.fairseq --fairseq-venv PATH [--scale default] [--repeats 3] [--updates 40]
[--sentences 256] [--threads N] [--results results]``

fairseq is never a dependency of the suite: this benchmark runs fairseq's own command-line tools from a separate
virtual environment (``--fairseq-venv``; PyPI's ``fairseq-fixed==0.12.3.1`` imports on Python 3.11, see
tests/fixtures/fairseq/make_fixture.sh) and compares, on the same data and the same model sizes:

* training: ``fairseq-train`` (``--arch transformer``: the translation section's layers, d_model, FFN, heads,
  pre/post-norm, dropout, shared embeddings; Adam, inverse-sqrt warm-up, clipping, label-smoothed cross entropy,
  ``--max-tokens``) against the suite's loop (``repro.train.loop.train``) on the suite's model and batches. Both read
  the same token ids: the suite's encoded training split is written as a fairseq data-bin (``--data-bin`` format:
  ``dict.*.txt`` and ``.bin``/``.idx`` files, ``repro.data.fairseq_io``), fairseq's specials in fairseq's order.
  fairseq's rate is its own ``wps`` (target tokens per second, eos included) over its log intervals after the first;
  the suite's is non-pad target tokens (eos included) per second over the same number of updates after one warm-up
  update. Process start-up and data loading are outside both.
* decoding: ``fairseq-generate`` (greedy: ``--beam 1``, and beam search with the section's ``eval.beam``,
  ``--lenpen``, ``--max-len-a/b``, ``--max-tokens``) against the suite's batched decoders (``decode_ids``) on the SAME
  weights: the checkpoint of the last fairseq-train repeat, imported with ``repro.train.fairseq_import``. fairseq's
  rate is the "Translated N sentences (T tokens) in S s" line (its generation timer), the suite's is the same count
  over its decoding wall time. The checkpoint has seen only ``--updates`` updates (its hypotheses are short; the page
  gives their mean length), and the page gives the fraction of hypotheses that agree token for token up to the
  shorter length cap.

Repeats alternate which side goes first. Results: ``<results>/<hw>/<scale>/_bench/fairseq_peer/`` (metrics.csv,
summary.json, config.json, fingerprint.json, verdict.json) and ``<results>/../reports/<hw>/<scale>/fairseq_peer.md``:
medians with the interquartile range over repeats, and the suite/fairseq ratio per repeat (> 1: the suite is faster).
Only ratios are comparable across runs on a shared CPU. ``python -m repro.report publish`` copies them into a reference
(``--peers-only``: into an existing one).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from repro import config
from repro.artefacts import CKPT_NAME
from repro.bench.fingerprint import fingerprint
from repro.data.batching import batch_indices, collate
from repro.data.fairseq_io import write_fairseq_dictionary, write_indexed_dataset
from repro.io import atomic_write_json, atomic_write_text, write_results
from repro.peers.throughput import (commit_text, default_paths, encoded_corpus, peer_paths_arguments, side_by_side,
                                    side_by_side_rows)
from repro.train.decode import DecodeConfig, decode_ids
from repro.train.fairseq_import import import_fairseq_checkpoint
from repro.train.loop import RunConfig, configs_from_params, train
from repro.train.pipeline import build_model
from repro.verdicts import verdict

log = logging.getLogger("repro.peers.fairseq")
CLAIM = "fairseq_peer"
# fairseq's CLIs load checkpoints with torch.load(weights_only=True); its checkpoints store argparse.Namespace
_SAFE = "import argparse, sys, torch; torch.serialization.add_safe_globals([argparse.Namespace]); "
_TRANSLATED = re.compile(r"Translated ([\d,]+) sentences \(([\d,]+) tokens\) in ([\d.]+)s")


def fairseq_ids(ids, pad: int, unk: int, bos: int, eos: int) -> np.ndarray:
    """The suite's ids in fairseq's dictionary order: fairseq's specials are bos 0, pad 1, eos 2, unk 3 and every
    other symbol keeps its id (the suite's specials are the first four ids too, in another order)."""
    table = {bos: 0, pad: 1, eos: 2, unk: 3}
    a = np.asarray(ids, dtype=np.int64)
    out = a.copy()
    for k, v in table.items():
        out[a == k] = v
    return out


def write_data_bin(dest: Path, enc: dict, vocab: int, tok, test_src: list) -> None:
    """A fairseq data-bin (joined dictionary of placeholder symbols: only the ids matter) of the encoded splits."""
    dest.mkdir(parents=True, exist_ok=True)
    specials = dict(pad=tok.pad_id, unk=tok.unk_id, bos=tok.bos_id, eos=tok.eos_id)
    symbols = [f"w{i}" for i in range(4, vocab)]
    for lang in ("de", "en"):
        write_fairseq_dictionary(dest / f"dict.{lang}.txt", symbols)
    eos = np.array([2], dtype=np.int64)
    for split in ("train", "valid"):
        e = enc[split]
        src = [fairseq_ids(s, **specials) for s in e.src]  # already ends with eos
        tgt = [np.concatenate([fairseq_ids(t, **specials), eos]) for t in e.tgt]
        write_indexed_dataset(dest / f"{split}.de-en.de", src, vocab_size=vocab)
        write_indexed_dataset(dest / f"{split}.de-en.en", tgt, vocab_size=vocab)
    src = [fairseq_ids(s, **specials) for s in test_src]
    write_indexed_dataset(dest / "test.de-en.de", src, vocab_size=vocab)
    write_indexed_dataset(dest / "test.de-en.en", [eos.copy() for _ in src], vocab_size=vocab)  # no references


def _fs(venv: Path, tool: str, args: list[str], threads: int, log_path: Path) -> str:
    """Run fairseq_cli.<tool> from ``venv`` with ``threads`` OpenMP threads; its combined output."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "GOMP_SPINCOUNT": "1000", "PYTHONHASHSEED": "0"}  # as the suite (repro/__init__)
    env.pop("PYTHONPATH", None)
    code = _SAFE + f"from fairseq_cli.{tool} import cli_main; sys.argv[0] = 'fairseq-{tool}'; cli_main()"
    r = subprocess.run([str(venv / "bin" / "python"), "-c", code, *args], env=env, capture_output=True, text=True)
    log_path.write_text(r.stdout + r.stderr)
    if r.returncode:
        raise RuntimeError(f"fairseq-{tool} failed (exit {r.returncode}); its log: {log_path}\n{r.stderr[-2000:]}")
    return r.stdout + r.stderr


def fairseq_train_args(params: dict, data: Path, save: Path | None, updates: int) -> list[str]:
    """fairseq-train arguments equivalent to the translation section (model, optimizer, schedule, batch)."""
    m, tr = params["model"], params["training"]
    b, o, s = m["block"], tr["optimizer"], tr["schedule"]
    pre = b.get("norm_position", "pre") == "pre"
    args = [str(data), "--arch", "transformer", "--task", "translation", "--source-lang", "de", "--target-lang", "en",
            "--encoder-layers", str(m["n_encoder_layers"]), "--decoder-layers", str(m["n_decoder_layers"]),
            "--encoder-embed-dim", str(b["d_model"]), "--decoder-embed-dim", str(b["d_model"]),
            "--encoder-ffn-embed-dim", str(b["d_ff"]), "--decoder-ffn-embed-dim", str(b["d_ff"]),
            "--encoder-attention-heads", str(b["n_heads"]), "--decoder-attention-heads", str(b["n_heads"]),
            "--share-all-embeddings", "--max-source-positions", str(m["max_seq_len"]),
            "--max-target-positions", str(m["max_seq_len"]), "--dropout", str(b.get("dropout", 0.0)),
            "--attention-dropout", str(b.get("attn_dropout", 0.0)),
            "--optimizer", "adam", "--adam-betas", f"({o['betas'][0]}, {o['betas'][1]})", "--adam-eps", str(o["eps"]),
            "--weight-decay", str(o["weight_decay"]), "--clip-norm", str(o["clip_norm"]), "--lr", str(o["lr"]),
            "--lr-scheduler", "inverse_sqrt", "--warmup-updates", str(s["warmup_steps"]),
            "--warmup-init-lr", str(s["warmup_init_lr"]), "--criterion", "label_smoothed_cross_entropy",
            "--label-smoothing", str(tr["label_smoothing"]), "--max-tokens", str(tr["max_tokens"]),
            "--max-update", str(updates), "--seed", str(tr["seed"]), "--cpu", "--num-workers", "0",
            "--disable-validation", "--log-format", "json", "--log-interval", "5", "--no-progress-bar"]
    if pre:
        args += ["--encoder-normalize-before", "--decoder-normalize-before"]
    if save is None:
        args += ["--no-save"]
    else:
        args += ["--save-dir", str(save), "--no-epoch-checkpoints", "--no-save-optimizer-state"]
    return args


def fairseq_wps(output: str) -> float:
    """Median of fairseq-train's per-interval ``wps`` after the first interval (start-up and first batches)."""
    wps = []
    for line in output.splitlines():
        i = line.find("{")
        if i < 0 or '"wps"' not in line or '"epoch"' not in line:
            continue
        try:
            rec = json.loads(line[i:])
        except json.JSONDecodeError:
            continue
        if "train_wps" in rec or "wps" not in rec:
            continue  # the epoch summary, not an interval
        wps.append(float(rec["wps"]))
    if len(wps) < 2:
        raise RuntimeError(f"fairseq-train logged {len(wps)} wps intervals; raise --updates (5 updates per interval)")
    return float(np.median(wps[1:]))


def fairseq_generate(venv, data: Path, ckpt: Path, dcfg, beam: int, threads: int,
                     log_path: Path) -> tuple[float, int, list]:
    """(tokens per second by fairseq's generation timer, tokens, hypotheses by sentence id) of fairseq-generate."""
    out = _fs(venv, "generate", [str(data), "--path", str(ckpt), "--gen-subset", "test", "--beam", str(beam),
                                 "--nbest", "1", "--lenpen", str(dcfg.len_penalty), "--max-len-a", str(dcfg.max_len_a),
                                 "--max-len-b", str(dcfg.max_len_b), "--max-tokens", str(dcfg.max_tokens), "--cpu",
                                 "--seed", "1"], threads, log_path)
    m = _TRANSLATED.search(out)
    if not m:
        raise RuntimeError(f"fairseq-generate: no 'Translated ... in ...s' line in {log_path}")
    tokens, seconds = int(m.group(2).replace(",", "")), float(m.group(3))
    hyps = {}
    for line in out.splitlines():
        if line.startswith("H-"):
            tag, _, text = line.split("\t")
            hyps[int(tag[2:])] = [int(w[1:]) if w.startswith("w") else w for w in text.split()]
    return tokens / max(seconds, 1e-9), tokens, [hyps.get(i) for i in range(len(hyps))]


@dataclass
class _Workload:
    """Both sides' inputs: the suite's tokenizer, encoded splits and test sources, the data-bin fairseq reads, the
    suite's first ``updates + 1`` training batches, its optimizer and schedule, and its freshly built model."""
    tok: Any
    test: list
    data: Path
    batches: list
    opt_c: Any
    sch_c: Any
    model: Any


def _workload(params: dict, scale: str, work: Path, hw: str, sentences: int, updates: int,
              results_root: str | Path = "results") -> _Workload:
    tr = params["training"]
    tok, _, corpus, enc = encoded_corpus(params, scale, work, hw, results_root)
    test = [list(e) + [tok.eos_id] for e in tok.encode_batch([s for s, _ in corpus.test[:sentences]])]
    data = work / "data-bin"
    write_data_bin(data, enc, tok.vocab_size, tok, test)
    epoch = batch_indices(enc["train"], tr["max_tokens"], shuffle=True, seed=tr["seed"])
    batches = [collate(enc["train"], pos) for pos in epoch[:updates + 1]]
    opt_c, sch_c, _ = configs_from_params(tr)
    torch.manual_seed(tr["seed"])
    model = build_model(params["model"], tok.vocab_size, tok.pad_id)
    return _Workload(tok, test, data, batches, opt_c, sch_c, model)


def _suite_train_rate(w: _Workload, seed: int) -> float:
    """Target tokens per second of the suite's loop over ``w.batches[1:]``, after one untimed warm-up update."""
    first, rest = w.batches[:1], w.batches[1:]
    rc = lambda n: RunConfig(seed=seed, max_steps=n, log_every=10 ** 9, valid_every=10 ** 9,
                             ckpt_every_steps=10 ** 9, ckpt_every_minutes=1e9, progress=False,
                             progress_every_s=1e9, explode_loss=1e9)
    train(w.model, lambda e: first, None, w.opt_c, w.sch_c, rc(1), device="cpu")  # warm-up update, not timed
    t0 = time.perf_counter()
    n = train(w.model, lambda e: rest, None, w.opt_c, w.sch_c, rc(len(rest)), device="cpu").train_tokens
    return n / (time.perf_counter() - t0)


def _train_rates(venv: Path, params: dict, w: _Workload, ckpt_dir: Path, repeats: int, updates: int, threads: int,
                 work: Path) -> dict:
    """Training rates of both sides per repeat, alternating which goes first; the last fairseq-train repeat saves
    its checkpoint in ``ckpt_dir`` (the weights both sides decode with)."""
    rates: dict = {k: [] for k in ("train_suite", "train_fairseq")}
    for r in range(repeats):
        last = r == repeats - 1
        fs_args = fairseq_train_args(params, w.data, ckpt_dir if last else None, updates)

        def fs_train():
            return fairseq_wps(_fs(venv, "train", fs_args, threads, work / f"fairseq-train-{r}.log"))

        order = (("train_suite", lambda: _suite_train_rate(w, params["training"]["seed"])), ("train_fairseq", fs_train))
        for key, fn in (order if r % 2 == 0 else order[::-1]):
            rates[key].append(fn())
        log.info("train repeat %d: suite %.0f, fairseq %.0f target tokens/s", r, rates["train_suite"][-1],
                 rates["train_fairseq"][-1])
    return rates


def _decode_rates(venv: Path, params: dict, w: _Workload, ckpt: Path, repeats: int, threads: int, work: Path,
                  rates: dict) -> tuple[dict, dict]:
    """Greedy and beam decoding rates of both sides on fairseq's checkpoint ``ckpt`` (imported into the suite),
    added to ``rates``; returns (fraction of equal hypotheses, mean tokens per sentence) per decoder and side."""
    tok = w.tok
    imp = import_fairseq_checkpoint(ckpt, w.data / "dict.de.txt", w.data / "dict.en.txt")
    specials = dict(pad=tok.pad_id, unk=tok.unk_id, bos=tok.bos_id, eos=tok.eos_id)
    src_fs = [list(map(int, fairseq_ids(s, **specials))) for s in w.test]
    ev = params["eval"]
    same, lengths = {}, {}
    for kind in ("greedy", "beam"):
        dcfg = DecodeConfig.from_params({**ev, "decoder": kind})  # fairseq's greedy is --beam 1
        fs_beam = 1 if kind == "greedy" else dcfg.beam
        rates[f"{kind}_suite"], rates[f"{kind}_fairseq"] = [], []
        hyps = {}
        for r in range(repeats):
            def suite_decode():
                t0 = time.perf_counter()
                ids, _ = decode_ids(imp.model, src_fs, imp.bos_id, 2, 1, dcfg, vocab_limit=imp.tgt_vocab)
                hyps["suite"] = ids
                lengths[(kind, "suite")] = sum(len(h) + 1 for h in ids) / len(ids)
                return sum(len(h) + 1 for h in ids) / (time.perf_counter() - t0)

            def fs_decode():
                rate, n, h = fairseq_generate(venv, w.data, ckpt, dcfg, fs_beam, threads,
                                              work / f"fairseq-generate-{kind}-{r}.log")
                hyps["fairseq"] = h
                lengths[(kind, "fairseq")] = n / max(len(h), 1)
                return rate

            order = ((f"{kind}_suite", suite_decode), (f"{kind}_fairseq", fs_decode))
            for key, fn in (order if r % 2 == 0 else order[::-1]):
                rates[key].append(fn())
            log.info("%s repeat %d: suite %.0f, fairseq %.0f tokens/s", kind, r, rates[f"{kind}_suite"][-1],
                     rates[f"{kind}_fairseq"][-1])
        # equal up to the shorter length cap: fairseq 0.12 caps every sentence of a batch at max_len_a times the
        # padded batch width + b, the suite each sentence at its own length (the same rule per sentence)
        pairs = [(a, b) for a, b in zip(hyps["suite"], hyps["fairseq"]) if b is not None]
        same[kind] = sum(a[:len(b)] == b[:len(a)] for a, b in pairs) / max(len(pairs), 1)
    return same, lengths


def run(venv: Path, scale: str = "default", repeats: int = 3, updates: int = 40, sentences: int = 256,
        threads: int | None = None, out: Path | None = None, report: Path | None = None,
        results_root: str | Path = "results") -> dict:
    """Measure, write the results folder and the page, return the summary; ``results_root`` as
    :func:`repro.peers.throughput.run`'s (its run's tokenizer; the default places of the results and page)."""
    venv = Path(venv)
    if not (venv / "bin" / "python").exists():
        raise FileNotFoundError(f"--fairseq-venv: {venv}/bin/python does not exist")
    params = config.section("translation", scale)
    fp = fingerprint()
    hw = fp["hardware_id"]
    out, report = default_paths(results_root, hw, scale, CLAIM, out, report)
    work = out / "_work"
    work.mkdir(parents=True, exist_ok=True)
    threads = int(threads or params.get("threads") or torch.get_num_threads())
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        w = _workload(params, scale, work, hw, sentences, updates, results_root)
        load_before = os.getloadavg()
        ckpt_dir = work / "checkpoint"
        rates = _train_rates(venv, params, w, ckpt_dir, repeats, updates, threads, work)
        same, lengths = _decode_rates(venv, params, w, ckpt_dir / CKPT_NAME, repeats, threads, work, rates)
        load_after = os.getloadavg()
    finally:
        torch.set_num_threads(before)

    rows, summary = [], {"tasks": {}}
    for task in ("train", "greedy", "beam"):
        summary["tasks"][task] = side_by_side(rows, CLAIM, task, rates[f"{task}_suite"], rates[f"{task}_fairseq"],
                                              "fairseq")
    cfg = {"scale": scale, "repeats": repeats, "updates": updates, "sentences": len(w.test), "threads": threads,
           "fairseq_venv": str(venv), "translation": params}
    summary.update(same_hypotheses=same, tokens_per_sentence={f"{k}_{side}": v for (k, side), v in lengths.items()},
                   load_before=load_before, load_after=load_after, threads=threads,
                   fairseq_version=_fairseq_version(venv))
    v = verdict(CLAIM, "not_applicable", "a benchmark (suite vs fairseq), not a published claim",
                train_ratio_median=summary["tasks"]["train"]["suite_over_fairseq"]["median"])
    write_results(out, claim=CLAIM, scale=scale, metrics=rows, verdict=v, config=cfg, fingerprint=fp)
    atomic_write_json(out / "summary.json", {**summary, "hardware": hw, "commit": fp["git"], "config": cfg})
    report.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(report, markdown(summary, hw, scale, fp, cfg))
    log.info("wrote %s and %s", out, report)
    return summary


def _fairseq_version(venv: Path) -> str:
    r = subprocess.run([str(venv / "bin" / "python"), "-c", "import fairseq, torch; print(fairseq.__version__, "
                        "torch.__version__)"], capture_output=True, text=True)
    return r.stdout.strip() or "unknown"


def markdown(summary: dict, hw: str, scale: str, fp: dict, cfg: dict) -> str:
    lines = [f"# Training and decoding throughput: suite vs fairseq ({hw}, {scale})", "",
             "`python -m repro.peers.fairseq` (repro/peers/fairseq.py): fairseq-train / fairseq-generate "
             f"(fairseq {summary['fairseq_version']}, from its own venv) against the suite's loop and decoders on the "
             "same token ids and model sizes; target tokens per second, median [interquartile range] over "
             f"{cfg['repeats']} alternating repeats. Ratios > 1: the suite is faster.", "",
             "| task | suite tokens/s | fairseq tokens/s | suite / fairseq |", "|---|---|---|---|"]
    lines += side_by_side_rows(summary["tasks"], "fairseq")
    same, tl = summary["same_hypotheses"], summary["tokens_per_sentence"]
    lines += ["", f"Training: {cfg['updates']} updates per repeat (fairseq: its logged wps after the first of its "
                  "5-update intervals; the suite: after one warm-up update). Decoding: "
                  f"{cfg['sentences']} test sentences with the last fairseq-train repeat's checkpoint on both sides "
                  f"(imported into the suite); hypotheses identical token for token up to the shorter length cap: greedy "
                  f"{same['greedy']:.0%}, beam {same['beam']:.0%} (fairseq 0.12 caps every sentence of a batch at "
                  "max_len_a x the padded batch width + max_len_b, the suite each sentence at its own length). That "
                  f"checkpoint has seen only {cfg['updates']} updates: its hypotheses average {tl['greedy_suite']:.1f} "
                  f"tokens with eos (greedy) and {tl['beam_suite']:.1f} (beam) per sentence, so these runs are short "
                  "(seconds; fairseq prints its generation time to 0.1 s) and weigh the encoder and the first steps "
                  "more than an evaluation of a trained model does.",
              f"Threads {summary['threads']} on both sides; load average before {summary['load_before'][0]:.2f}, "
              f"after {summary['load_after'][0]:.2f}; torch {fp['software']['torch']} (suite), commit "
              f"{commit_text(fp)}.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m repro.peers.fairseq", description=__doc__.split("\n")[0])
    ap.add_argument("--fairseq-venv", type=Path, required=True, help="a venv with fairseq-fixed==0.12.3.1")
    ap.add_argument("--scale", default="default", choices=config.SCALES)
    ap.add_argument("--repeats", type=int, default=3, help="alternating repeats per task")
    ap.add_argument("--updates", type=int, default=40, help="training updates per repeat (fairseq logs every 5)")
    ap.add_argument("--sentences", type=int, default=256, help="test sentences decoded per repeat")
    ap.add_argument("--threads", type=int, default=None, help="torch/OpenMP threads (default: the config's)")
    peer_paths_arguments(ap)
    a = ap.parse_args(argv)
    for key in ("repeats", "sentences"):
        if getattr(a, key) < 1:
            ap.error(f"--{key}: must be >= 1")
    if a.updates < 10:
        ap.error("--updates: must be >= 10 (fairseq logs every 5 updates; the first interval is not counted)")
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    s = run(a.fairseq_venv, a.scale, a.repeats, a.updates, a.sentences, a.threads, a.out, a.report, a.results)
    print(json.dumps({t: e["suite_over_fairseq"]["median"] for t, e in s["tasks"].items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
