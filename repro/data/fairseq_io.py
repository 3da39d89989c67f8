"""fairseq data formats: ``dict.<lang>.txt`` dictionaries and MMapIndexedDataset ``.bin/.idx``.

Paper-scale runs of the BLEU claims (head pruning, Michel et al. 2019, on IWSLT14 de-en and
WMT; warm-up, Xiong et al. 2020, on IWSLT14 de-en) read a ``data-bin`` directory made by
``fairseq-preprocess`` directly, and the fairseq checkpoint import (repro.train.fairseq_import) reuses
:class:`FairseqDictionary`.  Written from the format, not from fairseq's code, and checked
against fairseq's layout:

* Dictionary file: one ``<symbol> <count>[ #fairseq:overwrite]`` per line; the four specials
  ``<s>``=0, ``<pad>``=1, ``</s>``=2, ``<unk>``=3 are implicit (not in the file).
* Index ``<prefix>.idx``: magic ``b"MMIDIDX\\x00\\x00"``, version ``<Q`` = 1, dtype code ``<B``,
  number of sequences N ``<Q``, then ``int32 sizes[N]`` and ``int64 pointers[N]`` (byte offsets
  into ``.bin``).  Megatron-LM's variant adds a document count ``<Q`` after N and
  ``int64 doc_idx[count]`` after the pointers; the reader accepts both (told apart by the file
  size), the writer writes fairseq's layout unless ``doc_idx`` is given.
* ``<prefix>.bin``: the concatenated token arrays in that dtype.  Codes: 1 uint8, 2 int8,
  3 int16, 4 int32, 5 int64, 6 float64, 7 float64 in fairseq (``np.double``) but float32 in
  Megatron-core (the reader decides from the ``.bin`` size), 8 uint16, 9 uint32, 10 uint64.
  fairseq-preprocess picks uint16 for vocabularies under 65500 symbols.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from repro.errors import FairseqFormatError

MMAP_MAGIC = b"MMIDIDX\x00\x00"
TNT_MAGIC = b"TNTIDX\x00\x00"  # fairseq's older "lazy/cached" format (not supported)
CODE_TO_DTYPE = {
    1: np.uint8,
    2: np.int8,
    3: np.int16,
    4: np.int32,
    5: np.int64,
    6: np.float64,
    7: np.float64,  # fairseq: np.double; Megatron-core: float32 -- resolved from the .bin size
    8: np.uint16,
    9: np.uint32,
    10: np.uint64,
}
DTYPE_TO_CODE = {np.dtype(np.uint8): 1, np.dtype(np.int8): 2, np.dtype(np.int16): 3, np.dtype(np.int32): 4,
                 np.dtype(np.int64): 5, np.dtype(np.float64): 6, np.dtype(np.float32): 7,
                 np.dtype(np.uint16): 8, np.dtype(np.uint32): 9, np.dtype(np.uint64): 10}
_HEADER_LEN = 9 + 8 + 1 + 8


# ---------------------------------------------------------------- dictionary
class FairseqDictionary:
    """fairseq's ``Dictionary``: symbols with counts, four specials first (bos, pad, eos, unk)."""

    def __init__(self, bos="<s>", pad="<pad>", eos="</s>", unk="<unk>", extra_special_symbols=()):
        self.symbols: list[str] = []
        self.counts: list[int] = []
        self.indices: dict[str, int] = {}
        self.bos_word, self.pad_word, self.eos_word, self.unk_word = bos, pad, eos, unk
        self.bos_index = self.add_symbol(bos)
        self.pad_index = self.add_symbol(pad)
        self.eos_index = self.add_symbol(eos)
        self.unk_index = self.add_symbol(unk)
        for s in extra_special_symbols:
            self.add_symbol(s)
        self.nspecial = len(self.symbols)

    def add_symbol(self, word: str, n: int = 1, overwrite: bool = False) -> int:
        if word in self.indices and not overwrite:
            idx = self.indices[word]
            self.counts[idx] += n
            return idx
        idx = len(self.symbols)
        self.indices[word] = idx
        self.symbols.append(word)
        self.counts.append(n)
        return idx

    def __len__(self) -> int:
        return len(self.symbols)

    def __getitem__(self, idx: int) -> str:
        return self.symbols[idx] if 0 <= idx < len(self.symbols) else self.unk_word

    def __contains__(self, sym: str) -> bool:
        return sym in self.indices

    def __eq__(self, other) -> bool:
        return isinstance(other, FairseqDictionary) and self.symbols == other.symbols and self.counts == other.counts

    def index(self, sym: str) -> int:
        return self.indices.get(sym, self.unk_index)

    def bos(self) -> int:
        return self.bos_index

    def pad(self) -> int:
        return self.pad_index

    def eos(self) -> int:
        return self.eos_index

    def unk(self) -> int:
        return self.unk_index

    # Tokenizer-compatible interface (repro.data.tokenizer.Tokenizer), so batching and decoding
    # code works on a fairseq vocabulary too.  Text given to encode() is already BPE-segmented.
    bpe_symbol: str | None = None

    @property
    def pad_id(self) -> int:
        return self.pad_index

    @property
    def bos_id(self) -> int:
        return self.bos_index

    @property
    def eos_id(self) -> int:
        return self.eos_index

    @property
    def unk_id(self) -> int:
        return self.unk_index

    @property
    def vocab_size(self) -> int:
        return len(self.symbols)

    def encode(self, text: str) -> list[int]:
        return self.encode_line(text, append_eos=False).tolist()

    def decode(self, ids) -> str:
        """Text up to the first eos, bos/pad dropped, BPE removed per ``self.bpe_symbol``."""
        out = []
        for i in np.asarray(ids).reshape(-1).tolist():
            if int(i) == self.eos_index:
                break
            out.append(int(i))
        return self.string(out, self.bpe_symbol)

    def encode_line(self, line: str, append_eos: bool = True) -> np.ndarray:
        """Whitespace-split ``line`` into ids (unknown -> unk), + eos, like fairseq-preprocess."""
        ids = [self.index(w) for w in line.split()]
        if append_eos:
            ids.append(self.eos_index)
        return np.asarray(ids, dtype=np.int64)

    def string(self, ids, bpe_symbol: str | None = None, include_eos: bool = False,
               unk_string: str | None = None) -> str:
        """Ids to text; bos/pad (and eos unless ``include_eos``) dropped; ``bpe_symbol``:
        None/"none" (keep), "@@ " or "subword_nmt" (join ``@@ `` continuations),
        "sentencepiece" (remove spaces, ``▁`` -> space)."""
        skip = {self.bos_index, self.pad_index} | (set() if include_eos else {self.eos_index})
        words = []
        for i in np.asarray(ids).reshape(-1).tolist():
            i = int(i)
            if i in skip:
                continue
            words.append(unk_string if (i == self.unk_index and unk_string is not None) else self[i])
        return remove_bpe(" ".join(words), bpe_symbol)

    def save(self, path: str | Path) -> None:
        write_fairseq_dictionary(path, self)

    @classmethod
    def load(cls, path: str | Path) -> "FairseqDictionary":
        return read_fairseq_dictionary(path)


def remove_bpe(sentence: str, bpe_symbol: str | None) -> str:
    """fairseq's post-processing of BPE output (``--post-process`` / ``--remove-bpe``)."""
    if bpe_symbol in (None, "none"):
        return sentence
    if bpe_symbol == "sentencepiece":
        return sentence.replace(" ", "").replace("\u2581", " ").strip()
    if bpe_symbol in ("subword_nmt", "@@ "):
        return (sentence + " ").replace("@@ ", "").rstrip()
    if bpe_symbol == "@@":
        return (sentence + " ").replace("@@ ", "").replace("@@", "").rstrip()
    raise ValueError(f"unknown bpe_symbol {bpe_symbol!r}; expected None, '@@ ', 'subword_nmt' or 'sentencepiece'")


def read_fairseq_dictionary(path: str | Path) -> FairseqDictionary:
    """Read a fairseq ``dict.<lang>.txt``; errors name the file and line."""
    path = Path(path)
    if not path.exists():
        raise FairseqFormatError(f"{path}: dictionary file not found")
    d = FairseqDictionary()
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            line = line.rstrip("\n").rstrip("\r")
            if not line.strip():
                continue
            try:
                word, field_ = line.rstrip().rsplit(" ", 1)
                overwrite = False
                if field_ == "#fairseq:overwrite":
                    overwrite = True
                    word, field_ = word.rsplit(" ", 1)
                count = int(field_)
            except ValueError:
                raise FairseqFormatError(
                    f"{path}:{lineno}: expected '<symbol> <count> [#fairseq:overwrite]', got {line!r}"
                ) from None
            if word in d and not overwrite:
                raise FairseqFormatError(f"{path}:{lineno}: duplicate symbol {word!r} without #fairseq:overwrite")
            if word in d:
                d.counts[d.indices[word]] = count
            else:
                d.add_symbol(word, n=count)
    return d


def write_fairseq_dictionary(path: str | Path, dictionary: FairseqDictionary | list[str], counts=None) -> None:
    """Write a dictionary as fairseq does: non-special symbols, ``<symbol> <count>`` lines.

    ``dictionary`` is a :class:`FairseqDictionary` or a list of non-special symbols (then
    ``counts`` defaults to 1 each)."""
    if not isinstance(dictionary, FairseqDictionary):
        syms = list(dictionary)
        counts = list(counts) if counts is not None else [1] * len(syms)
        if len(counts) != len(syms):
            raise ValueError(f"{len(syms)} symbols but {len(counts)} counts")
        d = FairseqDictionary()
        for s, c in zip(syms, counts):
            if any(ch.isspace() for ch in s) or not s:
                raise ValueError(f"dictionary symbol {s!r} is empty or contains whitespace")
            if s in d:
                raise ValueError(f"duplicate dictionary symbol {s!r}")
            d.add_symbol(s, n=int(c))
        dictionary = d
    with open(path, "w", encoding="utf-8") as f:
        for s, c in zip(dictionary.symbols[dictionary.nspecial:], dictionary.counts[dictionary.nspecial:]):
            f.write(f"{s} {c}\n")


# ---------------------------------------------------------------- indexed dataset
@dataclass
class IndexedDatasetIndex:
    """Parsed ``.idx``: element dtype and code, per-sequence sizes and byte pointers."""

    path: str
    dtype_code: int
    dtype: np.dtype
    sizes: np.ndarray
    pointers: np.ndarray
    doc_idx: np.ndarray | None = None  # Megatron variant only
    layout: str = "fairseq"  # or "megatron"


def best_fitting_int_dtype(max_int_to_represent: int | None) -> np.dtype:
    """fairseq's choice of token dtype from the vocabulary size."""
    if max_int_to_represent is None:
        return np.dtype(np.uint32)
    if max_int_to_represent < 65500:
        return np.dtype(np.uint16)
    if max_int_to_represent < 4294967295:
        return np.dtype(np.uint32)
    return np.dtype(np.int64)


def read_index(idx_path: str | Path, bin_size: int | None = None) -> IndexedDatasetIndex:
    """Parse an MMapIndexedDataset ``.idx`` file (fairseq or Megatron layout)."""
    idx_path = Path(idx_path)
    if not idx_path.exists():
        raise FairseqFormatError(f"{idx_path}: index file not found")
    data = idx_path.read_bytes()
    if data[:8] == TNT_MAGIC[:8]:
        raise FairseqFormatError(f"{idx_path}: legacy TNTIDX (lazy/cached) index; re-run fairseq-preprocess "
                                 "with --dataset-impl mmap")
    if data[:9] != MMAP_MAGIC:
        raise FairseqFormatError(f"{idx_path}: bad magic {data[:9]!r}, expected {MMAP_MAGIC!r} (MMapIndexedDataset)")
    if len(data) < _HEADER_LEN:
        raise FairseqFormatError(f"{idx_path}: truncated header ({len(data)} bytes)")
    (version,) = struct.unpack("<Q", data[9:17])
    if version != 1:
        raise FairseqFormatError(f"{idx_path}: unsupported index version {version}, expected 1")
    code = data[17]
    if code not in CODE_TO_DTYPE:
        raise FairseqFormatError(f"{idx_path}: unknown dtype code {code}; known {sorted(CODE_TO_DTYPE)}")
    (n,) = struct.unpack("<Q", data[18:26])
    off = _HEADER_LEN
    doc_idx, layout = None, "fairseq"
    if len(data) == off + 12 * n:
        pass
    elif len(data) >= off + 8 + 12 * n and len(data) == off + 8 + 12 * n + 8 * struct.unpack("<Q", data[off:off + 8])[0]:
        (ndoc,) = struct.unpack("<Q", data[off:off + 8])
        off += 8
        layout = "megatron"
    else:
        raise FairseqFormatError(f"{idx_path}: size {len(data)} bytes does not fit {n} sequences "
                                 f"(expected {off + 12 * n} for fairseq's layout)")
    sizes = np.frombuffer(data, dtype="<i4", count=n, offset=off).astype(np.int64)
    pointers = np.frombuffer(data, dtype="<i8", count=n, offset=off + 4 * n).copy()
    if layout == "megatron":
        doc_idx = np.frombuffer(data, dtype="<i8", count=ndoc, offset=off + 12 * n).copy()
    dtype = np.dtype(CODE_TO_DTYPE[code])
    if code == 7 and bin_size is not None and n:
        # fairseq writes float64 under code 7, Megatron-core float32: take the one the .bin fits
        for cand in (np.dtype(np.float64), np.dtype(np.float32)):
            if int(pointers[-1]) + int(sizes[-1]) * cand.itemsize == bin_size:
                dtype = cand
                break
    return IndexedDatasetIndex(str(idx_path), code, dtype, sizes, pointers, doc_idx, layout)


def read_indexed_dataset(prefix: str | Path, as_int64: bool = True) -> list[np.ndarray]:
    """All sequences of ``<prefix>.bin/.idx`` (fairseq MMapIndexedDataset) as numpy arrays
    (int64 copies by default, like fairseq's ``.long()``; else the file's dtype)."""
    prefix = str(prefix)
    bin_path = Path(prefix + ".bin")
    if not bin_path.exists():
        raise FairseqFormatError(f"{bin_path}: data file not found")
    bin_size = bin_path.stat().st_size
    index = read_index(prefix + ".idx", bin_size=bin_size)
    item = index.dtype.itemsize
    if len(index.sizes):
        end = int(index.pointers[-1]) + int(index.sizes[-1]) * item
        if end > bin_size or (index.pointers % item).any():
            raise FairseqFormatError(f"{bin_path}: {bin_size} bytes but {prefix}.idx points up to byte {end} "
                                     f"(dtype {index.dtype})")
    flat = np.memmap(bin_path, dtype=index.dtype.newbyteorder("<"), mode="r") if bin_size else np.zeros(0, index.dtype)
    out = []
    for p, s in zip(index.pointers.tolist(), index.sizes.tolist()):
        a = flat[p // item: p // item + s]
        out.append(a.astype(np.int64) if as_int64 else a.copy())
    return out


def write_indexed_dataset(prefix: str | Path, sequences, dtype=None, vocab_size: int | None = None,
                          doc_idx=None) -> IndexedDatasetIndex:
    """Write ``<prefix>.bin/.idx`` in fairseq's MMapIndexedDataset layout.

    ``dtype`` defaults to fairseq's :func:`best_fitting_int_dtype` of ``vocab_size`` (or of the
    largest id + 1).  Passing ``doc_idx`` writes Megatron's variant instead.  Returns the index."""
    seqs = [np.asarray(s).reshape(-1) for s in sequences]
    if dtype is None:
        hi = vocab_size if vocab_size is not None else (max((int(s.max()) + 1 for s in seqs if s.size), default=1))
        dtype = best_fitting_int_dtype(hi)
    dtype = np.dtype(dtype)
    if dtype not in DTYPE_TO_CODE:
        raise ValueError(f"dtype {dtype} has no MMapIndexedDataset code")
    code = DTYPE_TO_CODE[dtype]
    sizes = np.asarray([s.size for s in seqs], dtype=np.int64)
    pointers = np.zeros(len(seqs), dtype=np.int64)
    if len(seqs) > 1:
        pointers[1:] = np.cumsum(sizes[:-1]) * dtype.itemsize
    with open(str(prefix) + ".bin", "wb") as f:
        for s in seqs:
            if np.issubdtype(dtype, np.integer) and s.size:
                info = np.iinfo(dtype)
                if s.min() < info.min or s.max() > info.max:
                    raise ValueError(f"{prefix}.bin: ids outside the range of {dtype}")
            f.write(s.astype(dtype.newbyteorder("<")).tobytes(order="C"))
    with open(str(prefix) + ".idx", "wb") as f:
        f.write(MMAP_MAGIC)
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", code))
        f.write(struct.pack("<Q", len(seqs)))
        if doc_idx is not None:
            f.write(struct.pack("<Q", len(doc_idx)))
        f.write(sizes.astype("<i4").tobytes(order="C"))
        f.write(pointers.astype("<i8").tobytes(order="C"))
        if doc_idx is not None:
            f.write(np.asarray(doc_idx, dtype="<i8").tobytes(order="C"))
    return read_index(str(prefix) + ".idx")


# ---------------------------------------------------------------- data-bin directory
@dataclass
class DataBin:
    """A fairseq-preprocess output directory for one language pair."""

    path: str
    src_lang: str
    tgt_lang: str
    src_dict: FairseqDictionary
    tgt_dict: FairseqDictionary
    splits: dict[str, tuple[list[np.ndarray], list[np.ndarray]]] = field(default_factory=dict)

    def text_pairs(self, split: str, bpe_symbol: str | None = "@@ ") -> list[tuple[str, str]]:
        """Detokenised-by-BPE text pairs of a split (e.g. references for BLEU)."""
        src, tgt = self.splits[split]
        return [(self.src_dict.string(s, bpe_symbol), self.tgt_dict.string(t, bpe_symbol)) for s, t in zip(src, tgt)]

    def encoded(self, split: str, max_len: int | None = None, on_long: str = "drop"):
        """The split as a :class:`repro.data.batching.EncodedCorpus` in fairseq ids (bos 0, pad 1,
        eos 2), ready for ``token_batches``.  Source arrays keep their trailing eos; the target's
        trailing eos is removed (batching adds it back to ``tgt_out``).  A joined dictionary is
        required for a shared embedding, but not checked here."""
        from repro.data.batching import EncodedCorpus  # lazy: batching imports torch; the reader needs numpy only

        if on_long not in ("drop", "truncate", "error"):
            raise ValueError(f"on_long must be drop, truncate or error, got {on_long!r}")
        src, tgt = self.splits[split]
        eos = self.tgt_dict.eos_index
        out_s, out_t, idx, n_trunc = [], [], [], 0
        for i, (s, t) in enumerate(zip(src, tgt)):
            s = s if len(s) and s[-1] == self.src_dict.eos_index else np.append(s, self.src_dict.eos_index)
            t = t[:-1] if len(t) and t[-1] == eos else t
            if max_len is not None and (len(s) > max_len or len(t) + 1 > max_len):
                if on_long == "drop":
                    continue
                if on_long == "error":
                    raise ValueError(f"{self.path} {split} pair {i} is longer than max_len={max_len}")
                s = np.append(s[: max_len - 1], self.src_dict.eos_index)
                t = t[: max_len - 1]
                n_trunc += 1
            out_s.append(np.asarray(s, dtype=np.int64))
            out_t.append(np.asarray(t, dtype=np.int64))
            idx.append(i)
        return EncodedCorpus(out_s, out_t, np.asarray(idx, dtype=np.int64), self.tgt_dict.pad_index,
                             self.tgt_dict.bos_index, eos, len(src), n_trunc)


def load_data_bin(data_dir: str | Path, direction: str = "de-en", splits=("train", "valid", "test")) -> DataBin:
    """Read ``dict.{src,tgt}.txt`` and ``{split}.{src}-{tgt}.{lang}.bin/.idx`` from a data-bin.

    Files are named by the pair as preprocessed (``train.de-en.de``); the reverse direction
    (``en-de``) reads the same files.  A missing split raises naming the missing file."""
    d = Path(data_dir)
    if not d.is_dir():
        raise FairseqFormatError(f"{d}: data-bin directory not found")
    src, tgt = direction.split("-")
    db = DataBin(str(d), src, tgt, read_fairseq_dictionary(d / f"dict.{src}.txt"),
                 read_fairseq_dictionary(d / f"dict.{tgt}.txt"))
    for split in splits:
        pair = next((p for p in (f"{src}-{tgt}", f"{tgt}-{src}") if (d / f"{split}.{p}.{src}.idx").exists()), None)
        if pair is None:
            raise FairseqFormatError(f"{d / f'{split}.{src}-{tgt}.{src}.idx'}: split {split!r} not found in data-bin")
        s = read_indexed_dataset(d / f"{split}.{pair}.{src}")
        t = read_indexed_dataset(d / f"{split}.{pair}.{tgt}")
        if len(s) != len(t):
            raise FairseqFormatError(f"{d}/{split}.{pair}: {len(s)} source but {len(t)} target sequences")
        db.splits[split] = (s, t)
    return db
