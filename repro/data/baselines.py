"""Baselines a trained model must beat before a claim reads anything into it: the perplexity of a model that
learned only token frequencies (used by the quantization and layer-pruning gates)."""
from __future__ import annotations

import math

import numpy as np


def unigram_ppl(train, valid, vocab: int) -> float:
    """Perplexity of the add-one unigram model of the training targets (with eos) on the validation targets
    (``EncodedCorpus`` objects): the gate a trained LM must clear by far."""
    counts = np.ones(vocab)
    for t in train.tgt:
        np.add.at(counts, t, 1)
    counts[train.eos_id] += len(train.tgt)
    logp = np.log(counts / counts.sum())
    tot = sum(float(logp[t].sum()) + logp[valid.eos_id] for t in valid.tgt)
    n = sum(len(t) + 1 for t in valid.tgt)
    return math.exp(-tot / n)
