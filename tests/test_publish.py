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
    ({"judged__dirty": True}, "dirty tree"),
    ({"keys__code": "0" * 64}, "measurement code changed since"),
    ({"keys__config": "0" * 64}, "other parameters"),
])
def test_publish_refuses_what_is_not_a_clean_fresh_run_of_head(tmp_path, measured, git, change, message):
    res = _run(tmp_path, measured, **change)
    with pytest.raises(pub.PublishError, match=message):
        pub.publish("pub-hw", "tiny", res, tmp_path / "references", claims=[CLAIM])
    assert not (tmp_path / "references").exists()


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
