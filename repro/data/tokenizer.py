"""Joint sentencepiece vocabulary for the translation claims.

The head-pruning, warm-up and layer-dropping papers (Michel et al. 2019; Xiong et al. 2020;
Fan et al. 2020) train on joint subword vocabularies over both languages; here a sentencepiece
model (Kudo & Richardson 2018; unigram or BPE) is trained on both sides of the training split.

Special ids (fixed, documented, used by :mod:`repro.data.batching` and the models):
``pad=0, unk=1, bos=2, eos=3``.  pad is 0 so zero-initialised buffers are padding.
Normalisation is ``identity`` (no NFKC) so that ``decode(encode(s)) == s`` for any text whose
characters were seen in training, keeping BLEU against the raw references honest.
Determinism: fixed ``seed`` (sentencepiece's global RNG) and ``num_threads`` (default 1), and
all sentences used (no sampling), so the same corpus gives the same model file.

CLI (Snakemake): ``python -m repro.data.tokenizer --corpus data/gettext_de_en --direction de-en
--vocab-size 8000 --out PREFIX`` writes ``PREFIX.model``, ``PREFIX.vocab`` and ``PREFIX.json``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import sentencepiece as spm

from repro.data.corpus import load_corpus

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3


def train_sentencepiece(
    texts,
    model_prefix: str | Path,
    vocab_size: int,
    model_type: str = "unigram",
    character_coverage: float = 1.0,
    seed: int = 0,
    num_threads: int = 1,
    max_sentence_length: int = 8192,
    hard_vocab_limit: bool = False,
    byte_fallback: bool = False,
) -> "Tokenizer":
    """Train a sentencepiece model on ``texts`` and return it loaded.

    ``texts`` is an iterable of sentences or a list of file paths (``Path`` objects or strings
    naming existing files; one sentence per line).  ``hard_vocab_limit=False`` lets a tiny
    corpus end with fewer pieces than ``vocab_size`` instead of failing; ``byte_fallback`` encodes
    unseen characters as UTF-8 byte pieces instead of unk (costs 256 vocabulary entries).
    The ``.model`` file records its output path, so compare ``.vocab`` files for determinism."""
    if model_type not in ("unigram", "bpe", "char", "word"):
        raise ValueError(f"model_type must be unigram, bpe, char or word, got {model_type!r}")
    if vocab_size < 8:
        raise ValueError(f"vocab_size must be at least 8, got {vocab_size}")
    model_prefix = Path(model_prefix)
    model_prefix.parent.mkdir(parents=True, exist_ok=True)
    kwargs = dict(
        model_prefix=str(model_prefix),
        vocab_size=vocab_size,
        model_type=model_type,
        character_coverage=character_coverage,
        num_threads=num_threads,
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        normalization_rule_name="identity",
        input_sentence_size=0,
        shuffle_input_sentence=False,
        max_sentence_length=max_sentence_length,
        hard_vocab_limit=hard_vocab_limit,
        byte_fallback=byte_fallback,
        minloglevel=2,
    )
    texts = list(texts) if not isinstance(texts, (list, tuple)) else texts
    is_files = len(texts) > 0 and all(isinstance(t, Path) or (isinstance(t, str) and Path(t).is_file()) for t in texts)
    spm.set_random_generator_seed(seed)
    if is_files:
        for t in texts:
            if not Path(t).is_file():
                raise FileNotFoundError(f"{t}: tokenizer training file not found")
        spm.SentencePieceTrainer.train(input=",".join(str(t) for t in texts), **kwargs)
    else:
        sents = [s for s in texts if s.strip()]
        if not sents:
            raise ValueError("no non-empty sentences to train the tokenizer on")
        spm.SentencePieceTrainer.train(sentence_iterator=iter(sents), **kwargs)
    return Tokenizer.load(str(model_prefix) + ".model")


class Tokenizer:
    """A loaded sentencepiece model with the project's special ids."""

    def __init__(self, sp: spm.SentencePieceProcessor, path: str):
        self.sp = sp
        self.path = path
        for name, want in (("pad", PAD_ID), ("unk", UNK_ID), ("bos", BOS_ID), ("eos", EOS_ID)):
            got = getattr(sp, f"{name}_id")()
            if got != want:
                raise ValueError(f"{path}: {name}_id is {got}, expected {want} (train with train_sentencepiece)")

    @classmethod
    def load(cls, path: str | Path) -> "Tokenizer":
        """Load ``path`` (a ``.model`` file or its prefix)."""
        p = Path(path)
        if p.suffix != ".model":
            p = Path(str(p) + ".model")
        if not p.exists():
            raise FileNotFoundError(f"{p}: sentencepiece model not found")
        sp = spm.SentencePieceProcessor()
        sp.load(str(p))
        return cls(sp, str(p))

    pad_id, unk_id, bos_id, eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def __len__(self) -> int:
        return self.vocab_size

    def encode(self, text: str) -> list[int]:
        """Piece ids of ``text``, without bos/eos."""
        return self.sp.encode(text, out_type=int)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self.sp.encode(list(texts), out_type=int)

    def pieces(self, text: str) -> list[str]:
        return self.sp.encode(text, out_type=str)

    def decode(self, ids) -> str:
        """Text of ``ids``; pad/bos/eos are dropped and decoding stops at the first eos."""
        out = []
        for i in ids:
            i = int(i)
            if i == EOS_ID:
                break
            if i not in (PAD_ID, BOS_ID):
                out.append(i)
        return self.sp.decode(out)

    def id_to_piece(self, i: int) -> str:
        return self.sp.id_to_piece(int(i))

    def sha256(self) -> str:
        return hashlib.sha256(Path(self.path).read_bytes()).hexdigest()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Train a joint sentencepiece model on a corpus's train split.")
    ap.add_argument("--corpus", required=True, help="corpus directory or name under data/")
    ap.add_argument("--direction", default="de-en")
    ap.add_argument("--vocab-size", type=int, required=True)
    ap.add_argument("--out", required=True, help="output prefix (writes PREFIX.model, .vocab, .json)")
    ap.add_argument("--model-type", default="unigram", choices=["unigram", "bpe", "char", "word"])
    ap.add_argument("--character-coverage", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--byte-fallback", action="store_true", help="unseen characters as byte pieces, not unk")
    a = ap.parse_args(argv)
    c = load_corpus(a.corpus, a.direction)
    texts = [s for pair in c.train for s in pair]
    tok = train_sentencepiece(texts, a.out, a.vocab_size, a.model_type, a.character_coverage, a.seed, a.threads,
                              byte_fallback=a.byte_fallback)
    info = {
        "model": Path(tok.path).name,
        "sha256": tok.sha256(),
        "vocab_sha256": hashlib.sha256(Path(str(a.out) + ".vocab").read_bytes()).hexdigest(),
        "corpus": str(a.corpus),
        "direction": a.direction,
        "train_sentences": len(texts),
        "vocab_size_requested": a.vocab_size,
        "vocab_size": tok.vocab_size,
        "model_type": a.model_type,
        "character_coverage": a.character_coverage,
        "seed": a.seed,
        "threads": a.threads,
        "byte_fallback": a.byte_fallback,
        "special_ids": {"pad": PAD_ID, "unk": UNK_ID, "bos": BOS_ID, "eos": EOS_ID},
        "normalization": "identity",
    }
    Path(str(a.out) + ".json").write_text(json.dumps(info, indent=1) + "\n")
    print(f"tokenizer {tok.path}: vocab {tok.vocab_size}, trained on {len(texts)} sentences", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
