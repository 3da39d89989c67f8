"""Post-training quantization of the shared block's linear layers (C10, repro.claims.quantization):
round-to-nearest grids and bit packing (grid), absmax / vector-wise int8 and LLM.int8() (int8; Dettmers et al.
2022), GPTQ (gptq; Frantar et al. 2023), their application to a whole model (apply), and a function-preserving copy
of a model with outlier features (outliers)."""
from .apply import (PackedLinear, block_linears, quantize_gptq, quantize_int8, quantize_rtn, relative_error,
                    restored, stored_weight_bytes)
from .gptq import GPTQ
from .grid import Grid, QuantizedWeight, dequantize, fit_grid, pack_bits, quantize, rtn, unpack_bits
from .outliers import OutlierCopyError, outlier_dims_of, with_outliers
from .int8 import Int8Linear, absmax_quantize, matmul_absmax, matmul_llm_int8, matmul_vectorwise, outlier_dims

__all__ = ["GPTQ", "Grid", "Int8Linear", "OutlierCopyError", "PackedLinear", "QuantizedWeight", "absmax_quantize",
           "block_linears", "dequantize", "fit_grid", "matmul_absmax", "matmul_llm_int8", "matmul_vectorwise",
           "outlier_dims", "outlier_dims_of", "pack_bits", "quantize", "quantize_gptq", "quantize_int8",
           "quantize_rtn", "relative_error", "restored", "rtn", "stored_weight_bytes", "unpack_bits", "with_outliers"]
