"""Tests for repro.data: .mo parsing, corpus split, committed corpus, fairseq formats,
tokenizer and batching (issue 4)."""
from __future__ import annotations

import gettext
import hashlib
import json
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from repro.data import corpus as corpus_mod
from repro.data.batching import encode_corpus, token_batches
from repro.data.corpus import CorpusError, load_corpus, load_parallel_text
from repro.data.fairseq_io import (
    FairseqDictionary,
    FairseqFormatError,
    load_data_bin,
    read_fairseq_dictionary,
    read_index,
    read_indexed_dataset,
    remove_bpe,
    write_fairseq_dictionary,
    write_indexed_dataset,
)
from repro.data.gettext_corpus import (
    FilterConfig,
    Pair,
    SplitConfig,
    extract_pairs,
    group_pairs,
    is_placeholder_free,
    split_pairs,
    template_key,
)
from repro.data.mo import MoEntry, MoFormatError, read_mo, write_mo
from repro.data.tokenizer import Tokenizer, train_sentencepiece

COMMITTED = corpus_mod.DATA_ROOT / "gettext_de_en"

PO_TEXT = r'''msgid ""
msgstr ""
"Content-Type: text/plain; charset=UTF-8\n"
"Plural-Forms: nplurals=2; plural=(n != 1);\n"

msgid "Open the file"
msgstr "Datei öffnen"

msgctxt "menu"
msgid "Quit"
msgstr "Beenden"

msgid "Copying %d file"
msgid_plural "Copying %d files"
msgstr[0] "Kopiere %d Datei"
msgstr[1] "Kopiere %d Dateien"

#, fuzzy
msgid "Fuzzy message here"
msgstr "Unscharfe Nachricht"

msgid "Not translated yet"
msgstr ""

msgid "Line one\nLine two"
msgstr "Zeile eins\nZeile zwei"

msgid "Trailing newline is fine\n"
msgstr "Abschließender Zeilenumbruch ist in Ordnung\n"

msgid "Status"
msgstr "Status"

msgid "Too   many    spaces"
msgstr "Zu viele\tLeerzeichen"
'''


def _make_mo(tmp_path: Path) -> Path:
    mo = tmp_path / "tiny.mo"
    if shutil.which("msgfmt"):
        po = tmp_path / "tiny.po"
        po.write_text(PO_TEXT, encoding="utf-8")
        subprocess.run(["msgfmt", "-o", str(mo), str(po)], check=True)
    else:  # same catalog written in the binary format by hand
        entries = [
            MoEntry("Open the file", ("Datei öffnen",)),
            MoEntry("Quit", ("Beenden",), context="menu"),
            MoEntry("Copying %d file", ("Kopiere %d Datei", "Kopiere %d Dateien"), msgid_plural="Copying %d files"),
            MoEntry("Line one\nLine two", ("Zeile eins\nZeile zwei",)),
            MoEntry("Trailing newline is fine\n", ("Abschließender Zeilenumbruch ist in Ordnung\n",)),
            MoEntry("Status", ("Status",)),
            MoEntry("Too   many    spaces", ("Zu viele\tLeerzeichen",)),
        ]
        write_mo(mo, entries, "Content-Type: text/plain; charset=UTF-8\nPlural-Forms: nplurals=2; plural=(n != 1);\n")
    return mo


def test_mo_parsing_and_extraction(tmp_path):
    mo = _make_mo(tmp_path)
    cat = read_mo(mo)
    assert cat.charset.upper() == "UTF-8"
    assert cat.plural_forms.startswith("nplurals=2")
    by_id = {e.msgid: e for e in cat.entries}
    assert "" not in by_id  # header skipped
    assert by_id["Quit"].context == "menu"
    assert by_id["Copying %d file"].msgid_plural == "Copying %d files"
    assert by_id["Copying %d file"].msgstrs == ("Kopiere %d Datei", "Kopiere %d Dateien")
    assert "Fuzzy message here" not in by_id  # msgfmt drops fuzzy entries
    # independent check against the standard library's parser
    with open(mo, "rb") as f:
        std = gettext.GNUTranslations(f)
    assert std.gettext("Open the file") == by_id["Open the file"].msgstrs[0]
    assert std.pgettext("menu", "Quit") == "Beenden"

    stats = {}
    pairs = extract_pairs([mo], FilterConfig(), stats, packages={str(mo): "tinypkg"})
    got = {(p.source, p.target) for p in pairs}
    assert got == {
        ("Open the file", "Datei öffnen"),
        ("Quit", "Beenden"),
        ("Copying %d file", "Kopiere %d Datei"),
        ("Copying %d files", "Kopiere %d Dateien"),
        ("Trailing newline is fine", "Abschließender Zeilenumbruch ist in Ordnung"),
        ("Too many spaces", "Zu viele Leerzeichen"),
    }
    assert stats["dropped"]["multi_line"] == 1 and stats["dropped"]["same_as_source"] == 1
    assert all(p.package == "tinypkg" and p.catalog == "tiny" for p in pairs)
    lc = tmp_path / "xx" / "LC_MESSAGES"
    lc.mkdir(parents=True)
    shutil.copy(mo, lc / "dom.mo")
    assert {p.catalog for p in extract_pairs([lc / "dom.mo"], packages={str(lc / "dom.mo"): "x"})} == {"xx/dom"}
    singular = extract_pairs([mo], FilterConfig(plural_forms="singular"), packages={str(mo): "x"})
    assert ("Copying %d files", "Kopiere %d Dateien") not in {(p.source, p.target) for p in singular}
    # duplicates across catalogs are dropped, first one wins
    mo2 = tmp_path / "second.mo"
    shutil.copy(mo, mo2)
    both = extract_pairs([mo, mo2], packages={str(mo): "a", str(mo2): "b"})
    assert len(both) == len(pairs) and {p.package for p in both} == {"a"}


def test_write_mo_roundtrip_and_bad_magic(tmp_path):
    entries = [MoEntry("b", ("B",)), MoEntry("a %s", ("A %s", "As %s"), msgid_plural="as %s"),
               MoEntry("x", ("X",), context="ctx")]
    write_mo(tmp_path / "w.mo", entries)
    back = read_mo(tmp_path / "w.mo").entries
    assert sorted(back, key=lambda e: e.msgid) == sorted(entries, key=lambda e: e.msgid)
    with open(tmp_path / "w.mo", "rb") as f:
        std = gettext.GNUTranslations(f)
    assert std.ngettext("a %s", "as %s", 2) == "As %s"
    (tmp_path / "bad.mo").write_bytes(b"\x00" * 40)
    with pytest.raises(MoFormatError, match="bad.mo.*magic"):
        read_mo(tmp_path / "bad.mo")


def test_placeholder_flags_and_template_key():
    assert is_placeholder_free("Open the file")
    for s in ["Copying %d files", "cannot open '%s'", "Use {name} here", "see --help", "Try -h",
              "file /etc/passwd", "visit https://x.org", "value $HOME", "<b>bold</b>", "%1$s of %2$s"]:
        assert not is_placeholder_free(s), s
    assert is_placeholder_free("E-Mail-Adresse und Ein-/Ausgabe")  # hyphens are not options
    assert template_key("Copying %d files...") == template_key("copying 12 FILES") == "copying ph files"
    assert template_key("Copying 3 files") == template_key("  Copying 12   files.") == "copying ph files"
    assert template_key("_Open") == template_key("Open:") == "open"
    assert template_key("Copying files") != template_key("Copying %s files")


def _word(g: int) -> str:
    """A digit-free name per family (digits would be normalised away by the template key)."""
    return "".join("abcdefghij"[int(c)] for c in str(g))


def _pairs_with_groups():
    pairs, groups = [], []
    for i in range(300):  # 300 template families of 5 near-duplicates each
        g = _word(i)
        fam = [Pair(f"Copying {k} item{g}s", f"Kopiere {k} Element{g}e", "p", "c") for k in (1, 22, 333)]
        fam.append(Pair(f"Copying %d item{g}s.", f"Kopiere %d Element{g}e.", "p", "c"))
        # different source template, same translation template -> same group
        fam.append(Pair(f"Duplicating {g}", f"Kopiere 5 Element{g}e", "p", "c"))
        pairs += fam
        groups += [i] * len(fam)
    return pairs, groups


def test_split_keeps_template_groups_together():
    pairs, fam = _pairs_with_groups()
    splits = split_pairs(pairs, SplitConfig(valid_frac=0.1, test_frac=0.1))
    where = {}
    for name, ps in splits.items():
        for p in ps:
            where[(p.source, p.target)] = name
    fam_splits = {}
    for p, g in zip(pairs, fam):
        fam_splits.setdefault(g, set()).add(where[(p.source, p.target)])
    assert all(len(s) == 1 for s in fam_splits.values())
    counts = {k: len(v) for k, v in splits.items()}
    assert sum(counts.values()) == len(pairs)
    assert counts["valid"] > 0 and counts["test"] > 0 and counts["train"] > counts["valid"] + counts["test"]
    # deterministic and independent of input order
    rev = split_pairs(list(reversed(pairs)), SplitConfig(valid_frac=0.1, test_frac=0.1))
    assert {n: {(p.source, p.target) for p in v} for n, v in rev.items()} == \
        {n: {(p.source, p.target) for p in v} for n, v in splits.items()}
    assert len(set(group_pairs(pairs))) == 300


def test_committed_corpus_matches_manifest():
    manifest = json.loads((COMMITTED / "manifest.json").read_text())
    for split, info in manifest["splits"].items():
        assert hashlib.sha256((COMMITTED / info["file"]).read_bytes()).hexdigest() == info["sha256"]
    c = load_corpus("gettext_de_en", "de-en")
    for split in ("train", "valid", "test"):
        assert len(c.split(split)) == manifest["splits"][split]["pairs"]
        assert sum(c.clean_masks[split]) == manifest["splits"][split]["placeholder_free"]
    assert manifest["total_pairs"] > 20000
    assert 800 <= len(c.test) <= 2000 and 800 <= len(c.valid) <= 2000
    assert 0 < sum(c.test_clean_mask) < len(c.test)
    # no leakage: no normalised German or English template shared between train and test
    tr_de, tr_en = {template_key(s) for s, _ in c.train}, {template_key(t) for _, t in c.train}
    assert not any(template_key(s) in tr_de or template_key(t) in tr_en for s, t in c.test + c.valid)
    # direction swaps the columns
    r = load_corpus(COMMITTED, "en-de")
    assert r.test[0] == (c.test[0][1], c.test[0][0])
    assert c.copy_hypotheses("test") == [s for s, _ in c.test]
    with pytest.raises(CorpusError, match="language 'fr'"):
        load_corpus(COMMITTED, "fr-en")


def test_corpus_integrity_errors(tmp_path):
    d = tmp_path / "gettext_de_en"
    shutil.copytree(COMMITTED, d)
    m = json.loads((d / "manifest.json").read_text())
    m["splits"]["test"]["sha256"] = "0" * 64
    (d / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(CorpusError, match="test.tsv.gz: sha256"):
        load_corpus(d)
    load_corpus(d, verify=False)
    with pytest.raises(CorpusError, match="not found"):
        load_corpus(tmp_path / "nope")


def test_parallel_text(tmp_path):
    (tmp_path / "train.de").write_text("Hallo Welt\nGuten Tag\n")
    (tmp_path / "train.en").write_text("Hello world\nGood day\n")
    assert load_parallel_text(tmp_path / "train.de", tmp_path / "train.en") == [
        ("Hallo Welt", "Hello world"), ("Guten Tag", "Good day")]
    c = load_corpus(tmp_path, "en-de")
    assert c.train[0] == ("Hello world", "Hallo Welt") and c.test == []
    (tmp_path / "valid.de").write_text("a\nb\n")
    (tmp_path / "valid.en").write_text("a\n")
    with pytest.raises(CorpusError, match="valid.de has 2 lines but .*valid.en has 1"):
        load_corpus(tmp_path)


# ---------------------------------------------------------------- fairseq formats
def test_fairseq_dictionary_roundtrip(tmp_path):
    path = tmp_path / "dict.de.txt"
    write_fairseq_dictionary(path, ["die@@", "Katze", "▁Hund", ","], counts=[10, 7, 5, 3])
    assert path.read_text() == "die@@ 10\nKatze 7\n▁Hund 5\n, 3\n"
    d = read_fairseq_dictionary(path)
    assert d.symbols[:4] == ["<s>", "<pad>", "</s>", "<unk>"]
    assert (d.bos(), d.pad(), d.eos(), d.unk()) == (0, 1, 2, 3)
    assert d.index("Katze") == 5 and d.index("nicht-da") == 3 and len(d) == 8
    ids = d.encode_line("die@@ Katze unbekannt")
    assert ids.tolist() == [4, 5, 3, 2]
    assert d.string(ids) == "die@@ Katze <unk>"
    assert d.string(ids, "@@ ") == "dieKatze <unk>"
    assert d.string([0, 4, 5, 2, 1, 1], "@@ ", include_eos=True) == "dieKatze </s>"
    assert remove_bpe("▁Der ▁Hund e ▁bellt", "sentencepiece") == "Der Hunde bellt"
    d.save(tmp_path / "again.txt")
    assert read_fairseq_dictionary(tmp_path / "again.txt") == d
    # overwrite flag and errors
    (tmp_path / "ow.txt").write_text("a 3\na 5 #fairseq:overwrite\nb 1\n")
    ow = read_fairseq_dictionary(tmp_path / "ow.txt")
    assert ow.symbols[4:] == ["a", "b"] and ow.counts[4] == 5
    (tmp_path / "dup.txt").write_text("a 3\na 5\n")
    with pytest.raises(FairseqFormatError, match="dup.txt:2: duplicate"):
        read_fairseq_dictionary(tmp_path / "dup.txt")
    (tmp_path / "bad.txt").write_text("a notanumber\n")
    with pytest.raises(FairseqFormatError, match="bad.txt:1"):
        read_fairseq_dictionary(tmp_path / "bad.txt")


@pytest.mark.parametrize("dtype,code", [(np.uint16, 8), (np.int32, 4), (np.int64, 5), (np.uint8, 1)])
def test_indexed_dataset_exact_layout(tmp_path, dtype, code):
    seqs = [np.array([4, 5, 2]), np.array([], dtype=np.int64), np.array([7, 8, 9, 10, 2]), np.array([2])]
    write_indexed_dataset(tmp_path / "x", seqs, dtype=dtype)
    idx = (tmp_path / "x.idx").read_bytes()
    n = len(seqs)
    assert idx[:9] == b"MMIDIDX\x00\x00"
    assert struct.unpack("<Q", idx[9:17]) == (1,)
    assert idx[17] == code
    assert struct.unpack("<Q", idx[18:26]) == (n,)
    assert len(idx) == 26 + 12 * n  # fairseq layout: no document index
    sizes = np.frombuffer(idx, "<i4", n, 26)
    ptrs = np.frombuffer(idx, "<i8", n, 26 + 4 * n)
    assert sizes.tolist() == [3, 0, 5, 1]
    item = np.dtype(dtype).itemsize
    assert ptrs.tolist() == [0, 3 * item, 3 * item, 8 * item]
    assert (tmp_path / "x.bin").read_bytes() == np.concatenate(seqs).astype(np.dtype(dtype).newbyteorder("<")).tobytes()
    back = read_indexed_dataset(tmp_path / "x")
    assert [b.tolist() for b in back] == [s.tolist() for s in seqs]
    assert all(b.dtype == np.int64 for b in back)
    assert read_index(tmp_path / "x.idx").dtype == np.dtype(dtype)


def test_indexed_dataset_defaults_errors_and_megatron(tmp_path):
    seqs = [np.arange(5) + 4, np.array([70000, 2])]
    write_indexed_dataset(tmp_path / "small", [seqs[0]], vocab_size=100)
    assert (tmp_path / "small.idx").read_bytes()[17] == 8  # fairseq-preprocess picks uint16
    write_indexed_dataset(tmp_path / "big", seqs)
    assert (tmp_path / "big.idx").read_bytes()[17] == 9  # uint32 once ids pass 65500
    assert read_indexed_dataset(tmp_path / "big")[1].tolist() == [70000, 2]
    with pytest.raises(ValueError, match="outside the range"):
        write_indexed_dataset(tmp_path / "o", seqs, dtype=np.uint16)
    # Megatron's variant (document index) is read too
    write_indexed_dataset(tmp_path / "m", seqs, dtype=np.int32, doc_idx=[0, 1, 2])
    ix = read_index(tmp_path / "m.idx")
    assert ix.layout == "megatron" and ix.doc_idx.tolist() == [0, 1, 2]
    assert [a.tolist() for a in read_indexed_dataset(tmp_path / "m")] == [s.tolist() for s in seqs]
    # bad magic / missing files name the file
    raw = bytearray((tmp_path / "big.idx").read_bytes())
    raw[:9] = b"NOTMAGIC\x00"
    (tmp_path / "bad.idx").write_bytes(bytes(raw))
    shutil.copy(tmp_path / "big.bin", tmp_path / "bad.bin")
    with pytest.raises(FairseqFormatError, match=r"bad\.idx: bad magic"):
        read_indexed_dataset(tmp_path / "bad")
    with pytest.raises(FairseqFormatError, match=r"missing\.bin: data file not found"):
        read_indexed_dataset(tmp_path / "missing")
    (tmp_path / "trunc.idx").write_bytes((tmp_path / "big.idx").read_bytes()[:-4])
    shutil.copy(tmp_path / "big.bin", tmp_path / "trunc.bin")
    with pytest.raises(FairseqFormatError, match="trunc.idx: size"):
        read_indexed_dataset(tmp_path / "trunc")


def test_data_bin_directory(tmp_path):
    de = FairseqDictionary()
    for w in ["Hallo", "We@@", "lt"]:
        de.add_symbol(w, 5)
    en = FairseqDictionary()
    for w in ["Hello", "world"]:
        en.add_symbol(w, 5)
    de.save(tmp_path / "dict.de.txt")
    en.save(tmp_path / "dict.en.txt")
    src = [de.encode_line("Hallo We@@ lt"), de.encode_line("Hallo")]
    tgt = [en.encode_line("Hello world"), en.encode_line("Hello")]
    for split in ("train", "valid"):
        write_indexed_dataset(tmp_path / f"{split}.de-en.de", src, vocab_size=len(de))
        write_indexed_dataset(tmp_path / f"{split}.de-en.en", tgt, vocab_size=len(en))
    db = load_data_bin(tmp_path, "de-en", splits=("train", "valid"))
    assert db.text_pairs("train") == [("Hallo Welt", "Hello world"), ("Hallo", "Hello")]
    rev = load_data_bin(tmp_path, "en-de", splits=("valid",))
    assert rev.text_pairs("valid")[0] == ("Hello world", "Hallo Welt")
    with pytest.raises(FairseqFormatError, match="test.de-en.de.idx"):
        load_data_bin(tmp_path, "de-en", splits=("test",))
    # batches straight from the data-bin, in fairseq ids (bos 0, pad 1, eos 2)
    enc = db.encoded("train")
    (b,) = list(token_batches(enc, max_tokens=100, shuffle=False))
    row = int((b.index == 0).nonzero()[0, 0])
    assert b.src[row].tolist() == src[0].tolist()
    assert b.tgt_in[row].tolist() == [0] + tgt[0][:-1].tolist()
    assert b.tgt_out[row].tolist() == tgt[0].tolist()
    assert torch.equal(b.tgt_pad_mask, b.tgt_out == 1)
    en.bpe_symbol = "@@ "
    assert de.decode(src[0]) == "Hallo We@@ lt" and en.decode(b.tgt_out[row]) == "Hello world"


# ---------------------------------------------------------------- tokenizer and batching
@pytest.fixture(scope="module")
def tiny_tok(tmp_path_factory):
    c = load_corpus("gettext_de_en")
    texts = [s for p in c.train[:1500] for s in p]
    d = tmp_path_factory.mktemp("tok")
    return train_sentencepiece(texts, d / "spm", vocab_size=300, seed=0), texts, d


def test_tokenizer_roundtrip_and_determinism(tiny_tok):
    tok, texts, d = tiny_tok
    assert (tok.pad_id, tok.unk_id, tok.bos_id, tok.eos_id) == (0, 1, 2, 3)
    assert tok.vocab_size == 300
    for s in texts[:200]:
        ids = tok.encode(s)
        assert all(4 <= i < tok.vocab_size for i in ids)
        assert tok.decode(ids) == s
        assert tok.decode([tok.bos_id] + ids + [tok.eos_id, tok.pad_id, 7]) == s  # stops at eos
    again = train_sentencepiece(texts, d / "again" / "spm", vocab_size=300, seed=0)
    # same pieces and scores (the .model also stores the output path, so compare the .vocab)
    assert (d / "again" / "spm.vocab").read_text() == (d / "spm.vocab").read_text()
    assert [again.id_to_piece(i) for i in range(300)] == [tok.id_to_piece(i) for i in range(300)]
    assert Tokenizer.load(d / "spm").encode(texts[0]) == tok.encode(texts[0])
    with pytest.raises(FileNotFoundError, match="nothere.model"):
        Tokenizer.load(d / "nothere")


def test_token_batches(tiny_tok):
    tok, _, _ = tiny_tok
    pairs = load_corpus("gettext_de_en").valid[:400]
    enc = encode_corpus(pairs, tok, max_len=48)
    assert 0 < len(enc) <= len(pairs)
    trunc = encode_corpus(pairs, tok, max_len=12, on_long="truncate")
    assert len(trunc) == len(pairs) and max(len(s) for s in trunc.src) <= 12
    max_tokens = 300
    batches = list(token_batches(enc, max_tokens, shuffle=True, seed=3))
    seen = []
    for b in batches:
        B, S = b.src.shape
        T = b.tgt_in.shape[1]
        assert B * max(S, T) <= max_tokens and b.num_tokens <= max_tokens
        assert b.src.dtype == b.tgt_in.dtype == b.tgt_out.dtype == b.index.dtype == torch.long
        assert b.src_pad_mask.dtype == b.tgt_pad_mask.dtype == torch.bool and b.tgt_out.shape == b.tgt_in.shape
        assert torch.equal(b.src_pad_mask, b.src == tok.pad_id)
        assert torch.equal(b.tgt_pad_mask, b.tgt_out == tok.pad_id)
        assert (b.tgt_in[:, 0] == tok.bos_id).all()
        for r in range(B):
            i = int(b.index[r])
            s, t = pairs[i]
            n_src = int((~b.src_pad_mask[r]).sum())
            n_tgt = int((~b.tgt_pad_mask[r]).sum())
            assert b.src[r, :n_src].tolist() == tok.encode(s) + [tok.eos_id]
            y = tok.encode(t)
            assert b.tgt_in[r, :n_tgt].tolist() == [tok.bos_id] + y
            assert b.tgt_out[r, :n_tgt].tolist() == y + [tok.eos_id]
            if tok.unk_id not in y:  # characters unseen by the tiny tokenizer decode as unk
                assert tok.decode(b.tgt_out[r].tolist()) == t
        seen += b.index.tolist()
    assert sorted(seen) == sorted(enc.index.tolist())  # every kept pair exactly once
    assert np.mean([b.num_tokens for b in batches]) > 0.6 * max_tokens  # length grouping packs well
    again = [b.index.tolist() for b in token_batches(enc, max_tokens, shuffle=True, seed=3)]
    assert again == [b.index.tolist() for b in batches]
    other = [b.index.tolist() for b in token_batches(enc, max_tokens, shuffle=True, seed=4)]
    assert other != again
    with pytest.raises(ValueError, match="max_tokens=10"):
        list(token_batches(enc, 10))
