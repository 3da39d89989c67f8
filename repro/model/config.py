"""Block and model configuration: the slots that papers change, validated in one place.

Every enumerated choice is a tuple below; `BlockConfig` / `ModelConfig` reject unknown values,
non-positive sizes and bad combinations with a `ConfigError` that names the offending key.
Post-LN, Pre-LN and "no norm" are data (``norm_position``, ``norm``), not separate classes.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from repro.errors import ConfigError

from .rope import ROPE_SCALING_TYPES

NORM_KINDS = ("layernorm", "rmsnorm", "scalenorm", "none")
NORM_POSITIONS = ("pre", "post")
NORM_IMPLS = ("torch", "manual", "triton")
ATTENTION_BACKENDS = ("math", "sdpa", "triton")
FFN_KINDS = ("relu", "gelu", "gelu_tanh", "swiglu", "moe")
BLOCK_CHECKPOINT = ("none", "selective")
STACK_CHECKPOINT = ("none", "full", "every_k", "sqrt", "selective")
POSITIONAL = ("sinusoidal", "learned", "none")


def _check_choice(prefix: str, key: str, value: Any, choices: tuple) -> None:
    if value not in choices:
        raise ConfigError(f"{prefix}{key}: {value!r} is not one of {', '.join(map(str, choices))}")


def _check_positive(prefix: str, key: str, value: Any, allow_zero: bool = False) -> None:
    ok = isinstance(value, int) and not isinstance(value, bool) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        raise ConfigError(f"{prefix}{key}: must be a {'non-negative' if allow_zero else 'positive'} integer, got {value!r}")


def _check_prob(prefix: str, key: str, value: Any) -> None:
    if not isinstance(value, (int, float)) or not 0.0 <= float(value) < 1.0:
        raise ConfigError(f"{prefix}{key}: must be a probability in [0, 1), got {value!r}")


def _from_mapping(cls, data: Mapping[str, Any], prefix: str):
    if not isinstance(data, Mapping):
        raise ConfigError(f"{prefix.rstrip('.') or cls.__name__}: expected a mapping, got {type(data).__name__}")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{prefix}{unknown[0]}: unknown key (valid keys: {', '.join(sorted(known))})")
    return cls(**data, _prefix=prefix) if "_prefix" in known else cls(**data)


@dataclass(frozen=True)
class BlockConfig:
    """One Transformer block: sizes, norm kind/position, attention backend, FFN kind, residual scaling."""

    d_model: int = 512
    n_heads: int = 8
    n_kv_heads: int | None = None  # None: multi-head; fewer than n_heads: grouped-query attention
    head_dim: int | None = None  # None: d_model // n_heads
    d_ff: int = 2048
    norm: str = "layernorm"
    norm_position: str = "pre"
    norm_impl: str = "torch"
    norm_eps: float = 1e-5
    attention: str = "sdpa"
    ffn: str = "relu"
    n_experts: int = 8
    moe_top_k: int = 2
    dropout: float = 0.0  # residual-branch dropout
    attn_dropout: float = 0.0
    act_dropout: float = 0.0
    bias: bool = True
    qkv_bias: bool | None = None  # q/k/v projection biases; None: as ``bias`` (Qwen2: true with bias false)
    out_bias: bool | None = None  # attention output projection bias; None: as ``bias``
    ffn_bias: bool | None = None  # FFN linear biases; None: as ``bias`` (Llama's mlp_bias)
    norm_bias: bool = True  # LayerNorm beta (only for layernorm)
    residual: bool = True  # False drops the skip connection: x <- F(x) (block_numerics, rank_collapse)
    residual_scale: float = 1.0  # branch multiplier: x + s * F(x); e.g. 1/sqrt(L) (Noci et al. 2022)
    checkpoint: str = "none"  # "selective": recompute the attention core (Korthikanti et al. 2023)
    rope: bool = False  # rotary positions on self-attention q/k (repro.model.rope; Llama / GPT-NeoX rotate-half)
    rope_base: float = 10000.0  # theta base (Llama-2: 10000, Llama-3: 500000)
    rope_dim: int | None = None  # rotated dims per head (None: the whole head; GPT-NeoX rotary_pct < 1: fewer)
    rope_scaling: dict | None = None  # {type: linear, factor} or {type: llama3, factor, low_freq_factor, ...}
    # sliding-window (banded causal) self-attention: query i sees keys i - attn_window < j <= i (Mistral's
    # sliding_window, Jiang et al. 2023; FlashAttention-2's window_size=(attn_window - 1, 0)); None: full causal
    attn_window: int | None = None
    attn_scale_by_layer: bool = False  # block l's scores also divided by l + 1 (GPT-2 scale_attn_by_inverse_layer_idx)
    _prefix: str = field(default="block.", repr=False, compare=False)

    def __post_init__(self) -> None:
        p = self._prefix
        for key in ("d_model", "n_heads", "d_ff", "n_experts", "moe_top_k"):
            _check_positive(p, key, getattr(self, key))
        if self.n_kv_heads is not None:
            _check_positive(p, "n_kv_heads", self.n_kv_heads)
            if self.n_heads % self.n_kv_heads:
                raise ConfigError(f"{p}n_kv_heads: {self.n_kv_heads} must divide n_heads={self.n_heads}")
        if self.head_dim is None:
            if self.d_model % self.n_heads:
                raise ConfigError(f"{p}n_heads: {self.n_heads} must divide d_model={self.d_model} (or set head_dim)")
        else:
            _check_positive(p, "head_dim", self.head_dim)
        _check_choice(p, "norm", self.norm, NORM_KINDS)
        _check_choice(p, "norm_position", self.norm_position, NORM_POSITIONS)
        _check_choice(p, "norm_impl", self.norm_impl, NORM_IMPLS)
        _check_choice(p, "attention", self.attention, ATTENTION_BACKENDS)
        _check_choice(p, "ffn", self.ffn, FFN_KINDS)
        _check_choice(p, "checkpoint", self.checkpoint, BLOCK_CHECKPOINT)
        for key in ("dropout", "attn_dropout", "act_dropout"):
            _check_prob(p, key, getattr(self, key))
        if not isinstance(self.norm_eps, (int, float)) or not self.norm_eps > 0:
            raise ConfigError(f"{p}norm_eps: must be > 0, got {self.norm_eps!r}")
        if not isinstance(self.residual_scale, (int, float)) or not self.residual_scale > 0:
            raise ConfigError(f"{p}residual_scale: must be > 0, got {self.residual_scale!r}")
        if self.ffn == "moe" and self.moe_top_k > self.n_experts:
            raise ConfigError(f"{p}moe_top_k: {self.moe_top_k} exceeds n_experts={self.n_experts}")
        self._check_rope(p)
        self._check_attention_options(p)
        if self.attention == "triton" and self.attn_dropout > 0:
            raise ConfigError(f"{p}attn_dropout: the triton attention backend has no dropout; set it to 0")

    def _check_attention_options(self, p: str) -> None:
        if self.attn_window is not None:
            _check_positive(p, "attn_window", self.attn_window)
        for key in ("qkv_bias", "out_bias", "ffn_bias"):
            if getattr(self, key) not in (None, True, False):
                raise ConfigError(f"{p}{key}: must be true, false or null (as bias), got {getattr(self, key)!r}")
        if not isinstance(self.attn_scale_by_layer, bool):
            raise ConfigError(f"{p}attn_scale_by_layer: must be true or false, got {self.attn_scale_by_layer!r}")

    def _check_rope(self, p: str) -> None:
        if not isinstance(self.rope, bool):
            raise ConfigError(f"{p}rope: must be true or false, got {self.rope!r}")
        if not isinstance(self.rope_base, (int, float)) or isinstance(self.rope_base, bool) or not self.rope_base > 1:
            raise ConfigError(f"{p}rope_base: must be a number > 1, got {self.rope_base!r}")
        if self.rope_dim is not None:
            _check_positive(p, "rope_dim", self.rope_dim)
            if self.rope_dim % 2 or self.rope_dim > self.dim_head:
                raise ConfigError(f"{p}rope_dim: {self.rope_dim} must be even and at most the head dim {self.dim_head}")
        elif self.rope and self.dim_head % 2:
            raise ConfigError(f"{p}rope: the head dim {self.dim_head} must be even")
        sc = self.rope_scaling
        if sc is None:
            return
        if not isinstance(sc, Mapping):
            raise ConfigError(f"{p}rope_scaling: expected a mapping or null, got {type(sc).__name__}")
        kind = sc.get("type", "none")
        _check_choice(f"{p}rope_scaling.", "type", kind, ROPE_SCALING_TYPES)
        need = {"none": (), "linear": ("factor",),
                "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")}[kind]
        allowed = set(need) | {"type"}
        for key in sc:
            if key not in allowed:
                raise ConfigError(f"{p}rope_scaling.{key}: unknown key for type {kind} (valid: {', '.join(sorted(allowed))})")
        for key in need:
            v = sc.get(key)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
                raise ConfigError(f"{p}rope_scaling.{key}: must be a number > 0, got {v!r}")
        if kind == "llama3" and not sc["high_freq_factor"] > sc["low_freq_factor"]:
            raise ConfigError(f"{p}rope_scaling.high_freq_factor: must exceed low_freq_factor")

    @property
    def use_qkv_bias(self) -> bool:
        return self.bias if self.qkv_bias is None else self.qkv_bias

    @property
    def use_out_bias(self) -> bool:
        return self.bias if self.out_bias is None else self.out_bias

    @property
    def use_ffn_bias(self) -> bool:
        return self.bias if self.ffn_bias is None else self.ffn_bias

    @property
    def rotary_dim(self) -> int:
        return self.rope_dim or self.dim_head

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def dim_head(self) -> int:
        return self.head_dim or self.d_model // self.n_heads

    def replace(self, **changes) -> "BlockConfig":
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], prefix: str = "block.") -> "BlockConfig":
        return _from_mapping(cls, data, prefix)

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")}


@dataclass(frozen=True)
class ModelConfig:
    """A model built from `BlockConfig` blocks: encoder, decoder, encoder-decoder or decoder-only LM."""

    block: BlockConfig = field(default_factory=BlockConfig)
    vocab_size: int = 32000
    n_encoder_layers: int = 6
    n_decoder_layers: int = 6
    max_seq_len: int = 1024
    positional: str = "sinusoidal"
    n_token_types: int = 0  # BERT segment embeddings
    embed_scale: bool = True  # multiply token embeddings by sqrt(d_model) (Vaswani et al. 2017, 3.4)
    tie_output: bool = True  # output projection shares the decoder's token embedding
    share_encoder_decoder_embeddings: bool = True
    final_norm: bool | None = None  # None: on for pre-norm, off for post-norm
    embed_norm: bool = False  # a norm right after the embeddings (BERT)
    # token embedding width when it differs from d_model: embeddings of this width are projected in (embed_dim ->
    # d_model) before the positions are added, and the last hidden state out (d_model -> embed_dim) before the
    # output projection; both without bias (OPT-350m's project_in / project_out, word_embed_proj_dim 512, d 1024)
    embed_dim: int | None = None
    pooler: bool = False  # encoder models: dense + tanh on the first ([CLS]) token (BERT's pooler)
    n_classes: int = 0  # encoder models: a linear classifier on the pooled output (BERT fine-tuned on a task)
    pad_id: int = 0
    checkpoint: str = "none"  # stack policy: none | full | every_k | sqrt | selective
    checkpoint_every: int = 2  # segment length for every_k
    _prefix: str = field(default="model.", repr=False, compare=False)

    def __post_init__(self) -> None:
        p = self._prefix
        block = self.block
        if isinstance(block, Mapping):
            block = BlockConfig.from_dict(block, prefix=f"{p}block.")
            object.__setattr__(self, "block", block)
        if not isinstance(block, BlockConfig):
            raise ConfigError(f"{p}block: expected a BlockConfig or mapping, got {type(block).__name__}")
        for key in ("vocab_size", "max_seq_len", "checkpoint_every"):
            _check_positive(p, key, getattr(self, key))
        for key in ("n_encoder_layers", "n_decoder_layers", "n_token_types", "pad_id", "n_classes"):
            _check_positive(p, key, getattr(self, key), allow_zero=True)
        _check_choice(p, "positional", self.positional, POSITIONAL)
        _check_choice(p, "checkpoint", self.checkpoint, STACK_CHECKPOINT)
        if self.n_classes and not self.pooler:
            raise ConfigError(f"{p}n_classes: a classifier reads the pooled output; set pooler: true")
        if self.embed_dim is not None:
            _check_positive(p, "embed_dim", self.embed_dim)
        if block.attn_window is not None and self.n_encoder_layers:
            raise ConfigError(f"{p}block.attn_window: sliding-window attention is causal (decoder self-attention); "
                              "an encoder's bidirectional attention has no window")
        if self.pad_id >= self.vocab_size:
            raise ConfigError(f"{p}pad_id: {self.pad_id} is outside the vocabulary of size {self.vocab_size}")

    @property
    def use_final_norm(self) -> bool:
        if self.final_norm is None:
            return self.block.norm_position == "pre" and self.block.norm != "none"
        return bool(self.final_norm)

    def replace(self, **changes) -> "ModelConfig":
        return dataclasses.replace(self, **changes)

    def replace_block(self, **changes) -> "ModelConfig":
        return dataclasses.replace(self, block=self.block.replace(**changes))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], prefix: str = "model.") -> "ModelConfig":
        return _from_mapping(cls, data, prefix)

    def to_dict(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")}
        out["block"] = self.block.to_dict()
        return out
