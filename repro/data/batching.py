"""Token-id encoding and token-based batching for the translation claims.

Batches are formed like fairseq's ``--max-tokens`` (Ott et al. 2019, used by the head-pruning,
warm-up and layer-dropping papers): sentences sorted by length, then cut greedily so that
``batch_size * max(padded src length, padded tgt length) <= max_tokens``.

Layout of one pair: ``src = x + [eos]``, ``tgt_in = [bos] + y``, ``tgt_out = y + [eos]``.
Masks follow ``repro.model``: ``True`` marks padding.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch


@dataclass
class EncodedCorpus:
    """Token ids of kept pairs: ``src[i]`` ends with eos, ``tgt[i]`` is y without specials;
    ``index[i]`` is the position of that pair in the input list."""

    src: list[np.ndarray]
    tgt: list[np.ndarray]
    index: np.ndarray
    pad_id: int
    bos_id: int
    eos_id: int
    n_input: int  # pairs given to encode_corpus
    n_truncated: int = 0

    def __len__(self) -> int:
        return len(self.src)

    @property
    def src_lens(self) -> np.ndarray:
        return np.fromiter((len(s) for s in self.src), dtype=np.int64, count=len(self.src))

    @property
    def tgt_lens(self) -> np.ndarray:  # length of tgt_in / tgt_out
        return np.fromiter((len(t) + 1 for t in self.tgt), dtype=np.int64, count=len(self.tgt))


@dataclass
class Batch:
    """One padded batch (LongTensors (B, S) / (B, T); masks bool, True = pad)."""

    src: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    src_pad_mask: torch.Tensor
    tgt_pad_mask: torch.Tensor
    index: torch.Tensor  # (B,) positions in the pair list given to encode_corpus

    @property
    def num_tokens(self) -> int:
        """Padded size in tokens, the quantity bounded by ``max_tokens``."""
        return self.src.shape[0] * max(self.src.shape[1], self.tgt_in.shape[1])

    @property
    def ntokens(self) -> int:
        """Non-pad target tokens (the loss normaliser)."""
        return int((~self.tgt_pad_mask).sum())

    def to(self, device) -> "Batch":
        return Batch(*(t.to(device) for t in (self.src, self.tgt_in, self.tgt_out, self.src_pad_mask,
                                              self.tgt_pad_mask, self.index)))


def encode_corpus(pairs, tokenizer, max_len: int, on_long: str = "drop") -> EncodedCorpus:
    """Encode (src, tgt) text pairs with ``tokenizer`` (pad/bos/eos ids taken from it).

    ``max_len`` bounds ``len(src)`` (with eos) and ``len(tgt_in)``.  ``on_long``: "drop" the pair
    (training), "truncate" it (evaluation keeps every pair), or "error"."""
    if on_long not in ("drop", "truncate", "error"):
        raise ValueError(f"on_long must be drop, truncate or error, got {on_long!r}")
    if max_len < 2:
        raise ValueError(f"max_len must be >= 2, got {max_len}")
    pairs = list(pairs)
    srcs = tokenizer.encode_batch([s for s, _ in pairs]) if hasattr(tokenizer, "encode_batch") else \
        [tokenizer.encode(s) for s, _ in pairs]
    tgts = tokenizer.encode_batch([t for _, t in pairs]) if hasattr(tokenizer, "encode_batch") else \
        [tokenizer.encode(t) for _, t in pairs]
    eos = tokenizer.eos_id
    out_s, out_t, idx, n_trunc = [], [], [], 0
    for i, (s, t) in enumerate(zip(srcs, tgts)):
        if len(s) + 1 > max_len or len(t) + 1 > max_len:
            if on_long == "drop":
                continue
            if on_long == "error":
                raise ValueError(f"pair {i} is longer than max_len={max_len} tokens ({len(s) + 1}, {len(t) + 1})")
            s, t = s[: max_len - 1], t[: max_len - 1]
            n_trunc += 1
        out_s.append(np.asarray(list(s) + [eos], dtype=np.int64))
        out_t.append(np.asarray(t, dtype=np.int64))
        idx.append(i)
    return EncodedCorpus(out_s, out_t, np.asarray(idx, dtype=np.int64), tokenizer.pad_id, tokenizer.bos_id, eos,
                         len(pairs), n_trunc)


def batch_indices(encoded: EncodedCorpus, max_tokens: int, shuffle: bool = True, seed: int = 0,
                  max_sentences: int | None = None) -> list[np.ndarray]:
    """Lists of positions (into ``encoded``) per batch.

    Order: a seeded permutation (when ``shuffle``) stably sorted by (src length, tgt length), cut
    greedily under ``max_tokens``; the batch order is then shuffled with the same seed."""
    n = len(encoded)
    if n == 0:
        return []
    rng = np.random.default_rng(seed)
    src_l, tgt_l = encoded.src_lens, encoded.tgt_lens
    order = rng.permutation(n) if shuffle else np.arange(n)
    order = order[np.argsort(tgt_l[order], kind="stable")]
    order = order[np.argsort(src_l[order], kind="stable")]
    longest = int(max(src_l.max(), tgt_l.max()))
    if longest > max_tokens:
        raise ValueError(f"max_tokens={max_tokens} is smaller than the longest sequence ({longest} tokens); "
                         "raise max_tokens or lower max_len")
    batches, cur, cur_len = [], [], 0
    for i in order.tolist():
        L = max(int(src_l[i]), int(tgt_l[i]))
        new_len = max(cur_len, L)
        if cur and (new_len * (len(cur) + 1) > max_tokens or (max_sentences and len(cur) >= max_sentences)):
            batches.append(np.asarray(cur, dtype=np.int64))
            cur, new_len = [], L
        cur.append(i)
        cur_len = new_len
    if cur:
        batches.append(np.asarray(cur, dtype=np.int64))
    if shuffle:
        batches = [batches[j] for j in rng.permutation(len(batches))]
    return batches


def collate(encoded: EncodedCorpus, positions) -> Batch:
    """Pad the pairs at ``positions`` into one :class:`Batch`. Filled in numpy, then wrapped: one torch slice
    assignment per sentence cost ~8x more (0.95 vs 0.12 ms for a 1024-token batch, ~1.4% of a small model's
    update), for the same tensors (tests/test_data.py)."""
    positions = np.asarray(positions, dtype=np.int64)
    B = len(positions)
    srcs = [encoded.src[i] for i in positions.tolist()]
    tgts = [encoded.tgt[i] for i in positions.tolist()]
    src_l = np.fromiter((len(s) for s in srcs), np.int64, B)
    tgt_l = np.fromiter((len(y) for y in tgts), np.int64, B)
    S, T = int(src_l.max()), int(tgt_l.max()) + 1
    src, tgt_in, tgt_out = (np.full((B, n), encoded.pad_id, dtype=np.int64) for n in (S, T, T))
    for b, (s, y) in enumerate(zip(srcs, tgts)):
        src[b, : len(s)] = s
        tgt_in[b, 1: len(y) + 1] = y
        tgt_out[b, : len(y)] = y
    tgt_in[:, 0] = encoded.bos_id
    tgt_out[np.arange(B), tgt_l] = encoded.eos_id
    src_pad_mask = torch.arange(S)[None, :] >= torch.from_numpy(src_l)[:, None]
    tgt_pad_mask = torch.arange(T)[None, :] >= torch.from_numpy(tgt_l + 1)[:, None]
    return Batch(torch.from_numpy(src), torch.from_numpy(tgt_in), torch.from_numpy(tgt_out), src_pad_mask,
                 tgt_pad_mask, torch.from_numpy(encoded.index[positions]))


def token_batches(encoded: EncodedCorpus, max_tokens: int, shuffle: bool = True, seed: int = 0,
                  max_sentences: int | None = None) -> Iterator[Batch]:
    """Padded batches of at most ``max_tokens`` padded tokens, deterministic given ``seed``
    (pass ``seed + epoch`` for a new order each epoch).  Every kept pair appears exactly once."""
    for pos in batch_indices(encoded, max_tokens, shuffle, seed, max_sentences):
        yield collate(encoded, pos)
