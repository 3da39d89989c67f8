"""Reader and writer for GNU gettext binary message catalogs (``.mo`` files).

Used to build the default German-English corpus of the BLEU claims from the translated message
catalogs of Debian packages, the construction behind OPUS's GNOME/KDE/Ubuntu corpora
(Tiedemann, "Parallel Data, Tools and Interfaces in OPUS", LREC 2012).

Format (GNU gettext manual, "The Format of GNU MO Files"): a 28-byte header of uint32
fields -- magic 0x950412de, revision, number of strings N, offset of the original-string
table, offset of the translation table, hash-table size and offset -- then two tables of
N (length, offset) uint32 pairs.  Strings are NUL-terminated; the length excludes the NUL.
A plural entry is ``singular\\0plural`` -> ``form0\\0form1...``; a context is
``context\\x04msgid``.  The entry with an empty msgid is the header (charset, plural rules).

The standard library's ``gettext.GNUTranslations`` fails on catalogs whose header charset is
not UTF-8 and hides contexts, so this module parses the binary format itself.
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

from repro.errors import MoFormatError

MO_MAGIC_LE = 0x950412DE
MO_MAGIC_BE = 0xDE120495


@dataclass(frozen=True)
class MoEntry:
    """One catalog message: msgid (+ optional plural id and context) and its translations."""

    msgid: str
    msgstrs: tuple[str, ...]
    msgid_plural: str | None = None
    context: str | None = None


@dataclass
class MoCatalog:
    """A parsed catalog: its header fields and its (non-header) entries, in file order."""

    path: str
    charset: str
    header: dict[str, str]
    entries: list[MoEntry] = field(default_factory=list)

    @property
    def plural_forms(self) -> str | None:
        return self.header.get("plural-forms")


def _parse_header(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.split("\n"):
        if ":" in line:
            key, value = line.split(":", 1)
            out[key.strip().lower()] = value.strip()
    return out


def _charset(header: dict[str, str]) -> str:
    m = re.search(r"charset=([^\s;]+)", header.get("content-type", ""))
    cs = m.group(1) if m else "utf-8"
    return "utf-8" if cs.upper() in ("CHARSET", "") else cs


def read_mo(path: str | Path) -> MoCatalog:
    """Parse a .mo file; raises :class:`MoFormatError` naming the file on bad input."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise MoFormatError(f"{path}: .mo file not found") from None
    if len(data) < 28:
        raise MoFormatError(f"{path}: too short to be a .mo file ({len(data)} bytes)")
    (magic,) = struct.unpack("<I", data[:4])
    if magic == MO_MAGIC_LE:
        end = "<"
    elif magic == MO_MAGIC_BE:
        end = ">"
    else:
        raise MoFormatError(f"{path}: bad .mo magic 0x{magic:08x} (expected 0x{MO_MAGIC_LE:08x})")
    revision, n, orig_off, trans_off = struct.unpack(end + "4I", data[4:20])
    if revision >> 16 not in (0, 1):
        raise MoFormatError(f"{path}: unsupported .mo major revision {revision >> 16}")

    def table(off: int) -> list[bytes]:
        if off + 8 * n > len(data):
            raise MoFormatError(f"{path}: string table at {off} runs past end of file")
        out = []
        for i in range(n):
            length, soff = struct.unpack(end + "2I", data[off + 8 * i : off + 8 * i + 8])
            if soff + length > len(data):
                raise MoFormatError(f"{path}: string {i} runs past end of file")
            out.append(data[soff : soff + length])
        return out

    originals, translations = table(orig_off), table(trans_off)
    header: dict[str, str] = {}
    for o, t in zip(originals, translations):
        if o == b"":
            header = _parse_header(t.decode("utf-8", errors="replace"))
            break
    charset = _charset(header)
    cat = MoCatalog(path=str(path), charset=charset, header=header)
    for o, t in zip(originals, translations):
        if o == b"":
            continue
        try:
            src, tgt = o.decode(charset), t.decode(charset)
        except (UnicodeDecodeError, LookupError) as e:
            raise MoFormatError(f"{path}: cannot decode a message as {charset}: {e}") from None
        context = None
        if "\x04" in src:
            context, src = src.split("\x04", 1)
        ids = src.split("\x00")
        cat.entries.append(
            MoEntry(
                msgid=ids[0],
                msgid_plural=ids[1] if len(ids) > 1 else None,
                msgstrs=tuple(tgt.split("\x00")),
                context=context,
            )
        )
    return cat


def write_mo(path: str | Path, entries: list[MoEntry], header: str | None = None) -> None:
    """Write a little-endian revision-0 .mo file (no hash table), as msgfmt would.

    Entries are sorted by their encoded msgid, as the format requires for binary search.
    ``header`` is the header entry's text (default: UTF-8 content type).
    """
    if header is None:
        header = "Content-Type: text/plain; charset=UTF-8\n"
    items = [(b"", header.encode("utf-8"))]
    for e in entries:
        key = e.msgid if e.msgid_plural is None else e.msgid + "\x00" + e.msgid_plural
        if e.context is not None:
            key = e.context + "\x04" + key
        items.append((key.encode("utf-8"), "\x00".join(e.msgstrs).encode("utf-8")))
    items.sort(key=lambda kv: kv[0])
    n = len(items)
    orig_off = 28
    trans_off = orig_off + 8 * n
    pos = trans_off + 8 * n
    o_tab, t_tab, blobs = [], [], []
    for k, _ in items:
        o_tab.append((len(k), pos))
        blobs.append(k + b"\x00")
        pos += len(k) + 1
    for _, v in items:
        t_tab.append((len(v), pos))
        blobs.append(v + b"\x00")
        pos += len(v) + 1
    out = struct.pack("<7I", MO_MAGIC_LE, 0, n, orig_off, trans_off, 0, pos)
    out += b"".join(struct.pack("<2I", *x) for x in o_tab + t_tab) + b"".join(blobs)
    Path(path).write_bytes(out)
