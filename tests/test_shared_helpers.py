"""The shared helpers of issue 14: statistics (repro.stats; the judges' intervals, repro.intervals), inits
(repro.model.init), the eager reference formulas the model and the kernel benchmark share, and the error hierarchy
(repro.errors)."""
import math
import statistics

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from repro import errors
from repro import intervals, stats
from repro.bench import kernels
from repro.model import BlockConfig, EncoderDecoder, ModelConfig
from repro.model.attention import attention_core, math_attention
from repro.model.init import INITS, init_weights
from repro.model.norms import LayerNorm, RMSNorm, layer_norm_manual, rms_norm_manual


def test_slopes():
    assert stats.fit_slope([0, 1, 2, 3], [1, 3, 5, 7]) == pytest.approx(2.0)
    assert math.isnan(stats.fit_slope([2, 2], [1, 3]))
    assert stats.loglog_slope([512, 1024, 2048], [1, 4, 16]) == pytest.approx(2.0)
    assert stats.loglog_slope([1, 4, 16], [3, 6, 12]) == pytest.approx(0.5)


def test_mean_std_and_interval():
    assert stats.mean_std([1.0]) == (1.0, 0.0)
    m, s = stats.mean_std([1.0, 2.0, 3.0])
    assert (m, s) == pytest.approx((2.0, 1.0))
    mean, lo, hi, sd = intervals.sample_interval([1.0, 2.0, 3.0])
    assert mean == pytest.approx(2.0) and sd == pytest.approx(1.0)
    assert hi - mean == pytest.approx(4.303 / math.sqrt(3))  # t_{0.975, 2}


def test_welch_interval_of_a_contrast():
    """Welch's interval: variance sum c^2 s^2 / n, Welch-Satterthwaite df rounded down (the t table's value)."""
    a, b = [4.30, 5.03, 3.61, 3.99, 5.06], [2.821, 2.771, 2.796]
    est, lo, hi = intervals.welch_interval([(1, a), (-1, b)])
    va, vb = statistics.variance(a) / 5, statistics.variance(b) / 3
    df = (va + vb) ** 2 / (va ** 2 / 4 + vb ** 2 / 2)
    assert math.floor(df) == 4 and est == pytest.approx(statistics.fmean(a) - statistics.fmean(b))
    assert hi - est == pytest.approx(2.776 * math.sqrt(va + vb)) and est - lo == pytest.approx(hi - est)
    # a difference of differences: constant groups add nothing to the variance
    est4, lo4, hi4 = intervals.welch_interval([(1, a), (-1, b), (-1, [1.0, 1.0]), (1, [0.5, 0.5, 0.5])])
    assert (est4 - est, lo4 - lo, hi4 - hi) == pytest.approx((-0.5, -0.5, -0.5))
    assert intervals.welch_interval([(1, a), (-1, [3.0])])[1:] == (-math.inf, math.inf)  # one value: no spread to use
    assert intervals.welch_interval([(1, [2.0, 2.0]), (-1, [1.0, 1.0])]) == (1.0, 1.0, 1.0)


def _model(d=16):
    cfg = ModelConfig(vocab_size=40, pad_id=1, n_encoder_layers=1, n_decoder_layers=1, max_seq_len=16,
                      block=BlockConfig(d_model=d, n_heads=2, d_ff=32))
    torch.manual_seed(0)
    return EncoderDecoder(cfg)


def test_inits_differ_only_where_documented():
    d = 16
    m = {name: _model(d) for name in INITS}
    for name, model in m.items():
        torch.manual_seed(1)
        init_weights(model, name)
    fair, gain1 = (dict(m[k].named_modules()) for k in ("fairseq", "fairseq_qkv_gain1"))
    q = next(n for n in fair if n.endswith("q_proj"))
    bound = lambda g: g * math.sqrt(6 / (d + d))  # noqa: E731 (Xavier-uniform bound, square d x d weight)
    assert fair[q].weight.abs().max() <= bound(1 / math.sqrt(2)) + 1e-6
    assert gain1[q].weight.abs().max() > bound(1 / math.sqrt(2))  # gain 1 exceeds the 1/sqrt(2) bound
    emb = next(n for n, mod in fair.items() if isinstance(mod, nn.Embedding))
    assert fair[emb].weight[1].abs().sum() == 0  # the padding row
    assert fair[emb].weight.std().item() == pytest.approx(d ** -0.5, rel=0.3)
    ref = _model(d)
    assert all(torch.equal(a, b) for a, b in zip(m["pytorch"].parameters(), ref.parameters()))  # left as built
    with pytest.raises(ValueError, match="init: 'bogus'"):
        init_weights(ref, "bogus")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_benchmark_eager_norms_are_the_model_formulas(dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 32, generator=g).to(dtype)
    rms, ln = RMSNorm(32, impl="manual").to(dtype), LayerNorm(32, impl="manual").to(dtype)
    with torch.no_grad():
        rms.weight.normal_(1, 0.1, generator=g)
        ln.weight.normal_(1, 0.1, generator=g)
        ln.bias.normal_(0, 0.1, generator=g)
        assert torch.equal(kernels._norm_fn("rmsnorm", "eager")(x, rms.weight, None, 1e-5), rms(x))
        assert torch.equal(kernels._norm_fn("layernorm", "eager")(x, ln.weight, ln.bias, 1e-5), ln(x))
        assert torch.equal(rms_norm_manual(x, rms.weight, 1e-5), rms(x))
        assert torch.equal(layer_norm_manual(x, ln.weight, ln.bias, 1e-5), ln(x))
        tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=3e-2, rtol=3e-2)
        torch.testing.assert_close(rms(x), F.rms_norm(x, (32,), rms.weight, 1e-5), **tol)
        torch.testing.assert_close(ln(x), F.layer_norm(x, (32,), ln.weight, ln.bias, 1e-5), **tol)


@pytest.mark.parametrize("causal", [False, True])
def test_benchmark_math_attention_is_the_model_formula(causal):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 8, 16, generator=g) for _ in range(3))
    got = kernels._attn_fn("math", causal)(q, k, v)
    assert torch.equal(got, attention_core(q, k, v, backend="math", causal=causal))
    assert torch.equal(got, math_attention(q, k, v, causal=causal))
    torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, v, is_causal=causal), atol=1e-5, rtol=1e-5)


def test_error_hierarchy():
    from repro import artefacts, config
    from repro.model import config as model_config
    assert config.ConfigError is model_config.ConfigError is errors.ConfigError
    assert artefacts.ArtefactError is errors.ArtefactError
    for e in (errors.ConfigError, errors.ResultsError, errors.ArtefactError):
        assert issubclass(e, errors.ReproError) and issubclass(e, ValueError)
    for e in (errors.CorpusError, errors.CheckpointError, errors.HFImportError, errors.FairseqImportError,
              errors.MoFormatError, errors.FairseqFormatError):
        assert issubclass(e, errors.ArtefactError)
    assert issubclass(errors.TrainConfigError, errors.ConfigError) and issubclass(errors.RegistryError,
                                                                                   errors.ConfigError)
