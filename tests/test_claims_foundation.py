"""param_accounting and block_numerics: exact counts, and verdict rules that flip when a number is wrong."""
import copy

from repro import config
from repro.bench import records
from repro.claims import block_numerics, param_accounting


def test_param_accounting_exact_counts():
    params = config.section("param_accounting", "default")
    q = param_accounting.measure(params["models"]["llama_7b"], [16, 4])
    assert q["total"] == 6_738_415_616 and q["block_total"] == 202_383_360
    assert q["block_attention"] == 67_108_864 and q["block_ffn"] == 135_266_304 and q["block_norms"] == 8_192
    q = param_accounting.measure(params["models"]["mixtral_8x7b"], [16])
    assert round(q["total"] / 1e9, 1) == 46.7 and round(q["active"] / 1e9, 1) == 12.9
    q = param_accounting.measure(params["models"]["vaswani_base"], [16])
    assert q["block_total"] == 3_152_384 and q["block_ffn"] == 2_099_712
    q = param_accounting.measure(params["models"]["gpt2_small"], [16])
    assert q["total"] == 124_439_808  # the well-known GPT-2 small count, tied embeddings


def test_param_accounting_verdict_flips_on_a_wrong_count():
    params = config.section("param_accounting", "default")
    rows, v = param_accounting.run(params, "default", None)
    assert v["verdict"] == "reproduced"
    bad = copy.deepcopy(params)
    bad["models"]["llama_7b"]["model"]["block"]["d_ff"] = 11264  # a different SwiGLU rounding
    rows, v = param_accounting.run(bad, "default", None)
    assert v["verdict"] == "partially" and "llama_7b.total" in v["reason"]


def test_block_numerics_judge_flips():
    params = config.section("block_numerics", "tiny")
    rows = (block_numerics.norm_values(params) + block_numerics.activation_values(params)
            + block_numerics.chain_gradients(params) + block_numerics.fp16_epsilon(params))
    v = block_numerics.judge(rows, params, "default")
    assert v["verdict"] == "reproduced", v["reason"]
    wrong = copy.deepcopy(rows)
    next(r for r in wrong if r["metric"] == "gelu_output")["value"] += 0.01
    assert block_numerics.judge(wrong, params, "default")["verdict"] == "partially"
    fake = [records.metric("block_numerics", "copy_task_final_loss_ratio", v_, "ratio", stack=s, layers=2, residual=False, seed=0)
            for s, v_ in (("shallow_plain", 0.1), ("deep_plain", 0.2), ("deep_residual", 0.1))]
    v = block_numerics.judge(rows + fake, params, "default")
    assert v["verdict"] == "partially" and "deep stack" in v["reason"]
