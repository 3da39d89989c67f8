"""Publishing a run as a committed reference (repro.report.publish): only a clean, fresh, whole run of HEAD."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from repro.report import publish as pub

ROOT = Path(__file__).resolve().parents[1]
HEAD = "a" * 40
CLAIM = "block_numerics"


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """A tiny run of one claim, made by the claim module, as if measured and judged at HEAD on a clean tree."""
    out = tmp_path_factory.mktemp("run") / "results" / "pub-hw" / "tiny" / CLAIM
    subprocess.run([sys.executable, "-m", f"repro.claims.{CLAIM}", "--scale", "tiny", "--out", str(out),
                    "--hardware", "pub-hw"], cwd=ROOT, check=True, capture_output=True)
    return out


def _run(tmp_path: Path, measured: Path, **change) -> Path:
    res = tmp_path / "results"
    dst = res / "pub-hw" / "tiny" / CLAIM
    dst.parent.mkdir(parents=True)
    subprocess.run(["cp", "-r", str(measured), str(dst)], check=True)
    v = json.loads((dst / "verdict.json").read_text())
    prov = v["provenance"]
    prov["measured"].update(commit=HEAD, dirty=False)
    prov["judged"].update(commit=HEAD, dirty=False)
    for key, value in change.items():
        section, name = key.split("__")
        if section == "keys":
            prov["measured"]["keys"][name] = value
        elif section == "verdict":  # a top-level field of verdict.json, merged (e.g. one threshold changed)
            v[name] = {**v[name], **value}
        else:
            prov[section][name] = value
    (dst / "verdict.json").write_text(json.dumps(v))
    return res


@pytest.fixture
def git(monkeypatch):
    state = {"status": ""}

    def fake(*args):
        return HEAD + "\n" if args[0] == "rev-parse" else state["status"]

    monkeypatch.setattr(pub, "_git", fake)
    return state


def test_publish_copies_a_clean_run_and_renders_it_as_a_reference(tmp_path, measured, git):
    res = _run(tmp_path, measured)
    before = {p: p.read_bytes() for p in res.rglob("*") if p.is_file()}
    refs = tmp_path / "references"
    dst = pub.publish("pub-hw", "tiny", res, refs, claims=[CLAIM])
    assert (dst / CLAIM / "verdict.json").read_bytes() == (res / "pub-hw/tiny" / CLAIM / "verdict.json").read_bytes()
    page = (refs / "reports/pub-hw/tiny" / f"{CLAIM}.md").read_text()
    assert "reference run of `pub-hw`, committed: measured at commit `aaaaaaa`" in page
    assert "| A | `pub-hw` | reference |" in (refs / "reports/matrix.md").read_text()
    assert (refs / "reports/matrix.csv").read_text().splitlines()[1].startswith("pub-hw,tiny,reference,")
    assert {p: p.read_bytes() for p in res.rglob("*") if p.is_file()} == before  # the run is not touched


@pytest.mark.parametrize("change, message", [
    ({"judged__commit": "b" * 40, "judged__judge_key": "0" * 64}, "another judge than HEAD's"),
    ({"judged__judge_key": "0" * 64}, "another judge than HEAD's"),  # judged at HEAD, with other thresholds' key
    ({"verdict__thresholds": {"value_tolerance": 0.5}}, "other thresholds than config/claims/block_numerics.yaml"),
    ({"judged__dirty": True}, "dirty tree"),
    ({"keys__code": "0" * 64}, "measurement code changed since"),
    ({"keys__config": "0" * 64}, "other parameters"),
])
def test_publish_refuses_what_is_not_a_clean_fresh_run_of_head(tmp_path, measured, git, change, message):
    res = _run(tmp_path, measured, **change)
    with pytest.raises(pub.PublishError, match=message):
        pub.publish("pub-hw", "tiny", res, tmp_path / "references", claims=[CLAIM])
    assert not (tmp_path / "references").exists()


@pytest.mark.parametrize("change, waiver, message", [
    ({"measured__dirty": True}, None, "measured on a dirty tree \\(--waiver"),  # no reason given: refused
    ({"measured__dirty": True, "judged__dirty": True}, "node copy", "judged on a dirty tree"),  # judge it here
    ({"measured__dirty": True, "keys__code": "0" * 64}, "node copy", "measurement code changed since"),
    ({"measured__dirty": True, "keys__config": "0" * 64}, "node copy", "other parameters"),
])
def test_a_waiver_accepts_only_a_dirty_measurement_with_heads_code(tmp_path, measured, git, change, waiver, message):
    res = _run(tmp_path, measured, **change)
    with pytest.raises(pub.PublishError, match=message):
        pub.publish("pub-hw", "tiny", res, tmp_path / "references", claims=[CLAIM], waiver=waiver)
    assert not (tmp_path / "references").exists()


def test_a_waived_measurement_is_published_with_its_reason_on_the_page(tmp_path, measured, git):
    res = _run(tmp_path, measured, measured__dirty=True, measured__commit="c" * 40)
    refs = tmp_path / "references"
    dst = pub.publish("pub-hw", "tiny", res, refs, claims=[CLAIM], waiver="the GPU node's copy lacked references/")
    record = json.loads((dst / CLAIM / "published_waiver.json").read_text())
    assert record["reason"] == "the GPU node's copy lacked references/"
    assert (record["measured_commit"], record["published_at"]) == ("c" * 40, HEAD)
    page = (refs / "reports/pub-hw/tiny" / f"{CLAIM}.md").read_text()
    assert "Published with a waiver: measured on a modified tree (commit `cccccccccc`, dirty)" in page
    assert "Reason: the GPU node's copy lacked references/" in page
    clean = _run(tmp_path / "clean", measured)  # a clean measurement published with a waiver records none
    dst = pub.publish("pub-hw", "tiny", clean, tmp_path / "refs2", claims=[CLAIM], waiver="unused")
    assert not (dst / CLAIM / "published_waiver.json").exists()
    assert "waiver" not in (tmp_path / "refs2/reports/pub-hw/tiny" / f"{CLAIM}.md").read_text()


def test_publish_takes_a_rejudged_run_and_refuses_mixed_commits(tmp_path, measured, git):
    res = _run(tmp_path, measured, measured__commit="c" * 40)  # measured at an older commit, judged at HEAD
    pub.publish("pub-hw", "tiny", res, tmp_path / "references", claims=[CLAIM])
    other = res / "pub-hw/tiny/param_accounting"
    subprocess.run([sys.executable, "-m", "repro.claims.param_accounting", "--scale", "tiny", "--out", str(other),
                    "--hardware", "pub-hw"], cwd=ROOT, check=True, capture_output=True)
    v = json.loads((other / "verdict.json").read_text())
    v["provenance"]["measured"].update(commit=HEAD, dirty=False)
    v["provenance"]["judged"].update(commit=HEAD, dirty=False)
    (other / "verdict.json").write_text(json.dumps(v))
    with pytest.raises(pub.PublishError, match="mixed commits"):
        pub.publish("pub-hw", "tiny", res, tmp_path / "references", claims=[CLAIM, "param_accounting"])


def test_publish_refuses_a_dirty_tree_and_an_incomplete_run(tmp_path, measured, git):
    res = _run(tmp_path, measured)
    with pytest.raises(pub.PublishError, match="no results for"):  # a whole run has every claim
        pub.publish("pub-hw", "tiny", res, tmp_path / "references")
    git["status"] = " M repro/model/block.py\n"
    with pytest.raises(pub.PublishError, match="not clean"):
        pub.publish("pub-hw", "tiny", res, tmp_path / "references", claims=[CLAIM])


# ----------------------------------------------------------------------------- the peer throughput benchmarks
def _peer(run: Path, name: str, commit: str = HEAD, hardware: str = "pub-hw", scale: str = "tiny",
          dirty: bool = False) -> Path:
    """A fabricated peer benchmark folder (repro.peers' files, with scratch and a model that must not travel)."""
    from repro.io import write_results
    from repro.peers.throughput import side_by_side
    from repro.verdicts import verdict

    out = run / "_bench" / name
    key = {"throughput": "reference", "fairseq_peer": "fairseq"}[name]
    rows, tasks = [], {t: side_by_side([], name, t, [110.0, 120.0], [100.0, 100.0], key)
                       for t in ("train", "greedy", "beam")}
    summary = {"tasks": tasks, "same_hypotheses": {"greedy": True, "beam": True}, "threads": 1, "nice": 0,
               "load_before": [1.0, 1.0, 1.0], "load_after": [1.1, 1.0, 1.0], "seconds": 9.0,
               "padding_fraction": {w: {"src": 0.1, "tgt": 0.1, "all": 0.1, "batches": 2}
                                    for w in ("epoch", "benchmarked_batches")},
               "weights": "initialised (untrained)", "decode_sentences": 4, "fairseq_version": "0.12.3.1 2.13.0+cpu",
               "tokens_per_sentence": {"greedy_suite": 3.0, "beam_suite": 3.5}}
    cfg = {"scale": scale, "repeats": 2, "updates": 10, "sentences": 4, "threads": 1,
           "translation": {"training": {"max_tokens": 512}}}
    fp = {"hardware_id": hardware, "hardware": {"cpu": "Test CPU"}, "software": {"torch": "2.13.0"},
          "git": {"commit": commit, "dirty": dirty}, "timestamp": "2026-12-01T10:00:00+00:00"}
    write_results(out, claim=name, scale=scale, metrics=rows, config=cfg, fingerprint=fp,
                  verdict=verdict(name, "not_applicable", "a benchmark, not a published claim"))
    (out / "summary.json").write_text(json.dumps({**summary, "hardware": hardware, "commit": fp["git"],
                                                  "config": cfg}))
    (out / "_work" / "checkpoint").mkdir(parents=True)
    (out / "_work" / "checkpoint" / "checkpoint_last.pt").write_bytes(b"scratch")
    return out


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def test_publish_copies_the_peer_benchmarks_and_renders_their_pages(tmp_path, measured, git):
    res = _run(tmp_path, measured)
    run = res / "pub-hw" / "tiny"
    _peer(run, "throughput")
    _peer(run, "fairseq_peer", commit="c" * 40, hardware="other-hw")  # measured later, elsewhere: published, named
    (run / "_bench" / "other").mkdir()
    (run / "_bench" / "other" / "x.json").write_text("{}")
    (run / "_models" / "translation").mkdir(parents=True)
    (run / "_models" / "translation" / "checkpoint_last.pt").write_bytes(b"model")
    refs = tmp_path / "references"
    dst = pub.publish("pub-hw", "tiny", res, refs, claims=[CLAIM])
    for name in ("throughput", "fairseq_peer"):
        assert _files(dst / "_bench" / name) == {"config.json", "fingerprint.json", "measured.json", "metrics.csv",
                                                 "summary.json", "verdict.json"}  # no scratch
    assert not (dst / "_bench" / "other").exists() and not (dst / "_models").exists()
    rep = refs / "reports" / "pub-hw" / "tiny"
    own = (rep / "throughput.md").read_text()
    assert own.startswith("# Training and decoding throughput: suite vs torch.nn.Transformer (pub-hw, tiny)")
    assert "measured at commit `aaaaaaaaaa` on `pub-hw` (Test CPU), 2026-12-01T10:00:00 UTC." in own
    assert "Another commit" not in own and "Measured on hardware" not in own
    assert "| train | 115 [112, 118] | 100 [100, 100] | 1.150 [1.125, 1.175] |" in own
    other = (rep / "fairseq_peer.md").read_text()
    assert "**Another commit than the reference run's claims** (measured at `aaaaaaaaaa`)" in other
    assert "commit `cccccccccc`" in other and "**Measured on hardware `other-hw`**, published under `pub-hw`" in other
    index = (rep / "index.md").read_text()
    assert "[suite vs torch.nn.Transformer](throughput.md): train 1.150, greedy 1.150, beam 1.150" in index
    assert "[suite vs fairseq](fairseq_peer.md)" in index


def test_publish_peers_only_adds_them_to_an_existing_reference(tmp_path, measured, git):
    res = _run(tmp_path, measured)
    refs = tmp_path / "references"
    with pytest.raises(pub.PublishError, match="no reference to add peer results to"):
        pub.publish_peers("pub-hw", "tiny", res, refs)
    dst = pub.publish("pub-hw", "tiny", res, refs, claims=[CLAIM])
    claim_files = {p: p.read_bytes() for p in (dst / CLAIM).rglob("*") if p.is_file()}
    with pytest.raises(pub.PublishError, match="no peer results"):
        pub.publish_peers("pub-hw", "tiny", res, refs)
    _peer(res / "pub-hw" / "tiny", "throughput", commit="d" * 40)
    assert pub.publish_peers("pub-hw", "tiny", res, refs) == [dst / "_bench" / "throughput"]
    assert {p: p.read_bytes() for p in (dst / CLAIM).rglob("*") if p.is_file()} == claim_files
    page = (refs / "reports/pub-hw/tiny/throughput.md").read_text()
    assert "commit `dddddddddd`" in page and "Another commit than the reference run's claims" in page
    assert "(throughput.md)" in (refs / "reports/pub-hw/tiny/index.md").read_text()
    git["status"] = " M repro/model/block.py\n"
    with pytest.raises(pub.PublishError, match="not clean"):
        pub.publish_peers("pub-hw", "tiny", res, refs)
    from repro.report.__main__ import main
    assert main(["publish", "--hardware", "pub-hw", "--scale", "tiny", "--results", str(res), "--references",
                 str(refs), "--peers-only", "--claims", CLAIM]) == 2  # --peers-only publishes no claims


def _damage(folder: Path, how: str) -> None:
    if how == "missing":
        (folder / "summary.json").unlink()
    elif how == "unreadable":
        (folder / "fingerprint.json").write_text("{not json")
    elif how == "old summary":
        s = json.loads((folder / "summary.json").read_text())
        del s["same_hypotheses"]
        (folder / "summary.json").write_text(json.dumps(s))


@pytest.mark.parametrize("damage, peer, message", [
    ("missing", {}, "not a complete peer benchmark \\(no summary.json\\)"),
    ("unreadable", {}, "unreadable summary.json, fingerprint.json or config.json"),
    ("old summary", {}, "summary.json lacks what repro.peers.throughput's page needs"),
    (None, {"dirty": True}, "measured on a dirty tree"),
    (None, {"scale": "default"}, "measured at scale 'default', not 'tiny'"),
])
def test_publish_refuses_a_bad_peer_benchmark_before_writing(tmp_path, measured, git, damage, peer, message):
    res = _run(tmp_path, measured)
    _damage(_peer(res / "pub-hw" / "tiny", "throughput", **peer), damage)
    with pytest.raises(pub.PublishError, match=message):
        pub.publish("pub-hw", "tiny", res, tmp_path / "references", claims=[CLAIM])
    assert not (tmp_path / "references").exists()
