"""Paper sections on Hugging Face checkpoint folders (issue 17): layer_pruning prunes a Llama-family folder (Gromov's
angular distance, ShortGPT's Block Influence, perplexity on a user-given text file, healing) and param_accounting
counts any folder beside the checkpoint's own total. The folder here is a tiny random Llama written with
transformers' save_pretrained plus a sentencepiece tokenizer.model in Llama-2's layout (unk 0, bos 1, eos 2), and
the text is the English side of the committed corpus."""
from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

import pytest
import torch
import yaml

import repro.kernels  # noqa: F401  before transformers (which imports triton): CPU kernels keep the interpreter

transformers = pytest.importorskip("transformers", reason="transformers (the test extra) writes the tiny folder")

from repro.artefacts import ArtefactError  # noqa: E402
from repro import config  # noqa: E402
from repro.claims import layer_pruning as lp  # noqa: E402
from repro.claims import param_accounting as pa  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _english(n: int) -> list[str]:
    with gzip.open(ROOT / "data/gettext_de_en/train.tsv.gz", "rt", encoding="utf-8") as f:
        rows = [r["en"] for r in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
                if r["placeholder_free"] == "1"]
    return rows[:: max(1, len(rows) // n)][:n]


def write_tiny_llama(root: Path, n_text: int = 120) -> tuple[Path, Path]:
    """A 4-layer Llama folder (GQA, RoPE, SwiGLU) with a sentencepiece tokenizer.model, and a text file."""
    import sentencepiece as spm

    lines = _english(n_text)
    folder, text = root / "tiny-llama", root / "text.txt"
    folder.mkdir(parents=True)
    text.write_text("\n".join(lines) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_prefix=str(folder / "tokenizer"),
                                   vocab_size=160, model_type="unigram", unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
                                   hard_vocab_limit=False, minloglevel=2, num_threads=1)
    (folder / "tokenizer.vocab").unlink()
    cfg = transformers.LlamaConfig(vocab_size=160, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                   bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(cfg).save_pretrained(folder, safe_serialization=True)
    return folder, text


def _small(params: dict, folder: Path, text: Path) -> dict:
    params.update(device="cpu", hf_model=str(folder), text_path=str(text), stacks=["lm"], random_seeds=[0],
                  text_max_len=48)
    params["calibration"].update(sentences=16, max_tokens=512)
    params["eval"].update(valid_sentences=16, max_tokens=512)
    params["heal"].update(steps=2, max_tokens=256, rules=["angular"], fractions={"lm": [0.5]}, control=True)
    return params


def test_layer_pruning_paper_section_on_a_llama_folder(tmp_path):
    torch.set_num_threads(1)
    folder, text = write_tiny_llama(tmp_path)
    params = config.section(lp.CLAIM, "paper")
    with pytest.raises(ArtefactError, match="layer_pruning.text_path"):
        lp.resolve_models({**params, "hf_model": str(folder), "stacks": ["lm"]}, tmp_path / "layer_pruning")
    with pytest.raises(ArtefactError, match="layer_pruning.hf_model"):
        lp.resolve_models({**params, "hf_model": str(tmp_path), "text_path": str(text), "stacks": ["lm"]},
                          tmp_path / "x")
    params = _small(params, folder, text)
    out = tmp_path / "layer_pruning"
    out.mkdir()
    rows, verdict = lp.run(params, "paper", out)
    assert [int(r["value"]) for r in lp._sel(rows, "n_layers")] == [4]
    assert len(lp._sel(rows, "block_influence", stack="lm")) == 4
    assert len(lp._sel(rows, "angular_distance", stack="lm")) == 4 + 3 + 2 + 1
    # unpruned + 4 rules x 4 counts unhealed, then the healing control and the healed angular cut
    assert len(lp._sel(rows, "valid_ppl", stack="lm", healed=False)) == 1 + 4 * 4
    assert len(lp._sel(rows, "valid_ppl", stack="lm", healed=True)) == 2
    [n_params] = lp._sel(rows, "model_parameters")
    assert n_params["value"] == sum(p.numel() for p in
                                    transformers.LlamaForCausalLM.from_pretrained(folder).parameters())
    # the unpruned model's perplexity is computed on the text: a random model is near-uniform over 160 pieces
    base = lp._sel(rows, "valid_ppl", stack="lm", rule="none", healed=False)[0]["value"]
    assert 60 < base < 400
    profiles = json.loads((out / "profiles.json").read_text())
    assert profiles["lm"]["n_layers"] == 4 and len(profiles["lm"]["block_influence"]) == 4
    assert verdict["verdict"] != "not_implemented" and verdict["checks"]


def test_claim_layer_pruning_through_snakemake_from_a_llama_folder(tmp_path):
    from test_workflow import smk

    folder, text = write_tiny_llama(tmp_path)
    p = _small(config.section(lp.CLAIM, "tiny"), folder, text)
    lp_over = {k: p[k] for k in ("device", "hf_model", "text_path", "stacks", "random_seeds", "text_max_len",
                                 "calibration", "eval", "heal")}
    # Snakemake 9 reads nested --config values as strings, so the budgets (numbers) come in a config file; the
    # scale is chosen on the command line as the README shows
    cfg_file = tmp_path / "llama_paths.yaml"
    cfg_file.write_text(yaml.safe_dump({"overrides": {"layer_pruning": lp_over}}))
    work = tmp_path / "run"
    work.mkdir()
    r = smk("claim_layer_pruning", "--cores", "1", "--directory", str(work), "--configfile", str(cfg_file),
            "--config", "scale=paper", "hardware=test-hw", timeout=900)
    assert r.returncode == 0, (r.stdout + r.stderr)[-6000:]
    res = work / "results/test-hw/paper/layer_pruning"
    verdict = json.loads((res / "verdict.json").read_text())
    assert verdict["scale"] == "paper" and verdict["checks"], verdict
    cfg = json.loads((res / "config.json").read_text())["config"]
    assert cfg["hf_model"] == str(folder) and cfg["stacks"] == ["lm"]
    assert not (work / "results/test-hw/paper/_models").exists()  # no shared LM was trained
    assert "scale `paper`" in (work / "reports/test-hw/paper/layer_pruning.md").read_text()


def test_param_accounting_of_a_checkpoint_folder(tmp_path):
    folder, _ = write_tiny_llama(tmp_path, n_text=40)
    ref = transformers.LlamaForCausalLM.from_pretrained(folder)
    q = pa.measure({"hf_folder": str(folder)}, [16])
    assert q["total"] == q["checkpoint_total"] == sum(p.numel() for p in ref.parameters())
    assert q["embeddings"] == 2 * 160 * 32 and q["block_total"] == sum(p.numel() for p in ref.model.layers[0].parameters())
    params = {"models": {"tiny_llama": {"hf_folder": str(folder)}}, "bits": [16], "rounded_rel_tolerance": 0.05}
    rows, _ = pa.run(params, "paper", tmp_path)
    assert {r["metric"] for r in rows} >= {"total", "checkpoint_total"}
    # the paper section validates with a folder-only entry added by overrides
    merged = config.section("param_accounting", "paper", {"param_accounting": {"models": {"x": {"hf_folder": "f"}}}})
    assert merged["models"]["x"] == {"hf_folder": "f", "published": {}} and "llama_7b" in merged["models"]
