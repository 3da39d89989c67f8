"""Command line: the tokenizer step of the translation artefact, from config.

``python -m repro.train.prepare --params JSON --out DIR`` checks the configured corpus (and fairseq checkpoint)
paths, failing early with the config key named, then writes ``DIR/tokenizer.json`` pointing at the vocabulary:

* ``corpus.format`` tsv/raw: a joint sentencepiece model trained on both sides of the training split
  (``DIR/spm.model``, ``spm.vocab``, ``spm.json``; Kudo & Richardson 2018, via repro.data.train_sentencepiece);
* ``data_bin``: the data-bin's ``dict.<tgt>.txt`` (already BPE-segmented by fairseq-preprocess);
* ``fairseq_checkpoint`` set: the checkpoint's dictionaries (nothing is trained).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
from pathlib import Path

from repro.cli import add_params_arguments, load_params, out_folder, setup_logging
from repro.data.tokenizer import train_sentencepiece
from repro.errors import ConfigError
from repro.layout import TOKENIZER_NAME
from repro.train.pipeline import load_data, require_path

log = logging.getLogger("repro.translation")


def prepare(params: dict, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    c = params["corpus"]
    sl, tl = c["direction"].split("-")
    if params.get("fairseq_checkpoint"):
        ck = require_path(params["fairseq_checkpoint"], "fairseq_checkpoint", "fairseq checkpoint file")
        where = Path(c["path"]) if c.get("path") else ck.parent
        tgt = where / f"dict.{tl}.txt"
        if not tgt.exists():
            tgt = ck.parent / f"dict.{tl}.txt"
        require_path(str(tgt), "fairseq_checkpoint (dict." + tl + ".txt beside it or in corpus.path)", "dictionary")
        info = {"kind": "fairseq_dict", "path": str(tgt.resolve()), "fairseq_checkpoint": str(ck.resolve())}
    elif c["format"] == "data_bin":
        d = require_path(c["path"], "corpus.path", "fairseq data-bin directory")
        tgt = require_path(str(d / f"dict.{tl}.txt"), "corpus.path (dict." + tl + ".txt)", "dictionary")
        info = {"kind": "fairseq_dict", "path": str(tgt.resolve())}
    else:
        if not c.get("path"):
            raise SystemExit("translation.corpus.path: not set")
        corpus = load_data(params)
        t = params["tokenizer"]
        texts = [s for pair in corpus.train for s in pair]
        tok = train_sentencepiece(texts, out / "spm", t["vocab_size"], t["model_type"], t["character_coverage"],
                                  t["seed"], 1)
        info = {"kind": "sentencepiece", "path": str((out / "spm.model").resolve()), "vocab_size": tok.vocab_size,
                "sha256": tok.sha256(),
                "vocab_sha256": hashlib.sha256((out / "spm.vocab").read_bytes()).hexdigest(),
                "train_sentences": len(texts), **t}
        (out / "spm.json").write_text(json.dumps(info, indent=1) + "\n")
    info.update(corpus=c, direction=c["direction"])
    (out / TOKENIZER_NAME).write_text(json.dumps(info, indent=1) + "\n")
    log.info("tokenizer: %s", json.dumps(info))
    return info


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m repro.train.prepare", description=__doc__.split("\n")[0])
    add_params_arguments(ap, "translation", scale_default="default")
    ap.add_argument("--out", required=True, type=out_folder, help="tokenizer folder (a folder, or a path not there yet)")
    a = ap.parse_args(argv)
    setup_logging()
    params = load_params(ap, "translation", a.scale, a.params)
    try:
        prepare(params, a.out)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
