"""Batched greedy and beam-search decoding for the translation claims.

Greedy decoding uses the shared model's incremental cache (``model.decoder.new_cache()``, one step per call
with ``offset=t``), so a step costs one token per sentence; head pruning (Michel et al. 2019, Fig. 1-2) decodes
the test set once per ablated head, so this path is kept lean.  Beam search follows fairseq's ``SequenceGenerator``
(Ott et al. 2019): 2k candidates per step, eos candidates among the top k are finalised with score
``sum log p / length ** len_penalty``, the k best non-eos candidates continue; a sentence stops when k hypotheses
are finalised or at its length cap.

Token rules are fairseq's (``SequenceGenerator._generate``) for both start-token conventions: the suite's own
models start decoding with ``<s>`` (bos), fairseq-trained ones with eos (``bos_id == eos_id``).  At every step pad
is banned; the start token is banned only when it is not eos (the suite's ``<s>`` is never a target; fairseq bans
nothing else, so an imported model may emit ``<s>`` like fairseq does); eos is banned at step 0 (fairseq's
``min_len=1``); at step ``max_len`` only eos is allowed, so a hypothesis has at most ``max_len`` tokens before eos,
with ``max_len = min(int(max_len_a * src_len + max_len_b), max_seq_len - 1)`` and ``src_len`` the source length
with its eos.  fairseq takes ``src_len`` as the padded width of the whole batch; here it is each sentence's own
length, which is the same for a one-sentence batch or ``max_len_a = 0``.

Sources may be right-padded (the suite's batches) or left-padded (fairseq's batches): the model derives positions
from the padding mask (fairseq's ``make_positions``), so both give the same result per sentence.

``translate(model, tokenizer, sources, ...)`` encodes text, sorts by length into batches of ``max_tokens`` source
tokens, decodes and returns hypotheses in input order.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch


@dataclass
class DecodeConfig:
    decoder: str = "greedy"  # greedy | beam
    beam: int = 4
    len_penalty: float = 1.0
    max_len_a: float = 1.5
    max_len_b: int = 10
    max_tokens: int = 8000  # source tokens per batch

    @classmethod
    def from_params(cls, ev: dict) -> "DecodeConfig":
        keys = {"decoder", "beam", "len_penalty", "max_len_a", "max_len_b", "max_tokens"}
        return cls(**{k: v for k, v in ev.items() if k in keys})


def _length_caps(src_pad_mask, a, b, model_max):
    """fairseq's max_len per sentence: tokens allowed before the forced eos (src_len counts the source's eos)."""
    src_len = (~src_pad_mask).sum(1)
    return torch.clamp((a * src_len.double()).floor().long() + b, min=1, max=model_max - 1)


def _banned(bos_id: int, pad_id: int, eos_id: int) -> list[int]:
    """Ids never generated: pad, and the start token unless it is eos (fairseq's convention)."""
    return [pad_id] if bos_id == eos_id else [pad_id, bos_id]


def _ban(scores: torch.Tensor, ids: list[int]) -> None:
    """Set the columns ``ids`` to -inf in place (one strided fill per id: cheaper than an indexed write)."""
    for i in ids:
        scores[:, i] = float("-inf")


@torch.inference_mode()
def greedy_decode(model, src, src_pad_mask, bos_id: int, eos_id: int, pad_id: int, max_len_a: float = 1.5,
                  max_len_b: int = 10, vocab_limit: int | None = None, encode=None) -> list[list[int]]:
    """Token ids (without bos/eos) of the greedy translation of each row of ``src`` (B, S).

    ``vocab_limit``: ids at or above it are never produced (an imported model with a smaller target vocabulary).
    ``encode(src, src_pad_mask)``: the encoder output in place of ``model.encode`` (a caller's cache of it).
    Finished rows are dropped from the batch (memory, masks and cache compacted) once a quarter of the active
    rows has finished, so a batch costs what its unfinished sentences cost."""
    B = src.shape[0]
    dev = src.device
    caps = _length_caps(src_pad_mask, max_len_a, max_len_b, model.cfg.max_seq_len)
    T = int(caps.max()) + 1  # steps 0..max_len, the last one eos
    banned = _banned(bos_id, pad_id, eos_id)
    memory = (encode or model.encode)(src, src_pad_mask)
    mask = src_pad_mask
    cache = model.decoder.new_cache()
    tok = torch.full((B, 1), bos_id, dtype=torch.long, device=dev)
    out = torch.full((B, T), pad_id, dtype=torch.long, device=dev)
    lengths = caps.clone()
    rows = torch.arange(B, device=dev)  # original row of each active row
    active = torch.ones(B, dtype=torch.bool, device=dev)  # over the current (compacted) batch
    row_caps = caps
    for t in range(T):
        logits = model.decode(tok, memory, mask, cache=cache, offset=t)[:, -1]
        if vocab_limit is not None:
            logits[:, vocab_limit:] = float("-inf")
        _ban(logits, banned)
        if t == 0:
            logits[:, eos_id] = float("-inf")  # fairseq's min_len = 1
        nxt = logits.argmax(-1)
        nxt = torch.where(t >= row_caps, torch.full_like(nxt, eos_id), nxt)  # cap reached: end here
        nxt = torch.where(active, nxt, torch.full_like(nxt, pad_id))
        out[rows, t] = nxt
        newly = active & (nxt == eos_id)
        if bool(newly.any()):
            lengths[rows[newly]] = t
            active = active & ~newly
            n_active = int(active.sum())
            if n_active == 0:
                break
            if n_active <= 0.75 * active.numel():  # compact: drop finished rows
                keep = active.nonzero().squeeze(1)
                rows, row_caps, nxt = rows[keep], row_caps[keep], nxt[keep]
                memory, mask = memory.index_select(0, keep), mask.index_select(0, keep)
                _reorder_cache(cache, keep)
                active = torch.ones(len(keep), dtype=torch.bool, device=dev)
        tok = nxt[:, None]
    out = out.tolist()
    return [row[: int(n)] for row, n in zip(out, lengths.tolist())]


def _reorder_cache(cache: list, order: torch.Tensor, kinds=("self", "cross")) -> None:
    for layer in cache:
        for kind in kinds:
            c = layer.get(kind)
            if c and "k" in c:
                c["k"] = c["k"].index_select(0, order)
                c["v"] = c["v"].index_select(0, order)


@dataclass
class _Beams:
    """Beam-search state of the open sentences of a batch: row ``b * K + j`` is beam ``j`` of sentence ``b``.
    Finished sentences are dropped (as fairseq does), so a batch costs what its open sentences cost."""
    K: int
    tokens: torch.Tensor  # (B * K, t + 1): the start token and the tokens so far
    steps: torch.Tensor  # (B * K, t): per-token log-probabilities of each live beam
    scores: torch.Tensor  # (B, K): summed log-probabilities
    caps: torch.Tensor  # (B,): length caps
    memory: torch.Tensor  # (B, S, d): one encoder output per sentence
    mask: torch.Tensor
    cache: list
    finalized: list  # per sentence: its list in the result (finalised hypotheses)
    done: list
    caps_l: list

    @property
    def B(self) -> int:
        return len(self.done)

    def log_probs(self, model, t: int, banned: list[int], eos_id: int, vocab_limit: int | None) -> torch.Tensor:
        """(B * K, V) next-token log-probabilities under the token rules (see the module docstring)."""
        logits = model.decode(self.tokens[:, -1:], self.memory, self.mask, cache=self.cache, offset=t)[:, -1].float()
        if vocab_limit is not None:
            logits[:, vocab_limit:] = float("-inf")
        lp = torch.log_softmax(logits, -1)
        _ban(lp, banned)
        if t == 0:
            lp[:, eos_id] = float("-inf")  # fairseq's min_len = 1
        at_cap = (t >= self.caps).repeat_interleave(self.K)  # must end now
        if bool(at_cap.any()):
            eos_lp = lp[:, eos_id].clone()
            lp.masked_fill_(at_cap[:, None], float("-inf"))
            lp[:, eos_id] = torch.where(at_cap, eos_lp, lp[:, eos_id])
        return lp

    def candidates(self, lp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(score, beam, token) of the 2K best candidates per sentence; NaN log-probabilities become -inf."""
        B, K, V = self.B, self.K, lp.shape[-1]
        cand = (self.scores.view(B * K, 1) + lp).view(B, K * V)
        top_v, top_i = cand.topk(2 * K, dim=1)
        if bool(top_v.isnan().any()):  # topk ranks NaN above every number, so any NaN in lp shows up here:
            lp.masked_fill_(lp.isnan(), float("-inf"))  # fairseq's lprobs[lprobs != lprobs] = -inf, then again
            cand = (self.scores.view(B * K, 1) + lp).view(B, K * V)
            top_v, top_i = cand.topk(2 * K, dim=1)
        return top_v, top_i // V, top_i % V

    def finalise(self, t: int, is_eos, top_v, beam_idx, lp, eos_id: int, len_penalty: float) -> None:
        """Finalise the eos candidates ranked among the top K; a sentence is done with K hypotheses or at its cap."""
        K, finalized, done = self.K, self.finalized, self.done
        eos_pos = (is_eos[:, :K]).nonzero().tolist()
        if eos_pos:
            prev, prev_lp = self.tokens[:, 1:].tolist(), self.steps.tolist()
            tv, bi = top_v.tolist(), beam_idx.tolist()
            eos_lp = lp[:, eos_id].tolist()
            for b, j in eos_pos:
                if done[b] or len(finalized[b]) >= K:
                    continue
                row = b * K + bi[b][j]
                hyp = prev[row] + [eos_id]
                finalized[b].append((tv[b][j] / (len(hyp) ** len_penalty), hyp, prev_lp[row] + [eos_lp[row]]))
        for b in range(self.B):
            if not done[b] and (len(finalized[b]) >= K or t >= self.caps_l[b]):
                done[b] = True

    def advance(self, top_v, beam_idx, tok_idx, is_eos, lp, eos_id: int, pad_id: int, dev) -> None:
        """The K best non-eos candidates per sentence continue (finished sentences get pad and score -inf)."""
        B, K, V = self.B, self.K, lp.shape[-1]
        key = torch.arange(2 * K, device=dev)[None, :] + is_eos.long() * 2 * K + (~torch.isfinite(top_v)).long() * 4 * K
        sel = key.argsort(1)[:, :K]
        new_scores = top_v.gather(1, sel)
        new_beam = beam_idx.gather(1, sel)
        new_tok = tok_idx.gather(1, sel)
        origin = (torch.arange(B, device=dev)[:, None] * K + new_beam).view(-1)
        done_t = torch.tensor(self.done, device=dev)
        step_lp = lp.view(B, K, V)[torch.arange(B, device=dev)[:, None], new_beam, new_tok].view(-1, 1)
        new_scores = new_scores.masked_fill(done_t[:, None], float("-inf"))
        new_scores = new_scores.masked_fill(new_tok == eos_id, float("-inf"))
        new_col = new_tok.masked_fill(done_t[:, None], pad_id).view(-1, 1)  # finished sentences: pad
        self.tokens = torch.cat([self.tokens.index_select(0, origin), new_col], 1)
        self.steps = torch.cat([self.steps.index_select(0, origin), step_lp], 1)
        _reorder_cache(self.cache, origin, kinds=("self",))  # beams move within their sentence: its memory stays
        self.scores = new_scores

    def drop_finished(self, dev) -> None:
        """Keep the open sentences only (their beams' rows, memory, masks and cache)."""
        K = self.K
        keep = [i for i in range(self.B) if not self.done[i]]
        ks = torch.tensor(keep, device=dev)
        kr = (ks[:, None] * K + torch.arange(K, device=dev)[None, :]).view(-1)  # their beams' rows
        self.tokens, self.steps = self.tokens.index_select(0, kr), self.steps.index_select(0, kr)
        self.scores, self.caps = self.scores.index_select(0, ks), self.caps.index_select(0, ks)
        self.memory, self.mask = self.memory.index_select(0, ks), self.mask.index_select(0, ks)
        _reorder_cache(self.cache, kr, kinds=("self",))
        _reorder_cache(self.cache, ks, kinds=("cross",))
        self.finalized, self.caps_l = [self.finalized[i] for i in keep], [self.caps_l[i] for i in keep]
        self.done = [False] * len(keep)


@torch.inference_mode()
def beam_search(model, src, src_pad_mask, bos_id: int, eos_id: int, pad_id: int, beam: int = 4,
                len_penalty: float = 1.0, max_len_a: float = 1.5, max_len_b: int = 10,
                vocab_limit: int | None = None, encode=None) -> list[list[tuple[float, list[int], list[float]]]]:
    """fairseq's beam search: per row of ``src``, the finalised hypotheses best first, each
    ``(score, tokens, positional_scores)`` with ``score = sum log p / len ** len_penalty`` (len counts the eos),
    ``tokens`` without the start token but with the final eos, and the per-token log-probabilities. ``encode``: as
    :func:`greedy_decode`'s."""
    B, K = src.shape[0], beam
    dev = src.device
    caps = _length_caps(src_pad_mask, max_len_a, max_len_b, model.cfg.max_seq_len)  # (B,)
    T = int(caps.max()) + 1  # steps 0..max_len, the last one eos
    banned = _banned(bos_id, pad_id, eos_id)
    # one encoder output per sentence, not per beam: the K beams of a sentence (consecutive rows) share it in
    # cross-attention (MultiHeadAttention folds them into the query length), so it is never repeated or reordered
    memory, mask = (encode or model.encode)(src, src_pad_mask), src_pad_mask
    cache = model.decoder.new_cache()
    tokens = torch.full((B * K, 1), bos_id, dtype=torch.long, device=dev)
    steps = torch.zeros((B * K, 0), device=dev)
    scores = torch.full((B, K), float("-inf"), device=dev)
    scores[:, 0] = 0.0  # all beams start identical: keep one (fairseq: lprobs[:, ::beam_size] at step 0)
    results: list[list[tuple[float, list[int], list[float]]]] = [[] for _ in range(B)]
    s = _Beams(K, tokens, steps, scores, caps, memory, mask, cache, finalized=list(results), done=[False] * B,
               caps_l=caps.tolist())
    for t in range(T):
        lp = s.log_probs(model, t, banned, eos_id, vocab_limit)
        top_v, beam_idx, tok_idx = s.candidates(lp)
        is_eos = (tok_idx == eos_id) & torch.isfinite(top_v)
        s.finalise(t, is_eos, top_v, beam_idx, lp, eos_id, len_penalty)
        if all(s.done):
            break
        s.advance(top_v, beam_idx, tok_idx, is_eos, lp, eos_id, pad_id, dev)
        n_done = sum(s.done)
        if n_done and n_done >= s.B / 4:  # a quarter of the sentences finished: drop them
            s.drop_finished(dev)
    # best first; Python's sort is stable, so equal scores keep the order in which they were finalised
    return [sorted(f, key=lambda x: -x[0]) for f in results]


def beam_decode(model, src, src_pad_mask, bos_id: int, eos_id: int, pad_id: int, beam: int = 4,
                len_penalty: float = 1.0, max_len_a: float = 1.5, max_len_b: int = 10,
                vocab_limit: int | None = None, encode=None) -> list[list[int]]:
    """Token ids (without bos/eos) of the best beam hypothesis per row (see :func:`beam_search`)."""
    nbest = beam_search(model, src, src_pad_mask, bos_id, eos_id, pad_id, beam, len_penalty, max_len_a, max_len_b,
                        vocab_limit, encode)
    return [f[0][1][:-1] for f in nbest]  # every sentence finalises at least one hypothesis by its cap


def _src_tensor(ids_list, pad_id, device):
    S = max(len(s) for s in ids_list)
    src = torch.full((len(ids_list), S), pad_id, dtype=torch.long)
    for i, s in enumerate(ids_list):
        src[i, : len(s)] = torch.as_tensor(s, dtype=torch.long)
    mask = torch.arange(S)[None, :] >= torch.tensor([len(s) for s in ids_list])[:, None]
    return src.to(device), mask.to(device)


def length_batches(src_ids: list[list[int]], max_tokens: int, max_src: int, eos_id: int):
    """``(positions, id lists)`` per batch: sources sorted by length, cut so that ``batch size * longest source
    <= max_tokens`` (at least one sentence); sources over ``max_src`` tokens are truncated, keeping the final eos."""
    order = sorted(range(len(src_ids)), key=lambda i: len(src_ids[i]))
    i = 0
    while i < len(order):
        j = i
        while j < len(order) and (j - i + 1) * len(src_ids[order[j]]) <= max_tokens:
            j += 1
        j = max(j, i + 1)
        idx = order[i:j]
        yield idx, [list(src_ids[k]) if len(src_ids[k]) <= max_src else list(src_ids[k][: max_src - 1]) + [eos_id]
                    for k in idx]
        i = j


@torch.no_grad()
def decode_ids(model, src_ids: list[list[int]], bos_id: int, eos_id: int, pad_id: int, cfg: DecodeConfig,
               device="cpu", vocab_limit: int | None = None, encode=None) -> tuple[list[list[int]], dict]:
    """Decode source id lists (each ending with eos) in length-sorted batches; returns hypotheses in input order
    and stats (sentences, generated tokens, seconds, tokens/s). ``encode(src, src_pad_mask)``: the encoder output
    in place of ``model.encode`` (a caller's cache: repro.claims._heads.EncoderCache)."""
    was = model.training
    model.eval()
    hyps: list[list[int] | None] = [None] * len(src_ids)
    t0 = time.perf_counter()
    for idx, batch in length_batches(src_ids, cfg.max_tokens, model.cfg.max_seq_len, eos_id):
        src, mask = _src_tensor(batch, pad_id, device)
        if cfg.decoder == "greedy":
            out = greedy_decode(model, src, mask, bos_id, eos_id, pad_id, cfg.max_len_a, cfg.max_len_b, vocab_limit,
                                encode)
        elif cfg.decoder == "beam":
            out = beam_decode(model, src, mask, bos_id, eos_id, pad_id, cfg.beam, cfg.len_penalty, cfg.max_len_a,
                              cfg.max_len_b, vocab_limit, encode)
        else:
            raise ValueError(f"eval.decoder: {cfg.decoder!r} is not greedy or beam")
        for k, h in zip(idx, out):
            hyps[k] = h
    secs = time.perf_counter() - t0
    model.train(was)
    ntok = sum(len(h) + 1 for h in hyps)
    return hyps, {"sentences": len(hyps), "generated_tokens": ntok, "seconds": secs,
                  "tokens_per_s": ntok / secs if secs > 0 else 0.0}


def translate(model, tokenizer, sources: list[str], cfg: DecodeConfig | None = None, device="cpu",
              bos_id: int | None = None, src_tokenizer=None, vocab_limit: int | None = None) -> tuple[list[str], dict]:
    """Translate ``sources`` (text) with ``tokenizer`` (sentencepiece Tokenizer or FairseqDictionary).

    ``bos_id``: the decoder's start token (default the tokenizer's bos; fairseq-trained models start with eos).
    ``src_tokenizer``: a separate source vocabulary (imported fairseq models with two dictionaries)."""
    cfg = cfg or DecodeConfig()
    eos = tokenizer.eos_id
    st = src_tokenizer or tokenizer
    enc = st.encode_batch(sources) if hasattr(st, "encode_batch") else [st.encode(s) for s in sources]
    src_ids = [list(e) + [st.eos_id] for e in enc]
    hyps, stats = decode_ids(model, src_ids, tokenizer.bos_id if bos_id is None else bos_id, eos, tokenizer.pad_id,
                             cfg, device, vocab_limit)
    return [tokenizer.decode(h) for h in hyps], stats
