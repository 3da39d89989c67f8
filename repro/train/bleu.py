"""BLEU for the translation claims: sacrebleu corpus BLEU (Post 2018) with its signature, the copy
baseline and the placeholder-free subset, and paired bootstrap resampling (Koehn 2004).

Head pruning (Michel et al. 2019, Table 1-2) asks whether ablating one head changes BLEU significantly: compute
:func:`sentence_stats` once per system, then :func:`paired_bootstrap` between the baseline and each ablation
(the resampled index sets depend only on the seed, so every comparison uses the same samples).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from sacrebleu.metrics import BLEU

_BLEU = BLEU()  # default: 13a tokenisation, exp smoothing, mixed case


def bleu_metric() -> BLEU:
    return _BLEU


@dataclass
class BleuScore:
    score: float
    signature: str
    n: int
    bp: float
    sys_len: int
    ref_len: int
    precisions: list

    def as_dict(self) -> dict:
        return asdict(self)


def corpus_bleu(hyps: list[str], refs: list[str]) -> BleuScore:
    """sacrebleu corpus BLEU of ``hyps`` against one reference each, with the sacrebleu signature."""
    if len(hyps) != len(refs):
        raise ValueError(f"corpus_bleu: {len(hyps)} hypotheses but {len(refs)} references")
    r = _BLEU.corpus_score(list(hyps), [list(refs)])
    return BleuScore(float(r.score), str(_BLEU.get_signature()), len(hyps), float(r.bp), int(r.sys_len),
                     int(r.ref_len), [float(p) for p in r.precisions])


def sentence_stats(hyps: list[str], refs: list[str]) -> np.ndarray:
    """(N, 10) sufficient statistics per sentence (sys_len, ref_len, 4 n-gram matches, 4 n-gram totals),
    summable over any subset (how sacrebleu's own significance tests resample)."""
    if len(hyps) != len(refs):
        raise ValueError(f"sentence_stats: {len(hyps)} hypotheses but {len(refs)} references")
    return np.asarray(_BLEU._extract_corpus_statistics(list(hyps), [list(refs)]), dtype=np.int64)


def bleu_from_stats(stats: np.ndarray) -> float:
    """Corpus BLEU of the summed statistics of the rows of ``stats`` (one subset) or of each sample
    when ``stats`` is (n_samples, 10)."""
    stats = np.asarray(stats)
    if stats.ndim == 1:
        return float(_BLEU._compute_score_from_stats([int(x) for x in stats]).score)
    order = _BLEU.max_ngram_order
    if _BLEU.smooth_method == "exp" and not _BLEU.effective_order and stats.shape[1:] == (2 + 2 * order,):
        return _exp_smoothed_bleu_rows(stats, order)
    return np.array([_BLEU._compute_score_from_stats([int(x) for x in row]).score for row in stats])


def _exp_smoothed_bleu_rows(stats: np.ndarray, order: int) -> np.ndarray:
    """sacrebleu's ``BLEU.compute_bleu`` (exp smoothing, no effective order) for every row of ``stats`` at once:
    the same operations in the same order (``math.log`` and ``math.exp`` per value, the log-precisions summed left
    to right), so the same bits (tests/test_train.py), ~7x faster than one sacrebleu call per row (0.018 vs 0.136 s
    for a paired bootstrap's 20,000 resamples)."""
    stats = np.asarray(stats, dtype=np.int64)
    sys_len, ref_len = stats[:, 0], stats[:, 1]
    correct, total = stats[:, 2: 2 + order], stats[:, 2 + order:]
    bp = [1.0 if s >= r else math.exp(1 - r / s) if s > 0 else 0.0 for s, r in zip(sys_len.tolist(), ref_len.tolist())]
    prec = np.zeros(correct.shape)
    smooth = np.ones(len(stats))
    counted = np.ones(len(stats), dtype=bool)  # sacrebleu stops at the first order with no n-grams
    for n in range(order):
        counted &= total[:, n] != 0
        zero = counted & (correct[:, n] == 0)
        smooth = np.where(zero, smooth * 2, smooth)
        safe = np.where(counted, total[:, n], 1)
        prec[:, n] = np.where(counted, np.where(zero, 100. / (smooth * safe), 100. * correct[:, n] / safe), 0.0)
    scores = []
    for b, row in zip(bp, prec.tolist()):
        acc = 0
        for p in row:
            acc += math.log(p) if p != 0.0 else -9999999999
        scores.append(b * math.exp(acc / order))
    out = np.array(scores, dtype=np.float64)
    out[~correct.any(1)] = 0.0
    return out


def subset_bleu(hyps: list[str], refs: list[str], mask: list[bool]) -> BleuScore:
    """BLEU on the pairs where ``mask`` is True (e.g. ``Corpus.test_clean_mask``: no placeholders)."""
    if len(mask) != len(hyps):
        raise ValueError(f"subset_bleu: mask has {len(mask)} entries for {len(hyps)} hypotheses")
    return corpus_bleu([h for h, m in zip(hyps, mask) if m], [r for r, m in zip(refs, mask) if m])


def bootstrap_indices(n: int, samples: int, seed: int) -> np.ndarray:
    """(samples, n) sentence indices drawn with replacement; a pure function of (n, samples, seed)."""
    return np.random.default_rng(seed).integers(0, n, size=(samples, n))


def bootstrap_counts(n: int, samples: int, seed: int) -> np.ndarray:
    """(samples, n): how often each of the ``n`` sentences is drawn in each resample of :func:`bootstrap_indices`
    (the resampled statistics are then ``counts @ stats``, without materialising (samples, n, 10))."""
    idx = bootstrap_indices(n, samples, seed)
    counts = np.zeros((samples, n), dtype=np.int64)
    np.add.at(counts, (np.repeat(np.arange(samples), n), idx.reshape(-1)), 1)
    return counts


def paired_bootstrap(stats_a: np.ndarray, stats_b: np.ndarray, samples: int = 1000, seed: int = 0,
                     alpha: float = 0.05, *, counts: np.ndarray | None = None,
                     resampled_a: np.ndarray | None = None) -> dict:
    """Paired bootstrap resampling (Koehn 2004) of BLEU(b) - BLEU(a) on the same test sentences.

    Returns the observed BLEUs and delta, the (1 - alpha) percentile interval of the delta and of each system's
    BLEU, and a two-sided p-value: 2 * min(P(delta* <= 0), P(delta* >= 0)) over the resamples (capped at 1),
    i.e. how often the resampled difference has the other sign. ``counts`` (:func:`bootstrap_counts` of the same
    sentences, samples and seed) and ``resampled_a`` (system a's BLEU per resample, ``bleu_from_stats(counts @
    stats_a)``) may be passed in when many comparisons share them: the same numbers, computed once."""
    stats_a, stats_b = np.asarray(stats_a), np.asarray(stats_b)
    if stats_a.shape != stats_b.shape:
        raise ValueError(f"paired_bootstrap: systems scored on different sets ({stats_a.shape} vs {stats_b.shape})")
    if counts is None:
        counts = bootstrap_counts(stats_a.shape[0], samples, seed)
    ba = bleu_from_stats(counts @ stats_a) if resampled_a is None else resampled_a
    bb = bleu_from_stats(counts @ stats_b)
    delta = bb - ba
    obs_a, obs_b = bleu_from_stats(stats_a.sum(0)), bleu_from_stats(stats_b.sum(0))
    q = [100 * alpha / 2, 100 * (1 - alpha / 2)]
    p = min(1.0, 2 * min(float(np.mean(delta <= 0)), float(np.mean(delta >= 0))))
    return {"bleu_a": obs_a, "bleu_b": obs_b, "delta": obs_b - obs_a, "p_value": p,
            "delta_ci": [float(x) for x in np.percentile(delta, q)],
            "ci_a": [float(x) for x in np.percentile(ba, q)], "ci_b": [float(x) for x in np.percentile(bb, q)],
            "samples": samples, "seed": seed, "alpha": alpha}


def bootstrap_se(hyps: list[str], refs: list[str], sources: list[str], samples: int, seed: int) -> dict:
    """Sampling error of a test set's corpus BLEU over its sentences (Koehn 2004's bootstrap): the standard deviation
    over ``samples`` resampled sentence sets (seed ``seed``) of the system's BLEU (``bleu``) and of its paired
    difference to copying the source (``minus_copy``, the same resamples). A standard error, so the judge picks the
    confidence level (a threshold) without resampling again."""
    sys_stats, copy_stats = sentence_stats(hyps, refs), sentence_stats(sources, refs)
    counts = bootstrap_counts(sys_stats.shape[0], samples, seed)
    b_sys, b_copy = bleu_from_stats(counts @ sys_stats), bleu_from_stats(counts @ copy_stats)
    return {"bleu": float(np.std(b_sys, ddof=1)), "minus_copy": float(np.std(b_sys - b_copy, ddof=1)),
            "samples": int(samples), "seed": int(seed), "sentences": int(sys_stats.shape[0])}


def bleu_report(hyps: list[str], refs: list[str], sources: list[str], clean_mask: list[bool] | None = None) -> dict:
    """Full-test BLEU, placeholder-free-subset BLEU and the copy baseline (source used as the output) on both."""
    out = {"full": corpus_bleu(hyps, refs).as_dict(), "copy_full": corpus_bleu(sources, refs).as_dict()}
    if clean_mask is not None:
        out["clean"] = subset_bleu(hyps, refs, clean_mask).as_dict()
        out["copy_clean"] = subset_bleu(sources, refs, clean_mask).as_dict()
    return out
