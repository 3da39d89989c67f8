"""The shared block against PyTorch's own layers and against the formulas."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from repro.model import (BlockConfig, ConfigError, DecoderLM, EncoderDecoder, ModelConfig, attention_core,
                         count_by_slot, active_parameters, make_norm)
from repro.model.block import Block, BlockStack

torch.manual_seed(0)


def copy_from_torch_layer(ref: nn.TransformerEncoderLayer, block: Block) -> None:
    d = block.cfg.d_model
    w, b = ref.self_attn.in_proj_weight, ref.self_attn.in_proj_bias
    with torch.no_grad():
        for i, proj in enumerate((block.self_attn.q_proj, block.self_attn.k_proj, block.self_attn.v_proj)):
            proj.weight.copy_(w[i * d:(i + 1) * d]); proj.bias.copy_(b[i * d:(i + 1) * d])
        block.self_attn.out_proj.load_state_dict(ref.self_attn.out_proj.state_dict())
        block.ffn.fc1.load_state_dict(ref.linear1.state_dict()); block.ffn.fc2.load_state_dict(ref.linear2.state_dict())
        block.norm_self.load_state_dict(ref.norm1.state_dict()); block.norm_ffn.load_state_dict(ref.norm2.state_dict())


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("backend", ["math", "sdpa"])
def test_encoder_block_matches_torch(norm_first, backend):
    d, h = 32, 4
    ref = nn.TransformerEncoderLayer(d, h, dim_feedforward=64, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    cfg = BlockConfig(d_model=d, n_heads=h, d_ff=64, norm_position="pre" if norm_first else "post", attention=backend)
    block = Block(cfg).eval()
    copy_from_torch_layer(ref, block)
    x = torch.randn(3, 7, d)
    pad = torch.zeros(3, 7, dtype=torch.bool); pad[1, 5:] = True; pad[2, 3:] = True
    ref.train()  # avoid the fused fast path, which returns zeros at padded positions
    with torch.no_grad():
        expected = ref(x, src_key_padding_mask=pad)
        got = block(x, key_padding_mask=pad)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_norm_formulas():
    x = torch.tensor([[2.0, 4.0, 6.0, 8.0]])
    ln, rms, sn = (make_norm(k, 4, eps=0.0 if k != "layernorm" else 1e-12) for k in ("layernorm", "rmsnorm", "scalenorm"))
    mean, var = 5.0, 5.0
    torch.testing.assert_close(ln(x), (x - mean) / math.sqrt(var))
    torch.testing.assert_close(rms(x), x / math.sqrt(30.0))
    torch.testing.assert_close(sn(x), 2.0 * x / math.sqrt(120.0))  # g = sqrt(4)
    for impl in ("manual",):
        for kind in ("layernorm", "rmsnorm"):
            a, b = make_norm(kind, 4, 1e-5), make_norm(kind, 4, 1e-5, impl=impl)
            y = torch.randn(5, 4)
            torch.testing.assert_close(a(y), b(y))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_math_and_sdpa_agree(causal, kv_heads):
    q = torch.randn(2, 4, 9, 8); k = torch.randn(2, kv_heads, 9, 8); v = torch.randn(2, kv_heads, 9, 8)
    pad = torch.zeros(2, 9, dtype=torch.bool); pad[1, 6:] = True
    for mask in (None, pad):
        a = attention_core(q, k, v, backend="math", causal=causal, key_padding_mask=mask)
        b = attention_core(q, k, v, backend="sdpa", causal=causal, key_padding_mask=mask)
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    # the mask is real: masked keys do not influence the output
    k2 = k.clone(); k2[1, :, 6:] += 100.0
    torch.testing.assert_close(attention_core(q, k, v, backend="math", key_padding_mask=pad),
                               attention_core(q, k2, v, backend="math", key_padding_mask=pad))


def test_gated_heads_equal_removed_heads():
    cfg = BlockConfig(d_model=32, n_heads=4, d_ff=64)
    block = Block(cfg).eval()
    x = torch.randn(2, 5, 32)
    block.self_attn.head_gate[torch.tensor([1, 3])] = 0.0
    gated = block(x)
    block.self_attn.prune_heads([0, 2])
    assert block.self_attn.n_heads == 2 and block.self_attn.q_proj.out_features == 16
    torch.testing.assert_close(block(x), gated, atol=1e-6, rtol=1e-6)
    block.self_attn.prune_heads([])  # all heads gone: only the output bias remains
    assert block.self_attn(x).shape == x.shape


def test_gate_changes_after_a_forward_are_honoured():
    """The all-ones gate multiply is skipped, but setting, filling or replacing head_gate after a forward (as the
    head-pruning ablations do between forwards) changes the output exactly as the explicit multiply would."""
    cfg = BlockConfig(d_model=32, n_heads=4, d_ff=64)
    attn = Block(cfg).eval().self_attn
    x = torch.randn(2, 5, 32)
    full = attn(x)
    assert attn.gates_are_identity()
    attn.head_gate[2] = 0.0
    assert not attn.gates_are_identity()
    masked = attn(x)
    assert not torch.allclose(masked, full)
    ref = Block(cfg).eval().self_attn
    ref.load_state_dict(attn.state_dict())
    ref.gate_module = lambda: torch.tensor([1.0, 1.0, 0.0, 1.0])  # the explicit multiply path
    torch.testing.assert_close(masked, ref(x))
    attn.head_gate.fill_(1.0)
    torch.testing.assert_close(attn(x), full)
    attn.head_gate = torch.tensor([0.5, 1.0, 1.0, 1.0])  # replaced, not changed in place
    assert not attn.gates_are_identity() and not torch.allclose(attn(x), full)
    attn.head_gate = torch.ones(4, requires_grad=True)  # a gradient is wanted: the multiply stays in the graph
    attn(x).sum().backward()
    assert attn.head_gate.grad is not None and attn.head_gate.grad.abs().sum() > 0


@pytest.mark.parametrize("backend", ["sdpa", "math"])
def test_cross_attention_memory_rows_shared_by_consecutive_queries(backend):
    """Beam search passes one memory row per sentence for its K beams: the same output as repeating the memory
    K times, and the cached keys/values keep one row per sentence; a batch that does not divide is refused."""
    cfg = BlockConfig(d_model=32, n_heads=4, n_kv_heads=2, d_ff=64, attention=backend)
    attn = Block(cfg, cross_attention=True).eval().cross_attn
    B, K = 3, 4
    x, mem = torch.randn(B * K, 2, 32), torch.randn(B, 7, 32)
    pad = torch.zeros(B, 7, dtype=torch.bool)
    pad[1, 5:] = True
    want = attn(x, mem.repeat_interleave(K, 0), key_padding_mask=pad.repeat_interleave(K, 0))
    cache = {}
    torch.testing.assert_close(attn(x, mem, key_padding_mask=pad, cache=cache), want, atol=1e-6, rtol=1e-6)
    assert cache["k"].shape[0] == B
    torch.testing.assert_close(attn(x, mem, key_padding_mask=pad, cache=cache), want, atol=1e-6, rtol=1e-6)
    with pytest.raises(ValueError, match="cannot share"):
        attn(torch.randn(5, 2, 32), mem, key_padding_mask=pad)


def test_gqa_prune_whole_groups():
    cfg = BlockConfig(d_model=32, n_heads=4, n_kv_heads=2, d_ff=64)
    block = Block(cfg).eval(); x = torch.randn(2, 5, 32)
    block.self_attn.head_gate[torch.tensor([2, 3])] = 0.0
    gated = block(x)
    block.self_attn.prune_heads([0, 1])
    torch.testing.assert_close(block(x), gated, atol=1e-6, rtol=1e-6)
    with pytest.raises(ValueError, match="whole query groups"):
        Block(cfg).self_attn.prune_heads([0, 2])


def test_incremental_decoding_matches_full():
    cfg = ModelConfig(block=BlockConfig(d_model=32, n_heads=4, d_ff=64), vocab_size=50, n_encoder_layers=2,
                      n_decoder_layers=2, max_seq_len=32)
    model = EncoderDecoder(cfg).eval()
    src = torch.randint(1, 50, (2, 6)); tgt = torch.randint(1, 50, (2, 5))
    pad = torch.zeros(2, 6, dtype=torch.bool); pad[0, 4:] = True
    with torch.no_grad():
        full = model(src, tgt, pad)
        mem = model.encode(src, pad); cache = model.decoder.new_cache()
        steps = [model.decode(tgt[:, t:t + 1], mem, pad, cache=cache, offset=t) for t in range(5)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("policy", ["full", "every_k", "sqrt", "selective"])
def test_checkpoint_policies_same_gradients(policy):
    base = ModelConfig(block=BlockConfig(d_model=16, n_heads=2, d_ff=32), vocab_size=20, n_decoder_layers=4, max_seq_len=16)
    torch.manual_seed(1); a = DecoderLM(base)
    torch.manual_seed(1); b = DecoderLM(base.replace(checkpoint=policy))
    toks = torch.randint(1, 20, (2, 8))
    for m in (a, b):
        m(toks).sum().backward()
    for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=n)


def test_moe_routes_top_k_and_counts_active():
    cfg = ModelConfig(block=BlockConfig(d_model=16, n_heads=2, d_ff=24, ffn="moe", n_experts=4, moe_top_k=2,
                                        bias=False, norm="rmsnorm"), vocab_size=20, n_decoder_layers=1, tie_output=False)
    m = DecoderLM(cfg)
    out = m(torch.randint(0, 20, (2, 5)))
    assert out.shape == (2, 5, 20) and torch.isfinite(out).all()
    slots = count_by_slot(m)
    assert slots["router"] == 16 * 4
    assert active_parameters(m) == slots["total"] - 2 * 3 * 16 * 24


def test_meta_device_and_tied_embeddings():
    cfg = ModelConfig(vocab_size=100, n_encoder_layers=1, n_decoder_layers=1)
    with torch.device("meta"):
        m = EncoderDecoder(cfg)
    assert count_by_slot(m)["embeddings"] == 100 * 512  # shared source/target/output embedding counted once


@pytest.mark.parametrize("bad, key", [
    (dict(norm="batchnorm"), "block.norm"), (dict(d_model=-4), "block.d_model"), (dict(n_heads=3), "block.n_heads"),
    (dict(attention="flash"), "block.attention"), (dict(n_kv_heads=3), "block.n_kv_heads"),
    (dict(norm_position="middle"), "block.norm_position"), (dict(dropout=1.5), "block.dropout")])
def test_bad_block_config_names_key(bad, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        BlockConfig(**bad)


def test_bad_model_config_names_key():
    with pytest.raises(ConfigError, match=r"model\.block\.bogus"):
        ModelConfig.from_dict({"block": {"bogus": 1}})
    with pytest.raises(ConfigError, match=r"model\.checkpoint"):
        ModelConfig(checkpoint="sometimes")


def test_block_with_triton_kernels_matches_torch_backends():
    """The block with Triton norms and attention (interpreter on CPU) equals its torch backends, forward and backward."""
    from repro.kernels import triton_available  # first: it selects the interpreter before triton is imported
    if not triton_available():
        pytest.skip("triton kernels unavailable")
    for norm in ("layernorm", "rmsnorm"):
        base = ModelConfig(block=BlockConfig(d_model=32, n_heads=2, d_ff=48, norm=norm), vocab_size=30,
                           n_encoder_layers=1, n_decoder_layers=1, max_seq_len=32)
        torch.manual_seed(0); ref = EncoderDecoder(base)
        torch.manual_seed(0); tri = EncoderDecoder(base.replace_block(attention="triton", norm_impl="triton"))
        src = torch.randint(1, 30, (2, 7)); tgt = torch.randint(1, 30, (2, 5))
        pad = torch.zeros(2, 7, dtype=torch.bool); pad[1, 5:] = True
        a, b = ref(src, tgt, pad), tri(src, tgt, pad)
        torch.testing.assert_close(b, a, atol=2e-4, rtol=2e-4)
        a.square().mean().backward(); b.square().mean().backward()
        for (n, p), (_, q) in zip(ref.named_parameters(), tri.named_parameters()):
            torch.testing.assert_close(q.grad, p.grad, atol=5e-4, rtol=5e-3, msg=n)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_manual_layer_norm_centres_once_and_is_bit_identical(dtype):
    """The eager LayerNorm computes x - mean once; its output is bit for bit what the two-subtraction form gave,
    and close to torch's layer_norm."""
    from repro.model.norms import layer_norm_manual

    g = torch.Generator().manual_seed(0)
    x = (torch.randn(3, 7, 97, generator=g) * 3 + 1).to(dtype)
    w, b = torch.randn(97, generator=g).to(dtype), torch.randn(97, generator=g).to(dtype)
    xf = x.float()
    mean = xf.mean(-1, keepdim=True)
    var = (xf - mean).pow(2).mean(-1, keepdim=True)
    before = ((xf - mean) * torch.rsqrt(var + 1e-5)).to(dtype) * w + b
    after = layer_norm_manual(x, w, b, 1e-5)
    assert torch.equal(after, before)
    tol = {torch.float32: 1e-5, torch.bfloat16: 5e-2, torch.float16: 1e-2}[dtype]
    ref = torch.nn.functional.layer_norm(x.float(), (97,), w.float(), b.float(), 1e-5)
    assert torch.allclose(after.float(), ref, atol=tol, rtol=tol)
