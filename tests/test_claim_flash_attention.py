"""flash_attention (C7): tiny run end to end (kernel sweep via repro.bench.kernels, Table 21, Fig 2, training step)
and the verdict rule."""
import math

import pytest
import torch

from repro import config
from repro.bench import kernels
from repro.claims._cli import judge_rows, run_and_judge
from repro.claims.flash_attention import loglog_slope, run

CLAIM = "flash_attention"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    params = config.section("flash_attention", "tiny")
    out = tmp_path_factory.mktemp("fa")
    rows, verdict = run_and_judge(CLAIM, run, params, "tiny", out)
    return params, rows, verdict, out


def test_tiny_run_shapes(tiny):
    params, rows, verdict, out = tiny
    assert verdict["verdict"] == "not_applicable"
    assert (out / "kernels_attention.csv").exists()
    exps = {(r["sweep"]["provider"], r["sweep"]["pass"], r["sweep"]["causal"]): r["value"]
            for r in rows if r["metric"] == "memory_exponent_in_n"}
    assert ("math", "fwd_bwd", False) in exps and ("sdpa", "fwd_bwd", True) in exps
    # even at N 32 -> 64 the materialised scores make standard attention grow faster than SDPA
    assert exps[("math", "fwd", False)] > exps[("sdpa", "fwd", False)]
    t21 = {r["sweep"]["backend"]: r for r in rows if r["metric"] == "table21_peak_memory" and r["sweep"]["seq_len"] == 64}
    assert t21["math"]["value"] > 0 and t21["sdpa"]["value"] > 0
    if not torch.cuda.is_available():  # GPU-only rows are recorded with the reason
        assert t21["triton"]["value"] is None and "interpreter" in t21["triton"]["sweep"]["reason"]
        skipped = [r for r in rows if r["metric"] == "attn_time" and r["sweep"]["provider"] == "triton"]
        assert skipped and all(r["value"] is None and r["sweep"]["status"] == "skipped" for r in skipped)
    assert any(r["metric"] == "train_step_speedup_over_math" for r in rows)
    assert any(r["metric"] == "fig2_hbm_traffic" and r["value"] is None for r in rows)


def test_loglog_slope():
    assert loglog_slope([512, 1024, 2048], [1, 4, 16]) == pytest.approx(2.0)


P = config.section(CLAIM, "default")
T = {"quadratic_exponent": [1.6, 2.2], "linear_exponent": [0.8, 1.2], "speed_fraction_of_paper": 0.5}


def judge(rows, params=P, scale="default", device=None, load=None, thresholds=T):
    """The claim's judge on ``rows`` with the context a measurement records (``device`` None: an old measurement
    that did not record it, judged from the rows' evidence)."""
    return judge_rows(CLAIM, rows, scale=scale, params=params, thresholds=thresholds, device=device, load=load)


def _rows(math_exp=(1.95, 1.9), sdpa_exp=(1.0, 1.02), ratios=((512, 3.0), (1024, 5.5)), step=(1.4, 0.1),
          fig2=(2.5, 0.2), n=10):
    rows = [{"metric": "memory_exponent_in_n", "value": v, "sweep": {"provider": p, "pass": "fwd_bwd", "causal": c}}
            for p, vals in (("math", math_exp), ("sdpa", sdpa_exp)) for v, c in zip(vals, (False, True))]
    rows += [{"metric": "table21_memory_ratio_math_over_fused", "value": v, "sweep": {"backend": "sdpa", "seq_len": n}}
             for n, v in ratios]
    for name, (med, width) in (("train_step_speedup_over_math", step), ("fig2_speedup_over_math", fig2)):
        # as the measurement writes a speed-up: its median interval (here +- width/2) over n rounds
        ci = {} if n is None else {"ci_below": width / 2, "ci_above": width / 2, "confidence": 0.95}
        rows.append({"metric": name, "value": med, "spread": width, "n": n, "sweep": {"backend": "sdpa", **ci}})
    return rows


GPU = "gpu-nvidia-a100-sxm4-40gb"
GOOD = dict(step=(2.0, 0.1), fig2=(4.0, 0.2))  # paper-true speed-ups (Fig 2 ~5.7x, end-to-end ~3x, x 0.5)


def _headline(v):
    heads = [c for c in v["checks"] if c["headline"]]
    assert len(heads) == 1 and heads[0]["name"].startswith("GPT-2-medium attention fwd+bwd: sdpa faster")
    return heads[0]


def _memory_checks(v):
    mem = [c for c in v["checks"] if "peak memory" in c["name"] or c["name"].startswith("Table 21")]
    assert len(mem) == 3  # math ~N^2, sdpa linear, Table 21 sdpa
    return mem


def _with_hardware(rows, hw):
    return [{**r, "hardware": hw} for r in rows]


def test_judge_reproduced():
    # on a GPU: the speed headline and every secondary (paper fraction, end-to-end, memory) hold
    v = judge(_rows(**GOOD), P, "default", device="cuda")
    assert v["verdict"] == "reproduced"
    assert _headline(v)["passed"] is True
    assert all(c["passed"] is True for c in v["checks"])
    # re-judged without a device: every row's hardware id gpu-... -> judged as a GPU run (P's config says cpu)
    assert P["device"] == "cpu"
    assert judge(_with_hardware(_rows(**GOOD), GPU), P, "default")["verdict"] == "reproduced"


@pytest.mark.parametrize("how", ["argument", "hardware", "interpreter_skip", "config"])
def test_judge_cpu_is_inconclusive_with_memory_holding(how):
    """On a CPU the same paper-true numbers leave the speed headline undecided (CPU stand-in), whatever tells the
    judge the device; the memory checks (exact on any device) still decide and hold."""
    rows, device = _rows(**GOOD), None
    if how == "argument":
        device = "cpu"
    elif how == "hardware":
        rows = _with_hardware(rows, "cpu-x86_64-2c")
    elif how == "interpreter_skip":  # a GPU hardware id cannot override the CPU-only Triton interpreter skip
        rows = _with_hardware(rows, GPU) + [{"metric": "attn_time", "value": None, "hardware": GPU,
                                             "sweep": {"provider": "triton", "status": "skipped",
                                                       "reason": kernels.INTERPRETER_REASON}}]
    v = judge(rows, P, "default", device=device)
    assert v["verdict"] == "inconclusive"
    assert "CPU stand-in" in v["reason"]
    speed = [c for c in v["checks"] if "faster" in c["name"]]
    assert len(speed) == 4 and all(c["passed"] is None and "CPU stand-in" in c["undecided_because"] for c in speed)
    assert _headline(v)["passed"] is None
    assert all(c["passed"] is True for c in _memory_checks(v))


def test_judge_headline_flips():
    # on a GPU the fused kernel slower than standard attention (interval 0.85..0.95x, wholly below 1)
    v = judge(_rows(**{**GOOD, "fig2": (0.9, 0.1)}), P, "default", device="cuda")
    assert v["verdict"] == "not_reproduced" and _headline(v)["passed"] is False
    # touching 1 from below (interval 0.0..1.0x, exact in binary): a tie decides nothing, neither pass nor fail
    v = judge(_rows(**{**GOOD, "fig2": (0.5, 1.0)}), P, "default", device="cuda")
    assert v["verdict"] == "inconclusive" and _headline(v)["passed"] is None
    # the same slow rows re-judged from their gpu- hardware ids
    assert judge(_with_hardware(_rows(**{**GOOD, "fig2": (0.9, 0.1)}), GPU), P,
                 "default")["verdict"] == "not_reproduced"
    # on a CPU the same slow ratio is not evidence against the paper: undecided, never not_reproduced
    assert judge(_rows(**{**GOOD, "fig2": (0.9, 0.1)}), P, "default", device="cpu")["verdict"] == "inconclusive"


@pytest.mark.parametrize("bad", [dict(math_exp=(1.1, 1.0)), dict(ratios=((512, 3.0), (1024, 2.0))),
                                 dict(ratios=((512, 0.8), (1024, 0.9))), dict(step=(0.8, 0.05)),
                                 dict(sdpa_exp=(1.9, 2.0)), dict(fig2=(2.0, 0.1))])
def test_judge_flips(bad):
    """A secondary check failing (memory, Table 21, end-to-end step, the paper's fraction) with the speed headline
    holding on a GPU -> partially."""
    v = judge(_rows(**{**GOOD, **bad}), P, "default", device="cuda")
    assert _headline(v)["passed"] is True
    assert v["verdict"] == "partially"


def test_judge_speed_within_its_spread_is_undecided():
    # a secondary within its spread: end-to-end 1.35..1.65x against 0.5 x 3.0 = 1.5x is undecided (the > 1 check
    # holds); the headline holds, so the verdict stays reproduced
    v = judge(_rows(step=(1.5, 0.3), fig2=(4.0, 0.2)), P, "default", device="cuda")
    step = {c["name"]: c for c in v["checks"] if "end-to-end" in c["name"]}
    assert len(step) == 2
    frac = [c for n, c in step.items() if "paper's speed-up" in n][0]
    above1 = [c for n, c in step.items() if "paper's speed-up" not in n][0]
    assert frac["passed"] is None and "straddles" in frac["undecided_because"]
    assert above1["passed"] is True
    assert v["verdict"] == "reproduced"
    # the headline within its spread: 0.97..1.07x straddles 1 -> undecided -> inconclusive, with the load named
    busy = {"busy": True, "loadavg_1m_max": 2.9, "cpus": 2, "threads": 1}
    v = judge(_rows(step=(2.0, 0.1), fig2=(1.02, 0.1)), P, "default", device="cuda", load=busy)
    assert _headline(v)["passed"] is None and "straddles" in _headline(v)["undecided_because"]
    assert v["verdict"] == "inconclusive" and "busy" in v["reason"]
    # touching 1 from above (interval 1.0..2.0x) is not strictly above: undecided too
    v = judge(_rows(step=(2.0, 0.1), fig2=(1.5, 1.0)), P, "default", device="cuda")
    assert _headline(v)["passed"] is None and v["verdict"] == "inconclusive"


def test_judge_null_data_never_reproduces():
    """Identical variants: the fused backend's memory grows exactly like materialised attention's."""
    v = judge(_rows(math_exp=(2.0, 2.0), sdpa_exp=(2.0, 2.0), ratios=((512, 1.0), (1024, 1.0)), step=(1.0, 0.05),
                    fig2=(1.0, 0.05)), P, "default", device="cuda")
    assert v["verdict"] in ("not_reproduced", "inconclusive")


def test_judge_tiny():
    assert judge(_rows(), P, "tiny")["verdict"] == "not_applicable"


def test_judge_thresholds_come_from_the_judge_section():
    """speed_fraction_of_paper is read from the thresholds, never from the measured parameters: at 0.9 the
    end-to-end 2.0x (against 0.9 x 3.0 = 2.7x) fails and the verdict turns partially; the check names it."""
    v = judge(_rows(**GOOD), device="cuda", thresholds={**T, "speed_fraction_of_paper": 0.9})
    assert v["verdict"] == "partially"
    frac = [c for c in v["checks"] if "paper's speed-up" in c["name"]]
    assert frac and all(c["thresholds"] == {"speed_fraction_of_paper": 0.9} for c in frac)
    assert judge(_rows(**GOOD), device="cuda", thresholds=config.thresholds(CLAIM, "default"))["verdict"] == \
        "reproduced"


def test_speed_decided_by_the_stored_median_interval_on_gpu_rows():
    """Issue 37, items 2 and 6: on GPU-labelled rows the speed checks decide by the stored order-statistic interval
    of the median paired ratio; null (1.0x), reversed and tie controls on the same GPU rows."""
    rows = _with_hardware(_rows(**GOOD), GPU)
    head = _headline(judge(rows, P, "default"))
    assert head["passed"] is True and "order statistics" in head["interval"] and "median of 10" in head["interval"]
    assert head["numbers"]["lo"] == pytest.approx(3.9) and head["numbers"]["hi"] == pytest.approx(4.1)
    null = judge(_with_hardware(_rows(**{**GOOD, "fig2": (1.0, 0.1)}), GPU), P, "default")
    assert _headline(null)["passed"] is None and null["verdict"] == "inconclusive"
    reversed_ = judge(_with_hardware(_rows(**{**GOOD, "fig2": (0.8, 0.1)}), GPU), P, "default")
    assert _headline(reversed_)["passed"] is False and reversed_["verdict"] == "not_reproduced"
    tie = judge(_with_hardware(_rows(**{**GOOD, "fig2": (1.5, 1.0)}), GPU), P, "default")  # 1.0..2.0x touches 1
    assert _headline(tie)["passed"] is None


def test_speed_rows_without_an_interval():
    """Too few rounds for the interval (stored None) decide nothing, and the numbers carry no ends; rows measured
    before the interval fall back to McGill's notch over n, and with no n there is no interval at all."""
    few = _rows(**GOOD)
    for r in few:
        if r["metric"].endswith("_speedup_over_math"):
            r["sweep"].update(ci_below=None, ci_above=None)
    head = _headline(judge(few, P, "default", device="cuda"))
    assert head["passed"] is None and "too few rounds" in head["interval"]
    assert head["numbers"]["lo"] is None and head["numbers"]["hi"] is None
    assert "too few rounds" in head["measured"] and "inf" not in head["measured"]
    old = _headline(judge(_rows(**GOOD, n=None), P, "default", device="cuda"))
    assert old["passed"] is None and "no interval" in old["interval"]
    notch = _rows(**GOOD, n=None)
    for r in notch:
        if r["metric"].endswith("_speedup_over_math"):
            r["n"] = 20
    head = _headline(judge(notch, P, "default", device="cuda"))
    assert head["passed"] is True and "McGill" in head["interval"]


@pytest.mark.parametrize("scale", ["default", "paper"])
def test_every_speed_up_is_timed_over_enough_rounds_for_an_interval(scale):
    """Fig 2's and the end-to-end step's rounds (reps: the fewest timed) reach the order-statistic interval of the
    median at the config's confidence (6 at 95%: with fewer the speed-up has no interval and a GPU run decides
    nothing; the default Fig 2 shape had 3)."""
    from repro.bench.timing import median_interval

    p = config.section(CLAIM, scale)
    for part in ("fig2", "model"):
        lo, hi, cov = median_interval(range(p[part]["reps"]), p[part]["confidence"])
        assert math.isfinite(lo) and math.isfinite(hi) and cov >= p[part]["confidence"], (scale, part, p[part])
    assert median_interval(range(5), 0.95)[0] == -math.inf and math.isfinite(median_interval(range(6), 0.95)[0])


def test_gpu_controls_decide_by_their_rounds_and_fail_without_them():
    """tests/controls/flash_attention.py on the committed reference rows presented as a GPU run, each speed-up over
    the paper scale's rounds: null (1.0x) inconclusive with its intervals finite and straddling 1, reversed
    not_reproduced, paper-true reproduced. The same controls over the reference's 3 rounds (no interval) decide
    nothing: each contract assertion would fail there, so the verdicts above come from the rows' intervals."""
    from test_judge_contract import _controls, _judge, _reference, _rows as ref_rows, null

    folder, ctl = _reference(CLAIM), _controls(CLAIM)
    rows = ref_rows(folder)
    paper = config.section(CLAIM, "paper")
    assert {ctl.gpu_rounds(m) for m in ctl.SPEED} == {paper[p]["reps"] for p in ("fig2", "model")}
    v = {name: _judge(CLAIM, folder, make(rows), controlled=True) for name, make in
         (("null", lambda r: null(ctl.on_device(r))), ("reversed", ctl.paper_false), ("true", ctl.paper_true))}
    assert v["null"]["verdict"] == "inconclusive" and ctl.null_reaches(v["null"]) == []
    head = _headline(v["null"])
    assert head["numbers"]["lo"] < 1.0 < head["numbers"]["hi"] and "straddles" in head["undecided_because"]
    assert v["reversed"]["verdict"] == "not_reproduced" and _headline(v["reversed"])["passed"] is False
    assert v["true"]["verdict"] == "reproduced" and _headline(v["true"])["passed"] is True
    few = {name: _judge(CLAIM, folder, make(rows), controlled=True) for name, make in
           (("null", lambda r: null(ctl.on_device(r, rounds=3))),
            ("reversed", lambda r: ctl.paper_false(r, rounds=3)), ("true", lambda r: ctl.paper_true(r, rounds=3)))}
    assert all(x["verdict"] == "inconclusive" for x in few.values()), {k: x["verdict"] for k, x in few.items()}
    assert ctl.null_reaches(few["null"]) and all("too few rounds" in _headline(x)["undecided_because"]
                                                  for x in few.values())
