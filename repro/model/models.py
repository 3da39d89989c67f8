"""Models built from the shared block: encoder, decoder, encoder-decoder (Vaswani et al. 2017) and decoder-only LM.

All are constructible on the meta device (``with torch.device("meta"): EncoderDecoder(cfg)``), which is how
param_accounting counts 7B-class models without memory.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from .block import BlockStack
from .config import ModelConfig
from .norms import make_norm


def sinusoidal_table(n: int, d: int) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...) (Vaswani et al. 2017, 3.5)."""
    pos = torch.arange(n, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
    table = torch.zeros(n, d)
    table[:, 0::2] = torch.sin(pos * div)
    table[:, 1::2] = torch.cos(pos * div[: d // 2])
    return table


def positions_from_mask(pad_mask, T: int, offset: int = 0, device=None) -> torch.Tensor:
    """Position ids: ``offset + arange(T)`` (T,) without a mask; with ``pad_mask`` (B, T) (True = pad) each real
    token's index among the real tokens of its row (B, T), pads keeping ``offset + t``.  Right-padded rows thus get
    exactly ``arange``; left-padded rows get fairseq's ``make_positions`` (shifted to start at 0)."""
    ar = torch.arange(offset, offset + T, device=device)
    if pad_mask is None or not bool(pad_mask.any()):
        return ar
    real = ~pad_mask
    return torch.where(real, offset + real.long().cumsum(1) - 1, ar[None, :])


class TokenEmbedding(nn.Embedding):
    slot = "embeddings"


class EmbeddingProjection(nn.Linear):
    """Bias-free projection between the token-embedding width and d_model (OPT-350m's project_in / project_out)."""

    slot = "embeddings"

    def __init__(self, d_in: int, d_out: int):
        super().__init__(d_in, d_out, bias=False)


class Embeddings(nn.Module):
    """Token embedding (optionally scaled by sqrt(d)) (projected to d_model when ``model.embed_dim`` differs: OPT's
    project_in) + positions (+ token types) (+ a norm, BERT) + dropout."""

    slot = "embeddings"

    def __init__(self, cfg: ModelConfig, token: TokenEmbedding | None = None):
        super().__init__()
        d = cfg.block.d_model
        e = cfg.embed_dim or d
        self.token = token if token is not None else TokenEmbedding(cfg.vocab_size, e, padding_idx=cfg.pad_id)
        self.project_in = EmbeddingProjection(e, d) if e != d else None
        self.scale = math.sqrt(d) if cfg.embed_scale else 1.0
        self.position = nn.Embedding(cfg.max_seq_len, d) if cfg.positional == "learned" else None
        if cfg.positional == "sinusoidal":
            self.register_buffer("sinusoid", sinusoidal_table(cfg.max_seq_len, d), persistent=False)
        else:
            self.sinusoid = None
        self.token_type = nn.Embedding(cfg.n_token_types, d) if cfg.n_token_types else None
        self.norm = make_norm(cfg.block.norm, d, cfg.block.norm_eps, cfg.block.norm_bias) if cfg.embed_norm else None
        self.drop = nn.Dropout(cfg.block.dropout)
        self.max_seq_len = cfg.max_seq_len

    def forward(self, tokens: torch.Tensor, offset: int = 0, token_types=None, positions=None) -> torch.Tensor:
        """``positions``: ids (T,) or (B, T) from :func:`positions_from_mask`; default ``offset + arange(T)``."""
        T = tokens.shape[1]
        if offset + T > self.max_seq_len:
            raise ValueError(f"model.max_seq_len: sequence of {offset + T} tokens exceeds {self.max_seq_len}")
        x = self.token(tokens) * self.scale
        if self.project_in is not None:
            x = self.project_in(x)
        pos = positions_from_mask(None, T, offset, tokens.device) if positions is None else positions
        if self.position is not None:
            x = x + self.position(pos)
        if self.sinusoid is not None:
            x = x + self.sinusoid[pos].to(x.dtype)
        if self.token_type is not None:
            x = x + self.token_type(torch.zeros_like(tokens) if token_types is None else token_types)
        if self.norm is not None:
            x = self.norm(x)
        return self.drop(x)


class Encoder(nn.Module):
    """Bidirectional stack over (B, S) tokens; ``key_padding_mask`` (B, S) True = pad."""

    def __init__(self, cfg: ModelConfig, token: TokenEmbedding | None = None):
        super().__init__()
        self.cfg = cfg
        self.embed = Embeddings(cfg, token)
        self.layers = BlockStack(cfg.block, cfg.n_encoder_layers, False, cfg.checkpoint, cfg.checkpoint_every)
        b = cfg.block
        self.final_norm = make_norm(b.norm, b.d_model, b.norm_eps, b.norm_bias, b.norm_impl) if cfg.use_final_norm else None

    def forward(self, tokens, key_padding_mask=None, return_hidden=False, token_types=None):
        """Positions count real tokens (left- or right-padded rows alike); see :func:`positions_from_mask`."""
        pos = positions_from_mask(key_padding_mask, tokens.shape[1], 0, tokens.device)
        x = self.embed(tokens, token_types=token_types, positions=pos)
        out = self.layers(x, key_padding_mask=key_padding_mask, return_hidden=return_hidden, positions=pos)
        x, hidden = out if return_hidden else (out, None)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return (x, hidden) if return_hidden else x


class Decoder(nn.Module):
    """Causal stack with optional cross-attention, and the output projection to the vocabulary."""

    def __init__(self, cfg: ModelConfig, cross_attention: bool, token: TokenEmbedding | None = None):
        super().__init__()
        self.cfg = cfg
        self.embed = Embeddings(cfg, token)
        self.layers = BlockStack(cfg.block, cfg.n_decoder_layers, cross_attention, cfg.checkpoint, cfg.checkpoint_every)
        b = cfg.block
        self.final_norm = make_norm(b.norm, b.d_model, b.norm_eps, b.norm_bias, b.norm_impl) if cfg.use_final_norm else None
        e = cfg.embed_dim or b.d_model
        self.project_out = EmbeddingProjection(b.d_model, e) if e != b.d_model else None  # OPT-350m's project_out
        self.output = None if cfg.tie_output else OutputProjection(e, cfg.vocab_size)

    def logits(self, x):
        if self.final_norm is not None:
            x = self.final_norm(x)
        if self.project_out is not None:
            x = self.project_out(x)
        if self.output is None:
            return x @ self.embed.token.weight.t()
        return self.output(x)

    def forward(self, tokens, *, key_padding_mask=None, memory=None, memory_padding_mask=None,
                cache: list | None = None, offset: int = 0, return_hidden=False, keep=None):
        """Logits (B, T, V); with ``keep`` (B, T) bool, only at the kept positions, (N, V) in row-major order (the
        training loss: no vocabulary-sized work at padded targets)."""
        pos = positions_from_mask(key_padding_mask, tokens.shape[1], offset, tokens.device)
        x = self.embed(tokens, offset=offset, positions=pos)
        out = self.layers(x, causal=True, key_padding_mask=key_padding_mask, memory=memory,
                          memory_padding_mask=memory_padding_mask, cache=cache, return_hidden=return_hidden,
                          positions=pos)
        x, hidden = out if return_hidden else (out, None)
        if keep is not None:
            x = x[keep]
        return (self.logits(x), hidden) if return_hidden else self.logits(x)

    def new_cache(self) -> list:
        return [{} for _ in self.layers.layers]


class OutputProjection(nn.Linear):
    slot = "embeddings"

    def __init__(self, d: int, vocab: int):
        super().__init__(d, vocab, bias=False)


class EncoderDecoder(nn.Module):
    """Translation model. ``forward(src, tgt_in, src_pad_mask, tgt_pad_mask) -> logits (B, T, V)``."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.encoder = Encoder(cfg)
        shared = self.encoder.embed.token if cfg.share_encoder_decoder_embeddings else None
        self.decoder = Decoder(cfg, cross_attention=True, token=shared)

    def encode(self, src, src_pad_mask=None):
        return self.encoder(src, key_padding_mask=src_pad_mask)

    def decode(self, tgt_in, memory, src_pad_mask=None, tgt_pad_mask=None, cache=None, offset=0, keep=None):
        return self.decoder(tgt_in, key_padding_mask=tgt_pad_mask, memory=memory, memory_padding_mask=src_pad_mask,
                            cache=cache, offset=offset, keep=keep)

    def forward(self, src, tgt_in, src_pad_mask=None, tgt_pad_mask=None, keep=None):
        return self.decode(tgt_in, self.encode(src, src_pad_mask), src_pad_mask, tgt_pad_mask, keep=keep)

    def attention_modules(self) -> dict[str, list]:
        """Attention modules by kind: encoder self, decoder self, cross (encoder-decoder) attention."""
        return {"encoder_self": [b.self_attn for b in self.encoder.layers.layers],
                "decoder_self": [b.self_attn for b in self.decoder.layers.layers],
                "cross": [b.cross_attn for b in self.decoder.layers.layers]}


class DecoderLM(nn.Module):
    """Decoder-only language model (GPT-2 / Llama shape). ``forward(tokens, pad_mask) -> logits``."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.decoder = Decoder(cfg.replace(n_decoder_layers=cfg.n_decoder_layers), cross_attention=False)

    def forward(self, tokens, pad_mask=None, return_hidden=False, keep=None):
        return self.decoder(tokens, key_padding_mask=pad_mask, return_hidden=return_hidden, keep=keep)

    def attention_modules(self) -> dict[str, list]:
        return {"decoder_self": [b.self_attn for b in self.decoder.layers.layers]}


class Pooler(nn.Module):
    """BERT's pooler (Devlin et al. 2019, Sec. 3): tanh(W h_[CLS] + b) on the first token."""

    slot = "other"

    def __init__(self, d: int):
        super().__init__()
        self.dense = nn.Linear(d, d)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))


class Classifier(nn.Linear):
    slot = "other"


class EncoderModel(nn.Module):
    """Encoder-only model (BERT shape) without the MLM head: the backbone, and with ``model.pooler`` BERT's pooler
    (BERT-base then counts 109,482,240 parameters, Devlin et al.'s 110M); with ``model.n_classes`` a linear
    classifier on the pooled output (BERT fine-tuned on a classification task, e.g. MNLI in Michel et al. 2019)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.encoder = Encoder(cfg)
        self.pooler = Pooler(cfg.block.d_model) if cfg.pooler else None
        self.classifier = Classifier(cfg.block.d_model, cfg.n_classes) if cfg.n_classes else None
        self.drop = nn.Dropout(cfg.block.dropout)

    def classify(self, tokens, pad_mask=None, token_types=None) -> torch.Tensor:
        """Class logits (B, n_classes): classifier(dropout(pooler(encoder(tokens))))."""
        if self.classifier is None:
            raise ValueError("model.n_classes: this encoder model has no classifier")
        return self.classifier(self.drop(self.pool(self(tokens, pad_mask, token_types=token_types))))

    def forward(self, tokens, pad_mask=None, return_hidden=False, token_types=None):
        return self.encoder(tokens, key_padding_mask=pad_mask, return_hidden=return_hidden, token_types=token_types)

    def pool(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.pooler is None:
            raise ValueError("model.pooler: this encoder model has no pooler (set model.pooler: true)")
        return self.pooler(hidden)
