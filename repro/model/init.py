"""Weight initialisations of the shared models, by name (config key ``init``).

- ``pytorch``: torch's default ``nn.Linear`` / ``nn.Embedding`` init, left as constructed.
- ``xavier``: every linear weight Xavier-uniform (gain 1), biases 0; embeddings left as constructed.
- ``fairseq``: fairseq's transformer (Ott et al. 2019), the code base of Xiong et al. 2020: linear weights
  Xavier-uniform with gain 1/sqrt(2) for the q/k/v projections (fairseq's MultiheadAttention) and 1 elsewhere,
  biases 0, every embedding N(0, d^-1/2) with a zero padding row.
- ``fairseq_qkv_gain1``: ``fairseq`` with gain 1 on q/k/v too; the translation artefact (repro.train.pipeline)
  and the reference results were trained this way.
Norms keep their (1, 0) init in every scheme.
"""
from __future__ import annotations

import math

import torch
from torch import nn

QKV = ("q_proj", "k_proj", "v_proj")


@torch.no_grad()
def xavier_init(model: nn.Module, *, qkv_gain: float = 1.0, embeddings: bool = False) -> None:
    """Linear weights Xavier-uniform (``qkv_gain`` on q/k/v, 1 elsewhere), biases 0; with ``embeddings`` every
    ``nn.Embedding`` N(0, embedding_dim^-1/2) with a zero padding row. In place, in module order."""
    for name, mod in model.named_modules():
        if isinstance(mod, nn.Linear):
            leaf = name.rsplit(".", 1)[-1]
            nn.init.xavier_uniform_(mod.weight, gain=qkv_gain if leaf in QKV else 1.0)
            if mod.bias is not None:
                mod.bias.zero_()
        elif embeddings and isinstance(mod, nn.Embedding):
            nn.init.normal_(mod.weight, 0.0, mod.embedding_dim ** -0.5)
            if mod.padding_idx is not None:
                mod.weight[mod.padding_idx].zero_()


def init_pytorch_default(model: nn.Module) -> None:
    """torch's default init: nothing to do."""


def init_xavier(model: nn.Module) -> None:
    xavier_init(model)


def init_fairseq(model: nn.Module) -> None:
    xavier_init(model, qkv_gain=1 / math.sqrt(2), embeddings=True)


def init_fairseq_qkv_gain1(model: nn.Module) -> None:
    xavier_init(model, embeddings=True)


INITS = {"fairseq": init_fairseq, "xavier": init_xavier, "pytorch": init_pytorch_default,
         "fairseq_qkv_gain1": init_fairseq_qkv_gain1}


def init_weights(model: nn.Module, scheme: str) -> None:
    """Re-initialise ``model`` in place with the named scheme (see the module docstring)."""
    if scheme not in INITS:
        raise ValueError(f"init: {scheme!r} is not one of {', '.join(INITS)}")
    INITS[scheme](model)
