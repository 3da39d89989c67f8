"""The shared block's options for published checkpoints (issue 29): sliding-window attention in every backend
(Mistral, Jiang et al. 2023; FlashAttention-2's window_size), per-layer score scaling (GPT-2's
scale_attn_by_inverse_layer_idx), separate q/k/v, output and FFN biases (Qwen2, Llama's attention_bias/mlp_bias)
and OPT-350m's embedding projections; against an explicit eager reference on CPU."""
from __future__ import annotations

import math

import pytest
import torch

import repro.kernels as K
from repro.errors import ConfigError
from repro.model import DecoderLM, ModelConfig, count_by_slot
from repro.model.attention import attention_core, causal_band, math_attention

torch.set_num_threads(1)


def _reference(q, k, v, window, kpm=None, scale=None):
    """softmax over the keys i - window < j <= i (and not padded), written out row by row."""
    B, H, T, D = q.shape
    k, v = k.repeat_interleave(H // k.shape[1], 1), v.repeat_interleave(H // v.shape[1], 1)
    scale = 1 / math.sqrt(D) if scale is None else scale
    out = torch.zeros_like(q)
    for i in range(T):
        lo = max(0, i - window + 1) if window else 0
        keys = torch.arange(lo, i + 1)
        s = (q[:, :, i:i + 1] @ k[:, :, keys].transpose(-1, -2)) * scale  # (B, H, 1, n)
        if kpm is not None:
            s = s.masked_fill(kpm[:, None, None, keys], float("-inf"))
        p = torch.softmax(s, -1).nan_to_num(0.0)
        out[:, :, i] = (p @ v[:, :, keys])[:, :, 0]
    return out


def test_causal_band():
    band = causal_band(5, 2)
    assert band.tolist()[4] == [False, False, False, True, True]
    assert torch.equal(causal_band(5, None), torch.ones(5, 5, dtype=torch.bool).tril())
    assert torch.equal(causal_band(5, 5), causal_band(5, None))


@pytest.mark.parametrize("backend", ["math", "sdpa", "triton"])
@pytest.mark.parametrize("T,window", [(13, 1), (13, 4), (33, 7), (19, 19)])
def test_window_every_backend_matches_reference(backend, T, window):
    if backend == "triton" and not K.interpreter_enabled() and not torch.cuda.is_available():
        pytest.skip("CPU kernels need the Triton interpreter (TRITON_INTERPRET=1)")
    g = torch.Generator().manual_seed(T * 31 + window)
    q = torch.randn(2, 4, T, 16, generator=g)
    k, v = torch.randn(2, 2, T, 16, generator=g), torch.randn(2, 2, T, 16, generator=g)
    kpm = torch.zeros(2, T, dtype=torch.bool)
    kpm[1, :3] = True  # left padding
    want = _reference(q, k, v, window, kpm)
    got = attention_core(q, k, v, backend=backend, causal=True, key_padding_mask=kpm, window=window)
    real = ~kpm  # rows of padded queries are not compared (no real key may be visible to them)
    torch.testing.assert_close(got.transpose(1, 2)[real], want.transpose(1, 2)[real], atol=2e-5, rtol=1e-4)
    no_pad = attention_core(q, k, v, backend=backend, causal=True, window=window)
    torch.testing.assert_close(no_pad, _reference(q, k, v, window), atol=2e-5, rtol=1e-4)


def test_window_refused_where_it_has_no_meaning():
    q = torch.randn(1, 2, 6, 16)
    with pytest.raises(ValueError, match="needs causal"):
        math_attention(q, q, q, window=3)
    with pytest.raises(ValueError, match="positive integer"):
        attention_core(q, q, q, backend="sdpa", causal=True, window=0)
    with pytest.raises(ConfigError, match="attn_window"):
        ModelConfig(block={"attn_window": 0})
    with pytest.raises(ConfigError, match="encoder"):
        ModelConfig(block={"attn_window": 4}, n_encoder_layers=2)


def _lm(**block):
    cfg = ModelConfig(block={"d_model": 32, "n_heads": 2, "d_ff": 48, "rope": True, "norm": "rmsnorm",
                             "ffn": "swiglu", "bias": False, **block},
                      vocab_size=40, n_encoder_layers=0, n_decoder_layers=2, positional="none", max_seq_len=64)
    torch.manual_seed(0)
    return DecoderLM(cfg).eval()


@pytest.mark.parametrize("backend", ["math", "sdpa", "triton"])
def test_window_in_the_model_and_incremental_decoding(backend):
    """The windowed model equals the eager path in every backend, differs from full attention past the window,
    and a prefix + one-token-per-step decode with the cache gives the full forward's logits."""
    if backend == "triton" and not K.interpreter_enabled() and not torch.cuda.is_available():
        pytest.skip("CPU kernels need the Triton interpreter (TRITON_INTERPRET=1)")
    model = _lm(attn_window=5, attention=backend)
    ref = _lm(attn_window=5, attention="math")
    full = _lm(attention="math")
    tokens = torch.randint(1, 40, (2, 17), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = model(tokens)
        torch.testing.assert_close(logits, ref(tokens), atol=2e-5, rtol=1e-4)
        assert torch.allclose(logits[:, :5], full(tokens)[:, :5], atol=2e-5)  # within the window: the same
        assert not torch.allclose(logits[:, 5:], full(tokens)[:, 5:], atol=1e-3)
        cache = model.decoder.new_cache()
        steps = [model.decoder(tokens[:, :7], cache=cache)]
        steps += [model.decoder(tokens[:, t:t + 1], cache=cache, offset=t) for t in range(7, 17)]
    torch.testing.assert_close(torch.cat(steps, 1), logits, atol=2e-5, rtol=1e-4)


def test_scale_by_layer_divides_each_blocks_scores():
    """GPT-2's scale_attn_by_inverse_layer_idx: block l uses 1 / (sqrt(d_head) * (l + 1))."""
    model = _lm(attn_scale_by_layer=True)
    scales = [b.self_attn.scale for b in model.decoder.layers.layers]
    assert scales == pytest.approx([1 / 4, 1 / 8])
    assert all(b.self_attn.scale is None for b in _lm().decoder.layers.layers)
    x = torch.randn(1, 6, 32)
    attn = model.decoder.layers.layers[1].self_attn
    with torch.no_grad():
        got = attn(x, causal=True, positions=torch.arange(6))
        q, k = attn.rotate(attn.q_proj(x).view(1, 6, 2, 16).transpose(1, 2),
                           attn.k_proj(x).view(1, 6, 2, 16).transpose(1, 2), torch.arange(6))
        v = attn.v_proj(x).view(1, 6, 2, 16).transpose(1, 2)
        want = attn.out_proj(_reference(q, k, v, None, scale=1 / 8).transpose(1, 2).reshape(1, 6, 32))
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)


def test_separate_biases_and_embedding_projections():
    model = _lm(qkv_bias=True)  # Qwen2: q/k/v biases only
    a, f = model.decoder.layers.layers[0].self_attn, model.decoder.layers.layers[0].ffn
    assert a.q_proj.bias is not None and a.v_proj.bias is not None and a.out_proj.bias is None and f.w1.bias is None
    model = _lm(qkv_bias=True, out_bias=True, ffn_bias=True)  # Llama attention_bias + mlp_bias
    assert model.decoder.layers.layers[0].self_attn.out_proj.bias is not None
    assert model.decoder.layers.layers[0].ffn.w2.bias is not None
    base = ModelConfig(block={"d_model": 32, "n_heads": 2, "d_ff": 48}, vocab_size=40, n_encoder_layers=0,
                       n_decoder_layers=1, positional="learned", max_seq_len=16)
    plain, proj = DecoderLM(base), DecoderLM(base.replace(embed_dim=12))
    assert proj.decoder.embed.token.weight.shape == (40, 12)
    assert proj.decoder.embed.project_in.weight.shape == (32, 12) and proj.decoder.project_out.weight.shape == (12, 32)
    # OPT-350m's accounting: the embeddings shrink to 40 x 12, the two projections add 2 x 12 x 32
    n = count_by_slot(proj)["embeddings"] - count_by_slot(plain)["embeddings"]
    assert n == 40 * 12 - 40 * 32 + 2 * 12 * 32
    with torch.no_grad():
        assert proj(torch.randint(0, 40, (2, 5))).shape == (2, 5, 40)


def test_kernel_sweep_times_the_window_case():
    """repro.bench.kernels: a (seq_len, window) pair adds causal windowed rows (math and sdpa timed on CPU, SDPA's
    flash backend skipped by reason, triton skipped on CPU), FLOPs over the band's visible pairs."""
    from repro.bench import kernels as bk

    assert bk.attention_flops(1, 1, 10, 10, 16, True, "fwd", window=4) == 4.0 * 16 * (4 * 5 / 2 + 6 * 4)
    assert bk.attention_flops(1, 1, 10, 10, 16, True, "fwd", window=10) == bk.attention_flops(1, 1, 10, 10, 16, True, "fwd")
    rows = bk.run_attention_sweep(dict(seq_lens=(48,), head_dims=(16,), heads=2, tokens=48, causal=(True,),
                                       windows=((48, 8),), passes=("fwd",), reps=2, warmup=1, device="cpu",
                                       providers=("math", "sdpa", "sdpa_flash", "triton")), log=lambda s: None)
    win = {r["provider"]: r for r in rows if r["window"] == 8}
    assert win["math"]["status"] == win["sdpa"]["status"] == "ok" and win["sdpa"]["causal"] is True
    assert win["sdpa_flash"]["status"] == "skipped" and "band" in win["sdpa_flash"]["reason"]
    assert win["triton"]["status"] == "skipped"
    assert {r["window"] for r in rows} == {None, 8}
    fake = [dict(r, status="ok", median_ms=m, seq_len=4096, head_dim=128, dtype="bfloat16", provider="triton")
            for r, m in ((win["math"], 1.0), (next(r for r in rows if r["window"] is None), 2.0))]
    fake[0]["window"] = 1024
    (target,) = bk._window_targets(lambda **kv: next((r for r in fake if all(r.get(k) == v for k, v in kv.items())),
                                                     None))
    assert target["metric"] == "attention_window_fwd_speedup_vs_causal" and target["value"] == 2.0 and target["met"]
