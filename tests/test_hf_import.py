"""Hugging Face checkpoint folders imported into the shared block (issue 17): tiny random models built with
`transformers` (the reference; test-only), saved with save_pretrained, imported with safetensors and compared
logit by logit and layer by layer in fp32."""
from __future__ import annotations

import json

import pytest
import torch

import repro.kernels as K  # before transformers, which imports triton: CPU kernels then use the interpreter

transformers = pytest.importorskip("transformers", reason="transformers (the test extra) is the reference here")
from safetensors.torch import save_file  # noqa: E402

from repro.model import hf_import  # noqa: E402
from repro.model.hf_import import HFImportError, load_pretrained  # noqa: E402

torch.set_num_threads(1)
ATOL = 2e-5


def _save(model, folder, **kw):
    model.save_pretrained(folder, **kw)  # transformers 5 writes model.safetensors by default
    return folder


def _llama(tmp_path, name="llama", **over):
    cfg = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6, tie_word_embeddings=False)
    cfg.update(over)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**cfg)).eval()
    return model, _save(model, tmp_path / name)


def _compare_decoder(ref, ours, tokens, mask=None):
    with torch.no_grad():
        out = ref(input_ids=tokens, attention_mask=None if mask is None else (~mask).long(), output_hidden_states=True)
        logits, hidden = ours(tokens, pad_mask=mask, return_hidden=True)
    keep = torch.ones_like(tokens, dtype=torch.bool) if mask is None else ~mask
    torch.testing.assert_close(logits[keep], out.logits[keep], atol=ATOL, rtol=1e-4)
    # HF: embeddings, the output of layers 1..L-1, then the last layer's output after the final norm
    for i, h in enumerate(out.hidden_states[:-1]):
        torch.testing.assert_close(hidden[i][keep], h[keep], atol=ATOL, rtol=1e-4, msg=f"hidden state {i}")
    final = ours.decoder.final_norm(hidden[-1])
    torch.testing.assert_close(final[keep], out.hidden_states[-1][keep], atol=ATOL, rtol=1e-4)
    return float((logits[keep] - out.logits[keep]).abs().max())


def test_llama_gqa_rope_matches_transformers_and_decodes_incrementally(tmp_path):
    ref, folder = _llama(tmp_path)
    model, info = load_pretrained(folder)
    assert info.family == "llama" and info.kind == "decoder_lm"
    b = model.cfg.block
    assert b.rope and b.n_kv_heads == 2 and b.ffn == "swiglu" and b.norm == "rmsnorm" and not b.bias
    assert info.params["total"] == sum(p.numel() for p in ref.parameters()) == info.checkpoint_params
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 64, (2, 12), generator=g)
    _compare_decoder(ref, model, tokens)
    # left padding (HF's batched generation): positions count real tokens, as HF's attention-mask positions do
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    mask[1, :4] = True
    with torch.no_grad():
        pos = (~mask).long().cumsum(1) - 1
        out = ref(input_ids=tokens, attention_mask=(~mask).long(), position_ids=pos.clamp_min(0))
        logits = model(tokens, pad_mask=mask)
    torch.testing.assert_close(logits[~mask], out.logits[~mask], atol=ATOL, rtol=1e-4)
    # incremental decoding with the cache: rotary positions continue from the cache length
    with torch.no_grad():
        full = model(tokens)
        cache = model.decoder.new_cache()
        steps = [model.decoder(tokens[:, :5], cache=cache)]
        steps += [model.decoder(tokens[:, t:t + 1], cache=cache, offset=t) for t in range(5, 12)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=ATOL, rtol=1e-4)


@pytest.mark.parametrize("backend", ["math", "triton"])
def test_llama_rope_in_every_attention_backend(tmp_path, backend):
    if backend == "triton" and not torch.cuda.is_available() and not K.interpreter_enabled():
        pytest.skip("CPU kernels need the Triton interpreter (TRITON_INTERPRET=1); triton was imported before it")
    ref, folder = _llama(tmp_path, num_hidden_layers=1, hidden_size=64)  # the kernel needs head_dim >= 16
    model, _ = load_pretrained(folder, attention=backend)
    assert model.cfg.block.attention == backend
    tokens = torch.randint(0, 64, (1, 16), generator=torch.Generator().manual_seed(2))
    _compare_decoder(ref, model, tokens)


def test_llama_rope_scaling_theta_and_tied_head(tmp_path):
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 16}
    ref, folder = _llama(tmp_path, rope_theta=500000.0, rope_scaling=scaling, tie_word_embeddings=True,
                         head_dim=16, num_attention_heads=4)
    model, info = load_pretrained(folder)
    b = model.cfg.block
    assert b.rope_base == 500000.0 and b.rope_scaling["type"] == "llama3" and b.dim_head == 16
    assert model.cfg.tie_output
    tokens = torch.randint(0, 64, (2, 40), generator=torch.Generator().manual_seed(3))
    _compare_decoder(ref, model, tokens)
    # the same folder in transformers 4's config layout (rope_theta and rope_scaling at the top; Llama-2/3 files)
    cfg = json.loads((folder / "config.json").read_text())
    rp = cfg.pop("rope_parameters", None) or {}
    cfg["rope_theta"] = rp.pop("rope_theta", 500000.0)
    cfg["rope_scaling"] = rp or scaling
    (folder / "config.json").write_text(json.dumps(cfg))
    v4, _ = load_pretrained(folder)
    assert v4.cfg.block == model.cfg.block
    with torch.no_grad():
        torch.testing.assert_close(v4(tokens), model(tokens))
    ref, folder = _llama(tmp_path, name="linear", rope_scaling={"rope_type": "linear", "factor": 2.0})
    model, _ = load_pretrained(folder)
    assert model.cfg.block.rope_scaling == {"type": "linear", "factor": 2.0}
    _compare_decoder(ref, model, torch.randint(0, 64, (1, 20), generator=torch.Generator().manual_seed(4)))


def test_mistral_sharded_folder(tmp_path):
    cfg = transformers.MistralConfig(vocab_size=64, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=64,
                                     sliding_window=32)
    torch.manual_seed(5)
    ref = transformers.MistralForCausalLM(cfg).eval()
    folder = _save(ref, tmp_path / "mistral", max_shard_size="20KB")
    assert (folder / "model.safetensors.index.json").exists()
    assert len(list(folder.glob("model-*.safetensors"))) > 1
    model, info = load_pretrained(folder)
    assert info.family == "mistral" and model.cfg.block.attn_window == 32 and not info.notes
    _compare_decoder(ref, model, torch.randint(0, 64, (2, 10), generator=torch.Generator().manual_seed(6)))


def _compare_padded(ref, ours, tokens, mask, positions=True):
    """Logits of the real tokens of a padded batch against transformers' (attention_mask = ~mask; with
    ``positions`` HF gets the real-token position ids the suite's models use); returns the max |difference|."""
    pos = ((~mask).long().cumsum(1) - 1).clamp_min(0) if positions else None
    with torch.no_grad():
        want = ref(input_ids=tokens, attention_mask=(~mask).long(), position_ids=pos).logits
        got = ours(tokens, pad_mask=mask)
    torch.testing.assert_close(got[~mask], want[~mask], atol=1e-5, rtol=0)
    return float((got[~mask] - want[~mask]).abs().max())


def _params_agree(ref, folder, info, extra_checkpoint_rows=0):
    """The suite's parameter accounting (count_by_slot of the imported model, and count_folder's meta-device
    build from config.json alone) against the folder's tensor elements and transformers' own count."""
    counted = hf_import.count_folder(folder)
    assert counted["slots"]["total"] == info.params["total"] == sum(p.numel() for p in ref.parameters()) \
        - extra_checkpoint_rows
    assert counted["checkpoint_params"] == info.checkpoint_params == info.params["total"] + extra_checkpoint_rows


@pytest.mark.parametrize("backend", ["sdpa", "math", "triton"])
def test_mistral_window_shorter_than_the_input_matches_transformers(tmp_path, backend):
    """sliding_window = 4 with 13 tokens (left padding): transformers' banded mask, reproduced in every backend
    (before issue 29 this folder loaded with full attention, 0.1 away, silently)."""
    if backend == "triton" and not torch.cuda.is_available() and not K.interpreter_enabled():
        pytest.skip("CPU kernels need the Triton interpreter (TRITON_INTERPRET=1); triton was imported before it")
    cfg = transformers.MistralConfig(vocab_size=64, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
                                     num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                                     sliding_window=4)
    torch.manual_seed(16)
    ref = transformers.MistralForCausalLM(cfg).eval()
    folder = _save(ref, tmp_path / "mistral")
    model, info = load_pretrained(folder, attention=backend)
    assert model.cfg.block.attn_window == 4 and not info.notes
    _params_agree(ref, folder, info)
    tokens = torch.randint(0, 64, (2, 13), generator=torch.Generator().manual_seed(17))
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    mask[1, :3] = True
    assert _compare_padded(ref, model, tokens, mask) < 1e-5
    if backend == "sdpa":
        _compare_decoder(ref, model, tokens)
        with torch.no_grad():  # cached decoding attends the last 4 keys
            cache = model.decoder.new_cache()
            steps = [model.decoder(tokens[:, :6], cache=cache)]
            steps += [model.decoder(tokens[:, t:t + 1], cache=cache, offset=t) for t in range(6, 13)]
            torch.testing.assert_close(torch.cat(steps, 1), model(tokens), atol=1e-5, rtol=0)


def _qwen2(tmp_path, name, seed, **over):
    cfg = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6,
               rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    cfg.update(over)
    torch.manual_seed(seed)
    ref = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**cfg)).eval()
    return ref, _save(ref, tmp_path / name)


@pytest.mark.parametrize("tie", [False, True], ids=["untied", "tied"])
def test_qwen2_matches_transformers(tmp_path, tie):
    """Qwen2 = Llama with q/k/v biases (no o_proj / MLP bias), its rope theta (10^6), tied or untied head."""
    ref, folder = _qwen2(tmp_path, "qwen2", 18, tie_word_embeddings=tie)
    model, info = load_pretrained(folder)
    b = model.cfg.block
    assert info.family == "qwen2" and b.rope_base == 1e6 and b.attn_window is None and model.cfg.tie_output == tie
    attn = model.decoder.layers.layers[0].self_attn
    assert attn.q_proj.bias is not None and attn.out_proj.bias is None
    assert model.decoder.layers.layers[0].ffn.w1.bias is None
    _params_agree(ref, folder, info)
    tokens = torch.randint(0, 64, (2, 11), generator=torch.Generator().manual_seed(19))
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    mask[0, :4] = True
    assert _compare_padded(ref, model, tokens, mask) < 1e-5
    _compare_decoder(ref, model, tokens)


def test_qwen2_sliding_window_on_every_layer_or_refused(tmp_path):
    ref, folder = _qwen2(tmp_path, "all", 20, use_sliding_window=True, sliding_window=3, max_window_layers=0)
    model, _ = load_pretrained(folder)
    assert model.cfg.block.attn_window == 3
    tokens = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(21))
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    mask[1, :2] = True
    assert _compare_padded(ref, model, tokens, mask) < 1e-5
    _, folder = _qwen2(tmp_path, "mixed", 20, use_sliding_window=True, sliding_window=3, max_window_layers=1)
    with pytest.raises(HFImportError, match="layer_types.*some layers only"):
        load_pretrained(folder)
    # a transformers 4 file (no layer_types): max_window_layers decides the same way
    cfg = json.loads((folder / "config.json").read_text())
    del cfg["layer_types"]
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(HFImportError, match="max_window_layers.*some layers only"):
        load_pretrained(folder)


def test_llama_attention_and_mlp_bias(tmp_path):
    ref, folder = _llama(tmp_path, "bias", attention_bias=True, mlp_bias=True, num_hidden_layers=2)
    model, info = load_pretrained(folder)
    layer = model.decoder.layers.layers[0]
    assert layer.self_attn.out_proj.bias is not None and layer.ffn.w2.bias is not None
    _params_agree(ref, folder, info)
    tokens = torch.randint(0, 64, (2, 10), generator=torch.Generator().manual_seed(22))
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    mask[0, 7:] = True  # right padding
    assert _compare_padded(ref, model, tokens, mask) < 1e-5


def test_opt_350m_project_in_out_post_ln(tmp_path):
    """OPT-350m's layout: word_embed_proj_dim (16) != hidden_size (32): bias-free project_in / project_out, Post-LN
    (do_layer_norm_before=false) and then no final LayerNorm, as transformers' OPTDecoder."""
    cfg = transformers.OPTConfig(vocab_size=64, hidden_size=32, ffn_dim=48, num_hidden_layers=2, num_attention_heads=4,
                                 max_position_embeddings=32, word_embed_proj_dim=16, do_layer_norm_before=False,
                                 pad_token_id=1)
    torch.manual_seed(23)
    ref = transformers.OPTForCausalLM(cfg).eval()
    folder = _save(ref, tmp_path / "opt350")
    model, info = load_pretrained(folder)
    assert model.cfg.embed_dim == 16 and model.cfg.block.norm_position == "post" and model.decoder.final_norm is None
    assert model.decoder.embed.project_in.weight.shape == (32, 16)
    _params_agree(ref, folder, info, extra_checkpoint_rows=2 * 32)  # OPT's 2 offset position rows
    tokens = torch.randint(2, 64, (2, 11), generator=torch.Generator().manual_seed(24))
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    mask[0, :3] = True
    tokens[mask] = 1
    assert _compare_padded(ref, model, tokens, mask, positions=False) < 1e-5  # OPT derives positions from the mask


def test_gpt2_scale_attn_by_inverse_layer_idx(tmp_path):
    cfg = transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=3, n_head=4,
                                  scale_attn_by_inverse_layer_idx=True)
    torch.manual_seed(25)
    ref = transformers.GPT2LMHeadModel(cfg).eval()
    folder = _save(ref, tmp_path / "gpt2")
    model, info = load_pretrained(folder)
    assert [b.self_attn.scale for b in model.decoder.layers.layers] == pytest.approx([8 ** -0.5 / (i + 1) for i in range(3)])
    _params_agree(ref, folder, info)
    tokens = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(26))
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    mask[1, 6:] = True  # right padding
    assert _compare_padded(ref, model, tokens, mask, positions=False) < 1e-5
    _compare_decoder(ref, model, tokens)


def test_gpt2_matches_transformers(tmp_path):
    cfg = transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=4)
    torch.manual_seed(7)
    ref = transformers.GPT2LMHeadModel(cfg).eval()
    model, info = load_pretrained(_save(ref, tmp_path / "gpt2"))
    assert model.cfg.block.ffn == "gelu_tanh" and model.cfg.tie_output
    assert info.params["total"] == sum(p.numel() for p in ref.parameters())
    _compare_decoder(ref, model, torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(8)))


@pytest.mark.parametrize("pre", [True, False])
def test_opt_pre_and_post_ln_match_transformers(tmp_path, pre):
    cfg = transformers.OPTConfig(vocab_size=64, hidden_size=32, ffn_dim=48, num_hidden_layers=2,
                                 num_attention_heads=4, max_position_embeddings=32, word_embed_proj_dim=32,
                                 do_layer_norm_before=pre, pad_token_id=1)
    torch.manual_seed(9)
    ref = transformers.OPTForCausalLM(cfg).eval()
    model, info = load_pretrained(_save(ref, tmp_path / "opt"))
    assert model.cfg.block.norm_position == ("pre" if pre else "post")
    tokens = torch.randint(2, 64, (2, 11), generator=torch.Generator().manual_seed(10))
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    mask[0, :3] = True  # OPT derives positions from the attention mask: left padding is the usual batch
    tokens[mask] = 1
    with torch.no_grad():
        out = ref(input_ids=tokens, attention_mask=(~mask).long())
        logits = model(tokens, pad_mask=mask)
    torch.testing.assert_close(logits[~mask], out.logits[~mask], atol=ATOL, rtol=1e-4)
    if pre:
        _compare_decoder(ref, model, tokens[1:])
    # OPT stores 2 extra position rows (its offset), which the block does not need
    assert info.checkpoint_params - info.params["total"] == 2 * 32


def _bert(tmp_path, cls, seed, **over):
    cfg = dict(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
               max_position_embeddings=32, type_vocab_size=2)
    torch.manual_seed(seed)
    ref = cls(transformers.BertConfig(**{**cfg, **over})).eval()
    return ref, _save(ref, tmp_path / cls.__name__)


def test_bert_with_pooler_matches_transformers(tmp_path):
    ref, folder = _bert(tmp_path, transformers.BertModel, 11)
    model, info = load_pretrained(folder)
    assert info.kind == "encoder" and model.pooler is not None
    assert info.params["total"] == sum(p.numel() for p in ref.parameters())
    g = torch.Generator().manual_seed(12)
    tokens = torch.randint(1, 64, (2, 10), generator=g)
    types = torch.randint(0, 2, (2, 10), generator=g)
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    mask[1, 7:] = True
    tokens[mask] = 0
    with torch.no_grad():
        out = ref(input_ids=tokens, attention_mask=(~mask).long(), token_type_ids=types, output_hidden_states=True)
        h, hidden = model(tokens, pad_mask=mask, return_hidden=True, token_types=types)
        pooled = model.pool(h)
    keep = ~mask
    for i, ref_h in enumerate(out.hidden_states):
        torch.testing.assert_close(hidden[i][keep], ref_h[keep], atol=ATOL, rtol=1e-4, msg=f"hidden state {i}")
    torch.testing.assert_close(h[keep], out.last_hidden_state[keep], atol=ATOL, rtol=1e-4)
    torch.testing.assert_close(pooled, out.pooler_output, atol=ATOL, rtol=1e-4)


def test_bert_classifier_imported_and_mlm_head_listed(tmp_path):
    ref, folder = _bert(tmp_path, transformers.BertForSequenceClassification, 13, num_hidden_layers=1, num_labels=3)
    model, info = load_pretrained(folder)
    assert info.unused == [] and model.cfg.n_classes == 3
    tokens = torch.randint(1, 64, (2, 6), generator=torch.Generator().manual_seed(14))
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    mask[0, 4:] = True
    tokens[mask] = 0
    with torch.no_grad():
        want = ref(input_ids=tokens, attention_mask=(~mask).long()).logits
        torch.testing.assert_close(model.classify(tokens, mask), want, atol=ATOL, rtol=1e-4)
    assert info.params["total"] == sum(p.numel() for p in ref.parameters())
    # a masked-LM checkpoint: no pooler stored; the MLM head is listed, not imported
    ref, folder = _bert(tmp_path, transformers.BertForMaskedLM, 15, num_hidden_layers=1)
    model, info = load_pretrained(folder)
    assert model.pooler is None and info.unused and all(k.startswith("cls.") for k in info.unused)
    with torch.no_grad():
        torch.testing.assert_close(model(tokens, mask)[~mask], ref.bert(tokens, attention_mask=(~mask).long())
                                   .last_hidden_state[~mask], atol=ATOL, rtol=1e-4)


def test_bert_base_counts_109482240_with_pooler():
    from repro.model import EncoderModel, ModelConfig, count_by_slot

    cfg = ModelConfig.from_dict({"vocab_size": 30522, "n_encoder_layers": 12, "max_seq_len": 512,
                                 "positional": "learned", "n_token_types": 2, "embed_norm": True,
                                 "embed_scale": False, "pooler": True,
                                 "block": {"d_model": 768, "n_heads": 12, "d_ff": 3072, "norm_position": "post",
                                           "ffn": "gelu", "norm_eps": 1e-12}})
    with torch.device("meta"):
        n = count_by_slot(EncoderModel(cfg))["total"]
    assert n == 109_482_240
    with torch.device("meta"):
        assert count_by_slot(EncoderModel(cfg.replace(pooler=False)))["total"] == n - 590_592


def test_errors_name_the_architecture_tensor_and_file(tmp_path):
    ref, folder = _llama(tmp_path, num_hidden_layers=1)
    # unsupported architecture
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"model_type": "falcon", "architectures": ["FalconForCausalLM"]}))
    with pytest.raises(HFImportError, match="falcon.*FalconForCausalLM"):
        load_pretrained(other)
    # a missing tensor is named
    from safetensors.torch import load_file

    w = load_file(folder / "model.safetensors")
    del w["model.layers.0.mlp.up_proj.weight"]
    save_file(w, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(HFImportError, match=r"model\.layers\.0\.mlp\.up_proj\.weight"):
        load_pretrained(folder)
    # an unexpected tensor is named
    w = load_file(tmp_path / "llama" / "model.safetensors")
    w["model.layers.0.mlp.up_proj.weight"] = torch.zeros(48, 32)
    w["model.layers.0.self_attn.q_norm.weight"] = torch.zeros(8)
    save_file(w, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(HFImportError, match=r"q_norm"):
        load_pretrained(folder)
    # a shape disagreeing with config.json is named
    w["model.layers.0.mlp.up_proj.weight"] = torch.zeros(50, 32)
    del w["model.layers.0.self_attn.q_norm.weight"]
    save_file(w, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(HFImportError, match=r"up_proj\.weight \(50, 32\)"):
        load_pretrained(folder)
    # pickled weights are refused, never unpickled
    (folder / "model.safetensors").unlink()
    torch.save({"x": torch.zeros(1)}, folder / "pytorch_model.bin")
    with pytest.raises(HFImportError, match="pytorch_model.bin.*refused"):
        load_pretrained(folder)
    with pytest.raises(HFImportError, match="config.json"):
        load_pretrained(tmp_path / "nowhere")
    assert set(hf_import.FAMILIES) == set(hf_import.BUILDERS)


def test_dtype_and_device_arguments(tmp_path):
    _, folder = _llama(tmp_path, num_hidden_layers=1)
    model, _ = load_pretrained(folder, dtype=torch.bfloat16, device="cpu")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    with torch.no_grad():
        assert model(torch.randint(0, 64, (1, 5))).dtype == torch.bfloat16


def test_qwen2_7b_parameter_count_against_the_registry():
    """Qwen2-7B's released config through the importer on the meta device: 7,615,616,512 parameters (untied), the
    exact count the registry notes beside the published 7.07B (which counts the 152064 x 3584 embedding once)."""
    from pathlib import Path

    from repro import registry
    from repro.model import DecoderLM, count_by_slot

    cfg = dict(model_type="qwen2", hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
               num_attention_heads=28, num_key_value_heads=4, vocab_size=152064, max_position_embeddings=131072,
               rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=False, use_sliding_window=False,
               sliding_window=131072, max_window_layers=28, hidden_act="silu")
    mcfg = hf_import.BUILDERS["qwen2"](cfg, Path("Qwen2-7B"))[1]
    with torch.device("meta"):
        total = count_by_slot(DecoderLM(mcfg))["total"]
    assert total == 7_615_616_512
    rec = registry.published("param_accounting", "qwen2_7b_total_params")
    assert rec["value"] == 7.07e9 and not rec["exact"] and "7,615,616,512" in rec["note"]
    assert total - 152064 * 3584 == pytest.approx(rec["value"], rel=1e-3)
