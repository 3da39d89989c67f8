"""Import Hugging Face checkpoint folders into the shared block.

At paper scale the claims run on the published models themselves, read from a local folder (no hub access at run
time): Llama-2 / Mistral for layer pruning (Gromov et al. 2025, Men et al. 2025), OPT and Llama for the quantization
papers, GPT-2, and BERT-base for head pruning (Michel et al. 2019).  A folder is what ``save_pretrained`` writes:
``config.json`` plus ``model.safetensors`` or shards listed in ``model.safetensors.index.json``.  Weights are read
with safetensors only; pickled ``pytorch_model.bin`` files are refused, never unpickled.

Entry point::

    model, info = load_pretrained("path/to/folder", dtype=torch.float32, device="cpu")

``model`` is the suite's ``DecoderLM`` (Llama, Mistral, Qwen2, OPT, GPT-2) or ``EncoderModel`` (BERT, with its pooler),
in eval mode; ``info`` (:class:`HFImport`) names the family, the architecture, the suite's ``ModelConfig``, the
tensors left unused (task heads such as BERT's MLM or classifier) and the parameter totals (the suite's count and
the checkpoint's own).

Families and their mapping onto the block:

* ``llama`` / ``mistral`` / ``qwen2``: Pre-RMSNorm, SwiGLU, rotary positions (rotate-half, ``rope_theta`` and
  ``rope_scaling`` linear / llama3), grouped-query attention (``num_key_value_heads``), untied or tied head;
  Llama's ``attention_bias`` (q/k/v/o biases) and ``mlp_bias``; Qwen2's q/k/v biases.  Mistral's
  ``sliding_window`` (and Qwen2's, with ``use_sliding_window`` on every layer) is the block's ``attn_window``:
  banded causal attention in every backend, exact at any length (Jiang et al. 2023).  A window on some layers
  only is refused.
* ``gpt2``: Pre-LN, learned positions, tanh GELU (``gelu_new``), fused ``c_attn`` split into q/k/v (GPT-2's
  Conv1D weights are stored transposed); ``scale_attn_by_inverse_layer_idx`` divides block l's scores by l + 1.
* ``opt``: Pre-LN (``do_layer_norm_before``) or Post-LN without a final norm (OPT-350m), ReLU, learned positions
  stored with an offset of 2 rows (positions count real tokens from the attention mask, as the suite's models
  do); ``word_embed_proj_dim != hidden_size`` (OPT-350m) gives the bias-free ``project_in`` / ``project_out``.
* ``bert``: Post-LN, exact GELU, embedding LayerNorm, token types, learned positions, pooler (dense + tanh), and
  for ``BertForSequenceClassification`` its classifier (``EncoderModel.classify``).

Anything else (another ``model_type``, a feature the block cannot express, a missing tensor, an unexpected one, a
shape mismatch) raises :class:`HFImportError` naming it.  The rule (tests/test_hf_import_keys.py): every
config.json key read here either changes the model built (and the tests match transformers' logits in fp32) or
refuses unsupported values by name; none is read only into ``notes``, so nothing is silently approximated.
Config keys are read with literal names (``cfg.get("key")``, ``cfg["key"]``, ``_req(cfg, "key", ...)``) so the
rule's test can list them.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import sentencepiece as spm
import torch
from safetensors import safe_open

from repro.errors import HFImportError

from .config import BlockConfig, ModelConfig
from .models import DecoderLM, EncoderModel, sinusoidal_table
from .params import active_parameters, count_by_slot

log = logging.getLogger("repro.model")

FAMILIES = ("llama", "mistral", "qwen2", "gpt2", "opt", "bert")
# task heads the suite does not model: their tensors are reported in HFImport.unused, not an error
HEAD_PREFIXES = ("cls.", "classifier.", "qa_outputs.", "score.")


@dataclass
class HFImport:
    folder: Path
    family: str  # model_type: llama | mistral | gpt2 | opt | bert
    architecture: str  # config.json "architectures"[0]
    kind: str  # decoder_lm | encoder
    model_cfg: Any  # repro.model.ModelConfig
    hf_config: dict
    params: dict  # the suite's count_by_slot of the imported model
    checkpoint_params: int  # elements of the distinct tensors the model uses, read from the safetensors files
    unused: list[str] = field(default_factory=list)  # tensors of task heads not imported
    notes: list[str] = field(default_factory=list)
    bos_id: int | None = None
    eos_id: int | None = None
    pad_id: int | None = None


# ----------------------------------------------------------------------------------------------- reading the folder
def read_config(folder: Path) -> dict:
    path = folder / "config.json"
    if not folder.is_dir():
        raise HFImportError(f"{folder}: not a folder (expected a Hugging Face checkpoint folder with config.json)")
    if not path.exists():
        raise HFImportError(f"{path}: not found (a Hugging Face checkpoint folder has config.json)")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise HFImportError(f"{path}: not valid JSON ({exc})") from None


def weight_files(folder: Path) -> dict[str, Path]:
    """Tensor name -> safetensors file (single file, or the shards of model.safetensors.index.json)."""
    index = folder / "model.safetensors.index.json"
    single = folder / "model.safetensors"
    if index.exists():
        try:
            wmap = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError) as exc:
            raise HFImportError(f"{index}: not a safetensors index (needs 'weight_map'): {exc}") from None
        out = {}
        for name, shard in wmap.items():
            p = folder / shard
            if not p.exists():
                raise HFImportError(f"{index}: shard {shard} (for tensor {name}) not found in {folder}")
            out[name] = p
        return out
    if single.exists():
        with safe_open(str(single), framework="pt") as f:
            return {k: single for k in f.keys()}
    pickled = sorted(p.name for p in folder.glob("*.bin")) + sorted(p.name for p in folder.glob("*.pt*"))
    hint = (f"; {', '.join(pickled)} would need unpickling, which is refused: convert it to safetensors "
            "(transformers: AutoModel.from_pretrained(folder).save_pretrained(folder), which writes "
            "model.safetensors by default)") if pickled else ""
    raise HFImportError(f"{folder}: no model.safetensors or model.safetensors.index.json{hint}")


class _Tensors:
    """Lazy access to the folder's tensors by name; records which were used."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.files = weight_files(folder)
        self.used: set[str] = set()
        self._handles: dict[Path, Any] = {}

    def __contains__(self, name: str) -> bool:
        return name in self.files

    def get(self, name: str) -> torch.Tensor:
        if name not in self.files:
            raise HFImportError(f"{self.folder}: missing tensor {name!r} in the safetensors files")

        path = self.files[name]
        if path not in self._handles:
            self._handles[path] = safe_open(str(path), framework="pt")
        self.used.add(name)
        return self._handles[path].get_tensor(name)

    def numel(self, names) -> int:
        total = 0
        by_file: dict[Path, list[str]] = {}
        for n in names:
            by_file.setdefault(self.files[n], []).append(n)
        for path, ns in by_file.items():
            with safe_open(str(path), framework="pt") as f:
                for n in ns:
                    shape = f.get_slice(n).get_shape()
                    total += int(torch.Size(shape).numel())
        return total


def _req(cfg: Mapping, key: str, folder: Path):
    if cfg.get(key) is None:
        raise HFImportError(f"{folder / 'config.json'}: missing key {key!r}")
    return cfg[key]


def _rope(cfg: Mapping, path: Path) -> tuple[float, dict | None]:
    """rope_theta and scaling from transformers 4 (rope_theta, rope_scaling) or 5 (rope_parameters) configs."""
    params = cfg.get("rope_parameters") or {}
    if isinstance(params, Mapping) and "rope_theta" not in params and params:  # per-layer-type dicts (not used here)
        raise HFImportError(f"{path}: rope_parameters per layer type are not supported")
    scaling = cfg.get("rope_scaling") or (params if params.get("rope_type", "default") != "default" else None)
    theta = float(params.get("rope_theta") or cfg.get("rope_theta") or 10000.0)
    if not scaling:
        return theta, None
    kind = scaling.get("rope_type") or scaling.get("type") or "default"
    if kind == "default":
        return theta, None
    if kind == "linear":
        return theta, {"type": "linear", "factor": float(scaling["factor"])}
    if kind == "llama3":
        return theta, {"type": "llama3", **{k: float(scaling[k]) for k in (
            "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")}}
    raise HFImportError(f"{path}: rope scaling type {kind!r} is not supported (linear, llama3)")


# ------------------------------------------------------------------------------------------------------- families
def _llama_window(cfg: Mapping, path: Path) -> int | None:
    """The sliding window of a Llama-family folder, the same for every block, or None (full causal attention).

    Mistral: ``sliding_window`` (null: none) on every layer, as transformers' MistralModel.  Qwen2: only with
    ``use_sliding_window``, on the layers ``layer_types`` marks "sliding_attention" (transformers 5; from
    ``max_window_layers`` in older files: layers at or past it).  Llama reads no window.  A window on some layers
    only is refused: the block has one window for all of them, and full attention there would be an approximation.
    """
    family = cfg["model_type"]
    if family == "llama":
        return None
    window = cfg.get("sliding_window")
    if family == "qwen2" and not cfg.get("use_sliding_window", False):
        return None
    if window is None:
        return None
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise HFImportError(f"{path}: sliding_window={window!r} is not a positive integer")
    if family == "qwen2":
        n_layers = int(_req(cfg, "num_hidden_layers", path.parent))
        types = cfg.get("layer_types") or ["sliding_attention" if i >= int(cfg.get("max_window_layers", 28))
                                           else "full_attention" for i in range(n_layers)]
        unknown = sorted(set(types) - {"sliding_attention", "full_attention"})
        if unknown:
            raise HFImportError(f"{path}: layer_types {unknown} are not supported (full_attention, sliding_attention)")
        if len(set(types)) > 1:
            raise HFImportError(f"{path}: layer_types / max_window_layers give a sliding window on some layers only "
                                f"({types.count('sliding_attention')} of {len(types)}); the block has one window for "
                                "every layer, so this folder is refused rather than approximated")
        if types[0] == "full_attention":
            return None
    return window


def _llama_mapping(n: int, attn_bias: bool, qkv_bias: bool, mlp_bias: bool) -> dict[str, str]:
    p = f"model.layers.{n}"
    out = {}
    for src, dst, bias in (("self_attn.q_proj", "self_attn.q_proj", qkv_bias),
                           ("self_attn.k_proj", "self_attn.k_proj", qkv_bias),
                           ("self_attn.v_proj", "self_attn.v_proj", qkv_bias),
                           ("self_attn.o_proj", "self_attn.out_proj", attn_bias),
                           ("mlp.gate_proj", "ffn.w1", mlp_bias), ("mlp.up_proj", "ffn.w3", mlp_bias),
                           ("mlp.down_proj", "ffn.w2", mlp_bias)):
        out[f"{p}.{src}.weight"] = f"{dst}.weight"
        if bias:
            out[f"{p}.{src}.bias"] = f"{dst}.bias"
    out[f"{p}.input_layernorm.weight"] = "norm_self.weight"
    out[f"{p}.post_attention_layernorm.weight"] = "norm_ffn.weight"
    return out


def _llama(cfg: Mapping, folder: Path):
    """Llama, Mistral and Qwen2 (Llama with q/k/v biases): Pre-RMSNorm, SwiGLU, rotary positions, GQA."""
    path = folder / "config.json"
    family = cfg["model_type"]
    act = cfg.get("hidden_act", "silu")
    if act != "silu":
        raise HFImportError(f"{path}: hidden_act={act!r} is not supported for {family} (silu: SwiGLU)")
    if family == "qwen2":  # transformers' Qwen2Attention: q/k/v with biases, o_proj without; MLP without
        attn_bias, qkv_bias, mlp_bias = False, True, False
    else:  # LlamaConfig's attention_bias (q, k, v and o) and mlp_bias (gate, up, down)
        attn_bias, mlp_bias = bool(cfg.get("attention_bias", False)), bool(cfg.get("mlp_bias", False))
        qkv_bias = attn_bias
    d, H = _req(cfg, "hidden_size", folder), _req(cfg, "num_attention_heads", folder)
    theta, scaling = _rope(cfg, path)
    head_dim = cfg.get("head_dim") or d // H
    if cfg.get("partial_rotary_factor", 1.0) not in (None, 1, 1.0):
        raise HFImportError(f"{path}: partial_rotary_factor={cfg.get('partial_rotary_factor')} is not supported for "
                            f"{family}")
    block = BlockConfig(d_model=d, n_heads=H, n_kv_heads=cfg.get("num_key_value_heads") or H,
                        head_dim=head_dim if head_dim != d // H or d % H else None,
                        d_ff=_req(cfg, "intermediate_size", folder), norm="rmsnorm", norm_position="pre",
                        norm_eps=float(cfg.get("rms_norm_eps", 1e-6)), attention="sdpa", ffn="swiglu", bias=False,
                        qkv_bias=qkv_bias, out_bias=attn_bias, ffn_bias=mlp_bias,
                        rope=True, rope_base=theta, rope_scaling=scaling, attn_window=_llama_window(cfg, path))
    tie = bool(cfg.get("tie_word_embeddings", False))
    mcfg = ModelConfig(block=block, vocab_size=_req(cfg, "vocab_size", folder), n_encoder_layers=0,
                       n_decoder_layers=_req(cfg, "num_hidden_layers", folder),
                       max_seq_len=int(cfg.get("max_position_embeddings", 4096)), positional="none",
                       embed_scale=False, tie_output=tie, final_norm=True, pad_id=_pad(cfg))
    top = {"model.embed_tokens.weight": "decoder.embed.token.weight", "model.norm.weight": "decoder.final_norm.weight"}
    if not tie:
        top["lm_head.weight"] = "decoder.output.weight"
    ignore = ("rotary_emb.inv_freq",) + (("lm_head.weight",) if tie else ())
    layers = _per_layer(lambda n: _llama_mapping(n, attn_bias, qkv_bias, mlp_bias), mcfg.n_decoder_layers, "decoder")
    return "decoder_lm", mcfg, top, layers, {}, ignore, []


def _gpt2(cfg: Mapping, folder: Path):
    path = folder / "config.json"
    acts = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}
    act = cfg.get("activation_function", "gelu_new")
    if act not in acts:
        raise HFImportError(f"{path}: activation_function={act!r} is not supported ({', '.join(acts)})")
    if cfg.get("add_cross_attention"):
        raise HFImportError(f"{path}: add_cross_attention=true is not supported (GPT-2 as a decoder of an "
                            "encoder-decoder)")
    if cfg.get("scale_attn_weights") is False:
        raise HFImportError(f"{path}: scale_attn_weights=false is not supported")
    d, L = _req(cfg, "n_embd", folder), _req(cfg, "n_layer", folder)
    # scale_attn_by_inverse_layer_idx: block l's scores also divided by l + 1 (transformers' GPT2Attention.scaling)
    block = BlockConfig(d_model=d, n_heads=_req(cfg, "n_head", folder), d_ff=cfg.get("n_inner") or 4 * d,
                        norm="layernorm", norm_position="pre", norm_eps=float(cfg.get("layer_norm_epsilon", 1e-5)),
                        attention="sdpa", ffn=acts[act], bias=True,
                        attn_scale_by_layer=bool(cfg.get("scale_attn_by_inverse_layer_idx", False)))
    tie = bool(cfg.get("tie_word_embeddings", True))
    mcfg = ModelConfig(block=block, vocab_size=_req(cfg, "vocab_size", folder), n_encoder_layers=0,
                       n_decoder_layers=L, max_seq_len=int(_req(cfg, "n_positions", folder)), positional="learned",
                       embed_scale=False, tie_output=tie, final_norm=True, pad_id=_pad(cfg))
    pre = "transformer."

    def mapping(n: int) -> dict[str, Any]:
        p = f"{pre}h.{n}"
        return {f"{p}.ln_1.weight": "norm_self.weight", f"{p}.ln_1.bias": "norm_self.bias",
                f"{p}.ln_2.weight": "norm_ffn.weight", f"{p}.ln_2.bias": "norm_ffn.bias",
                f"{p}.attn.c_attn.weight": ("self_attn.{q,k,v}_proj.weight", _split_conv1d_qkv),
                f"{p}.attn.c_attn.bias": ("self_attn.{q,k,v}_proj.bias", _split_qkv_bias),
                f"{p}.attn.c_proj.weight": ("self_attn.out_proj.weight", _t),
                f"{p}.attn.c_proj.bias": "self_attn.out_proj.bias",
                f"{p}.mlp.c_fc.weight": ("ffn.fc1.weight", _t), f"{p}.mlp.c_fc.bias": "ffn.fc1.bias",
                f"{p}.mlp.c_proj.weight": ("ffn.fc2.weight", _t), f"{p}.mlp.c_proj.bias": "ffn.fc2.bias"}

    top = {f"{pre}wte.weight": "decoder.embed.token.weight", f"{pre}wpe.weight": "decoder.embed.position.weight",
           f"{pre}ln_f.weight": "decoder.final_norm.weight", f"{pre}ln_f.bias": "decoder.final_norm.bias"}
    if not tie:
        top["lm_head.weight"] = "decoder.output.weight"
    ignore = (".attn.bias", ".attn.masked_bias") + (("lm_head.weight",) if tie else ())
    return "decoder_lm", mcfg, top, _per_layer(mapping, L, "decoder"), {"prefix_optional": pre}, ignore, []


def _opt(cfg: Mapping, folder: Path):
    path = folder / "config.json"
    d = _req(cfg, "hidden_size", folder)
    # word_embed_proj_dim != hidden_size (OPT-350m: 512 vs 1024): embeddings of that width, project_in before the
    # positions are added and project_out after the last layer (model.embed_dim)
    embed_dim = int(cfg.get("word_embed_proj_dim") or d)
    act = cfg.get("activation_function", "relu")
    if act not in ("relu", "gelu"):
        raise HFImportError(f"{path}: activation_function={act!r} is not supported (relu, gelu)")
    if cfg.get("enable_bias") is False or cfg.get("layer_norm_elementwise_affine") is False:
        raise HFImportError(f"{path}: enable_bias=false / layer_norm_elementwise_affine=false are not supported")
    pre_ln = bool(cfg.get("do_layer_norm_before", True))
    final = pre_ln and not cfg.get("_remove_final_layer_norm", False)
    L = _req(cfg, "num_hidden_layers", folder)
    block = BlockConfig(d_model=d, n_heads=_req(cfg, "num_attention_heads", folder), d_ff=_req(cfg, "ffn_dim", folder),
                        norm="layernorm", norm_position="pre" if pre_ln else "post", norm_eps=1e-5,
                        attention="sdpa", ffn=act, bias=True)
    tie = bool(cfg.get("tie_word_embeddings", True))
    mcfg = ModelConfig(block=block, vocab_size=_req(cfg, "vocab_size", folder), n_encoder_layers=0,
                       n_decoder_layers=L, max_seq_len=int(_req(cfg, "max_position_embeddings", folder)),
                       positional="learned", embed_scale=False, tie_output=tie, final_norm=final, pad_id=_pad(cfg),
                       embed_dim=embed_dim if embed_dim != d else None)
    pre = "model.decoder."

    def mapping(n: int) -> dict[str, str]:
        p = f"{pre}layers.{n}"
        out = {}
        for m in ("q_proj", "k_proj", "v_proj", "out_proj"):
            for leaf in ("weight", "bias"):
                out[f"{p}.self_attn.{m}.{leaf}"] = f"self_attn.{m}.{leaf}"
        for src, dst in (("self_attn_layer_norm", "norm_self"), ("final_layer_norm", "norm_ffn"), ("fc1", "ffn.fc1"),
                         ("fc2", "ffn.fc2")):
            for leaf in ("weight", "bias"):
                out[f"{p}.{src}.{leaf}"] = f"{dst}.{leaf}"
        return out

    top = {f"{pre}embed_tokens.weight": "decoder.embed.token.weight",
           f"{pre}embed_positions.weight": ("decoder.embed.position.weight", lambda w: w[2:])}  # OPT's offset 2
    if final:
        top.update({f"{pre}final_layer_norm.weight": "decoder.final_norm.weight",
                    f"{pre}final_layer_norm.bias": "decoder.final_norm.bias"})
    if embed_dim != d:
        top.update({f"{pre}project_in.weight": "decoder.embed.project_in.weight",
                    f"{pre}project_out.weight": "decoder.project_out.weight"})
    if not tie:
        top["lm_head.weight"] = "decoder.output.weight"
    ignore = ("lm_head.weight",) if tie else ()
    return "decoder_lm", mcfg, top, _per_layer(mapping, L, "decoder"), {"prefix_optional": "model."}, ignore, []


def _bert(cfg: Mapping, folder: Path):
    path = folder / "config.json"
    if cfg.get("position_embedding_type", "absolute") != "absolute":
        raise HFImportError(f"{path}: position_embedding_type={cfg['position_embedding_type']!r} is not supported")
    if cfg.get("is_decoder") or cfg.get("add_cross_attention"):
        raise HFImportError(f"{path}: is_decoder/add_cross_attention (BERT as a decoder) is not supported")
    act = cfg.get("hidden_act", "gelu")
    acts = {"gelu": "gelu", "relu": "relu", "gelu_new": "gelu_tanh"}
    if act not in acts:
        raise HFImportError(f"{path}: hidden_act={act!r} is not supported ({', '.join(acts)})")
    d, L = _req(cfg, "hidden_size", folder), _req(cfg, "num_hidden_layers", folder)
    block = BlockConfig(d_model=d, n_heads=_req(cfg, "num_attention_heads", folder),
                        d_ff=_req(cfg, "intermediate_size", folder), norm="layernorm", norm_position="post",
                        norm_eps=float(cfg.get("layer_norm_eps", 1e-12)), attention="sdpa", ffn=acts[act], bias=True)
    archs = cfg.get("architectures") or []
    classes = 0
    if "BertForSequenceClassification" in archs:  # the classifier is imported; other task heads are listed unused
        classes = int(cfg.get("num_labels") or len(cfg.get("id2label") or {}) or 2)
        if cfg.get("problem_type") not in (None, "single_label_classification"):
            raise HFImportError(f"{path}: problem_type={cfg['problem_type']!r} is not supported "
                                "(single_label_classification)")
    mcfg = ModelConfig(block=block, vocab_size=_req(cfg, "vocab_size", folder), n_encoder_layers=L,
                       n_decoder_layers=0, max_seq_len=int(_req(cfg, "max_position_embeddings", folder)),
                       positional="learned", n_token_types=int(cfg.get("type_vocab_size", 2)), embed_scale=False,
                       final_norm=False, embed_norm=True, pooler=True, n_classes=classes, pad_id=_pad(cfg))
    pre = "bert."

    def mapping(n: int) -> dict[str, str]:
        p = f"{pre}encoder.layer.{n}"
        pairs = (("attention.self.query", "self_attn.q_proj"), ("attention.self.key", "self_attn.k_proj"),
                 ("attention.self.value", "self_attn.v_proj"), ("attention.output.dense", "self_attn.out_proj"),
                 ("attention.output.LayerNorm", "norm_self"), ("intermediate.dense", "ffn.fc1"),
                 ("output.dense", "ffn.fc2"), ("output.LayerNorm", "norm_ffn"))
        return {f"{p}.{s}.{leaf}": f"{t}.{leaf}" for s, t in pairs for leaf in ("weight", "bias")}

    e = f"{pre}embeddings."
    top = {f"{e}word_embeddings.weight": "encoder.embed.token.weight",
           f"{e}position_embeddings.weight": "encoder.embed.position.weight",
           f"{e}token_type_embeddings.weight": "encoder.embed.token_type.weight",
           f"{e}LayerNorm.weight": "encoder.embed.norm.weight", f"{e}LayerNorm.bias": "encoder.embed.norm.bias",
           f"{pre}pooler.dense.weight": "pooler.dense.weight", f"{pre}pooler.dense.bias": "pooler.dense.bias"}
    if classes:
        top.update({"classifier.weight": "classifier.weight", "classifier.bias": "classifier.bias"})
    return "encoder", mcfg, top, _per_layer(mapping, L, "encoder"), {"prefix_optional": pre}, (
        "embeddings.position_ids",), []


def _pad(cfg: Mapping) -> int:
    pad = cfg.get("pad_token_id")
    return int(pad) if isinstance(pad, int) and 0 <= pad < int(cfg.get("vocab_size") or 0) else 0


def _per_layer(mapping: Callable[[int], dict], n_layers: int, side: str) -> dict:
    out = {}
    for n in range(n_layers):
        for src, dst in mapping(n).items():
            if isinstance(dst, tuple):
                out[src] = (f"{side}.layers.layers.{n}.{dst[0]}", dst[1])
            else:
                out[src] = f"{side}.layers.layers.{n}.{dst}"
    return out


def _t(w: torch.Tensor) -> torch.Tensor:
    return w.t().contiguous()  # GPT-2's Conv1D stores (in, out)


def _split_conv1d_qkv(w: torch.Tensor) -> list[torch.Tensor]:
    return [x.t().contiguous() for x in w.chunk(3, dim=1)]


def _split_qkv_bias(b: torch.Tensor) -> list[torch.Tensor]:
    return list(b.chunk(3))


BUILDERS = {"llama": _llama, "mistral": _llama, "qwen2": _llama, "gpt2": _gpt2, "opt": _opt, "bert": _bert}


# ------------------------------------------------------------------------------------------------------ loading
@dataclass
class _Plan:
    folder: Path
    cfg: dict
    family: str
    architecture: str
    kind: str
    mcfg: Any
    mapping: dict  # HF tensor name (as in the folder) -> suite key, or (suite key pattern, transform)
    ignore: tuple
    notes: list
    tensors: _Tensors

    def build(self, device="cpu"):
        with torch.device(device):
            return DecoderLM(self.mcfg) if self.kind == "decoder_lm" else EncoderModel(self.mcfg)


def plan_folder(folder: str | Path, attention: str | None = None) -> _Plan:
    """Read config.json and the safetensors headers (no weights): the suite's ModelConfig and the tensor mapping."""
    folder = Path(folder)
    cfg = read_config(folder)
    family = cfg.get("model_type")
    archs = cfg.get("architectures") or [""]
    if family not in BUILDERS:
        raise HFImportError(f"{folder / 'config.json'}: model_type {family!r} (architecture {archs[0] or '?'}) is not "
                            f"supported; supported: {', '.join(FAMILIES)}")
    kind, mcfg, top, layers, opts, ignore, notes = BUILDERS[family](cfg, folder)
    if attention is not None:
        mcfg = mcfg.replace_block(attention=attention)
    tensors = _Tensors(folder)
    # task-specific checkpoints store the backbone under a prefix ("bert.", "transformer.", "model."); base models
    # (BertModel, GPT2Model, OPTModel) store it without
    prefix = opts.get("prefix_optional")
    strip = bool(prefix) and not any(k.startswith(prefix) for k in tensors.files)

    def src_name(name: str) -> str:
        return name[len(prefix):] if strip and name.startswith(prefix) else name

    pooler_keys = [k for k in top if ".pooler." in f".{k}"]
    if mcfg.pooler and not any(src_name(k) in tensors for k in pooler_keys):  # e.g. BertForMaskedLM: no pooler
        mcfg = mcfg.replace(pooler=False)
        top = {k: v for k, v in top.items() if k not in pooler_keys}
        notes.append("no pooler tensors in the checkpoint: imported without the pooler")
    mapping = {src_name(k): v for k, v in {**top, **layers}.items()}
    return _Plan(folder, cfg, family, archs[0], kind, mcfg, mapping, tuple(ignore), notes, tensors)


def count_folder(folder: str | Path) -> dict:
    """Parameters of a checkpoint folder without loading weights: the suite's model built from config.json on the
    meta device (``count_by_slot``) beside the checkpoint's own total, the elements of the tensors the model reads
    (from the safetensors headers)."""
    plan = plan_folder(folder)
    missing = [k for k in plan.mapping if k not in plan.tensors]
    if missing:
        raise HFImportError(f"{plan.folder}: missing tensor {missing[0]!r} in the safetensors files")
    model = plan.build("meta")
    return {"slots": count_by_slot(model), "active": active_parameters(model), "model": model, "plan": plan,
            "checkpoint_params": plan.tensors.numel(sorted(plan.mapping))}


def _materialize_buffers(model: torch.nn.Module, device) -> None:
    """Non-persistent buffers of a model built on the meta device, made real (head gates, sinusoid tables)."""
    for module in model.modules():
        for name, buf in list(module.named_buffers(recurse=False)):
            if buf is None or buf.device.type != "meta":
                continue
            if name == "head_gate":
                module.head_gate = torch.ones(buf.shape, device=device)
            elif name == "sinusoid":
                module.sinusoid = sinusoidal_table(*buf.shape).to(device)
            else:  # pragma: no cover - a new buffer kind must be added here
                raise HFImportError(f"internal: buffer {name} of {type(module).__name__} cannot be materialised")


def load_pretrained(folder: str | Path, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
                    attention: str | None = None):
    """Load a Hugging Face checkpoint folder into the suite's model; returns ``(model, HFImport)``.

    ``dtype``/``device``: where the weights end up; the model is built on the meta device and takes the
    checkpoint's tensors (converted to ``dtype``) directly, so a 7B model needs its weights' memory once.
    ``attention``: the block's attention backend (default "sdpa"; "math" or "triton" work the same)."""
    plan = plan_folder(folder, attention)
    folder, mcfg, tensors = plan.folder, plan.mcfg, plan.tensors
    model = plan.build("meta")
    target = model.state_dict()
    new: dict[str, torch.Tensor] = {}
    mismatched = []
    for hf_name, dst in plan.mapping.items():
        t = tensors.get(hf_name)
        names, fn = (dst, None) if isinstance(dst, str) else dst
        vals = fn(t) if fn else t
        if "{q,k,v}" in names:
            keys = [names.replace("{q,k,v}", x) for x in "qkv"]
        else:
            keys, vals = [names], [vals]
        for key, v in zip(keys, vals):
            if key not in target:
                raise HFImportError(f"{folder}: internal mapping {hf_name} -> {key} names no parameter of the model")
            if tuple(v.shape) != tuple(target[key].shape):
                if key.endswith("embed.position.weight") and v.shape[0] >= target[key].shape[0]:
                    v = v[: target[key].shape[0]]
                else:
                    mismatched.append(f"{hf_name} {tuple(v.shape)} -> {key} {tuple(target[key].shape)}")
                    continue
            new[key] = v.to(device=device, dtype=dtype).contiguous()
    if mismatched:
        raise HFImportError(f"{folder}: shape mismatches (config.json disagrees with the tensors): "
                            f"{'; '.join(mismatched[:8])}")
    if mcfg.tie_output and "decoder.output.weight" in target:
        raise HFImportError(f"{folder}: internal error: tied output has its own weight")
    missing = sorted(k for k in target if k not in new)
    if missing:
        raise HFImportError(f"{folder}: no tensor for the model's {', '.join(missing[:8])}")
    rest = sorted(set(tensors.files) - tensors.used)
    unused = [k for k in rest if k.startswith(HEAD_PREFIXES)]
    unknown = [k for k in rest if k not in unused and not k.endswith(plan.ignore)]
    if unknown:
        raise HFImportError(f"{folder}: unexpected tensors for {plan.family} ({plan.architecture or '?'}): "
                            f"{', '.join(unknown[:10])}{' ...' if len(unknown) > 10 else ''}")
    model.load_state_dict(new, strict=True, assign=True)
    _materialize_buffers(model, device)
    model = model.to(device=device).eval()
    info = HFImport(folder=folder, family=plan.family, architecture=plan.architecture, kind=plan.kind, model_cfg=mcfg,
                    hf_config=plan.cfg, params=count_by_slot(model), checkpoint_params=tensors.numel(sorted(tensors.used)),
                    unused=unused, notes=plan.notes, bos_id=plan.cfg.get("bos_token_id"),
                    eos_id=plan.cfg.get("eos_token_id"), pad_id=plan.cfg.get("pad_token_id"))
    log.info("imported %s (%s, %s): %d layers, d=%d, %s parameters%s", folder, plan.family, plan.architecture,
             mcfg.n_decoder_layers or mcfg.n_encoder_layers, mcfg.block.d_model, f"{info.params['total']:,}",
             f"; unused head tensors: {len(unused)}" if unused else "")
    return model, info


# ------------------------------------------------------------------------------------------------------ tokenizer
@dataclass
class HFTokenizer:
    """The folder's tokenizer with the suite's interface (``encode``, ``decode``, ``pad_id``/``bos_id``/``eos_id``):
    ``tokenizer.model`` (sentencepiece: Llama-2, Mistral v0.1) read with sentencepiece, or ``tokenizer.json`` read
    with the ``tokenizers`` library when it is installed.  No special tokens are added by ``encode``."""

    path: Path
    bos_id: int
    eos_id: int
    pad_id: int
    _encode: Callable[[str], list[int]]
    _decode: Callable[[list[int]], str]

    def encode(self, text: str) -> list[int]:
        return list(self._encode(text))

    def decode(self, ids) -> str:
        return self._decode(list(ids))


def load_tokenizer(folder: str | Path, cfg: Mapping | None = None) -> HFTokenizer:
    """The tokenizer of a checkpoint folder; bos/eos/pad ids from config.json (pad: pad_token_id, else 0)."""
    folder = Path(folder)
    cfg = cfg if cfg is not None else read_config(folder)
    spm_path, json_path = folder / "tokenizer.model", folder / "tokenizer.json"
    if spm_path.exists():
        sp = spm.SentencePieceProcessor(model_file=str(spm_path))
        enc, dec, path = (lambda s: sp.encode(s)), (lambda ids: sp.decode(ids)), spm_path
        bos, eos = sp.bos_id(), sp.eos_id()
    elif json_path.exists():
        try:
            from tokenizers import Tokenizer  # lazy: optional (comes with transformers), for tokenizer.json only
        except ImportError:
            raise HFImportError(f"{json_path}: reading tokenizer.json needs the 'tokenizers' package "
                                "(pip install tokenizers)") from None
        tk = Tokenizer.from_file(str(json_path))
        enc = lambda s: tk.encode(s, add_special_tokens=False).ids  # noqa: E731
        dec, path, bos, eos = (lambda ids: tk.decode(ids)), json_path, -1, -1
    else:
        raise HFImportError(f"{folder}: no tokenizer.model or tokenizer.json (the text cannot be tokenized)")
    def first(v):
        return v[0] if isinstance(v, list) and v else v

    bos = first(cfg.get("bos_token_id")) if isinstance(first(cfg.get("bos_token_id")), int) else bos
    eos = first(cfg.get("eos_token_id")) if isinstance(first(cfg.get("eos_token_id")), int) else eos
    if bos is None or bos < 0 or eos is None or eos < 0:
        raise HFImportError(f"{folder / 'config.json'}: bos_token_id / eos_token_id missing (needed for the text)")
    return HFTokenizer(path, int(bos), int(eos), _pad(cfg), enc, dec)
