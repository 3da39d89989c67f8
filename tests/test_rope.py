"""Rotary positions in the shared block (issue 17): the rotate-half convention against the complex-number form of
Su et al. (2021, eq. 34), the relative-position property, scaling, config validation, and RoPE applied identically
by every attention backend, with and without the incremental cache."""
from __future__ import annotations

import math

import pytest
import torch

import repro.kernels as K  # sets TRITON_INTERPRET=1 on CPU before triton is imported

from repro.model import BlockConfig, ConfigError, DecoderLM, ModelConfig
from repro.model.rope import apply_rope, inv_frequencies, rope_cos_sin

torch.set_num_threads(1)


def _complex_rope(x, positions, base):
    """Su et al. eq. 34 with the pair (i, i + d/2) as one complex number (the Llama / NeoX layout)."""
    d = x.shape[-1]
    half = d // 2
    theta = torch.tensor([base ** (-2 * i / d) for i in range(half)], dtype=torch.float64)
    z = torch.complex(x[..., :half].double(), x[..., half:].double())
    rot = torch.polar(torch.ones_like(theta), theta)[None, :] ** positions.double()[:, None]
    out = z * rot
    return torch.cat([out.real, out.imag], -1).float()


def test_rotate_half_equals_complex_rotation_and_depends_on_relative_position():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 2, 7, 16, generator=g)
    pos = torch.arange(3, 10)
    cos, sin = rope_cos_sin(pos, inv_frequencies(16, 10000.0), torch.float32)
    torch.testing.assert_close(apply_rope(x, cos, sin), _complex_rope(x, pos, 10000.0), atol=1e-5, rtol=1e-5)
    q, k = torch.randn(16, generator=g), torch.randn(16, generator=g)

    def dot(m, n):
        c, s = rope_cos_sin(torch.tensor([m, n]), inv_frequencies(16, 10000.0), torch.float32)
        a = apply_rope(torch.stack([q, k])[None, None], c, s)[0, 0]
        return float(a[0] @ a[1])

    assert dot(5, 2) == pytest.approx(dot(13, 10), abs=1e-4)  # q.k depends on m - n only
    # partial rotary: the tail passes through
    c, s = rope_cos_sin(pos, inv_frequencies(8, 10000.0), torch.float32)
    y = apply_rope(x, c, s)
    torch.testing.assert_close(y[..., 8:], x[..., 8:])


def test_scaling_linear_and_llama3():
    base = inv_frequencies(16, 10000.0)
    torch.testing.assert_close(inv_frequencies(16, 10000.0, {"type": "linear", "factor": 4.0}), base / 4)
    ll3 = inv_frequencies(16, 10000.0, {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                        "high_freq_factor": 4.0, "original_max_position_embeddings": 64})
    wavelen = 2 * math.pi / base
    assert torch.equal(ll3[wavelen < 16], base[wavelen < 16])  # high frequencies kept
    torch.testing.assert_close(ll3[wavelen > 64], base[wavelen > 64] / 8)  # low frequencies divided by factor


def test_rope_config_errors_name_the_key():
    with pytest.raises(ConfigError, match="block.rope_scaling.type"):
        BlockConfig(d_model=32, n_heads=4, rope=True, rope_scaling={"type": "yarn", "factor": 2})
    with pytest.raises(ConfigError, match="block.rope_scaling.factor"):
        BlockConfig(d_model=32, n_heads=4, rope=True, rope_scaling={"type": "linear"})
    with pytest.raises(ConfigError, match="block.rope_dim"):
        BlockConfig(d_model=32, n_heads=4, rope=True, rope_dim=10)
    with pytest.raises(ConfigError, match="block.rope_base"):
        BlockConfig(d_model=32, n_heads=4, rope=True, rope_base=0.5)


def _lm(backend, **block):
    torch.manual_seed(0)
    cfg = ModelConfig(block=BlockConfig(d_model=64, n_heads=4, n_kv_heads=2, d_ff=64, ffn="swiglu", norm="rmsnorm",
                                        bias=False, rope=True, attention=backend, **block),
                      vocab_size=50, n_encoder_layers=0, n_decoder_layers=2, max_seq_len=64, positional="none",
                      embed_scale=False, tie_output=False)
    return DecoderLM(cfg).eval()


@pytest.mark.parametrize("backend", ["sdpa", "triton"])
def test_rope_same_in_every_backend_and_with_cache(backend, monkeypatch):
    if backend == "triton" and not torch.cuda.is_available() and not K.interpreter_enabled():
        pytest.skip("CPU kernels need the Triton interpreter (TRITON_INTERPRET=1); triton was imported before it")
    tokens = torch.randint(0, 50, (2, 12), generator=torch.Generator().manual_seed(1))
    ref = _lm("math", rope_dim=8)
    model = _lm(backend, rope_dim=8)
    model.load_state_dict(ref.state_dict())
    with torch.no_grad():
        want = ref(tokens)
        torch.testing.assert_close(model(tokens), want, atol=2e-5, rtol=1e-4)
        cache = model.decoder.new_cache()
        steps = [model.decoder(tokens[:, t:t + 1], cache=cache, offset=t) for t in range(12)]
    torch.testing.assert_close(torch.cat(steps, 1), want, atol=2e-5, rtol=1e-4)
    # without RoPE the model is blind to order: permuting a prefix leaves the next logit unchanged; with RoPE not
    with torch.no_grad():
        perm = tokens.clone()
        perm[:, [0, 1]] = perm[:, [1, 0]]
        assert not torch.allclose(ref(perm)[:, -1], want[:, -1], atol=1e-4)
