"""rmsnorm_speed (C4): tiny run end to end (op sweep via repro.bench.kernels, model step timing) and the verdict rule."""
import pytest
import torch

from repro import config
from repro.claims.rmsnorm_speed import judge, run


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    params = config.section("rmsnorm_speed", "tiny")
    out = tmp_path_factory.mktemp("rms")
    rows, verdict = run(params, "tiny", out)
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


P = {**config.section("rmsnorm_speed", "default"), "ratio_margin": 0.0}


def test_judge_per_implementation():
    v = judge(_rows(), P, "default")
    assert v["verdict"] == "not_reproduced"  # the headline (model step, torch) is slower
    assert v["per_implementation"]["torch"]["verdict"] == "not_reproduced"
    assert v["per_implementation"]["manual"]["verdict"] == "reproduced"
    assert v["per_implementation"]["triton"]["verdict"] == "not_applicable"


def test_judge_all_faster_is_reproduced_and_slower_flips():
    good = _rows(op_torch=(0.8, 0.9), model_torch=(0.9, 0.02))
    assert judge(good, P, "default")["verdict"] == "reproduced"
    # the model ratio is below 1 but within its spread: undecided, so the headline is inconclusive
    noisy = _rows(op_torch=(0.8, 0.9), model_torch=(0.98, 0.1))
    v = judge(noisy, P, "default", {"busy": True, "loadavg_1m_max": 2.9, "cpus": 2, "threads": 1})
    assert v["per_implementation"]["torch"]["verdict"] == "inconclusive"
    assert v["verdict"] == "inconclusive" and "busy" in v["reason"]
    slow_scale = _rows(op_torch=(0.8, 0.9), model_torch=(0.9, 0.02), scale=(1.3, 0.05))
    assert judge(slow_scale, P, "default")["verdict"] == "partially"


def test_judge_null_data_never_reproduces():
    """Identical variants: every ratio 1 with some spread."""
    same = _rows(op_torch=(1.0, 1.0), op_eager=(1.0, 1.0), model_torch=(1.0, 0.03), model_manual=(1.0, 0.03),
                 scale=(1.0, 0.03))
    assert judge(same, P, "default")["verdict"] in ("not_reproduced", "inconclusive")


def test_judge_tiny_not_applicable():
    assert judge(_rows(), P, "tiny")["verdict"] == "not_applicable"
