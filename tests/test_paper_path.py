"""Paper scale from checkpoint and data paths (issue 7), through Snakemake.

The paper profile reruns the trained-model claims on a published fairseq checkpoint and its fairseq data-bin. Neither
those files nor a GPU exist here, so this writes a small fairseq transformer checkpoint (fairseq 0.12's exact key
layout, argparse args, the zero fast-path duplicates) and a fairseq-preprocess data-bin, and runs
``claim_head_pruning``, ``claim_layer_pruning`` and ``claim_warmup_stability`` at ``scale=paper`` with only
``overrides`` changed: the paths, ``device: cpu`` and the budgets (the tiny section's). Every rule of the paper DAG
runs for real: the translation rules import the checkpoint and read the data-bin's dictionaries, the LM trains on
the data-bin's target side, head_pruning imports the checkpoint itself, and each claim writes results and a page.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

import test_fairseq_import as tfi  # tests/ is on sys.path under pytest's default import mode
from test_workflow import smk

from repro import config
from repro.data.fairseq_io import write_fairseq_dictionary, write_indexed_dataset

WORDS = [f"w{i}" for i in range(26)]  # one joined dictionary: 4 specials + 26 words = 30 = the checkpoint's vocab


def write_fixture(root: Path) -> tuple[Path, Path]:
    """A fairseq checkpoint (3+2 layers, Post-LN, shared embeddings) and a de-en data-bin whose target copies the
    source; returns (checkpoint path, data-bin folder)."""
    rng = torch.Generator().manual_seed(0)
    ck_dir, db = root / "fairseq_model", root / "data-bin"
    ck_dir.mkdir()
    db.mkdir()
    w = tfi._fairseq_state(rng, 3, 2, 30, 30, share_all=True)
    ck = ck_dir / "checkpoint_best.pt"
    torch.save({"args": tfi._args(3, 2, True, False, False), "model": w, "optimizer_history": [],
                "extra_state": {}}, ck)
    for folder in (ck_dir, db):
        for lang in ("de", "en"):
            write_fairseq_dictionary(folder / f"dict.{lang}.txt", WORDS)
    g = torch.Generator().manual_seed(1)
    for split, n in (("train", 64), ("valid", 24), ("test", 16)):
        seqs = [torch.cat([torch.randint(4, 30, (int(torch.randint(3, 9, (1,), generator=g)),), generator=g),
                           torch.tensor([2])]).numpy() for _ in range(n)]  # eos = 2
        for lang in ("de", "en"):
            write_indexed_dataset(db / f"{split}.de-en.{lang}", seqs, vocab_size=30)
    return ck, db


def paper_overrides(ck: Path, db: Path) -> dict:
    """Only paths, the device and budgets change; every other key keeps its paper value."""
    tiny = {name: config.section(name, "tiny") for name in ("translation", "head_pruning", "layer_pruning",
                                                            "warmup_stability")}
    small_lm = {"model": tiny["translation"]["lm"]["model"], "training": tiny["translation"]["lm"]["training"]}
    small_eval = {"decoder": "greedy", "max_len_a": 1.2, "max_len_b": 5, "max_tokens": 2048, "bootstrap_samples": 50}
    hp = {k: v for k, v in tiny["head_pruning"].items()
          if k not in ("model_dir", "fairseq_checkpoint", "require_fairseq_checkpoint", "corpus", "decode")}
    lp = {k: v for k, v in tiny["layer_pruning"].items()
          if k not in ("translation_model", "lm_model", "fairseq_checkpoint", "data_path")}
    ws = {k: v for k, v in tiny["warmup_stability"].items() if k not in ("vocab_size",)}  # the data-bin has its dictionary
    ws["warmup_steps"] = [3]
    return {
        "translation": {"device": "cpu", "threads": 1, "fairseq_checkpoint": str(ck),
                        "corpus": {"path": str(db)}, "lm": small_lm, "eval": small_eval},
        "head_pruning": {**hp, "fairseq_checkpoint": str(ck),
                         "corpus": {"path": str(db), "direction": "de-en"},
                         "decode": {"decoder": "greedy", "max_len_a": 1.2, "max_len_b": 5, "max_tokens": 2048}},
        "layer_pruning": lp,
        "warmup_stability": ws,
    }


@pytest.mark.slow  # over 20 s: the second stage (scripts/test_slow.sh, run by .ci/run)
def test_paper_scale_runs_from_a_fairseq_checkpoint(tmp_path):
    ck, db = write_fixture(tmp_path)
    cfg = tmp_path / "paper_paths.yaml"
    cfg.write_text(yaml.safe_dump({"scale": "paper", "hardware": "test-hw", "overrides": paper_overrides(ck, db)}))
    work = tmp_path / "run"
    work.mkdir()
    targets = ["claim_head_pruning", "claim_layer_pruning", "claim_warmup_stability"]
    r = smk(*targets, "--cores", "2", "--directory", str(work), "--configfile", str(cfg), timeout=1500)
    log = r.stdout + r.stderr
    assert r.returncode == 0, log[-6000:]
    res, rep = work / "results/test-hw/paper", work / "reports/test-hw/paper"
    # the translation artefact was imported from the checkpoint, not trained; the LM trained on the data-bin
    summary = json.loads((res / "_models/translation/summary.json").read_text())
    assert summary["stop_reason"] == "imported" and summary["fairseq_checkpoint"] == str(ck), summary
    assert (res / "_models/lm/checkpoint_last.pt").exists()
    assert (res / "head_pruning/_imported/checkpoint_last.pt").exists()
    for claim in ("head_pruning", "layer_pruning", "warmup_stability"):
        verdict = json.loads((res / claim / "verdict.json").read_text())
        assert verdict["scale"] == "paper", verdict
        # a random-weight model may leave BLEU checks undecided, but the paper-scale judge ran its checks
        assert verdict["verdict"] != "not_implemented" and verdict["checks"], verdict
        params = json.loads((res / claim / "config.json").read_text())["config"]
        assert params["device"] == "cpu"
        page = (rep / f"{claim}.md").read_text()
        assert "scale `paper`" in page and "Measured beside published" in page
    # the random-weight model does not beat the copy baseline (the data-bin's target copies its source), so every
    # BLEU-based head-pruning check is left undecided by the gate rather than judged, and the CPU speed-up is a
    # stand-in for Michel's GPU measurement: nothing is decided, the verdict is inconclusive
    hp_v = json.loads((res / "head_pruning/verdict.json").read_text())
    assert [c["name"] for c in hp_v["checks"] if c["passed"] is not None] == []
    assert hp_v["verdict"] == "inconclusive" and not hp_v["gates"][0]["passed"]
    hp = json.loads((res / "head_pruning/config.json").read_text())["config"]
    assert hp["fairseq_checkpoint"] == str(ck) and hp["corpus"]["format"] == "data_bin"
    lp = json.loads((res / "layer_pruning/config.json").read_text())["config"]
    assert lp["translation_model"].endswith("_models/translation") and lp["lm_model"].endswith("_models/lm")


# the speed and memory claims (issue 6): their paper sections with only the device and the sizes changed
SPEED_OVERRIDES = {
    "rmsnorm_speed": {
        "device": "cpu", "compile_threads": 1,
        # torch.compile is left out only to keep this test short; the paper's dtypes (bf16 + fp32) stay
        "op_sweep": {"hidden": [64, 96], "rows": 16, "providers": ["torch", "eager", "triton"], "reps": 2, "warmup": 1},
        "model": {"layers": 1, "d_model": 32, "n_heads": 2, "d_ff": 64, "vocab": 64, "seq_len": 16, "batch": 2,
                  "reps": 2, "warmup": 1, "min_time_s": 0}},
    "flash_attention": {
        "device": "cpu",
        "sweep": {"seq_lens": [32, 64], "head_dims": [16], "heads": 2, "batch": 1, "reps": 2, "warmup": 1},
        "table21": {"seq_lens": [32, 64], "batch": 1, "heads": 2, "head_dim": 16},
        "fig2": {"seq_len": 64, "heads": 2, "head_dim": 16, "batch": 1, "reps": 2, "warmup": 1},
        "model": {"layers": 1, "d_model": 32, "n_heads": 2, "seq_len": 32, "batch": 2, "vocab": 64, "reps": 2,
                  "warmup": 1, "min_time_s": 0}},
    "activation_checkpointing": {
        "device": "cpu",
        "block": {"d_model": 32, "n_heads": 2, "d_ff": 128},
        "terms": {"seq_len": 8},
        "depth_sweep": {"depths": [1, 4, 9], "seq_len": 16},
        "seq_sweep": {"seq_lens": [8, 16], "depth": 1},
        "timing": {"depth": 2, "seq_len": 16, "batch": 1, "reps": 2, "warmup": 1, "min_time_s": 0}},
}


@pytest.mark.slow  # over 20 s: the second stage (scripts/test_slow.sh, run by .ci/run)
def test_speed_claims_paper_sections_run_on_cpu_with_gpu_rows_not_applicable(tmp_path):
    """The paper sections' provider/dtype/policy lists run end to end; CUDA-only rows say why they are skipped."""
    cfg = tmp_path / "paper_cpu.yaml"
    cfg.write_text(yaml.safe_dump({"scale": "paper", "hardware": "test-hw", "overrides": SPEED_OVERRIDES}))
    r = smk(*[f"claim_{c}" for c in SPEED_OVERRIDES], "--cores", "1", "--directory", str(tmp_path),
            "--configfile", str(cfg), timeout=1200)
    assert r.returncode == 0, (r.stdout + r.stderr)[-6000:]
    import pandas as pd

    res = tmp_path / "results/test-hw/paper"
    for claim in SPEED_OVERRIDES:
        verdict = json.loads((res / claim / "verdict.json").read_text())
        assert verdict["scale"] == "paper" and verdict["hardware"] == "test-hw" and verdict["checks"], verdict
        assert (tmp_path / f"reports/test-hw/paper/{claim}.md").exists()
    fa = pd.read_csv(res / "flash_attention/metrics.csv")
    skipped = fa[fa["sweep"].str.contains('"status": "skipped"')]
    assert {"sdpa_flash", "sdpa_efficient", "triton"} <= {json.loads(s)["provider"] for s in skipped["sweep"]
                                                         if "provider" in json.loads(s)}
    assert all(json.loads(s).get("reason") for s in skipped["sweep"])  # every skipped row says why
    rms = json.loads((res / "rmsnorm_speed/verdict.json").read_text())
    per_impl = rms.get("per_implementation") or {}
    assert per_impl.get("triton", {}).get("verdict") == "not_applicable", rms
