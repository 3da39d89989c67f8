"""The importer's rule (issue 29): every config.json key repro.model.hf_import reads either changes the model it
builds or refuses unsupported values with an HFImportError; no key is read only into ``notes`` (a note is not a
model: a key that only reaches the notes is a silent approximation, like Mistral's window before this issue).

Two halves: (1) the keys are listed statically from the source (every ``cfg.get("k")`` / ``cfg["k"]`` /
``_req(cfg, "k", ...)``; a read with a computed key fails the test, since it could not be checked), and every
listed key needs an entry below; (2) each entry changes that key in a tiny transformers config and the builder
must then build a different model (ModelConfig, tensor mapping) or raise.  Notes are left out of the comparison
on purpose."""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import repro.kernels  # noqa: F401  (before transformers, which imports triton: CPU kernels use the interpreter)

transformers = pytest.importorskip("transformers", reason="transformers (the test extra) builds the base configs")
from repro.model import hf_import  # noqa: E402
from repro.model.hf_import import HFImportError  # noqa: E402

DROP = object()  # remove the key from the base config
SEQ_CLS = ["BertForSequenceClassification"]
TINY = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=64)


def _base(family: str) -> dict:
    if family in ("llama", "mistral", "qwen2"):
        cls = {"llama": transformers.LlamaConfig, "mistral": transformers.MistralConfig,
               "qwen2": transformers.Qwen2Config}[family]
        return cls(**TINY, num_key_value_heads=2).to_dict()
    if family == "gpt2":
        return transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=4).to_dict()
    if family == "opt":
        return transformers.OPTConfig(vocab_size=64, hidden_size=32, ffn_dim=48, num_hidden_layers=2,
                                      num_attention_heads=4, max_position_embeddings=32,
                                      word_embed_proj_dim=32).to_dict()
    return transformers.BertConfig(**TINY).to_dict()


# key -> [(family, base changes, perturbed changes)]: one entry per builder that reads the key
PERTURB = {
    "_remove_final_layer_norm": [("opt", {}, {"_remove_final_layer_norm": True})],
    "activation_function": [("gpt2", {}, {"activation_function": "relu"}), ("opt", {}, {"activation_function": "gelu"})],
    "add_cross_attention": [("gpt2", {}, {"add_cross_attention": True}), ("bert", {}, {"add_cross_attention": True})],
    "architectures": [("bert", {}, {"architectures": SEQ_CLS})],
    "attention_bias": [("llama", {}, {"attention_bias": True})],
    "do_layer_norm_before": [("opt", {}, {"do_layer_norm_before": False})],
    "enable_bias": [("opt", {}, {"enable_bias": False})],
    "ffn_dim": [("opt", {}, {"ffn_dim": 64})],
    "head_dim": [("llama", {}, {"head_dim": 16})],
    "hidden_act": [("llama", {}, {"hidden_act": "gelu"}), ("bert", {}, {"hidden_act": "relu"})],
    "hidden_size": [(f, {}, {"hidden_size": 64}) for f in ("llama", "bert", "opt")],
    "id2label": [("bert", {"architectures": SEQ_CLS}, {"id2label": {0: "a", 1: "b", 2: "c"}})],
    "intermediate_size": [(f, {}, {"intermediate_size": 64}) for f in ("llama", "bert")],
    "is_decoder": [("bert", {}, {"is_decoder": True})],
    "layer_norm_elementwise_affine": [("opt", {}, {"layer_norm_elementwise_affine": False})],
    "layer_norm_eps": [("bert", {}, {"layer_norm_eps": 1e-6})],
    "layer_norm_epsilon": [("gpt2", {}, {"layer_norm_epsilon": 1e-6})],
    "layer_types": [("qwen2", {"use_sliding_window": True, "sliding_window": 3,
                               "layer_types": ["sliding_attention"] * 2},
                     {"layer_types": ["full_attention"] * 2})],
    "max_position_embeddings": [(f, {}, {"max_position_embeddings": 128}) for f in ("llama", "bert", "opt")],
    "max_window_layers": [("qwen2", {"use_sliding_window": True, "sliding_window": 3, "max_window_layers": 0,
                                     "layer_types": DROP}, {"max_window_layers": 1})],
    "mlp_bias": [("llama", {}, {"mlp_bias": True})],
    "model_type": [("llama", {}, {"model_type": "qwen2"})],
    "n_embd": [("gpt2", {}, {"n_embd": 64})],
    "n_head": [("gpt2", {}, {"n_head": 2})],
    "n_inner": [("gpt2", {}, {"n_inner": 40})],
    "n_layer": [("gpt2", {}, {"n_layer": 3})],
    "n_positions": [("gpt2", {}, {"n_positions": 64})],
    "num_attention_heads": [(f, {}, {"num_attention_heads": 2}) for f in ("llama", "bert", "opt")],
    "num_hidden_layers": [(f, {}, {"num_hidden_layers": 3}) for f in ("llama", "bert", "opt")],
    "num_key_value_heads": [("llama", {}, {"num_key_value_heads": 4})],
    "num_labels": [("bert", {"architectures": SEQ_CLS}, {"num_labels": 5})],
    "pad_token_id": [("opt", {}, {"pad_token_id": 2})],
    "partial_rotary_factor": [("llama", {}, {"partial_rotary_factor": 0.5})],
    "position_embedding_type": [("bert", {}, {"position_embedding_type": "relative_key"})],
    "problem_type": [("bert", {"architectures": SEQ_CLS}, {"problem_type": "multi_label_classification"})],
    "rms_norm_eps": [("llama", {}, {"rms_norm_eps": 1e-5})],
    "rope_parameters": [("llama", {}, {"rope_parameters": {"rope_type": "default", "rope_theta": 5e5}})],
    "rope_scaling": [("llama", {"rope_parameters": DROP}, {"rope_scaling": {"rope_type": "linear", "factor": 2.0}})],
    "rope_theta": [("llama", {"rope_parameters": DROP}, {"rope_theta": 5e5})],  # transformers 4's layout
    "scale_attn_by_inverse_layer_idx": [("gpt2", {}, {"scale_attn_by_inverse_layer_idx": True})],
    "scale_attn_weights": [("gpt2", {}, {"scale_attn_weights": False})],
    "sliding_window": [("mistral", {}, {"sliding_window": 8})],
    "tie_word_embeddings": [(f, {}, {"tie_word_embeddings": t}) for f, t in (("llama", True), ("gpt2", False),
                                                                             ("opt", False))],
    "type_vocab_size": [("bert", {}, {"type_vocab_size": 3})],
    "use_sliding_window": [("qwen2", {"sliding_window": 3, "layer_types": ["sliding_attention"] * 2},
                            {"use_sliding_window": True})],
    "vocab_size": [(f, {}, {"vocab_size": 80}) for f in ("llama", "gpt2", "bert", "opt")],
    "word_embed_proj_dim": [("opt", {}, {"word_embed_proj_dim": 16})],
}
# keys that configure no model by design, with where they go instead (never notes)
NOT_MODEL = {
    "bos_token_id": "HFImport.bos_id and load_tokenizer (the text's special tokens)",
    "eos_token_id": "HFImport.eos_id and load_tokenizer",
}
BUILDER_FAMILY = {"_gpt2": "gpt2", "_opt": "opt", "_bert": "bert", "_llama": "llama"}


def _keys_read() -> dict[str, set[str]]:
    """config key -> functions of hf_import reading it, from the source; computed keys fail here."""
    tree = ast.parse(inspect.getsource(hf_import))
    keys: dict[str, set[str]] = {}
    for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name != "_req"):
        for node in ast.walk(fn):
            key = None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                    and ast.unparse(node.func.value).split(".")[-1] == "cfg":
                key = node.args[0]
            elif isinstance(node, ast.Subscript) and ast.unparse(node.value).split(".")[-1] == "cfg":
                key = node.slice
            elif isinstance(node, ast.Call) and ast.unparse(node.func) == "_req":
                key = node.args[1]
            if key is None:
                continue
            assert isinstance(key, ast.Constant) and isinstance(key.value, str), \
                f"{fn.name}: config key read with a computed name ({ast.unparse(node)}): use a literal"
            keys.setdefault(key.value, set()).add(fn.name)
    return keys


def _build(family: str, changes: dict):
    cfg = _base(family)
    for k, v in changes.items():
        if v is DROP:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    kind, mcfg, top, layers, opts, ignore, _notes = hf_import.BUILDERS[cfg["model_type"]](cfg, Path("folder"))
    names = {k: v if isinstance(v, str) else v[0] for k, v in {**top, **layers}.items()}
    return kind, mcfg, names, opts, tuple(ignore)


def test_every_key_read_is_listed_here():
    read = _keys_read()
    assert "sliding_window" in read and "word_embed_proj_dim" in read  # the scan sees the builders
    missing = sorted(set(read) - set(PERTURB) - set(NOT_MODEL))
    assert not missing, f"config keys read by hf_import with no entry in PERTURB or NOT_MODEL: {missing}"
    stale = sorted((set(PERTURB) | set(NOT_MODEL)) - set(read))
    assert not stale, f"entries for keys hf_import no longer reads: {stale}"
    for key, fns in read.items():  # a key read by several builders is checked in each of them
        need = {BUILDER_FAMILY[f] for f in fns if f in BUILDER_FAMILY}
        have = {fam if fam not in ("mistral", "qwen2") else "llama" for fam, _, _ in PERTURB.get(key, [])}
        assert key in NOT_MODEL or need <= have, f"{key}: read by {sorted(fns)}, perturbed only for {sorted(have)}"


@pytest.mark.parametrize("key,family,base,changed", [(k, *e) for k, es in PERTURB.items() for e in es],
                         ids=[f"{k}-{e[0]}" for k, es in PERTURB.items() for e in es])
def test_each_key_changes_the_model_or_refuses(key, family, base, changed):
    before = _build(family, base)
    try:
        after = _build(family, {**base, **changed})
    except HFImportError as exc:
        assert key in str(exc), f"the refusal should name {key!r}: {exc}"
        return
    assert after != before, f"{key}: changing it from the base config builds the same model (read only into notes?)"


@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2", "gpt2", "opt", "bert"])
def test_builders_write_no_notes_for_supported_configs(family):
    cfg = _base(family)
    assert hf_import.BUILDERS[family](cfg, Path("folder"))[-1] == []
