"""The shared Transformer block and the models built from it. Nothing here knows about claims."""
from .attention import MultiHeadAttention, attention_core
from .block import Block, BlockStack
from .config import (ATTENTION_BACKENDS, FFN_KINDS, NORM_IMPLS, NORM_KINDS, NORM_POSITIONS, STACK_CHECKPOINT,
                     BlockConfig, ConfigError, ModelConfig)
from .ffn import MoE, SwiGLU, DenseFFN, make_ffn
from .models import Decoder, DecoderLM, Encoder, EncoderDecoder, EncoderModel, sinusoidal_table
from .norms import LayerNorm, RMSNorm, ScaleNorm, make_norm
from .params import active_parameters, count_by_slot

__all__ = [n for n in dir() if not n.startswith("_")]
