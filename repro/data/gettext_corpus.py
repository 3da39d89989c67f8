"""Default translation corpus of the BLEU claims: sentence pairs from installed gettext catalogs.

The BLEU-based claims (head pruning, Michel et al. 2019 / Voita et al. 2019; warm-up stability,
Xiong et al. 2020; layer dropping, Fan et al. 2020) need an encoder-decoder trained on real text.
At CPU scale we use the German (or any ``--lang``) translations of the message catalogs shipped
by Debian packages, the construction of OPUS's GNOME, KDE and Ubuntu corpora (Tiedemann, LREC 2012).
msgid is the English original, msgstr its translation.

Pipeline: :func:`find_catalogs` -> :func:`extract_pairs` (parse, normalise whitespace, filter,
dedupe) -> :func:`split_pairs` (template groups kept whole, hash-assigned) -> :func:`write_corpus`
(deterministic ``{train,valid,test}.tsv.gz``, ``manifest.json``, ``PROVENANCE.md``).

Two known weaknesses of this corpus are handled here rather than left to the reader:

* Copying the source already scores well (placeholders such as ``%s``, option names such as
  ``--help``, paths).  Every pair carries a ``placeholder_free`` flag (no printf/brace/shell
  placeholders, no command-line options, no paths/URLs/markup on either side) so BLEU can be
  reported on the clean subset too.
* Templated near-duplicates ("Copying %d files", "Copying 1 file") would leak across splits.
  Pairs are joined into groups when they share a normalised template key of the source or of
  the target (lowercase, placeholders and numbers -> one token, punctuation removed, whitespace
  collapsed; this subsumes sharing the same normalised source or target), and whole groups are
  assigned to train/valid/test by a salted SHA-256 of the group's key.

Run: ``python -m repro.data.gettext_corpus --out data/gettext_de_en``.
"""
from __future__ import annotations

import argparse
import dataclasses
import glob
import gzip
import hashlib
import io
import json
import re
import subprocess
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from repro.data.mo import read_mo

SPLITS = ("train", "valid", "test")
SOURCE_LANG = "en"  # msgids of these catalogs are English

# Where catalogs live on Debian/Ubuntu; ``{lang}`` is substituted.
DEFAULT_CATALOG_GLOBS = (
    "/usr/share/locale/{lang}/LC_MESSAGES/*.mo",
    "/usr/share/locale/{lang}_*/LC_MESSAGES/*.mo",
    "/usr/share/locale-langpack/{lang}/LC_MESSAGES/*.mo",
    "/usr/share/locale-langpack/{lang}_*/LC_MESSAGES/*.mo",
    "/usr/share/vim/vim*/lang/{lang}/LC_MESSAGES/*.mo",
)


@dataclass(frozen=True)
class FilterConfig:
    """Pair filters; every field can be overridden from config / the command line."""

    min_chars: int = 2  # per side, after whitespace normalisation
    max_chars: int = 200
    min_words: int = 1
    max_words: int = 40
    require_letter: bool = True  # each side contains at least one letter
    plural_forms: str = "both"  # "both": also pair msgid_plural with msgstr[1] when the
    # catalog's plural rule is English-like (nplurals=2; plural=(n != 1)); "singular": never


@dataclass(frozen=True)
class SplitConfig:
    """Fractions of *groups' hash space* for valid and test; the rest is train."""

    valid_frac: float = 0.03
    test_frac: float = 0.03
    salt: str = "gettext-split-v1"


@dataclass(frozen=True)
class Pair:
    """One sentence pair: English ``source`` (msgid), translated ``target`` (msgstr)."""

    source: str
    target: str
    package: str  # Debian binary package owning the catalog ("unknown" without dpkg)
    catalog: str  # locale/domain, e.g. "de/coreutils" for .../de/LC_MESSAGES/coreutils.mo

    @property
    def placeholder_free(self) -> bool:
        return is_placeholder_free(self.source) and is_placeholder_free(self.target)


# ---------------------------------------------------------------- text normalisation / flags
_WS = re.compile(r"\s+")
_PRINTF = (
    r"%(?:\d+\$)?[-+#0']*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|h|ll|l|L|q|j|z|Z|t|I64|I32)?"
    r"[diouxXeEfFgGaAcCsSpnm]"
)
_PLACEHOLDER = re.compile(
    "|".join(
        [
            _PRINTF,
            r"%\([A-Za-z_][\w]*\)[a-zA-Z]",  # python %(name)s
            r"%<[A-Za-z0-9_]+>",  # gettext system-dependent <PRIu64>
            r"\{[A-Za-z_0-9:.!]*\}",  # {name}, {0}, {}
            r"\$\{?[A-Za-z_][\w]*\}?",  # $VAR, ${VAR}
            r"\$\d+",
            r"@[A-Za-z_]+@",  # @PACKAGE@
        ]
    )
)
_NOT_CLEAN = re.compile(
    "|".join(
        [
            r"(?<![\w\-])--?[A-Za-z][\w\-]*",  # -v, --help
            r"[a-z][a-z0-9+.\-]*://",  # URLs
            r"\bwww\.",
            r"(?:^|[\s\"'(\[=<`«„‚»])(?:~|\.{1,2})?/[\w.\-]",  # /usr/bin, ~/x, ./configure
            r"\b[\w\-]+\.(?:conf|cfg|ini|txt|log|deb|so|py|sh|mo|po|gz|xz|xml|json|list|d)\b",
            r"<[A-Za-z/!][^<>]*>",  # markup, <FILE>
            r"[\w.+\-]+@[\w\-]+\.[\w.]+",  # e-mail
        ]
    )
)
_LETTER = re.compile(r"[^\W\d_]")


def normalize_whitespace(text: str) -> str:
    """Strip and collapse runs of whitespace (tabs, alignment spaces) to one space."""
    return _WS.sub(" ", text).strip()


def is_placeholder_free(text: str) -> bool:
    """True when ``text`` has no placeholders, options, paths, URLs, e-mails or markup."""
    return not (_PLACEHOLDER.search(text) or _NOT_CLEAN.search(text))


def template_key(text: str) -> str:
    """Normalised template of a message: placeholders and digit runs -> ``ph`` (so "Copying %d
    files", "Copying 3 files" and "copying 12 files." share a key), lowercase, punctuation
    (incl. ``_``/``&`` mnemonics) removed, whitespace collapsed."""
    t = _PLACEHOLDER.sub(" ph ", text).lower()
    t = re.sub(r"\d+", " ph ", t)
    t = re.sub(r"[\W_]+", " ", t)
    return t.strip()


# ---------------------------------------------------------------- extraction
def find_catalogs(lang: str = "de", patterns=DEFAULT_CATALOG_GLOBS) -> list[Path]:
    """All .mo files for ``lang`` matching ``patterns`` (sorted, deduplicated by real path)."""
    seen, out = set(), []
    for pat in patterns:
        for p in sorted(glob.glob(pat.format(lang=lang))):
            rp = Path(p).resolve()
            if rp not in seen:
                seen.add(rp)
                out.append(Path(p))
    return out


def catalog_label(path: str | Path) -> str:
    """``<locale>/<domain>`` for a catalog under ``<locale>/LC_MESSAGES/``, else the file stem."""
    path = Path(path)
    if path.parent.name == "LC_MESSAGES":
        return f"{path.parent.parent.name}/{path.stem}"
    return path.stem


def debian_package_of(path: str | Path) -> str:
    """Debian package owning ``path`` via ``dpkg -S``; "unknown" without dpkg or owner."""
    try:
        r = subprocess.run(["dpkg", "-S", str(path)], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if r.returncode != 0 or ":" not in r.stdout:
        return "unknown"
    return r.stdout.splitlines()[0].split(":", 1)[0].split(",")[0].strip()


def _english_like_plurals(plural_forms: str | None) -> bool:
    if not plural_forms:
        return False
    pf = plural_forms.replace(" ", "").rstrip(";")
    return pf in ("nplurals=2;plural=(n!=1)", "nplurals=2;plural=n!=1")


def raw_pairs_from_catalog(path: str | Path, fcfg: FilterConfig = FilterConfig()):
    """Yield (source, target) for every translated message of one catalog (header skipped,
    context stripped, plurals per ``fcfg.plural_forms``), before any filtering."""
    cat = read_mo(path)
    both = fcfg.plural_forms == "both" and _english_like_plurals(cat.plural_forms)
    if fcfg.plural_forms not in ("both", "singular"):
        raise ValueError(f"plural_forms must be 'both' or 'singular', got {fcfg.plural_forms!r}")
    for e in cat.entries:
        yield e.msgid, e.msgstrs[0]
        if e.msgid_plural is not None and both and len(e.msgstrs) > 1:
            yield e.msgid_plural, e.msgstrs[1]


def filter_reason(src: str, tgt: str, fcfg: FilterConfig) -> str | None:
    """Why a normalised pair is dropped, or None to keep it.  Reasons are stable strings."""
    if not src or not tgt:
        return "empty"
    if "\n" in src or "\n" in tgt:
        return "multi_line"
    for side in (src, tgt):
        if not fcfg.min_chars <= len(side) <= fcfg.max_chars:
            return "char_length"
        if not fcfg.min_words <= len(side.split()) <= fcfg.max_words:
            return "word_length"
        if fcfg.require_letter and not _LETTER.search(side):
            return "no_letter"
    if src.casefold() == tgt.casefold():
        return "same_as_source"
    return None


def extract_pairs(
    mo_paths, fcfg: FilterConfig = FilterConfig(), stats: dict | None = None, packages=None
) -> list[Pair]:
    """Parse, normalise, filter and dedupe the pairs of the given catalogs, in input order.

    Multi-line messages are judged before whitespace normalisation (an internal newline drops
    the pair; a trailing one is stripped).  ``stats`` (if given) receives counters of raw
    entries and drop reasons.  ``packages`` maps a path to its Debian package (default: dpkg).
    """
    stats = stats if stats is not None else {}
    drops: Counter = stats.setdefault("dropped", Counter())
    seen: set[tuple[str, str]] = set()
    out: list[Pair] = []
    for path in mo_paths:
        path = Path(path)
        pkg = packages[str(path)] if packages is not None else debian_package_of(path)
        for src, tgt in raw_pairs_from_catalog(path, fcfg):
            stats["raw"] = stats.get("raw", 0) + 1
            src, tgt = src.strip(), tgt.strip()
            if "\n" in src or "\n" in tgt:
                drops["multi_line"] += 1
                continue
            src, tgt = normalize_whitespace(src), normalize_whitespace(tgt)
            why = filter_reason(src, tgt, fcfg)
            if why is None and (src, tgt) in seen:
                why = "duplicate"
            if why is not None:
                drops[why] += 1
                continue
            seen.add((src, tgt))
            out.append(Pair(src, tgt, pkg, catalog_label(path)))
    stats["kept"] = len(out)
    return out


# ---------------------------------------------------------------- grouping and split
def group_pairs(pairs: list[Pair]) -> list[str]:
    """Group key per pair: pairs sharing a source or target template key are one group
    (connected components); the key is the smallest member key, so it is order-independent."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(a: str, b: str) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            lo, hi = min(ra, rb), max(ra, rb)
            parent[hi] = lo  # smallest key becomes the root

    keys = [("s:" + template_key(p.source), "t:" + template_key(p.target)) for p in pairs]
    for ks, kt in keys:
        union(ks, kt)
    return [find(ks) for ks, _ in keys]


def split_of_group(group_key: str, scfg: SplitConfig = SplitConfig()) -> str:
    """Deterministic split for a group: salted SHA-256 of its key mapped to [0, 1)."""
    h = hashlib.sha256((scfg.salt + "\x00" + group_key).encode("utf-8")).digest()
    u = int.from_bytes(h[:8], "big") / 2**64
    if u < scfg.test_frac:
        return "test"
    if u < scfg.test_frac + scfg.valid_frac:
        return "valid"
    return "train"


def split_pairs(pairs: list[Pair], scfg: SplitConfig = SplitConfig()) -> dict[str, list[Pair]]:
    """Assign whole template groups to train/valid/test; pair order within a split is kept."""
    if not (0 <= scfg.valid_frac and 0 <= scfg.test_frac and scfg.valid_frac + scfg.test_frac < 1):
        raise ValueError(f"bad split fractions valid_frac={scfg.valid_frac} test_frac={scfg.test_frac}")
    out: dict[str, list[Pair]] = {s: [] for s in SPLITS}
    for p, g in zip(pairs, group_pairs(pairs)):
        out[split_of_group(g, scfg)].append(p)
    return out


# ---------------------------------------------------------------- writing
def deterministic_gzip(data: bytes) -> bytes:
    """gzip with mtime=0 and no file name, so equal input gives equal bytes (same zlib)."""
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as f:
        f.write(data)
    return buf.getvalue()


def tsv_columns(lang: str) -> list[str]:
    return [lang, SOURCE_LANG, "package", "catalog", "placeholder_free"]


def pairs_to_tsv(pairs: list[Pair], lang: str) -> bytes:
    lines = ["\t".join(tsv_columns(lang))]
    for p in pairs:
        for s in (p.source, p.target):
            if "\t" in s or "\n" in s:
                raise ValueError(f"pair text contains a tab/newline: {s!r}")
        lines.append("\t".join([p.target, p.source, p.package, p.catalog, str(int(p.placeholder_free))]))
    return ("\n".join(lines) + "\n").encode("utf-8")


def _dpkg_version(pkg: str) -> str:
    try:
        r = subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], capture_output=True, text=True, timeout=30)
        return r.stdout.strip() if r.returncode == 0 else "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def _licences(pkg: str) -> str:
    """Short licence names from a DEP-5 /usr/share/doc/<pkg>/copyright (best effort)."""
    p = Path("/usr/share/doc") / pkg / "copyright"
    if not p.exists():
        return "see upstream (no copyright file found)"
    names = []
    for line in p.read_text(errors="replace").splitlines():
        if line.startswith("License:"):
            n = line.split(":", 1)[1].strip()
            if n and n not in names:
                names.append(n)
    return ", ".join(names[:6]) + (" ..." if len(names) > 6 else "") if names else f"see {p}"


def write_corpus(out_dir, splits, lang, catalogs, packages, fcfg, scfg, stats) -> dict:
    """Write the split files, ``manifest.json`` and ``PROVENANCE.md``; returns the manifest."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {}
    for split in SPLITS:
        raw = pairs_to_tsv(splits[split], lang)
        gz = deterministic_gzip(raw)
        name = f"{split}.tsv.gz"
        (out_dir / name).write_bytes(gz)
        files[split] = {
            "file": name,
            "pairs": len(splits[split]),
            "placeholder_free": sum(p.placeholder_free for p in splits[split]),
            "sha256": hashlib.sha256(gz).hexdigest(),
            "sha256_uncompressed": hashlib.sha256(raw).hexdigest(),
        }
    per_pkg = defaultdict(lambda: {s: 0 for s in SPLITS})
    per_cat = defaultdict(lambda: {s: 0 for s in SPLITS})
    for split in SPLITS:
        for p in splits[split]:
            per_pkg[p.package][split] += 1
            per_cat[p.catalog][split] += 1
    pkg_names = sorted({packages[str(c)] for c in catalogs})
    versions = {p: _dpkg_version(p) for p in pkg_names}
    manifest = {
        "name": out_dir.name,
        "format": "tsv.gz, header row, columns: " + ", ".join(tsv_columns(lang)),
        "languages": {"source_of_catalogs": SOURCE_LANG, "translation": lang},
        "columns": tsv_columns(lang),
        "splits": files,
        "total_pairs": sum(f["pairs"] for f in files.values()),
        "filters": dataclasses.asdict(fcfg),
        "split_config": dataclasses.asdict(scfg),
        "extraction_stats": {"raw_messages": stats.get("raw", 0), "dropped": dict(sorted(stats["dropped"].items()))},
        "catalogs": [
            {"path": str(c), "package": packages[str(c)], "version": versions[packages[str(c)]]} for c in catalogs
        ],
        "pairs_per_catalog": {k: per_cat[k] for k in sorted(per_cat)},
        "pairs_per_package": {k: per_pkg[k] for k in sorted(per_pkg)},
    }
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
    (out_dir / "PROVENANCE.md").write_text(_provenance_md(manifest, versions, lang))
    return manifest


def _provenance_md(m: dict, versions: dict, lang: str) -> str:
    s = m["splits"]
    lines = [
        f"# {m['name']}: {lang}-{SOURCE_LANG} sentence pairs from Debian gettext catalogs",
        "",
        "Generated by `python -m repro.data.gettext_corpus` (repro/data/gettext_corpus.py); do not edit by hand.",
        "Each pair is a message of an installed `.mo` catalog: the English msgid and its "
        f"`{lang}` msgstr. Same construction as OPUS's GNOME/KDE/Ubuntu corpora.",
        "",
        "## Licence",
        "The message catalogs are part of their Debian packages and remain under those packages' "
        "licences (mostly GPL/LGPL; see `/usr/share/doc/<package>/copyright` on a Debian system "
        "and the table below). This extract is redistributed for research use under the same terms.",
        "",
        "## Counts",
        f"- raw messages read: {m['extraction_stats']['raw_messages']}",
        f"- kept pairs: {m['total_pairs']}",
        "- dropped: " + ", ".join(f"{k} {v}" for k, v in m["extraction_stats"]["dropped"].items()),
        "",
        "| split | pairs | placeholder_free | sha256 (gz) |",
        "|---|---:|---:|---|",
    ]
    for k in SPLITS:
        lines.append(f"| {k} | {s[k]['pairs']} | {s[k]['placeholder_free']} | `{s[k]['sha256'][:16]}…` |")
    lines += [
        "",
        "## Filters",
        "Whitespace stripped and collapsed; pairs with an internal newline dropped (single-line only);",
        "header entry (empty msgid) skipped; msgctxt stripped; fuzzy entries are never in a .mo "
        "(msgfmt drops them), untranslated (empty msgstr) ones are dropped;",
        "exact duplicates dropped (first catalog in sorted path order wins); pairs whose translation "
        "equals the source (case-insensitively) dropped. Bounds: "
        + ", ".join(f"`{k}={v}`" for k, v in m["filters"].items())
        + ".",
        "",
        "## Split",
        "Pairs sharing a normalised template key of the English source or of the translation "
        "(lowercase, placeholders and digit runs->`ph`, punctuation removed, whitespace collapsed) form one "
        "group (connected components); each group goes whole to one split by a salted SHA-256 of its key: "
        + ", ".join(f"`{k}={v}`" for k, v in m["split_config"].items())
        + ". `placeholder_free=1` marks pairs with no printf/brace/shell placeholders, command-line "
        "options, paths, URLs, e-mail addresses or markup on either side (report BLEU on that subset too: "
        "copying the source scores well on the rest).",
        "",
        "## Catalogs and packages",
        "| catalog | Debian package | version | licence (copyright file) | train | valid | test |",
        "|---|---|---|---|---:|---:|---:|",
    ]
    lic = {p: _licences(p) for p in versions}
    for c in m["catalogs"]:
        cnt = m["pairs_per_catalog"].get(catalog_label(c["path"]), {k: 0 for k in SPLITS})
        lines.append(
            f"| `{c['path']}` | {c['package']} | {c['version']} | {lic[c['package']]} | "
            f"{cnt['train']} | {cnt['valid']} | {cnt['test']} |"
        )
    lines += ["", "## Pairs per Debian package", "| package | version | train | valid | test |", "|---|---|---:|---:|---:|"]
    for pkg, cnt in m["pairs_per_package"].items():
        lines.append(f"| {pkg} | {versions.get(pkg, 'unknown')} | {cnt['train']} | {cnt['valid']} | {cnt['test']} |")
    lines.append("")
    return "\n".join(lines)


def build_corpus(
    out_dir,
    lang: str = "de",
    catalogs=None,
    fcfg: FilterConfig = FilterConfig(),
    scfg: SplitConfig = SplitConfig(),
) -> dict:
    """Find catalogs for ``lang`` (unless given), extract, split and write; returns the manifest."""
    catalogs = [Path(c) for c in (catalogs if catalogs is not None else find_catalogs(lang))]
    if not catalogs:
        raise FileNotFoundError(f"no .mo catalogs found for language {lang!r} (searched {DEFAULT_CATALOG_GLOBS})")
    packages = {str(c): debian_package_of(c) for c in catalogs}
    stats: dict = {}
    pairs = extract_pairs(catalogs, fcfg, stats, packages)
    splits = split_pairs(pairs, scfg)
    return write_corpus(out_dir, splits, lang, catalogs, packages, fcfg, scfg, stats)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output directory, e.g. data/gettext_de_en")
    ap.add_argument("--lang", default="de", help="translation language of the catalogs (default de)")
    ap.add_argument("--catalog", action="append", help="explicit .mo file (repeatable); default: search")
    for f in dataclasses.fields(FilterConfig) + dataclasses.fields(SplitConfig):
        typ = {"int": int, "float": float, "bool": lambda s: s.lower() in ("1", "true", "yes")}.get(
            f.type if isinstance(f.type, str) else f.type.__name__, str
        )
        ap.add_argument("--" + f.name.replace("_", "-"), type=typ, default=f.default, help=f"default {f.default}")
    a = ap.parse_args(argv)
    fcfg = FilterConfig(**{f.name: getattr(a, f.name) for f in dataclasses.fields(FilterConfig)})
    scfg = SplitConfig(**{f.name: getattr(a, f.name) for f in dataclasses.fields(SplitConfig)})
    m = build_corpus(a.out, a.lang, a.catalog, fcfg, scfg)
    s = m["splits"]
    print(
        f"{m['total_pairs']} pairs from {len(m['catalogs'])} catalogs -> {a.out}: "
        + ", ".join(f"{k} {s[k]['pairs']} ({s[k]['placeholder_free']} placeholder-free)" for k in SPLITS),
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
