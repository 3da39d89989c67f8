"""activation_checkpointing (C8): tiny run end to end, the saved-bytes accounting, and the verdict rule."""
import pytest
import torch

from repro import config
from repro.claims import activation_checkpointing as ac
from repro.claims._cli import judge_rows, run_and_judge
from repro.claims.activation_checkpointing import loglog_slope, run


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    params = config.section("activation_checkpointing", "tiny")
    rows, verdict = run_and_judge("activation_checkpointing", run, params, "tiny", tmp_path_factory.mktemp("ac"))
    return params, rows, verdict


def _coef(rows, **sweep):
    hits = [r["value"] for r in rows if r["metric"] == "saved_coeff_16bit"
            and all(r["sweep"].get(k) == v for k, v in sweep.items())]
    assert len(hits) == 1, sweep
    return hits[0]


def test_tiny_run_shapes(tiny):
    params, rows, verdict = tiny
    assert verdict["verdict"] == "not_applicable"
    names = {r["metric"] for r in rows}
    assert {"saved_coeff_16bit", "peak_bytes_fwd_bwd", "retained_bytes_after_forward", "time_overhead",
            "loglog_slope_peak_bytes_fwd_bwd"} <= names
    assert all(r["value"] is not None for r in rows)
    overheads = [r for r in rows if r["metric"] == "time_overhead"]
    # the median interval is stored with its level; 2 rounds are too few for 95% coverage, so its ends are None
    level = params["timing"]["confidence"]
    assert overheads and all(r["sweep"]["confidence"] == level and r["sweep"]["ci_below"] is None for r in overheads)


def test_terms_match_korthikanti_exactly_in_the_formula_setting(tiny):
    """fp32 run in the 16-bit convention, math attention, dropout on: 11/19/4 sbh and 5 as^2b.

    The norms carry the fp32 mean and rstd on top (2 LNs x 2 x 4 bytes x sb -> 8/h sbh in the convention)."""
    params, rows, _ = tiny
    h = params["block"]["d_model"]
    f = dict(backend="math", dtype="float32", dropout=0.1, policy="none")
    assert _coef(rows, section="attention", kind="sbh", **f) == pytest.approx(11, abs=0.05)  # + the per-head gate buffer
    assert _coef(rows, section="mlp", kind="sbh", **f) == pytest.approx(19)
    assert _coef(rows, section="norms", kind="sbh", **f) == pytest.approx(4 + 8 / h)
    assert _coef(rows, section="total", kind="score", **f) == pytest.approx(5)
    assert _coef(rows, section="total", kind="sbh", policy="full", backend="math", dtype="float32",
                 dropout=0.1) == pytest.approx(2)
    assert not [r for r in rows if r["metric"] == "saved_coeff_16bit" and r["sweep"].get("backend") == "sdpa"
                and r["sweep"].get("kind") == "score"]


def test_sqrt_checkpointing_keeps_fewer_bytes_than_none():
    blk = {"d_model": 16, "n_heads": 2, "d_ff": 32}
    kept = {}
    for pol in ("none", "full", "sqrt"):
        st = ac.build_stack(blk, 9, pol, 2, torch.float32, "cpu")
        x0, _ = ac._inputs(1, 4, 16, torch.float32, "cpu")
        kept[pol] = ac.retained_bytes(st, x0)
    assert kept["sqrt"] * 2 < kept["full"] < kept["none"]
    assert kept["full"] == 9 * 4 * 16 * 4  # each layer keeps exactly its fp32 input
    assert kept["sqrt"] == 3 * 4 * 16 * 4  # three segments of three


@pytest.mark.parametrize("policy", ["none", "selective", "full"])
@pytest.mark.parametrize("count", ["retained", "terms"])
def test_counting_leaves_no_graph_behind(policy, count):
    """Counting saved tensors must not keep the stack alive once it is dropped: a pack hook that returned the
    tensor itself tied each saved output to its own graph node (a cycle gc never sees), so every stack of the paper
    depth sweep stayed on the GPU and depth 64 ran out of its 140 GB (the H200 run of 2026-12-04)."""
    import weakref

    blk = {"d_model": 16, "n_heads": 2, "d_ff": 32, "ffn": "gelu", "norm": "layernorm"}
    st = ac.build_stack(blk, 4, policy, 2, torch.float32, "cpu", attention="math", dropout=0.1)
    x0, _ = ac._inputs(1, 8, 16, torch.float32, "cpu")
    alive = [weakref.ref(p) for p in st.parameters()]
    if count == "retained":
        assert ac.retained_bytes(st, x0) > 0
    else:
        assert ac.saved_terms(st, x0, 8, [0.1])
    del st, x0
    assert not [r for r in alive if r() is not None]


def test_loglog_slope():
    assert loglog_slope([1, 4, 16], [3, 6, 12]) == pytest.approx(0.5)
    assert loglog_slope([2, 4, 8], [5, 10, 20]) == pytest.approx(1.0)


def _rows(total=34.06, score=5.0, full=2.0, sel=34.06, sdpa_score=None, slope_sqrt=0.5, slope_none=1.0,
          over_full=33.0, over_sel=5.0, pred=30.0, iqr=2.0, n=12):
    """Rows as the measurement writes them; the time overheads carry their median interval (here +- iqr/2) over n
    rounds (``n`` None: an old row without the interval and without n)."""
    def coef(value, section, kind, policy="none", backend="math"):
        return {"metric": "saved_coeff_16bit", "value": value, "sweep": dict(
            backend=backend, dtype="float32", dropout=0.1, policy=policy, section=section, kind=kind)}
    rows = [coef(11.0, "attention", "sbh"), coef(19.0, "mlp", "sbh"), coef(4.06, "norms", "sbh"),
            coef(total, "total", "sbh"), coef(score, "total", "score"), coef(full, "total", "sbh", "full"),
            coef(sel, "total", "sbh", "selective"), coef(36.1, "total", "sbh", backend="sdpa")]
    if sdpa_score is not None:
        rows.append(coef(sdpa_score, "total", "score", backend="sdpa"))
    rows += [{"metric": "loglog_slope_peak_bytes_fwd_bwd", "value": v, "sweep": {"axis": "depth", "policy": p}}
             for p, v in (("sqrt", slope_sqrt), ("none", slope_none))]
    ci = {} if n is None else {"ci_below": iqr / 2, "ci_above": iqr / 2, "confidence": 0.95}
    rows += [{"metric": "time_overhead", "value": v, "spread": iqr, "n": n, "sweep": {"policy": p, **ci}}
             for p, v in (("full", over_full), ("selective", over_sel))]
    rows.append({"metric": "predicted_overhead_one_forward", "value": pred, "sweep": {}})
    return rows


PARAMS = config.section("activation_checkpointing", "default")
T = {"coeff_rel": 0.05, "sqrt_slope": [0.3, 0.7], "none_slope": [0.85, 1.15], "overhead_abs_pct": 15,
     "selective_fraction_of_full": 0.5}


def judge(rows, params, scale, load=None, thresholds=None):
    return judge_rows("activation_checkpointing", rows, scale=scale, params=params, thresholds=thresholds or T,
                      load=load)


def test_a_moved_threshold_changes_the_check_that_names_it():
    """overhead_abs_pct is the judge's: at 1 point the +40% overhead (one forward = +35%) no longer fits."""
    v = judge(_rows(over_full=40.0, iqr=2.0), PARAMS, "default", thresholds={**T, "overhead_abs_pct": 1})
    c = [c for c in v["checks"] if "extra forward" in c["name"]][0]
    assert c["passed"] is False and c["thresholds"] == {"overhead_abs_pct": 1}


def test_judge_reproduced_on_good_rows():
    v = judge(_rows(), PARAMS, "default")
    assert v["verdict"] == "reproduced"
    assert {r["aspect"] for r in v["setup"]} >= {"models", "hardware"}


@pytest.mark.parametrize("bad", [dict(total=40.0), dict(score=8.0), dict(full=34.0), dict(slope_sqrt=0.95)])
def test_judge_headline_fails_on_a_wrong_count(bad):
    v = judge(_rows(**bad), PARAMS, "default")
    assert v["verdict"] == "not_reproduced"


@pytest.mark.parametrize("bad", [dict(sel=40.0), dict(sdpa_score=5.0), dict(slope_none=0.5),
                                 dict(over_full=90.0), dict(over_sel=30.0)])
def test_judge_flips_on_a_wrong_secondary_result(bad):
    v = judge(_rows(**bad), PARAMS, "default")
    assert v["verdict"] == "partially"
    assert sum(c["passed"] is False for c in v["checks"]) >= 1


def test_judge_wide_timing_spread_is_undecided_and_names_the_load():
    load = {"busy": True, "loadavg_1m_max": 3.1, "cpus": 2, "threads": 1}
    v = judge(_rows(over_full=40.0, iqr=40.0), PARAMS, "default", load)
    timing = [c for c in v["checks"] if "extra forward" in c["name"]][0]
    assert timing["passed"] is None and "busy" in timing["undecided_because"]
    assert v["verdict"] == "reproduced" and v["load"]["busy"]  # a secondary undecided check does not decide


def test_judge_null_data_never_reproduces():
    """Identical variants (every policy keeps what 'none' keeps, no slope) cannot reproduce the claim."""
    v = judge(_rows(full=34.06, sel=34.06, slope_sqrt=1.0, slope_none=1.0, over_full=0.0, over_sel=0.0),
              PARAMS, "default")
    assert v["verdict"] in ("not_reproduced", "inconclusive")


def test_judge_tiny_is_not_applicable():
    assert judge(_rows(), PARAMS, "tiny")["verdict"] == "not_applicable"


def _with_interval(rows, below, above, level=0.95):
    """The overhead rows as the measurement now writes them: the median interval's distances (percentage points)."""
    for r in rows:
        if r["metric"] in ("time_overhead", "predicted_overhead_one_forward"):
            r["sweep"] = {**r["sweep"], "ci_below": below, "ci_above": above, "confidence": level}
            r["n"] = 116
    return rows


def _selective(v):
    return [c for c in v["checks"] if c["name"].startswith("selective recomputation is much")][0]


def test_timing_checks_decide_by_the_stored_median_interval():
    """Issue 37, item 2: the reference of 66ff298 left 'selective much cheaper than full' undecided by median +- IQR/2
    (+18.3 +- 4.4 against 0.5 x 44.3); the stored interval of the median decides such rows, the IQR alone does not."""
    wide = judge(_rows(over_full=44.3, over_sel=18.3, iqr=8.8), PARAMS, "default")  # the stored ends at +- IQR/2
    assert _selective(wide)["passed"] is None
    new = judge(_with_interval(_rows(over_full=44.3, over_sel=18.3, iqr=8.8), 0.9, 0.9), PARAMS, "default")
    assert _selective(new)["passed"] is True and "order statistics" in _selective(new)["interval"]
    assert "median of 116" in _selective(new)["interval"] and "95%" in _selective(new)["interval"]


def test_rows_measured_before_the_interval():
    """Old rows (no stored interval) are judged by McGill's notch over their n rounds, and the page says so: at 116
    rounds +- 1.58 x 8.8 / sqrt(116) = 1.3 points decides what +- IQR/2 did not; with no n there is no interval."""
    old = judge(_rows(over_full=44.3, over_sel=18.3, iqr=8.8, n=None), PARAMS, "default")
    assert _selective(old)["passed"] is None and "no interval" in _selective(old)["interval"]
    rows = _rows(over_full=44.3, over_sel=18.3, iqr=8.8, n=None)
    for r in rows:
        if r["metric"] == "time_overhead":
            r["n"] = 116
    notch = _selective(judge(rows, PARAMS, "default"))
    assert notch["passed"] is True and "McGill" in notch["interval"]


def test_median_interval_controls():
    """Reversed (selective costs more than half of full) fails; a tie at the threshold, or rounds too few for any
    interval (ci None), decides nothing."""
    reversed_ = judge(_with_interval(_rows(over_full=40.0, over_sel=30.0), 0.5, 0.5), PARAMS, "default")
    assert _selective(reversed_)["passed"] is False
    tie = judge(_with_interval(_rows(over_full=40.0, over_sel=20.0), 0.5, 0.5), PARAMS, "default")
    assert _selective(tie)["passed"] is None
    few = judge(_with_interval(_rows(over_full=40.0, over_sel=5.0), None, None), PARAMS, "default")
    assert _selective(few)["passed"] is None and "too few rounds" in _selective(few)["interval"]
