"""repro.peers.fairseq's pieces that do not need fairseq: the id mapping, the data-bin it writes (read back with
the suite's fairseq reader), the fairseq-train arguments it derives from the config, and the log parsing. The
end-to-end benchmark needs a fairseq venv (``python -m repro.peers.fairseq --fairseq-venv PATH``)."""
from types import SimpleNamespace

import numpy as np
import pytest

from repro import config
from repro.peers import fairseq as fp
from repro.data.batching import EncodedCorpus
from repro.data.fairseq_io import read_fairseq_dictionary, read_indexed_dataset

TOK = SimpleNamespace(pad_id=0, unk_id=1, bos_id=2, eos_id=3)


def test_suite_specials_map_to_fairseqs_order_and_other_ids_stay():
    got = fp.fairseq_ids([2, 0, 3, 1, 4, 7, 3], pad=0, unk=1, bos=2, eos=3)
    assert got.tolist() == [0, 1, 2, 3, 4, 7, 2]


def test_data_bin_holds_the_suites_token_ids(tmp_path):
    enc = EncodedCorpus(src=[np.array([5, 6, 3]), np.array([9, 3])], tgt=[np.array([7, 8]), np.array([4])],
                        index=np.arange(2), pad_id=0, bos_id=2, eos_id=3, n_input=2)
    fp.write_data_bin(tmp_path, {"train": enc, "valid": enc}, 12, TOK, [[5, 1, 3]])
    d = read_fairseq_dictionary(tmp_path / "dict.de.txt")
    assert len(d) == 12 and d.pad_index == 1 and d.eos_index == 2
    src = [s.tolist() for s in read_indexed_dataset(tmp_path / "train.de-en.de")]
    tgt = [t.tolist() for t in read_indexed_dataset(tmp_path / "train.de-en.en")]
    assert src == [[5, 6, 2], [9, 2]] and tgt == [[7, 8, 2], [4, 2]]
    assert [s.tolist() for s in read_indexed_dataset(tmp_path / "test.de-en.de")] == [[5, 3, 2]]


def test_fairseq_train_arguments_follow_the_translation_section():
    p = config.section("translation", "default")
    args = fp.fairseq_train_args(p, "bin", None, 40)
    kv = {a: b for a, b in zip(args, args[1:]) if a.startswith("--")}
    assert kv["--encoder-layers"] == str(p["model"]["n_encoder_layers"])
    assert kv["--decoder-layers"] == str(p["model"]["n_decoder_layers"])
    assert kv["--encoder-embed-dim"] == str(p["model"]["block"]["d_model"])
    assert kv["--max-tokens"] == str(p["training"]["max_tokens"]) and kv["--max-update"] == "40"
    assert kv["--lr"] == str(p["training"]["optimizer"]["lr"])
    assert ("--encoder-normalize-before" in args) == (p["model"]["block"]["norm_position"] == "pre")
    assert "--no-save" in args and "--save-dir" not in fp.fairseq_train_args(p, "bin", None, 40)
    assert "--save-dir" in fp.fairseq_train_args(p, "bin", "ck", 40)


LOG = """2026-12-01 04:11:38 | INFO | train_inner | {"epoch": 1, "update": 0.2, "wps": "100", "num_updates": "5"}
2026-12-01 04:11:38 | INFO | train_inner | {"epoch": 1, "update": 0.4, "wps": "2000", "num_updates": "10"}
2026-12-01 04:11:39 | INFO | train_inner | {"epoch": 1, "update": 0.6, "wps": "3000", "num_updates": "15"}
2026-12-01 04:11:39 | INFO | train | {"epoch": 1, "train_wps": "999", "train_num_updates": "15"}"""


def test_wps_is_the_median_of_the_intervals_after_the_first():
    assert fp.fairseq_wps(LOG) == 2500.0
    with pytest.raises(RuntimeError, match="raise --updates"):
        fp.fairseq_wps(LOG.splitlines()[0])


def test_generate_line_is_parsed():
    m = fp._TRANSLATED.search("INFO:fairseq_cli.generate:Translated 1,024 sentences (30,000 tokens) in 12.5s (9 "
                              "sentences/s, 2400 tokens/s)")
    assert m and m.group(2) == "30,000" and float(m.group(3)) == 12.5
