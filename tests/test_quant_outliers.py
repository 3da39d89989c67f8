"""repro.quant.outliers: the function-preserving copy with outlier features on which LLM.int8() (Dettmers et al.,
NeurIPS 2022, Section 3.2, 4.2) is judged - equal to the model in fp32, outliers of the paper's size at the int8
matmuls' inputs, and there LLM.int8() holds where vector-wise int8 degrades and tensor-wise absmax degrades more."""
import copy

import pytest
import torch

from repro import quant as Q
from repro.claims import quantization as qz
from test_quant import _tiny_lm

torch.set_num_threads(1)
TOKS = torch.randint(3, 50, (8, 24), generator=torch.Generator().manual_seed(1))


def _trained_like():
    """The tiny LM with LayerNorm gains and biases of a trained model's spread (fresh ones are all 1 and 0, where
    every dimension ties for the largest gain)."""
    lm = _tiny_lm()
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for _, block in Q.apply.blocks_of(lm):
            for norm in (block.norm_self, block.norm_ffn):
                norm.weight.copy_(0.5 + torch.rand(norm.weight.shape, generator=g))
                norm.bias.copy_(0.1 * torch.randn(norm.bias.shape, generator=g))
    return lm


def test_copy_computes_the_same_function_in_fp32():
    lm = _trained_like()
    ref = lm(TOKS)
    twin, dims = Q.with_outliers(lm, 3, 20.0)
    assert len(dims) == 3 and dims == Q.outlier_dims_of(lm, 3)
    assert torch.allclose(twin(TOKS), ref, rtol=1e-4, atol=1e-4)
    assert torch.equal(lm(TOKS), ref)  # the original is untouched
    # what changed: the norms' gains in those dimensions only
    b0, b1 = Q.apply.blocks_of(lm)[0][1], Q.apply.blocks_of(twin)[0][1]
    ratio = b1.norm_self.weight / b0.norm_self.weight
    assert torch.allclose(ratio[dims], torch.full((3,), 20.0)) and torch.allclose(
        ratio[[j for j in range(32) if j not in dims]], torch.ones(29))


def test_copy_carries_outlier_features_of_the_papers_size():
    """|x| >= 6 in the chosen dimensions of every block's tracked inputs, in most positions: systematic outlier
    features by Section 4.1's criteria (>= 25% of layers, >= 6% of positions); the original LM has none."""
    lm = _trained_like()
    batches = [qz.lm_batch(row) for row in TOKS.numpy()]
    twin, dims = Q.with_outliers(lm, 3, 20.0)
    em = qz.emergence(qz.outlier_stats(twin, batches, 6.0, "cpu"), 25, 6)
    assert set(dims) <= set(em["dims"]) and em["layers_affected_pct"] == 100 and em["seq_affected_pct"] >= 6
    assert qz.emergence(qz.outlier_stats(lm, batches, 6.0, "cpu"), 25, 6)["dims"] == []


@torch.no_grad()
def _err(model, mode, ref):
    m = copy.deepcopy(model)
    Q.quantize_int8(m, mode, 6.0)
    return float((m(TOKS) - ref).norm() / ref.norm())


def test_llm_int8_holds_where_vectorwise_degrades_and_absmax_degrades_more():
    lm = _trained_like()
    with torch.no_grad():
        ref = lm(TOKS)
    twin, _ = Q.with_outliers(lm, 3, 20.0)
    plain = {mode: _err(lm, mode, ref) for mode in ("llm_int8", "vectorwise", "absmax")}
    out = {mode: _err(twin, mode, ref) for mode in ("llm_int8", "vectorwise", "absmax")}
    # without outliers LLM.int8() is vector-wise int8; with them vector-wise int8 loses several times its precision
    # (every token's row is scaled by its outlier) while LLM.int8() keeps most of it: its error grows only through
    # the outlier dimensions' weight columns, c times smaller on the int8 grid (repro.quant.outliers)
    assert plain["llm_int8"] == plain["vectorwise"] and out["vectorwise"] > 4 * plain["vectorwise"]
    assert out["llm_int8"] < out["vectorwise"] / 2
    assert out["absmax"] > out["vectorwise"]


def test_post_ln_and_bad_arguments_are_refused():
    from repro.train.pipeline import build_model

    post = build_model({"n_decoder_layers": 1, "max_seq_len": 16, "positional": "sinusoidal",
                        "block": {"d_model": 16, "n_heads": 2, "d_ff": 32, "norm_position": "post",
                                  "dropout": 0.0}}, 50, 0, kind="lm")
    with pytest.raises(Q.OutlierCopyError, match="Post-LN"):
        Q.with_outliers(post, 2, 20.0)
    with pytest.raises(Q.OutlierCopyError):
        Q.with_outliers(_tiny_lm(), 0, 20.0)
