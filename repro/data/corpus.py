"""Loading translation corpora for the BLEU claims: the committed gettext corpus
(see :mod:`repro.data.gettext_corpus`), directories of raw parallel text, single file pairs.

Head pruning (Michel et al. 2019, Table/Fig. 1-4), warm-up stability (Xiong et al. 2020) and
layer dropping (Fan et al. 2020) evaluate BLEU on held-out pairs; this module gives them the
pairs in the configured direction plus the ``placeholder_free`` masks, so BLEU can also be
reported on the subset where copying the source does not pay.
"""
from __future__ import annotations

import gzip
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

from repro.errors import CorpusError
from repro.io import file_sha256

SPLITS = ("train", "valid", "test")
REPO_ROOT = Path(__file__).resolve().parents[2]
DATA_ROOT = REPO_ROOT / "data"


@dataclass
class Corpus:
    """Sentence pairs per split in the direction ``src_lang -> tgt_lang``.

    ``clean_masks[split][i]`` is True when pair i has no placeholders, options, paths or URLs
    (:func:`repro.data.gettext_corpus.is_placeholder_free`); all True for corpora without that
    column.  ``meta[split][i]`` holds the remaining columns (e.g. package, catalog).
    """

    name: str
    src_lang: str
    tgt_lang: str
    train: list[tuple[str, str]] = field(default_factory=list)
    valid: list[tuple[str, str]] = field(default_factory=list)
    test: list[tuple[str, str]] = field(default_factory=list)
    clean_masks: dict[str, list[bool]] = field(default_factory=dict)
    meta: dict[str, list[dict]] = field(default_factory=dict)

    @property
    def direction(self) -> str:
        return f"{self.src_lang}-{self.tgt_lang}"

    @property
    def test_clean_mask(self) -> list[bool]:
        return self.clean_masks["test"]

    @property
    def valid_clean_mask(self) -> list[bool]:
        return self.clean_masks["valid"]

    def split(self, name: str, clean_only: bool = False) -> list[tuple[str, str]]:
        if name not in SPLITS:
            raise KeyError(f"unknown split {name!r}; expected one of {SPLITS}")
        pairs = getattr(self, name)
        return [p for p, c in zip(pairs, self.clean_masks[name]) if c] if clean_only else list(pairs)

    __getitem__ = split

    def as_dict(self) -> dict[str, list[tuple[str, str]]]:
        return {s: getattr(self, s) for s in SPLITS}

    def sources(self, split: str, clean_only: bool = False) -> list[str]:
        return [s for s, _ in self.split(split, clean_only)]

    def references(self, split: str, clean_only: bool = False) -> list[str]:
        return [t for _, t in self.split(split, clean_only)]

    def copy_hypotheses(self, split: str = "test", clean_only: bool = False) -> list[str]:
        """The copy baseline: each source sentence used as its own translation (score it with
        ``sacrebleu.corpus_bleu(c.copy_hypotheses('test'), [c.references('test')])``)."""
        return self.sources(split, clean_only)

    def summary(self) -> dict:
        return {
            s: {"pairs": len(getattr(self, s)), "placeholder_free": sum(self.clean_masks[s])} for s in SPLITS
        }


def parse_direction(direction: str) -> tuple[str, str]:
    parts = direction.split("-")
    if len(parts) != 2 or not all(parts) or parts[0] == parts[1]:
        raise ValueError(f"direction must look like 'de-en', got {direction!r}")
    return parts[0], parts[1]


def resolve_corpus_dir(path_or_name: str | Path, data_root: str | Path | None = None) -> Path:
    """A directory path as given, else ``<data_root>/<name>`` (default: the repo's ``data/``), else a path relative
    to the repository root (so configs work when Snakemake runs in another ``--directory``)."""
    p = Path(path_or_name)
    if p.is_dir():
        return p
    cand = Path(data_root or DATA_ROOT) / str(path_or_name)
    if cand.is_dir():
        return cand
    in_repo = Path(DATA_ROOT).parent / p  # a repo-relative path ("data/gettext_de_en") from another working dir
    if not p.is_absolute() and in_repo.is_dir():
        return in_repo
    raise CorpusError(f"corpus {str(path_or_name)!r} not found (neither a directory nor {cand})")


def _open_text(path: Path):
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")


def read_tsv_split(path: Path) -> tuple[list[str], list[list[str]]]:
    """Header and rows of a corpus TSV (optionally .gz); rows must have the header's width."""
    if not path.exists():
        raise CorpusError(f"{path}: corpus split file not found")
    with _open_text(path) as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise CorpusError(f"{path}: empty file (expected a header row)")
    header = lines[0].split("\t")
    rows = []
    for i, line in enumerate(lines[1:], start=2):
        row = line.split("\t")
        if len(row) != len(header):
            raise CorpusError(f"{path}:{i}: {len(row)} columns, header has {len(header)}")
        rows.append(row)
    return header, rows


def load_corpus(
    path_or_name: str | Path, direction: str = "de-en", verify: bool = True, data_root=None
) -> Corpus:
    """Load a corpus directory in ``direction`` (e.g. "de-en" or "en-de").

    Two layouts are accepted:

    * TSV: ``{train,valid,test}.tsv[.gz]`` with a header naming language columns (and
      optionally ``placeholder_free``, package, ...), plus ``manifest.json``; with ``verify``
      the pair counts and SHA-256 of each file are checked against the manifest.
    * raw parallel text: ``{split}.{lang}`` files, one sentence per line (as fed to
      fairseq-preprocess); missing splits are empty.
    """
    d = resolve_corpus_dir(path_or_name, data_root)
    src, tgt = parse_direction(direction)
    corpus = Corpus(name=d.name, src_lang=src, tgt_lang=tgt)
    tsvs = {s: next((d / f"{s}{ext}" for ext in (".tsv.gz", ".tsv") if (d / f"{s}{ext}").exists()), None)
            for s in SPLITS}
    if any(tsvs.values()):
        manifest = None
        if (d / "manifest.json").exists():
            manifest = json.loads((d / "manifest.json").read_text())
        elif verify:
            raise CorpusError(f"{d / 'manifest.json'}: manifest not found (pass verify=False to skip checks)")
        for s in SPLITS:
            if tsvs[s] is None:
                raise CorpusError(f"{d}/{s}.tsv.gz: split file not found")
            header, rows = read_tsv_split(tsvs[s])
            for lang in (src, tgt):
                if lang not in header:
                    raise CorpusError(f"{tsvs[s]}: no column for language {lang!r} (columns: {header})")
            i_s, i_t = header.index(src), header.index(tgt)
            i_c = header.index("placeholder_free") if "placeholder_free" in header else None
            setattr(corpus, s, [(r[i_s], r[i_t]) for r in rows])
            corpus.clean_masks[s] = [r[i_c] == "1" for r in rows] if i_c is not None else [True] * len(rows)
            extra = [i for i, h in enumerate(header) if i not in (i_s, i_t, i_c) and h not in (src, tgt)]
            corpus.meta[s] = [{header[i]: r[i] for i in extra} for r in rows]
            if verify and manifest is not None:
                want = manifest["splits"][s]
                if want["pairs"] != len(rows):
                    raise CorpusError(f"{tsvs[s]}: {len(rows)} pairs, manifest.json says {want['pairs']}")
                got = file_sha256(tsvs[s])
                if want.get("file") == tsvs[s].name and want["sha256"] != got:
                    raise CorpusError(f"{tsvs[s]}: sha256 {got} does not match manifest.json {want['sha256']}")
        return corpus
    found = False
    for s in SPLITS:
        fs, ft = d / f"{s}.{src}", d / f"{s}.{tgt}"
        if fs.exists() or ft.exists():
            found = True
            pairs = load_parallel_text(fs, ft)
            setattr(corpus, s, pairs)
        corpus.clean_masks[s] = [True] * len(getattr(corpus, s))
        corpus.meta[s] = [{} for _ in getattr(corpus, s)]
    if not found:
        raise CorpusError(f"{d}: no {{train,valid,test}}.tsv.gz nor {{split}}.{src}/{{split}}.{tgt} files")
    return corpus


def load_parallel_text(src_file: str | Path, tgt_file: str | Path, strip: bool = True) -> list[tuple[str, str]]:
    """Pairs from two line-aligned text files (optionally .gz); the line counts must match."""
    src_file, tgt_file = Path(src_file), Path(tgt_file)
    sides = []
    for f in (src_file, tgt_file):
        if not f.exists():
            raise CorpusError(f"{f}: parallel text file not found")
        with _open_text(f) as fh:
            lines = fh.read().split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        sides.append([ln.rstrip("\r").strip() if strip else ln.rstrip("\r") for ln in lines])
    if len(sides[0]) != len(sides[1]):
        raise CorpusError(f"{src_file} has {len(sides[0])} lines but {tgt_file} has {len(sides[1])}")
    return list(zip(sides[0], sides[1]))
