"""Pilot learning curves for warmup_stability's default size (issue 37 item 3).

Trains candidate configurations of the claim's own experiment (repro.claims.warmup_stability.train_one, the same
code the claim runs) for a fixed number of updates each, two at a time in processes of one torch thread, and writes
one JSON line per run: the validation-NLL curve, greedy BLEU and the copy baseline on the claim's test sentences, and
the CPU seconds spent. The numbers chose the default size; they are committed in docs/pilots/warmup_stability.md.

    python scripts/pilots/warmup_stability.py CANDIDATES.json OUT_DIR

CANDIDATES.json: a list of {"name", "overrides" (merged into the default section by repro.config.section), "run"
(position, lr, warmup, layers, seed)}.
"""
from __future__ import annotations

import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path

import torch


def one(c: dict, out: str) -> dict:
    from repro import config
    from repro.claims import warmup_stability as W

    torch.set_num_threads(1)
    # the default section with the candidate's overrides, validated by the claim's schema like a user's overrides
    params = config.section("warmup_stability", "default", {"warmup_stability": c.get("overrides", {})})
    o = Path(out) / c["name"]
    (o / "curves").mkdir(parents=True, exist_ok=True)
    shared = W.prepare(params, "default", Path(out))  # tokenizer shared by vocabulary size under OUT/tokenizer
    r = c["run"]
    run = dict(name=c["name"], groups=["pilot"], norm=r.get("norm", "layernorm"), position=r["position"],
               fixnorm=False, layers=r.get("layers", params["model"]["n_encoder_layers"]), lr=r["lr"],
               warmup=r["warmup"], seed=r.get("seed", 1))
    t = time.process_time()
    s = W.train_one(params, run, shared["tok"], shared["enc"], shared["test"], o, "cpu")
    s["cpu_seconds"] = time.process_time() - t
    s["unigram_entropy"] = shared["data"]["unigram_entropy"]
    s["overrides"] = c.get("overrides", {})
    return s


def main(argv: list[str]) -> int:
    cands = json.loads(Path(argv[0]).read_text())
    out = Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    with ProcessPoolExecutor(2, mp_context=get_context("spawn")) as ex:
        futs = {ex.submit(one, c, str(out)): c["name"] for c in cands}
        for f in as_completed(futs):
            s = f.result()
            curve = [(v["step"], round(v["valid_nll"], 3)) for v in s["valid_curve"]]
            line = {k: s[k] for k in ("name", "position", "layers", "lr", "warmup", "seed", "steps", "final_valid_nll",
                                      "bleu", "bleu_clean", "bleu_copy", "cpu_seconds", "unigram_entropy",
                                      "overrides")}
            line["curve"] = curve
            with open(out / "pilots.jsonl", "a") as fh:
                fh.write(json.dumps(line) + "\n")
            print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
