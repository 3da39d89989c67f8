"""Hostile and mistaken input refused before anything runs: each bad value of the run config (folders, hardware id,
claims, every claim's model shapes, optimizer values, threshold bands), each bad option of a claim's command line
(JSON of the wrong kind, an --out that is a file) and each YAML file naming a key twice, with the message that must
name the key, option or file and the rule. Nothing here measures: the config rows build the workflow's Run and ask
it for every selected claim's parameters and thresholds (what the DAG / dry run does); the command-line rows give
``repro.claims._cli.main`` a measurement that fails the test if it is ever called."""
import json
from pathlib import Path

import pytest
from snakemake.exceptions import WorkflowError

from repro import config, registry
from repro.claims import _cli
from repro.workflow import Run

ROOT = Path(__file__).resolve().parents[1]


def _ov(claim: str, **keys) -> dict:
    """A run of one claim at tiny scale with ``overrides: {claim: keys}`` (the translation section: of a run of
    head_pruning, the claim built on it)."""
    return {"scale": "tiny", "hardware": "test-hw", "claims": [claim if claim != "translation" else "head_pruning"],
            "overrides": {claim: keys}}


def _tiny(**cfg) -> dict:
    return {"scale": "tiny", "hardware": "test-hw", "claims": ["block_numerics"], **cfg}


# (run config, what the message must say): the first string names the key, the rest state the rule
CONFIG_CASES = [
    (_tiny(results_dir="references/results"), ["results_dir: 'references/results' is inside", "only",
                                                "python -m repro.report publish"]),
    (_tiny(reports_dir="references/reports"), ["reports_dir: 'references/reports' is inside"]),
    (_tiny(results_dir="refs/mine", references_dir="refs"), ["results_dir: 'refs/mine' is inside references_dir"]),
    (_tiny(results_dir="out", reports_dir="out"), ["reports_dir: 'out' and results_dir 'out' overlap"]),
    (_tiny(results_dir="out", reports_dir="out/pages"), ["reports_dir: 'out/pages' and results_dir 'out' overlap"]),
    (_tiny(results_dir="out/data", reports_dir="out"), ["overlap", "keep results and reports apart"]),
    (_tiny(results_dir=" "), ["results_dir: empty"]),
    (_tiny(reports_dir="pages{hw}"), ["reports_dir: 'pages{hw}' holds '{'", "placeholders"]),
    (_tiny(hardware="gpu_h200.node"), ["hardware: 'gpu_h200.node' is not a hardware id",
                                       "groups joined by single '-'", "use 'gpu-h200-node'"]),
    (_tiny(hardware="Node 16"), ["hardware: 'Node 16' is not a hardware id", "use 'node-16'"]),
    (_tiny(hardware="a--b"), ["hardware: 'a--b' is not a hardware id", "use 'a-b'"]),
    (_tiny(claims=3), ["claims: 3 is not a list of claim ids, e.g. claims=[rank_collapse]"]),
    (_tiny(claims=[]), ["claims: [] is not a list of claim ids"]),
    (_tiny(claims=["bogus"]), ["claims: unknown claim id 'bogus'"]),
    (_tiny(claims="bogus"), ["claims: unknown claim id 'bogus'"]),  # one id is a one-element list
    (_tiny(scale="huge"), ["scale"]),
    (_tiny(overrides={"rank_collapse": 3}), ["overrides.rank_collapse: expected a mapping"]),
    # model shapes of every claim that builds a model (heads must divide the width)
    (_ov("rank_collapse", dong={"n_heads": 3}), ["rank_collapse.yaml [tiny]: dong.n_heads: 3 must divide d_model=16"]),
    (_ov("rank_collapse", noci={"n_heads": 5}), ["noci.n_heads: 5 must divide d_model=16"]),
    (_ov("prepost_gradients", model={"n_heads": 3}), ["prepost_gradients.yaml [tiny]: model.n_heads: 3 must divide"]),
    (_ov("block_numerics", deep_stack={"n_heads": 3}), ["deep_stack.n_heads: 3 must divide d_model=16"]),
    (_ov("flash_attention", model={"n_heads": 5}), ["flash_attention.yaml [tiny]: model.n_heads: 5 must divide"]),
    (_ov("rmsnorm_speed", model={"n_heads": 3}), ["rmsnorm_speed.yaml [tiny]: model.n_heads: 3 must divide"]),
    (_ov("activation_checkpointing", block={"n_heads": 5}), ["block.n_heads: 5 must divide d_model=32"]),
    (_ov("warmup_stability", model={"block": {"n_heads": 3}}), ["model.block.n_heads: 3 must divide d_model=16"]),
    (_ov("warmup_stability", model={"block": {"norm": "batchnorm"}}), ["model.block.norm: 'batchnorm' is not one of"]),
    (_ov("translation", model={"block": {"n_heads": 3}}), ["translation.yaml [tiny]", "n_heads: 3 must divide"]),
    # optimizer values in range
    (_ov("layer_pruning", heal={"betas": [1.5, 0.98]}), ["layer_pruning.yaml [tiny]: heal.betas.0: 1.5",
                                                         "maximum of 1"]),
    (_ov("layer_pruning", heal={"lr": 0}), ["heal.lr: 0 is less than or equal to the minimum of 0"]),
    (_ov("translation", training={"optimizer": {"eps": -1}}), ["training.optimizer.eps: -1"]),
    (_ov("translation", training={"optimizer": {"betas": [0.9, 1.0]}}), ["training.optimizer.betas.1: 1.0"]),
    (_ov("head_pruning", l0={"stretch": [0.1, 1.1]}), ["head_pruning.yaml [tiny]: l0.stretch.0: 0.1"]),
    # threshold bands [lo, hi] in order
    (_ov("activation_checkpointing", judge={"none_slope": [1.15, 0.85]}),
     ["activation_checkpointing.yaml [tiny]: judge.none_slope: [1.15, 0.85] is not a band [lo, hi]",
      "lo must be <= hi"]),
    (_ov("activation_checkpointing", judge={"sqrt_slope": [0.7, 0.3]}), ["judge.sqrt_slope: [0.7, 0.3] is not a band"]),
    (_ov("flash_attention", judge={"linear_exponent": [1.2, 0.8]}),
     ["judge.linear_exponent: [1.2, 0.8] is not a band"]),
    (_ov("flash_attention", judge={"quadratic_exponent": [2.2, 1.6]}), ["judge.quadratic_exponent: [2.2, 1.6]"]),
]


@pytest.mark.parametrize("cfg, message", CONFIG_CASES, ids=[f"config-{i}" for i in range(len(CONFIG_CASES))])
def test_a_bad_run_config_is_refused_naming_the_key_and_the_rule(tmp_path, monkeypatch, cfg, message):
    monkeypatch.chdir(tmp_path)  # relative folders resolve here, as under `snakemake --directory`
    with pytest.raises(WorkflowError) as err:
        w = Run(cfg, ROOT, main_process=False)
        for name in [*w.cfg["claims"], *w.cfg["overrides"]]:  # what building the DAG asks for: each claim's (and
            w.params(name)  # shared artefact's) parameters and thresholds
            w.thresholds(name)
    text = str(err.value)
    assert text.startswith("invalid configuration:"), text
    for part in message:
        assert part in text, text
    assert not list(tmp_path.iterdir())  # nothing written


def test_the_inputs_refused_above_have_a_valid_neighbour(tmp_path, monkeypatch):
    """The rules are not stricter than they say: the fixed values pass (a hardware id with digits, one claim id,
    folders with spaces, results and reports side by side, an ordered band, heads dividing the width)."""
    monkeypatch.chdir(tmp_path)
    w = Run({**_tiny(hardware="node-16-core", claims="rank_collapse", results_dir="my results",
                     reports_dir="my reports"),
             "overrides": {"rank_collapse": {"dong": {"n_heads": 4}}}}, ROOT, main_process=False)
    assert w.hw == "node-16-core" and w.cfg["claims"] == ["rank_collapse"]
    assert json.loads(w.params("rank_collapse"))["dong"]["n_heads"] == 4
    assert config.section("activation_checkpointing", "tiny",
                          {"activation_checkpointing": {"judge": {"none_slope": [0.85, 1.15]}}})


# ------------------------------------------------------------------------------------------ YAML given twice
def test_a_config_file_naming_a_key_twice_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    f = tmp_path / "run.yaml"
    f.write_text("scale: tiny\nclaims: [block_numerics]\nscale: paper\n")
    with pytest.raises(WorkflowError, match=r"(?s)run.yaml: not valid YAML .*duplicate key 'scale' \(first on line 1"):
        Run(_tiny(), ROOT, main_process=False, configfiles=[f])


def test_a_nested_key_given_twice_in_a_claim_or_schema_file_is_refused(tmp_path):
    f = tmp_path / "claim.yaml"
    f.write_text("tiny:\n  deep_stack: {d_model: 16, n_heads: 2, n_heads: 3}\n")
    with pytest.raises(config.ConfigError, match=r"(?s)claim.yaml: not valid YAML .*duplicate key 'n_heads'"):
        config._load_yaml(f)


def test_a_registry_naming_a_claim_twice_is_refused(tmp_path):
    f = tmp_path / "published.yaml"
    f.write_text((ROOT / "repro/registry/published.yaml").read_text() + "\nclaims: {}\n")
    with pytest.raises(registry.RegistryError, match=r"(?s)published.yaml: YAML error: .*duplicate key 'claims'"):
        registry.load(f)


# ---------------------------------------------------------------------------------- a claim's command line
def _never(params, scale, out):
    raise AssertionError("measured: the bad option was not refused first")


_never.__module__ = "repro.claims.activation_checkpointing"  # what _cli reads the claim's module from

CLI_CASES = [
    (["--keys", "notjson"], ["--keys: not valid JSON", "expected a JSON object"]),
    (["--keys", "[]"], ["--keys: expected a JSON object ({...}), got list []"]),
    (["--keys", '"judge"'], ["--keys: expected a JSON object", "got str"]),
    (["--keys", '{"judge": 3}'], ["--keys: judge: expected a string"]),
    (["--params", "notjson"], ["--params: not valid JSON"]),
    (["--params", "[1, 2]"], ["--params: activation_checkpointing.yaml [tiny]: expected a mapping of parameters, "
                              "got list"]),
    (["--params", "{}"], ["--params: activation_checkpointing.yaml [tiny]", "required property"]),
    (["--thresholds", "[0.3, 0.7]"], ["--thresholds: activation_checkpointing.yaml [tiny] judge: expected a mapping"]),
    (["--thresholds", '{"none_slope": [1.15, 0.85]}'], ["--thresholds: activation_checkpointing.yaml [tiny]: "
                                                        "judge.none_slope: [1.15, 0.85] is not a band"]),
    (["--thresholds", '{"bogus": 1}'], ["--thresholds:", "bogus: unknown key"]),
    (["--thresholds", "{"], ["--thresholds: not valid JSON"]),
    (["--hardware", "Bad Id"], ["--hardware: 'Bad Id' is not a hardware id", "use 'bad-id'"]),
    (["--threads", "0"], ["--threads: must be >= 1"]),
    (["--input", "model_dir"], ["--input model_dir: expected PARAM=PATH"]),
    (["--scale", "huge"], ["--scale: invalid choice: 'huge'"]),
]


@pytest.mark.parametrize("argv, message", CLI_CASES, ids=[f"cli-{i}" for i in range(len(CLI_CASES))])
def test_a_bad_command_line_option_is_refused_by_the_parser(tmp_path, capsys, argv, message):
    out = tmp_path / "out"
    scale = [] if "--scale" in argv else ["--scale", "tiny"]
    with pytest.raises(SystemExit) as exit_:
        _cli.main("activation_checkpointing", _never, [*scale, "--out", str(out), *argv])
    err = capsys.readouterr().err
    assert exit_.value.code == 2, err  # argparse's status for a usage error
    for part in message:
        assert part in err, err
    assert not out.exists()  # refused before anything was written


def test_an_out_that_is_a_file_is_refused(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text("keep me\n")
    with pytest.raises(SystemExit):
        _cli.main("activation_checkpointing", _never, ["--scale", "tiny", "--out", str(readme)])
    assert f"argument --out: '{readme}' is a file, not a folder" in capsys.readouterr().err
    assert readme.read_text() == "keep me\n"


@pytest.mark.parametrize("module", ["repro.train.train", "repro.train.prepare"])
def test_the_model_commands_refuse_an_out_that_is_a_file(tmp_path, capsys, module):
    import importlib  # the two commands import torch-side code: loaded only for this test
    readme = tmp_path / "README.md"
    readme.write_text("keep me\n")
    with pytest.raises(SystemExit) as exit_:
        importlib.import_module(module).main(["--scale", "tiny", "--out", str(readme)])
    assert exit_.value.code == 2
    assert f"argument --out: '{readme}' is a file, not a folder" in capsys.readouterr().err
    assert readme.read_text() == "keep me\n"
