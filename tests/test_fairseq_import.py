"""fairseq checkpoint import (issue 4): a tiny checkpoint in fairseq's exact key layout, written here, imported into
the shared EncoderDecoder and compared with a from-scratch reference of fairseq's transformer forward pass."""
from __future__ import annotations

import argparse
import math

import pytest
import torch
import torch.nn.functional as F

from repro.data.fairseq_io import write_fairseq_dictionary
from repro.train.fairseq_import import FairseqImportError, import_fairseq_checkpoint

D, H, FF = 16, 4, 24


def _dict_symbols(n, prefix):
    return [f"{prefix}{i}" for i in range(n)]


def _fairseq_state(rng, n_enc, n_dec, vocab_src, vocab_tgt, share_all, learned_pos=False, pre=False, max_pos=32,
                   pad=1):
    """A state dict with fairseq 0.12's keys, including the zero fast-path duplicates of encoder layers."""
    w = {}

    def lin(name, i, o):
        w[f"{name}.weight"] = torch.randn(o, i, generator=rng) / math.sqrt(i)
        w[f"{name}.bias"] = torch.randn(o, generator=rng) * 0.1

    def ln(name):
        w[f"{name}.weight"] = 1 + 0.1 * torch.randn(D, generator=rng)
        w[f"{name}.bias"] = 0.1 * torch.randn(D, generator=rng)

    emb_src = torch.randn(vocab_src, D, generator=rng) * D ** -0.5
    emb_src[pad] = 0
    w["encoder.version"] = torch.tensor([3.0])
    w["encoder.embed_tokens.weight"] = emb_src
    if learned_pos:
        w["encoder.embed_positions.weight"] = torch.randn(max_pos + pad + 1, D, generator=rng) * 0.1
    else:
        w["encoder.embed_positions._float_tensor"] = torch.tensor([1.0])
    for n in range(n_enc):
        p = f"encoder.layers.{n}"
        for m in ("q_proj", "k_proj", "v_proj", "out_proj"):
            lin(f"{p}.self_attn.{m}", D, D)
        ln(f"{p}.self_attn_layer_norm")
        lin(f"{p}.fc1", D, FF)
        lin(f"{p}.fc2", FF, D)
        ln(f"{p}.final_layer_norm")
        for k, shape in (("in_proj_weight", (3 * D, D)), ("in_proj_bias", (3 * D,)), ("out_proj_weight", (D, D)),
                         ("out_proj_bias", (D,)), ("fc1_weight", (FF, D)), ("fc1_bias", (FF,)),
                         ("fc2_weight", (D, FF)), ("fc2_bias", (D,))):
            w[f"{p}.{k}"] = torch.zeros(shape)  # fairseq 0.12 BetterTransformer buffers: zeros in saved files
    if pre:
        ln("encoder.layer_norm")
    emb_tgt = emb_src if share_all else torch.randn(vocab_tgt, D, generator=rng) * D ** -0.5
    if not share_all:
        emb_tgt[pad] = 0
    w["decoder.version"] = torch.tensor([3.0])
    w["decoder.embed_tokens.weight"] = emb_tgt
    if learned_pos:
        w["decoder.embed_positions.weight"] = torch.randn(max_pos + pad + 1, D, generator=rng) * 0.1
    else:
        w["decoder.embed_positions._float_tensor"] = torch.tensor([1.0])
    for n in range(n_dec):
        p = f"decoder.layers.{n}"
        for att in ("self_attn", "encoder_attn"):
            for m in ("q_proj", "k_proj", "v_proj", "out_proj"):
                lin(f"{p}.{att}.{m}", D, D)
            ln(f"{p}.{att}_layer_norm")
        lin(f"{p}.fc1", D, FF)
        lin(f"{p}.fc2", FF, D)
        ln(f"{p}.final_layer_norm")
    if pre:
        ln("decoder.layer_norm")
    w["decoder.output_projection.weight"] = emb_tgt  # saved even when tied
    return w


# ---------------------------------------------------------------- reference (written from fairseq's equations)
def _ref_positions(tokens, pad):
    mask = tokens.ne(pad).long()
    return torch.cumsum(mask, 1) * mask + pad  # fairseq utils.make_positions


def _ref_sinusoid(n, d, pad):
    half = d // 2
    out = torch.zeros(n, d)
    for pos in range(n):
        for i in range(half):
            ang = pos * math.exp(-i * math.log(10000) / (half - 1))
            out[pos, i], out[pos, half + i] = math.sin(ang), math.cos(ang)
    out[pad] = 0
    return out


def _ref_ln(w, name, x):
    return F.layer_norm(x, (D,), w[f"{name}.weight"], w[f"{name}.bias"], 1e-5)


def _ref_mha(w, name, q_in, kv_in, key_pad=None, causal=False):
    B, T, _ = q_in.shape
    S = kv_in.shape[1]
    dh = D // H
    q = F.linear(q_in, w[f"{name}.q_proj.weight"], w[f"{name}.q_proj.bias"]) * dh ** -0.5
    k = F.linear(kv_in, w[f"{name}.k_proj.weight"], w[f"{name}.k_proj.bias"])
    v = F.linear(kv_in, w[f"{name}.v_proj.weight"], w[f"{name}.v_proj.bias"])
    q, k, v = (t.view(B, -1, H, dh).transpose(1, 2) for t in (q, k, v))
    s = q @ k.transpose(-1, -2)
    if key_pad is not None:
        s = s.masked_fill(key_pad[:, None, None, :], float("-inf"))
    if causal:
        s = s.masked_fill(torch.ones(T, S, dtype=torch.bool).triu(1), float("-inf"))
    o = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, D)
    return F.linear(o, w[f"{name}.out_proj.weight"], w[f"{name}.out_proj.bias"])


def _ref_sub(w, x, ln_name, fn, pre):
    return x + fn(_ref_ln(w, ln_name, x)) if pre else _ref_ln(w, ln_name, x + fn(x))


def _ref_forward(w, src, prev, pad, n_enc, n_dec, pre, learned_pos, max_pos=32):
    """fairseq TransformerModel.forward in eval mode (sources left-padded as fairseq batches them)."""
    table = _ref_sinusoid(max_pos + pad + 1, D, pad)

    def embed(side, toks):
        pos = _ref_positions(toks, pad)
        ptab = w[f"{side}.embed_positions.weight"] if learned_pos else table
        return math.sqrt(D) * w[f"{side}.embed_tokens.weight"][toks] + ptab[pos]

    def ffn(p):
        return lambda h: F.linear(F.relu(F.linear(h, w[f"{p}.fc1.weight"], w[f"{p}.fc1.bias"])),
                                  w[f"{p}.fc2.weight"], w[f"{p}.fc2.bias"])

    spad = src.eq(pad)
    x = embed("encoder", src)
    for n in range(n_enc):
        p = f"encoder.layers.{n}"
        x = _ref_sub(w, x, f"{p}.self_attn_layer_norm", lambda h: _ref_mha(w, f"{p}.self_attn", h, h, spad), pre)
        x = _ref_sub(w, x, f"{p}.final_layer_norm", ffn(p), pre)
    if pre:
        x = _ref_ln(w, "encoder.layer_norm", x)
    y = embed("decoder", prev)
    for n in range(n_dec):
        p = f"decoder.layers.{n}"
        y = _ref_sub(w, y, f"{p}.self_attn_layer_norm", lambda h: _ref_mha(w, f"{p}.self_attn", h, h, causal=True), pre)
        y = _ref_sub(w, y, f"{p}.encoder_attn_layer_norm", lambda h: _ref_mha(w, f"{p}.encoder_attn", h, x, spad), pre)
        y = _ref_sub(w, y, f"{p}.final_layer_norm", ffn(p), pre)
    if pre:
        y = _ref_ln(w, "decoder.layer_norm", y)
    return y @ w["decoder.output_projection.weight"].t()


def _write(tmp_path, state_model, args, vocab_src, vocab_tgt, as_cfg=False, src="de", tgt="en"):
    write_fairseq_dictionary(tmp_path / f"dict.{src}.txt", _dict_symbols(vocab_src - 4, "s"))
    write_fairseq_dictionary(tmp_path / f"dict.{tgt}.txt", _dict_symbols(vocab_tgt - 4, "t"))
    if as_cfg:  # fairseq >= 0.10: omegaconf config converted to plain containers
        ck = {"cfg": {"model": vars(args), "task": {"source_lang": src, "target_lang": tgt}}, "model": state_model,
              "args": None, "optimizer_history": [], "extra_state": {"epoch": 1}}
    else:
        ck = {"args": args, "model": state_model, "optimizer_history": [], "extra_state": {}}
    path = tmp_path / "checkpoint_best.pt"
    torch.save(ck, path)
    return path


def _args(n_enc, n_dec, share_all, pre, learned_pos, src="de", tgt="en"):
    return argparse.Namespace(arch="transformer_iwslt_de_en", encoder_layers=n_enc, decoder_layers=n_dec,
                              encoder_embed_dim=D, decoder_embed_dim=D, encoder_ffn_embed_dim=FF,
                              decoder_ffn_embed_dim=FF, encoder_attention_heads=H, decoder_attention_heads=H,
                              encoder_normalize_before=pre, decoder_normalize_before=pre, activation_fn="relu",
                              share_all_embeddings=share_all, share_decoder_input_output_embed=True,
                              encoder_learned_pos=learned_pos, decoder_learned_pos=learned_pos,
                              max_source_positions=32, max_target_positions=32, dropout=0.3,
                              source_lang=src, target_lang=tgt)


def _left_pad(rows, pad):
    S = max(len(r) for r in rows)
    return torch.tensor([[pad] * (S - len(r)) + r for r in rows])


def _right_pad(rows, pad):
    S = max(len(r) for r in rows)
    t = torch.tensor([r + [pad] * (S - len(r)) for r in rows])
    return t, t.eq(pad)


@pytest.mark.parametrize("pre,share_all,learned_pos,as_cfg", [
    (False, True, False, False),  # Post-LN, joined dictionary, sinusoidal, Namespace args (Michel et al. setting)
    (True, False, True, True),  # Pre-LN, separate dictionaries, learned positions, fairseq 0.12 cfg dict
])
def test_import_matches_reference_forward(tmp_path, pre, share_all, learned_pos, as_cfg):
    rng = torch.Generator().manual_seed(0)
    n_enc, n_dec, vs = 2, 1, 30
    vt = vs if share_all else 22
    pad, eos = 1, 2
    w = _fairseq_state(rng, n_enc, n_dec, vs, vt, share_all, learned_pos, pre)
    path = _write(tmp_path, w, _args(n_enc, n_dec, share_all, pre, learned_pos), vs, vt, as_cfg)
    imp = import_fairseq_checkpoint(path)
    assert imp.model.cfg.block.norm_position == ("pre" if pre else "post")
    assert imp.bos_id == eos and imp.tgt_vocab == vt
    rows = [[5, 9, 17, 4, eos], [8, 6, eos]]
    prev = torch.tensor([[eos, 4, 7, 11], [eos, 12, 5, 6]])  # fairseq decoder input starts with eos
    ref = _ref_forward(w, _left_pad(rows, pad), prev, pad, n_enc, n_dec, pre, learned_pos)
    src, mask = _right_pad(rows, pad)
    with torch.no_grad():
        got = imp.model(src, prev, mask)
    torch.testing.assert_close(got[..., :vt], ref, atol=2e-5, rtol=1e-4)
    # incremental decoding of the imported model agrees too
    with torch.no_grad():
        mem = imp.model.encode(src, mask)
        cache = imp.model.decoder.new_cache()
        steps = torch.cat([imp.model.decode(prev[:, t:t + 1], mem, mask, cache=cache, offset=t) for t in range(4)], 1)
    torch.testing.assert_close(steps[..., :vt], ref, atol=2e-5, rtol=1e-4)


def test_fast_path_keys_ignored_but_unknown_key_named(tmp_path):
    rng = torch.Generator().manual_seed(1)
    w = _fairseq_state(rng, 1, 1, 20, 20, True)
    w["encoder.layers.0.self_attn.rotary.weight"] = torch.zeros(3)
    path = _write(tmp_path, w, _args(1, 1, True, False, False), 20, 20)
    with pytest.raises(FairseqImportError, match=r"encoder\.layers\.0\.self_attn\.rotary\.weight"):
        import_fairseq_checkpoint(path)


def test_shape_mismatch_and_missing_key_named(tmp_path):
    rng = torch.Generator().manual_seed(2)
    w = _fairseq_state(rng, 1, 1, 20, 20, True)
    w["decoder.layers.0.fc1.weight"] = torch.zeros(FF + 1, D)
    path = _write(tmp_path, w, _args(1, 1, True, False, False), 20, 20)
    with pytest.raises(FairseqImportError, match=r"decoder\.layers\.0\.fc1\.weight"):
        import_fairseq_checkpoint(path)
    w = _fairseq_state(rng, 1, 1, 20, 20, True)
    del w["encoder.layers.0.final_layer_norm.bias"]
    path = _write(tmp_path, w, _args(1, 1, True, False, False), 20, 20)
    with pytest.raises(FairseqImportError, match=r"encoder\.layers\.layers\.0\.norm_ffn\.bias"):
        import_fairseq_checkpoint(path)


def test_dictionary_size_mismatch_named(tmp_path):
    rng = torch.Generator().manual_seed(3)
    w = _fairseq_state(rng, 1, 1, 20, 20, True)
    path = _write(tmp_path, w, _args(1, 1, True, False, False), 20, 20)
    write_fairseq_dictionary(tmp_path / "dict.de.txt", _dict_symbols(10, "s"))  # 14 symbols, weights have 20 rows
    with pytest.raises(FairseqImportError, match="dict.de.txt"):
        import_fairseq_checkpoint(path)


def test_corrupt_and_unsafe_checkpoints_refused(tmp_path):
    bad = tmp_path / "corrupt.pt"
    bad.write_bytes(b"PK\x03\x04 not a checkpoint")
    with pytest.raises(FairseqImportError, match="corrupt.pt"):
        import_fairseq_checkpoint(bad, tmp_path / "x", tmp_path / "y")
    unsafe = tmp_path / "unsafe.pt"
    torch.save({"model": {}, "args": _Evil()}, unsafe)  # an arbitrary class must not be unpickled
    with pytest.raises(FairseqImportError, match="weights_only"):
        import_fairseq_checkpoint(unsafe, tmp_path / "x", tmp_path / "y")
    with pytest.raises(FairseqImportError, match="not found"):
        import_fairseq_checkpoint(tmp_path / "missing.pt")


class _Evil:
    def __reduce__(self):
        return (print, ("unpickled!",))


def test_left_padded_sources_and_eos_start_decoding(tmp_path):
    """fairseq batches left-pad the source: the imported model gives each sentence the same encoder output as
    unpadded; decoding that starts with eos (fairseq's convention) ends every hypothesis with eos by the cap, and the
    beam's scores are the mean of its per-token log-probabilities (fairseq's normalisation, lenpen 1)."""
    from repro.train.decode import beam_search, greedy_decode

    rng = torch.Generator().manual_seed(4)
    w = _fairseq_state(rng, 2, 2, 30, 30, True)
    imp = import_fairseq_checkpoint(_write(tmp_path, w, _args(2, 2, True, False, False), 30, 30))
    pad, eos = 1, 2
    rows = [[5, 9, 17, 4, eos], [8, 6, eos]]
    left = _left_pad(rows, pad)
    right, rmask = _right_pad(rows, pad)
    with torch.no_grad():
        el, er = imp.model.encode(left, left.eq(pad)), imp.model.encode(right, rmask)
        alone = imp.model.encode(torch.tensor([rows[1]]))
    torch.testing.assert_close(el[1, 2:], alone[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(er[1, :3], alone[0], atol=1e-5, rtol=1e-5)
    for src, mask in ((left, left.eq(pad)), (right, rmask)):
        greedy = greedy_decode(imp.model, src, mask, eos, eos, pad, max_len_a=0, max_len_b=6)
        assert all(len(h) <= 6 and eos not in h and pad not in h for h in greedy)
        nbest = beam_search(imp.model, src, mask, eos, eos, pad, beam=3, max_len_a=0, max_len_b=6)
        for hyps in nbest:
            assert len(hyps) == 3
            for score, toks, pos in hyps:
                assert toks[-1] == eos and len(toks) <= 7 and len(pos) == len(toks)
                assert score == pytest.approx(sum(pos) / len(toks), abs=1e-5)
            assert [h[0] for h in hyps] == sorted((h[0] for h in hyps), reverse=True)
    lb = beam_search(imp.model, left, left.eq(pad), eos, eos, pad, beam=3, max_len_a=0, max_len_b=6)
    rb = beam_search(imp.model, right, rmask, eos, eos, pad, beam=3, max_len_a=0, max_len_b=6)
    assert [[h[1] for h in s] for s in lb] == [[h[1] for h in s] for s in rb]
