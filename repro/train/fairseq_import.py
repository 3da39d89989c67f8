"""Import a fairseq transformer checkpoint (Ott et al. 2019) into the shared EncoderDecoder.

At paper scale the head-pruning claim (Michel et al. 2019, Tables 1-2, Fig. 2-3) evaluates and prunes published
fairseq models (WMT'14 en-fr "Large", IWSLT14 de-en).  fairseq itself does not import on Python 3.11, so this
module reads the file format directly:

* Safe loading only: ``torch.load(path, weights_only=True)`` with ``argparse.Namespace`` allow-listed (fairseq
  < 0.10 store ``args`` as a Namespace; 0.12 stores ``cfg`` as plain dicts).  Arbitrary unpickling is never used.
* Architecture from ``cfg["model"]`` or ``args``: ``encoder_layers``, ``encoder_embed_dim``,
  ``encoder_ffn_embed_dim``, ``encoder_attention_heads``, ``decoder_*``, ``encoder_normalize_before``,
  ``decoder_normalize_before``, ``activation_fn``, ``share_all_embeddings``, ``share_decoder_input_output_embed``,
  ``no_scale_embedding``, ``layernorm_embedding``, ``encoder_learned_pos``, ``max_source_positions``, ...
  (defaults of fairseq's ``base_architecture`` where a key is absent).
* Weights: ``{encoder,decoder}.layers.N.self_attn.{q,k,v,out}_proj``, ``self_attn_layer_norm``,
  ``encoder_attn``, ``encoder_attn_layer_norm``, ``fc1``, ``fc2``, ``final_layer_norm``, ``embed_tokens``,
  ``output_projection``, ``layer_norm``, ``layernorm_embedding``, ``embed_positions``.  fairseq 0.12's zero-filled
  BetterTransformer fast-path duplicates (``in_proj_weight``, ``in_proj_bias``, ``out_proj_weight``,
  ``fc1_weight``, ...) and version buffers are ignored; any other unknown key, missing key or shape mismatch
  fails with an error naming the keys.
* Positions: fairseq's sinusoidal table is ``[sin | cos]`` halves with frequencies ``10000^(-i/(half-1))`` and
  position ids starting at ``padding_idx + 1``; it is not the shared model's interleaved Vaswani table, so the
  import uses ``positional="learned"`` and copies fairseq's table (rows from ``padding_idx + 1``) into it.
  fairseq numbers positions with ``make_positions``: ``padding_idx + 1, padding_idx + 2, ...`` over the non-pad
  tokens of a row, pads getting ``padding_idx``.  fairseq batches left-pad the source, so there a row's first real
  token is not at index 0; the shared model's embeddings count positions over non-pad tokens from the padding mask
  (``repro.model.models.positions_from_mask``), so left-padded (fairseq) and right-padded (the suite's) batches
  both give every real token fairseq's position.
* The decoder starts with eos (fairseq's ``prev_output_tokens``), so decode with ``bos_id = eos``;
  ``repro.train.decode`` then bans only pad (and eos at the first step), as fairseq's ``SequenceGenerator`` does.
  With separate source/target dictionaries the model's vocabulary is the larger of the two and
  ``FairseqImport.tgt_vocab`` bounds the target ids (decoding must ban ids above it).
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch

from repro.data.fairseq_io import read_fairseq_dictionary
from repro.errors import FairseqImportError
from repro.model import BlockConfig, ModelConfig
from repro.model.models import EncoderDecoder
from repro.train.loop import CKPT_NAME, save_checkpoint
from repro.train.pipeline import require_path

log = logging.getLogger("repro.train")

FAST_PATH_KEYS = {"in_proj_weight", "in_proj_bias", "out_proj_weight", "out_proj_bias", "fc1_weight", "fc1_bias",
                  "fc2_weight", "fc2_bias", "norm1_weight", "norm1_bias", "norm2_weight", "norm2_bias"}
IGNORED_SUFFIXES = ("version", "embed_positions._float_tensor")


def fairseq_sinusoidal_table(num_embeddings: int, dim: int, padding_idx: int | None) -> torch.Tensor:
    """fairseq's ``SinusoidalPositionalEmbedding.get_embedding`` (rows indexed by fairseq position ids)."""
    half = dim // 2
    scale = math.log(10000) / (half - 1)
    freq = torch.exp(torch.arange(half, dtype=torch.float) * -scale)
    ang = torch.arange(num_embeddings, dtype=torch.float)[:, None] * freq[None, :]
    emb = torch.cat([torch.sin(ang), torch.cos(ang)], dim=1).view(num_embeddings, -1)
    if dim % 2 == 1:
        emb = torch.cat([emb, torch.zeros(num_embeddings, 1)], dim=1)
    if padding_idx is not None:
        emb[padding_idx, :] = 0
    return emb


def safe_load(path: str | Path) -> dict:
    """``torch.load(weights_only=True)`` with ``argparse.Namespace`` allow-listed; never full unpickling."""
    path = Path(path)
    if not path.exists():
        raise FairseqImportError(f"{path}: fairseq checkpoint not found")
    torch.serialization.add_safe_globals([argparse.Namespace])
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 -- report any unpickling refusal or corruption with the file name
        raise FairseqImportError(f"{path}: cannot be loaded safely (weights_only=True): {exc}") from None
    if not isinstance(state, Mapping) or "model" not in state:
        raise FairseqImportError(f"{path}: not a fairseq checkpoint (no 'model' entry; keys: "
                                 f"{sorted(state)[:10] if isinstance(state, Mapping) else type(state).__name__})")
    return dict(state)


def checkpoint_args(state: Mapping, path="checkpoint") -> dict:
    """The model arguments as a dict: ``cfg["model"]`` (fairseq >= 0.10, dict or Namespace) or ``args``."""
    cfg = state.get("cfg")
    src = None
    if isinstance(cfg, Mapping) and cfg.get("model") is not None:
        src = cfg["model"]
    elif state.get("args") is not None:
        src = state["args"]
    if src is None:
        raise FairseqImportError(f"{path}: no model arguments (neither cfg['model'] nor args)")
    return dict(vars(src)) if isinstance(src, argparse.Namespace) else dict(src)


def _arg(a: Mapping, key: str, default):
    v = a.get(key)
    return default if v is None else v


def model_config_from_args(a: Mapping, src_vocab: int, tgt_vocab: int, pad_id: int, path="checkpoint"):
    """ModelConfig equivalent to the fairseq transformer described by ``a`` (base_architecture defaults)."""
    e_dim = _arg(a, "encoder_embed_dim", 512)
    d_dim = _arg(a, "decoder_embed_dim", e_dim)
    e_ffn = _arg(a, "encoder_ffn_embed_dim", 2048)
    d_ffn = _arg(a, "decoder_ffn_embed_dim", e_ffn)
    e_heads = _arg(a, "encoder_attention_heads", 8)
    d_heads = _arg(a, "decoder_attention_heads", e_heads)
    e_pre = bool(_arg(a, "encoder_normalize_before", False))
    d_pre = bool(_arg(a, "decoder_normalize_before", False))
    for what, x, y in (("embed_dim", e_dim, d_dim), ("ffn_embed_dim", e_ffn, d_ffn),
                       ("attention_heads", e_heads, d_heads), ("normalize_before", e_pre, d_pre)):
        if x != y:
            raise FairseqImportError(f"{path}: encoder_{what}={x} but decoder_{what}={y}; the shared block uses one "
                                     "configuration for encoder and decoder")
    act = _arg(a, "activation_fn", "relu")
    if act not in ("relu", "gelu"):
        raise FairseqImportError(f"{path}: activation_fn={act!r} is not supported (relu, gelu)")
    if _arg(a, "decoder_output_dim", d_dim) != d_dim or _arg(a, "decoder_input_dim", d_dim) != d_dim:
        raise FairseqImportError(f"{path}: decoder_input_dim/decoder_output_dim differ from decoder_embed_dim")
    share_all = bool(_arg(a, "share_all_embeddings", False))
    tie = share_all or bool(_arg(a, "share_decoder_input_output_embed", False))
    if share_all and src_vocab != tgt_vocab:
        raise FairseqImportError(f"{path}: share_all_embeddings with dictionaries of {src_vocab} and {tgt_vocab} "
                                 "symbols (expected one joined dictionary)")
    max_pos = max(_arg(a, "max_source_positions", 1024), _arg(a, "max_target_positions", 1024))
    block = BlockConfig(d_model=e_dim, n_heads=e_heads, d_ff=e_ffn, norm="layernorm",
                        norm_position="pre" if e_pre else "post", ffn=act, attention="sdpa",
                        dropout=0.0, attn_dropout=0.0, act_dropout=0.0)
    return ModelConfig(block=block, vocab_size=max(src_vocab, tgt_vocab),
                       n_encoder_layers=_arg(a, "encoder_layers", 6), n_decoder_layers=_arg(a, "decoder_layers", 6),
                       max_seq_len=max_pos, positional="learned",
                       embed_scale=not bool(_arg(a, "no_scale_embedding", False)), tie_output=tie,
                       share_encoder_decoder_embeddings=share_all, final_norm=e_pre,
                       embed_norm=bool(_arg(a, "layernorm_embedding", False)), pad_id=pad_id)


_LAYER = re.compile(r"^(encoder|decoder)\.layers\.(\d+)\.(.+)$")
_SUB = {"self_attn.q_proj": "self_attn.q_proj", "self_attn.k_proj": "self_attn.k_proj",
        "self_attn.v_proj": "self_attn.v_proj", "self_attn.out_proj": "self_attn.out_proj",
        "self_attn_layer_norm": "norm_self",
        "encoder_attn.q_proj": "cross_attn.q_proj", "encoder_attn.k_proj": "cross_attn.k_proj",
        "encoder_attn.v_proj": "cross_attn.v_proj", "encoder_attn.out_proj": "cross_attn.out_proj",
        "encoder_attn_layer_norm": "norm_cross", "fc1": "ffn.fc1", "fc2": "ffn.fc2", "final_layer_norm": "norm_ffn"}


def _map_key(key: str) -> str | None:
    """Shared-model key for a fairseq key; None for keys handled elsewhere or ignored; raises KeyError if unknown."""
    m = _LAYER.match(key)
    if m:
        side, n, rest = m.groups()
        if rest in FAST_PATH_KEYS:
            return None
        mod, _, leaf = rest.rpartition(".")
        if mod in _SUB and leaf in ("weight", "bias"):
            return f"{side}.layers.layers.{n}.{_SUB[mod]}.{leaf}"
        raise KeyError(key)
    if key.endswith(IGNORED_SUFFIXES):
        return None
    fixed = {"encoder.embed_tokens.weight": "encoder.embed.token.weight",
             "decoder.embed_tokens.weight": "decoder.embed.token.weight",
             "encoder.layer_norm.weight": "encoder.final_norm.weight", "encoder.layer_norm.bias": "encoder.final_norm.bias",
             "decoder.layer_norm.weight": "decoder.final_norm.weight", "decoder.layer_norm.bias": "decoder.final_norm.bias",
             "encoder.layernorm_embedding.weight": "encoder.embed.norm.weight",
             "encoder.layernorm_embedding.bias": "encoder.embed.norm.bias",
             "decoder.layernorm_embedding.weight": "decoder.embed.norm.weight",
             "decoder.layernorm_embedding.bias": "decoder.embed.norm.bias",
             "decoder.output_projection.weight": "decoder.output.weight"}
    if key in fixed:
        return fixed[key]
    if key in ("encoder.embed_positions.weight", "decoder.embed_positions.weight"):
        return None  # learned positions: handled with the padding offset
    raise KeyError(key)


@dataclass
class FairseqImport:
    model: Any  # EncoderDecoder (eval mode)
    src_dict: Any  # FairseqDictionary
    tgt_dict: Any
    args: dict
    bos_id: int  # the decoder start token: fairseq uses eos
    tgt_vocab: int


def _dictionaries(state: Mapping, a: Mapping, path: Path, src_dict, tgt_dict, direction: str | None):
    """(source dictionary, target dictionary, their paths): the paths given, else ``dict.<lang>.txt`` beside the
    checkpoint with the languages of ``direction`` or of the checkpoint's task; both must share the pad index."""
    task = state.get("cfg", {}).get("task") if isinstance(state.get("cfg"), Mapping) else None
    ta = dict(vars(task)) if isinstance(task, argparse.Namespace) else dict(task or {})
    if direction:
        sl, tl = direction.split("-")
    else:
        sl, tl = ta.get("source_lang") or a.get("source_lang"), ta.get("target_lang") or a.get("target_lang")
    if src_dict is None or tgt_dict is None:
        if not (sl and tl):
            raise FairseqImportError(f"{path}: source/target language unknown; pass direction or the dictionaries")
        src_dict = src_dict or path.parent / f"dict.{sl}.txt"
        tgt_dict = tgt_dict or path.parent / f"dict.{tl}.txt"
    sd, td = read_fairseq_dictionary(src_dict), read_fairseq_dictionary(tgt_dict)
    if sd.pad_index != td.pad_index:
        raise FairseqImportError(f"{src_dict} and {tgt_dict}: different pad indices")
    return sd, td, src_dict, tgt_dict


def _check_embeddings(weights, path: Path, sides) -> None:
    """``weights`` is a state dict whose embedding tables have one row per symbol of each side's dictionary;
    ``sides``: (side, dictionary, its path)."""
    if not isinstance(weights, Mapping):
        raise FairseqImportError(f"{path}: 'model' is a {type(weights).__name__}, expected a state dict")
    for side, d, dpath in sides:
        w = weights.get(f"{side}.embed_tokens.weight")
        if w is None:
            raise FairseqImportError(f"{path}: missing key {side}.embed_tokens.weight")
        if w.shape[0] != len(d):
            raise FairseqImportError(f"{path}: {side}.embed_tokens.weight has {w.shape[0]} rows but {dpath} has "
                                     f"{len(d)} symbols")


def _mapped_weights(weights: Mapping, cfg, target: Mapping, path: Path) -> dict[str, torch.Tensor]:
    """The fairseq weights under the shared model's keys (embedding tables padded to the joint vocabulary, tied
    copies checked and dropped); fails naming unknown keys and shape mismatches."""
    new: dict[str, torch.Tensor] = {}
    unknown, mismatched = [], []
    for k, v in weights.items():
        try:
            mk = _map_key(k)
        except KeyError:
            unknown.append(k)
            continue
        if mk is None:
            continue
        if mk.endswith("embed.token.weight") and v.shape[0] < cfg.vocab_size:  # separate dicts: pad rows
            v = torch.cat([v, v.new_zeros(cfg.vocab_size - v.shape[0], v.shape[1])])
        if mk == "decoder.output.weight" and cfg.tie_output:
            if not torch.equal(v, weights["decoder.embed_tokens.weight"]):
                raise FairseqImportError(f"{path}: decoder.output_projection.weight differs from "
                                         "decoder.embed_tokens.weight although embeddings are shared")
            continue
        if mk == "decoder.output.weight" and v.shape[0] < cfg.vocab_size:
            v = torch.cat([v, v.new_zeros(cfg.vocab_size - v.shape[0], v.shape[1])])
        if mk == "decoder.embed.token.weight" and cfg.share_encoder_decoder_embeddings:
            if not torch.equal(v, weights["encoder.embed_tokens.weight"]):
                raise FairseqImportError(f"{path}: share_all_embeddings but encoder/decoder embed_tokens differ")
            mk = "encoder.embed.token.weight"
        if mk not in target:
            unknown.append(k)
            continue
        if tuple(target[mk].shape) != tuple(v.shape):
            mismatched.append(f"{k} {tuple(v.shape)} -> {mk} {tuple(target[mk].shape)}")
            continue
        new[mk] = v.float()
    if unknown:
        raise FairseqImportError(f"{path}: unknown keys (not a supported fairseq transformer layout): "
                                 f"{', '.join(unknown[:12])}{' ...' if len(unknown) > 12 else ''}")
    if mismatched:
        raise FairseqImportError(f"{path}: shape mismatches: {'; '.join(mismatched[:8])}")
    return new


def _position_tables(weights: Mapping, a: Mapping, cfg, pad: int, path: Path) -> dict[str, torch.Tensor]:
    """The learned position tables of both sides: fairseq's table (learned, none, or sinusoidal) from row
    padding_idx + 1 on."""
    new = {}
    for side in ("encoder", "decoder"):
        learned = weights.get(f"{side}.embed_positions.weight")
        if learned is not None:
            table = learned[pad + 1:]
        elif bool(_arg(a, "no_token_positional_embeddings", False)):
            table = torch.zeros(cfg.max_seq_len, cfg.block.d_model)
        else:
            table = fairseq_sinusoidal_table(cfg.max_seq_len + pad + 1, cfg.block.d_model, pad)[pad + 1:]
        if table.shape[0] < cfg.max_seq_len:
            raise FairseqImportError(f"{path}: {side}.embed_positions.weight has {learned.shape[0]} rows, fewer than "
                                     f"max positions {cfg.max_seq_len} + padding_idx + 1")
        new[f"{side}.embed.position.weight"] = table[: cfg.max_seq_len].float()
    return new


def import_fairseq_checkpoint(path: str | Path, src_dict: str | Path | None = None,
                              tgt_dict: str | Path | None = None, direction: str | None = None) -> FairseqImport:
    """Load ``path`` and its dictionaries into an EncoderDecoder with identical outputs (in eval mode).

    Dictionaries default to ``dict.<src>.txt`` / ``dict.<tgt>.txt`` beside the checkpoint, with the languages
    from the checkpoint's ``source_lang``/``target_lang`` (or ``direction`` like "de-en")."""
    path = Path(path)
    state = safe_load(path)
    a = checkpoint_args(state, path)
    sd, td, src_dict, tgt_dict = _dictionaries(state, a, path, src_dict, tgt_dict, direction)
    pad = td.pad_index
    weights = state["model"]
    _check_embeddings(weights, path, (("encoder", sd, src_dict), ("decoder", td, tgt_dict)))
    cfg = model_config_from_args(a, len(sd), len(td), pad, path)
    model = EncoderDecoder(cfg)
    target = model.state_dict()
    new = _mapped_weights(weights, cfg, target, path)
    new.update(_position_tables(weights, a, cfg, pad, path))  # positions: learned copy of fairseq's table
    missing = sorted(k for k in target if k not in new and not (cfg.share_encoder_decoder_embeddings
                                                                 and k == "decoder.embed.token.weight"))
    if missing:
        raise FairseqImportError(f"{path}: missing keys for the shared model: {', '.join(missing[:12])}")
    if cfg.share_encoder_decoder_embeddings:
        new["decoder.embed.token.weight"] = new["encoder.embed.token.weight"]
    model.load_state_dict(new, strict=True)
    model.eval()
    log.info("imported %s: %d+%d layers, d=%d, %d heads, %s-LN, vocab %d/%d", path, cfg.n_encoder_layers,
             cfg.n_decoder_layers, cfg.block.d_model, cfg.block.n_heads, cfg.block.norm_position, len(sd), len(td))
    return FairseqImport(model, sd, td, a, td.eos_index, len(td))


def import_to_checkpoint(params: Mapping, out_dir: str | Path) -> Path:
    """Snakemake's paper-scale path: import ``params["fairseq_checkpoint"]`` and save it as the suite's
    ``checkpoint_last.pt`` (loadable with :func:`repro.train.pipeline.load_trained`)."""
    ck = require_path(params.get("fairseq_checkpoint"), "fairseq_checkpoint", "fairseq checkpoint file")
    c = params["corpus"]
    sl, tl = c["direction"].split("-")
    d = Path(c["path"]) if c.get("path") else ck.parent
    dicts = [d / f"dict.{sl}.txt", d / f"dict.{tl}.txt"]
    if not all(p.exists() for p in dicts):
        dicts = [ck.parent / f"dict.{sl}.txt", ck.parent / f"dict.{tl}.txt"]
    for p in dicts:
        if not p.exists():
            raise FairseqImportError(f"translation.fairseq_checkpoint: dictionary {p} not found (looked in "
                                     "corpus.path and beside the checkpoint)")
    imp = import_fairseq_checkpoint(ck, dicts[0], dicts[1])
    out = Path(out_dir) / CKPT_NAME
    save_checkpoint(out, {"model": imp.model.state_dict(), "model_cfg": imp.model.cfg.to_dict(), "kind": "fairseq",
                          "tokenizer": str(dicts[1].resolve()), "src_tokenizer": str(dicts[0].resolve()),
                          "bos_id": imp.bos_id, "eos_id": imp.tgt_dict.eos_index, "pad_id": imp.tgt_dict.pad_index,
                          "tgt_vocab": imp.tgt_vocab, "params": json.dumps(dict(params)), "step": 0,
                          "elapsed_s": 0.0, "train_tokens": 0, "stop_reason": "imported",
                          "fairseq_checkpoint": str(ck)})
    return out
