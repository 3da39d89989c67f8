"""Command line: train the translation model or the target-side LM (or import a fairseq checkpoint).

``python -m repro.train.train --params JSON --tokenizer spm.model --out DIR [--lm]`` writes
``DIR/checkpoint_last.pt`` (resumed when present), ``DIR/curve.csv`` and ``DIR/summary.json``.
Without ``--params`` the section of config/claims/translation.yaml at ``--scale`` is used.  When
``fairseq_checkpoint`` is set in the parameters the encoder-decoder is imported instead of trained.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from repro.cli import add_params_arguments, load_params, out_folder, setup_logging
from repro.train.fairseq_import import import_to_checkpoint
from repro.train.loop import CheckpointError
from repro.train.pipeline import train_from_params


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m repro.train.train", description=__doc__.split("\n")[0])
    add_params_arguments(ap, "translation", scale_default="default",
                         params_help="JSON parameters (the translation section at one scale)")
    ap.add_argument("--tokenizer", help="sentencepiece .model, fairseq dict.<tgt>.txt or tokenizer.json (prepare)")
    ap.add_argument("--out", required=True, type=out_folder, help="model folder (a folder, or a path not there yet)")
    ap.add_argument("--work", type=out_folder, default=None, help="folder for the resumable state (default: --out)")
    ap.add_argument("--lm", action="store_true", help="train the decoder-only LM on the target side")
    ap.add_argument("--no-resume", action="store_true", help="start from scratch even if a checkpoint exists")
    ap.add_argument("--stop-after-steps", type=int, default=None, help="stop this call after N updates (resumable)")
    a = ap.parse_args(argv)
    setup_logging()
    params = load_params(ap, "translation", a.scale, a.params)
    a.out.mkdir(parents=True, exist_ok=True)
    if params.get("fairseq_checkpoint") and not a.lm:
        ck = import_to_checkpoint(params, a.out)
        (a.out / "summary.json").write_text(json.dumps({"kind": "fairseq", "stop_reason": "imported",
                                                        "checkpoint": str(ck),
                                                        "fairseq_checkpoint": params["fairseq_checkpoint"]}) + "\n")
        return 0
    if not a.tokenizer:
        ap.error("--tokenizer is required unless fairseq_checkpoint is set")
    try:
        res = train_from_params(params, a.tokenizer, a.out, kind="lm" if a.lm else "encdec", resume=not a.no_resume,
                                stop_after_steps=a.stop_after_steps, work_dir=a.work)
    except CheckpointError as exc:  # names the damaged file; nothing is deleted
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(res.summary()), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
