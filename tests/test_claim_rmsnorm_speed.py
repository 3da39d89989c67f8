"""rmsnorm_speed (C4): tiny run end to end (op sweep via repro.bench.kernels, model step timing) and the verdict rule."""
import pytest
import torch

from repro import config, registry
from repro.claims._cli import judge_rows, run_and_judge
from repro.claims.rmsnorm_speed import run

CLAIM = "rmsnorm_speed"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    params = config.section("rmsnorm_speed", "tiny")
    out = tmp_path_factory.mktemp("rms")
    rows, verdict = run_and_judge(CLAIM, run, params, "tiny", out)
    return params, rows, verdict, out


def test_tiny_run_shapes(tiny):
    params, rows, verdict, out = tiny
    assert verdict["verdict"] == "not_applicable"
    assert (out / "kernels_norms.csv").exists()
    ratios = [r for r in rows if r["metric"] == "op_time_ratio_rms_over_ln"]
    # one ratio per (measured provider, hidden, dtype, pass)
    measured = [p for p in params["op_sweep"]["providers"] if p != "triton" or torch.cuda.is_available()]
    assert len(ratios) == len(measured) * len(params["op_sweep"]["hidden"]) * len(params["op_sweep"]["passes"])
    assert all(r["value"] > 0 for r in ratios)
    steps = {(r["sweep"]["norm"], r["sweep"]["impl"]): r for r in rows if r["metric"] == "step_time"}
    assert steps[("layernorm", "torch")]["value"] > 0 and steps[("rmsnorm", "manual")]["value"] > 0
    assert ("scalenorm", "eager") in steps
    if not torch.cuda.is_available():  # GPU-only rows are recorded, with the reason
        assert steps[("rmsnorm", "triton")]["value"] is None
        assert "interpreter" in steps[("rmsnorm", "triton")]["sweep"]["reason"]
        assert verdict["per_implementation"]["triton"]["verdict"] == "not_applicable"
    assert {r["metric"] for r in rows} >= {"step_time_reduction_rms", "step_time_reduction_scale", "op_time_reduction"}


def _rows(op_torch=(1.5, 3.0), op_eager=(0.6, 0.7), model_torch=(1.2, 0.05), model_manual=(0.9, 0.04),
          scale=(0.97, 0.04)):
    rows = []
    for provider, vals in (("torch", op_torch), ("eager", op_eager)):
        rows += [{"metric": "op_time_ratio_rms_over_ln", "value": v, "sweep": {"provider": provider, "pass": "fwd_bwd"}}
                 for v in vals]
    for impl, (med, iqr) in (("torch", model_torch), ("manual", model_manual)):
        rows.append({"metric": "step_time_ratio_rms_over_ln", "value": med, "spread": iqr, "sweep": {"impl": impl}})
    rows.append({"metric": "step_time_ratio_scale_over_ln", "value": scale[0], "spread": scale[1], "sweep": {"impl": "torch"}})
    rows.append({"metric": "step_time", "value": None, "sweep": {"impl": "triton", "reason": "interpreter"}})
    return rows


P = config.section(CLAIM, "default")


def judge(rows, params=P, scale="default", load=None):
    """The claim's judge on ``rows`` at ``scale`` (the judge: section of the config, empty: the floor is the
    registry's), with the machine's ``load`` as a measurement records it."""
    return judge_rows(CLAIM, rows, scale=scale, params=params, load=load)


FLOOR = registry.published("rmsnorm_speed", "reduction_range")["value"][0]  # 7%: the time ratio must be < 0.93


def _head(v):
    return [c for c in v["checks"] if c["headline"]]


def _with_triton_step(rows, med, iqr):
    rows = [r for r in rows if not (r["metric"] == "step_time" and r["sweep"]["impl"] == "triton")]
    return rows + [{"metric": "step_time_ratio_rms_over_ln", "value": med, "spread": iqr, "sweep": {"impl": "triton"}}]


def test_judge_per_implementation():
    assert FLOOR == 7
    # manual: 0.88..0.92 (8%..12% reduction, above the 7% floor); torch native 1.2x slower is context only
    v = judge(_rows(), P, "default")
    assert [c["name"] for c in _head(v)] == [
        "model training step, norm_impl=manual: RMSNorm faster than LayerNorm (both norms written the same way)"]
    assert _head(v)[0]["passed"] is True
    assert v["verdict"] == "reproduced"
    native = [c for c in v["checks"] if "torch native" in c["name"]]
    assert len(native) == 2 and all(c["passed"] is None and not c["headline"] for c in native)
    assert all("for information" in c["undecided_because"] for c in native)
    scale = [c for c in v["checks"] if "ScaleNorm" in c["name"]]
    assert len(scale) == 1 and scale[0]["passed"] is None
    assert v["per_implementation"]["torch"]["verdict"] == "inconclusive"  # never decided either way
    assert v["per_implementation"]["manual"]["verdict"] == "reproduced"
    assert v["per_implementation"]["triton"]["verdict"] == "not_applicable"


def test_judge_all_faster_is_reproduced_and_slower_flips():
    # a tight interval above the floor: 0.89..0.91 -> 9%..11% reduction
    assert judge(_rows(model_manual=(0.9, 0.02)), P, "default")["verdict"] == "reproduced"
    # below the floor: 0.953..0.973 -> a 2.7%..4.7% reduction (faster, but not by the paper's 7%)
    v = judge(_rows(model_manual=(0.963, 0.02)), P, "default")
    assert v["verdict"] == "not_reproduced" and _head(v)[0]["passed"] is False
    # no config value moves the floor: ratio_margin (once declared, never read) is gone from the schema
    with pytest.raises(config.ConfigError, match="ratio_margin"):
        config.validate({**P, "ratio_margin": 0.03}, config._schema(CLAIM), "rmsnorm_speed.yaml [default]")
    with pytest.raises(config.ConfigError, match="ratio_margin"):
        config.validate_thresholds(CLAIM, "default", {"ratio_margin": 0.03})
    # RMSNorm slower than LayerNorm
    assert judge(_rows(model_manual=(1.1, 0.02)), P, "default")["verdict"] == "not_reproduced"
    # straddling the floor: 0.91..0.95 -> undecided, inconclusive, the busy machine named in the reason
    busy = {"busy": True, "loadavg_1m_max": 2.9, "cpus": 2, "threads": 1}
    v = judge(_rows(model_manual=(0.93, 0.04)), P, "default", busy)
    assert _head(v)[0]["passed"] is None and "7% floor" in _head(v)[0]["undecided_because"]
    assert v["per_implementation"]["manual"]["verdict"] == "inconclusive"
    assert v["verdict"] == "inconclusive" and "busy" in v["reason"]
    # exactly on the floor with no spread (a tie) is undecided, not held
    assert judge(_rows(model_manual=(1 - FLOOR / 100, 0.0)), P, "default")["verdict"] == "inconclusive"
    # torch native ops never decide: a native 2x speed-up cannot rescue a below-floor manual step, a native
    # slow-down cannot sink a good one
    fast_native = _rows(op_torch=(0.4, 0.5), model_torch=(0.5, 0.01), model_manual=(0.963, 0.02))
    assert judge(fast_native, P, "default")["verdict"] == "not_reproduced"
    slow_native = _rows(op_torch=(1.5, 3.0), model_torch=(2.0, 0.01), model_manual=(0.9, 0.02))
    assert judge(slow_native, P, "default")["verdict"] == "reproduced"
    # nor does ScaleNorm (context): a slow ScaleNorm leaves the verdict reproduced
    assert judge(_rows(model_manual=(0.9, 0.02), scale=(1.3, 0.05)), P, "default")["verdict"] == "reproduced"
    # the same-framework op (eager) is a decided secondary: RMSNorm slower there -> partially
    assert judge(_rows(op_eager=(1.1, 1.2), model_manual=(0.9, 0.02)), P, "default")["verdict"] == "partially"
    # where measured, the triton step is a headline too: below the floor there sinks the verdict
    v = judge(_with_triton_step(_rows(model_manual=(0.9, 0.02)), 0.963, 0.02), P, "default")
    assert len(_head(v)) == 2 and v["verdict"] == "not_reproduced"
    assert v["per_implementation"]["triton"]["verdict"] == "not_reproduced"
    assert v["per_implementation"]["manual"]["verdict"] == "reproduced"
    v = judge(_with_triton_step(_rows(model_manual=(0.9, 0.02)), 0.85, 0.02), P, "default")
    assert v["verdict"] == "reproduced" and v["per_implementation"]["triton"]["verdict"] == "reproduced"


def test_judge_null_data_never_reproduces():
    """Identical variants: every ratio 1 with some spread."""
    same = _rows(op_torch=(1.0, 1.0), op_eager=(1.0, 1.0), model_torch=(1.0, 0.03), model_manual=(1.0, 0.03),
                 scale=(1.0, 0.03))
    assert judge(same, P, "default")["verdict"] in ("not_reproduced", "inconclusive")


def test_judge_tiny_not_applicable():
    assert judge(_rows(), P, "tiny")["verdict"] == "not_applicable"
