"""Plain text files for language models imported from Hugging Face folders (the paper sections of layer_pruning and
quantization: a text file the user gives, tokenized with the folder's tokenizer, repro.model.hf_import.load_tokenizer).

- :func:`read_lines`: the non-empty lines of a file (layer_pruning: one calibration / evaluation sequence per line).
- :func:`token_stream`: the whole file as one token stream, bos first, as GPTQ's and LLM.int8()'s evaluation scripts
  tokenize WikiText-2 / C4 (``tokenizer("\\n\\n".join(rows))``); :func:`stride_windows` cuts it into windows of the
  model's context for perplexity, :func:`random_segments` draws GPTQ's random calibration segments from it, and
  :func:`lm_batch` wraps token windows as the suite's :class:`repro.data.batching.Batch` (no padding).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from repro.data.batching import Batch


def read_lines(path: str | Path) -> list[str]:
    """The stripped non-empty lines of a UTF-8 text file."""
    return [ln.strip() for ln in Path(path).read_text(encoding="utf-8").splitlines() if ln.strip()]


def token_stream(tokenizer, path: str | Path) -> np.ndarray:
    """The file tokenized as one stream: ``[bos] + encode(text)`` (int64)."""
    text = Path(path).read_text(encoding="utf-8")
    return np.asarray([tokenizer.bos_id] + tokenizer.encode(text), dtype=np.int64)


def stride_windows(n_tokens: int, seq_len: int, stride: int) -> list[tuple[int, int, int]]:
    """Windows (begin, end, first scored target) over a stream of ``n_tokens`` for perplexity with a sliding context
    (the Hugging Face perplexity recipe): a window holds at most ``seq_len`` tokens and starts ``stride`` after the
    previous one; a token is predicted at most once, in the first window that holds it after that window's first
    position. ``stride == seq_len``: GPTQ's disjoint windows (``seq_len - 1`` predictions each; a window's first
    token is context only); a smaller stride predicts every token from position 1 on, each with at least
    ``seq_len - stride`` tokens of context."""
    if not 0 < stride <= seq_len:
        raise ValueError(f"stride {stride} must be in 1..seq_len ({seq_len})")
    out, scored_to = [], 1  # position 0 (bos) is never a target
    for begin in range(0, max(n_tokens - 1, 1), stride):
        end = min(begin + seq_len, n_tokens)
        if end > scored_to:
            out.append((begin, end, max(scored_to, begin + 1)))
            scored_to = end
        if end == n_tokens:
            break
    return out


def random_segments(ids: np.ndarray, n: int, seq_len: int, seed: int) -> list[np.ndarray]:
    """``n`` segments of ``seq_len`` consecutive tokens at uniformly random starts (GPTQ's calibration: 128 random
    2048-token segments of C4), seeded."""
    if len(ids) < seq_len:
        raise ValueError(f"{len(ids)} tokens are fewer than one segment of {seq_len}")
    starts = np.random.default_rng(seed).integers(0, len(ids) - seq_len + 1, size=n)
    return [ids[s:s + seq_len] for s in starts.tolist()]


def lm_batch(tokens) -> Batch:
    """A decoder-only batch (1, T) of consecutive tokens: ``tgt_in`` = tokens[:-1], ``tgt_out`` = tokens[1:], no
    padding (``src`` is empty)."""
    t = torch.as_tensor(np.asarray(tokens), dtype=torch.long).reshape(1, -1)
    z = torch.zeros(1, 0, dtype=torch.long)
    return Batch(z, t[:, :-1], t[:, 1:], z.bool(), torch.zeros(1, t.shape[1] - 1, dtype=torch.bool),
                 torch.zeros(1, dtype=torch.long))
