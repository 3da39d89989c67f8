"""Hardware comparison (repro.report.compare): two fake machines' result trees written with
repro.io.write_results; the table joins rows by (claim, metric, sweep), shows a missing claim as
missing (never 0), and computes ratios to the paper and between machines. Which rows are compared is the rows'
``kind`` column; trees written before that column existed (no kind) give the same tables through the fallback."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from repro.io import _integrity, metric, read_json, write_results
from repro.verdicts import verdict
from repro.report import compare

CPU, GPU = "cpu-test-2c", "gpu-test-h200"


def _fp(hw: str, torch_version: str, cuda: str | None) -> dict:
    acc = None if cuda is None else {"name": "Test H200", "count": 1, "memory_gib": 141.0, "capability": "9.0",
                                     "cuda": cuda, "driver": "560.1"}
    return {"hardware_id": hw, "hardware": {"cpu": "Test CPU", "cores": 2, "memory_gib": 24.0, "machine": "x86_64",
                                            "accelerator": acc},
            "software": {"python": "3.11.7", "torch": torch_version, "triton": "3.7.1"},
            "git": {"commit": "0123456789abcdef", "dirty": False}, "timestamp": "2026-11-29T10:00:00+00:00"}


def _write(root, hw, claim, rows, fp, scale="default", code="code-of-the-test"):
    """One machine's results; ``code``: the measurement code key its verdict records (machines compare only where
    the same code measured them)."""
    write_results(root / hw / scale / claim, claim=claim, scale=scale, metrics=rows,
                  verdict=verdict(claim, "not_applicable", "test"), config={"test": True}, fingerprint=fp,
                  keys={"code": code, "config": "c", "software": "s"})


def _speed_rows(ln_s_per_1k, rms_s_per_1k, peak_mb, extra=()):
    rows = [metric("rmsnorm_speed", "transformer_step_time", ln_s_per_1k, "s/1k steps",
                   published_key="transformer_ln_time", norm="layernorm"),
            metric("rmsnorm_speed", "transformer_step_time", rms_s_per_1k, "s/1k steps",
                   published_key="transformer_rms_time", norm="rmsnorm"),
            metric("rmsnorm_speed", "peak_memory", peak_mb, "MB", norm="rmsnorm"),
            # not a timing/memory row: must not appear in the comparison
            metric("rmsnorm_speed", "final_loss", 2.5, "loss", norm="rmsnorm")]
    return rows + list(extra)


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "results"
    cpu_fp, gpu_fp = _fp(CPU, "2.13.0+cpu", None), _fp(GPU, "2.5.1", "12.4")
    _write(root, CPU, "rmsnorm_speed", _speed_rows(1240.0, 992.0, 300.0), cpu_fp)
    _write(root, GPU, "rmsnorm_speed",
           _speed_rows(124.0, 99.2, 600.0, extra=[metric("rmsnorm_speed", "peak_memory", 10.0, "MB", norm="triton")]),
           gpu_fp)
    # a row measured on neither machine as a number (skipped on CPU, value empty): n/a, not 0
    _write(root, CPU, "rmsnorm_speed", _speed_rows(1240.0, 992.0, 300.0,
                                                    extra=[metric("rmsnorm_speed", "op_time", None, "ms", norm="triton")]),
           cpu_fp)
    # a claim only the CPU machine has (the GPU shows it as missing), in ms
    _write(root, CPU, "flash_attention",
           [metric("flash_attention", "fwd_time", 8.0, "ms", seq_len=1024),
            metric("flash_attention", "peak_memory", 209.0 * 2, "MB", published_key="memory_1k_flash", seq_len=1024)],
           cpu_fp)
    # a claim without timing/memory rows (no comparison table), and scaffolding folders that are not hardware
    _write(root, GPU, "block_numerics", [metric("block_numerics", "copy_task_final_loss_ratio", 0.5, "ratio",
                                                        kind="quality")], gpu_fp)
    (root / "_gpu_check").mkdir()
    (root / CPU / "default" / "_models").mkdir()
    # another scale is not mixed in
    _write(root, GPU, "flash_attention", [metric("flash_attention", "fwd_time", 1.0, "ms", seq_len=1024)], gpu_fp,
           scale="tiny")
    return root


def _row(table, metric_name, setting):
    hit = table[(table["metric"] == metric_name) & (table["setting"] == setting)]
    assert len(hit) == 1, (metric_name, setting, table)
    return hit.iloc[0]


def test_discover_finds_hardware_and_claims(tree):
    res = compare.discover(tree, "default")
    assert res.hardware == [CPU, GPU]
    assert set(res.metrics) == {(CPU, "rmsnorm_speed"), (GPU, "rmsnorm_speed"), (CPU, "flash_attention"),
                                (GPU, "block_numerics")}
    assert compare.perf_claims(res) == ["rmsnorm_speed", "flash_attention"]
    assert compare.discover(tree, "tiny").hardware == [GPU]


def test_table_joins_by_metric_and_sweep_with_ratios(tree):
    res = compare.discover(tree, "default")
    table = compare.compare_table(res, "rmsnorm_speed", reference=CPU)
    assert "final_loss" not in set(table["metric"])
    ln = _row(table, "transformer_step_time", "norm=layernorm")
    rms = _row(table, "transformer_step_time", "norm=rmsnorm")
    assert (ln[CPU], ln[GPU]) == ("1240", "124")
    assert (rms[CPU], rms[GPU]) == ("992", "99.2")
    # paper: 248 and 231 s/1k steps on a V100 (registry)
    assert (ln["paper"], ln["paper hardware"]) == ("248", "V100")
    # a ratio is never below 1: the larger way round, with the word of the side that wins
    assert ln[f"{CPU} vs paper"] == "5x slower" and ln[f"{GPU} vs paper"] == "2x faster"
    assert rms[f"{GPU} vs paper"] == f"{231 / 99.2:.3g}x faster"
    assert ln[f"{GPU} vs {CPU}"] == "10x faster" and rms[f"{GPU} vs {CPU}"] == "10x faster"
    mem = _row(table, "peak_memory", "norm=rmsnorm")
    assert mem[f"{GPU} vs {CPU}"] == "2x larger" and mem["paper"] == "" and mem[f"{GPU} vs paper"] == ""
    # the software is stated once per machine (software_table), not on every row
    assert "software differs" not in table.columns
    sw = compare.software_table(res, "rmsnorm_speed", reference=CPU).set_index("hardware")
    assert sw.loc[GPU, "torch"] == "2.5.1" and sw.loc[GPU, f"differs from {CPU}"] == "torch, cuda, driver"
    # a setting only one machine measured (or one without a value) compares nothing: not a row of the page
    assert set(zip(table["metric"], table["setting"])) == {("transformer_step_time", "norm=layernorm"),
                                                           ("transformer_step_time", "norm=rmsnorm"),
                                                           ("peak_memory", "norm=rmsnorm")}


def test_missing_claim_shows_missing_and_units_convert(tree):
    res = compare.discover(tree, "default")
    table = compare.compare_table(res, "flash_attention", reference=CPU)
    fwd = _row(table, "fwd_time", "seq_len=1024")
    assert fwd[CPU] == "8" and fwd[GPU] == compare.MISSING
    assert fwd[f"{GPU} vs {CPU}"] == ""
    mem = _row(table, "peak_memory", "seq_len=1024")
    assert mem["paper"] == "209" and mem[f"{CPU} vs paper"] == "2x larger"
    assert (table != "0").all().all()


def test_reference_changes_direction(tree):
    res = compare.discover(tree, "default")
    table = compare.compare_table(res, "rmsnorm_speed", reference=GPU)
    assert _row(table, "transformer_step_time", "norm=layernorm")[f"{CPU} vs {GPU}"] == "10x slower"


def test_noise_and_percentages():
    """Two point values: no '~' from their spreads (only a deciding interval gives one); percentages compare by
    points, never by ratio."""
    assert compare._versus(1.05, 1.0, percent=False, unit="s") == "1.05x slower"
    assert compare._versus(7.78, 1.9, percent=True, unit="%") == "5.88 pp higher"
    assert compare._with_noise(1.234, 0.05, 7) == "1.234 +- 0.05 (n 7)" and compare._with_noise(2.0, None, 1) == "2"
    assert compare.is_percent("percent") and compare.is_percent("% less time") and not compare.is_percent("ms")


def test_unit_conversion():
    assert compare.convert(1.5, "s", "ms") == pytest.approx(1500.0)
    assert compare.convert(2048.0, "MiB", "GiB") == pytest.approx(2.0)
    assert compare.convert(1.0, "s", "MB") is None


def _drop_kind_column(root):
    """Rewrite every metrics.csv under ``root`` as the writer did before the kind column (its integrity record
    updated to match), as in the committed reference results."""
    import pandas as pd

    for csv in root.rglob("metrics.csv"):
        frame = pd.read_csv(csv).drop(columns=["kind"])
        text = frame.to_csv(index=False)
        csv.write_text(text)
        v = read_json(csv.parent / "verdict.json")
        v["integrity"]["metrics.csv"] = _integrity(text.encode("utf-8"), len(frame))
        (csv.parent / "verdict.json").write_text(json.dumps(v))


def test_old_results_without_kind_give_the_same_tables(tree, tmp_path):
    new = {c: compare.compare_table(compare.discover(tree, "default"), c, CPU)
           for c in ("rmsnorm_speed", "flash_attention")}
    _drop_kind_column(tree)
    assert "kind" not in (tree / CPU / "default" / "rmsnorm_speed" / "metrics.csv").read_text().splitlines()[0]
    res = compare.discover(tree, "default")
    assert list(res.metrics[(CPU, "rmsnorm_speed")]["kind"]) == ["time", "time", "memory", "quality", "time"]
    assert compare.perf_claims(res) == ["rmsnorm_speed", "flash_attention"]
    for claim, table in new.items():
        assert compare.compare_table(res, claim, CPU).equals(table), claim


def test_the_kind_decides_not_the_metric_name(tmp_path):
    """A speed-up named without any timing word is compared because its kind says ratio_time; a row named like
    memory but declared a statistic is not; in an old file (no kind column) the names decide as before."""
    root = tmp_path / "results"
    rows = [metric("rmsnorm_speed", "gain_over_baseline", 1.3, "x", kind="ratio_time"),
            metric("rmsnorm_speed", "peak_memory_share", 40.0, "percent", kind="statistic"),
            metric("rmsnorm_speed", "weights_gb_16bit", 2.0, "GB")]
    _write(root, CPU, "rmsnorm_speed", rows, _fp(CPU, "2.13.0+cpu", None))
    table = compare.compare_table(compare.discover(root, "default"), "rmsnorm_speed")
    assert list(table["metric"]) == ["gain_over_baseline", "weights_gb_16bit"]
    _drop_kind_column(root)
    table = compare.compare_table(compare.discover(root, "default"), "rmsnorm_speed")
    assert list(table["metric"]) == ["peak_memory_share"]  # the old name patterns


def test_write_compare_pages_plots_and_index(tree, tmp_path):
    out = tmp_path / "reports" / "compare" / "default"
    written = compare.write_compare(tree, "default", out, reference=CPU)
    names = sorted(p.name for p in written)
    assert names == ["flash_attention.csv", "flash_attention.md", "flash_attention.png", "index.md",
                     "rmsnorm_speed.csv", "rmsnorm_speed.md", "rmsnorm_speed.png"]
    full = pd.read_csv(out / "rmsnorm_speed.csv")  # every row of the table, whatever the page shows
    assert len(full) == len(compare.compare_table(compare.discover(tree, "default"), "rmsnorm_speed", CPU))
    page = (out / "flash_attention.md").read_text()
    assert "| missing" in page or "missing |" in page
    assert "2.13.0+cpu" in page  # the software table
    index = (out / "index.md").read_text()
    assert CPU in index and GPU in index and "[flash_attention](flash_attention.md)" in index
    assert "block_numerics" not in index
    assert (out / "rmsnorm_speed.png").stat().st_size > 1000


def test_cli_and_empty_results(tmp_path):
    out = tmp_path / "cmp"
    assert compare.main(["--results", str(tmp_path / "nothing"), "--scale", "tiny", "--out", str(out)]) == 0
    assert "Hardware comparison" in (out / "index.md").read_text()


def test_incomplete_folder_names_the_file(tmp_path):
    d = tmp_path / CPU / "default" / "rmsnorm_speed"
    d.mkdir(parents=True)
    (d / "verdict.json").write_text(json.dumps({"verdict": "reproduced"}))
    with pytest.raises(FileNotFoundError, match="metrics.csv"):
        compare.discover(tmp_path, "default")


def test_rule_inputs_glob_other_machines_and_own_verdicts(tree):
    own = [str(tree / CPU / "default" / "new_claim" / "verdict.json")]  # not built yet: still an input
    inputs = compare.rule_inputs(str(tree), "default", CPU, own)
    assert own[0] in inputs
    assert str(tree / GPU / "default" / "rmsnorm_speed" / "verdict.json") in inputs
    assert str(tree / GPU / "default" / "block_numerics" / "verdict.json") in inputs
    # this machine's other results are not inputs (the target never reruns unselected claims); other scales neither
    assert not any(f"/{CPU}/default/rmsnorm_speed/" in p for p in inputs)
    assert not any("/tiny/" in p for p in inputs)


def test_page_rows_by_relevance_and_at_most_eight_columns(tree, tmp_path):
    """The page shows the headline's row and the rows with a paper value first, then the largest differences beyond
    noise; at most 8 short columns with a legend; the CSV keeps every row (issue 39)."""
    res = compare.discover(tree, "default")
    table, meta = compare._build(res, "rmsnorm_speed", CPU)
    shown = compare.key_rows(table, meta, limit=3)
    assert list(shown["paper"].astype(bool)) == [True, True, False]  # the two rows with a paper value first
    assert _row(shown, "peak_memory", "norm=rmsnorm")[f"{GPU} vs {CPU}"] == "2x larger"  # then the largest difference
    small, _, left_out = compare.page_table(shown, res.hardware, CPU)
    assert len(small.columns) <= 8 and not left_out and {"A", "B", "vs paper", "vs A"} <= set(small.columns)
    assert small.iloc[0]["vs paper"] == "A 5x slower; B 2x faster"
    assert small.iloc[2]["vs A"] == "B 2x larger than A"
    out = tmp_path / "cmp"
    compare.write_compare(tree, "default", out, reference=CPU)
    page = (out / "rmsnorm_speed.md").read_text()
    assert f"**A**: `{CPU}`" in page and max(map(len, page.splitlines())) <= 220


def test_outcome_keys_do_not_split_a_setting_across_machines(tmp_path):
    """A sequential test's stopping record in the sweep (ci_below, looks, stop) is not part of the setting: two
    machines' runs of one setting are one row."""
    root = tmp_path / "results"
    for hw, looks in ((CPU, 2), (GPU, 4)):
        _write(root, hw, "rmsnorm_speed", [metric("rmsnorm_speed", "step_time", 1.0 * looks, "s", kind="time",
                                                  impl="manual", looks=looks, stop="decided", ci_below=0.1)],
               _fp(hw, "2.13.0+cpu", None))
    table = compare.compare_table(compare.discover(root, "default"), "rmsnorm_speed", CPU)
    assert len(table) == 1 and table.iloc[0]["setting"] == "impl=manual" and table.iloc[0][f"{GPU} vs {CPU}"] == "2x slower"


def test_other_code_gives_no_ratio_and_an_older_code_column(tmp_path):
    """Numbers measured by other code than the baseline's are shown, marked '(older code)' where the checkout would
    measure them anew, but never divided by the baseline's: the ratio would compare the code, not the machines."""
    root = tmp_path / "results"
    _write(root, CPU, "rmsnorm_speed", _speed_rows(1240.0, 992.0, 300.0), _fp(CPU, "2.13.0+cpu", None))
    _write(root, GPU, "rmsnorm_speed", _speed_rows(124.0, 99.2, 600.0), _fp(GPU, "2.5.1", "12.4"), code="older")
    res = compare.discover(root, "default")
    assert not res.comparable(GPU, CPU, "rmsnorm_speed") and res.is_stale(GPU, "rmsnorm_speed")
    table, meta = compare._build(res, "rmsnorm_speed", CPU)
    assert len(table) == 3 and not table[f"{GPU} vs {CPU}"].astype(bool).any()
    assert _row(table, "transformer_step_time", "norm=layernorm")[f"{GPU} vs paper"] == "2x faster"  # vs paper kept
    out = tmp_path / "cmp"
    compare.write_compare(root, "default", out, reference=CPU)
    page = (out / "rmsnorm_speed.md").read_text()
    assert "| B (older code) |" in page and "than A" not in page


def test_the_baseline_is_a_machine_that_measured_the_claim(tree):
    res = compare.discover(tree, "default")
    assert compare.baseline(res, "flash_attention", GPU) == CPU  # GPU has no flash_attention results
    assert compare.baseline(res, "rmsnorm_speed", GPU) == GPU
