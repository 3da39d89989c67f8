"""The published-numbers registry: every number the suite compares against, with its citation.

The data live in ``published.yaml`` beside this module: one entry per claim C1..C11 of CLAIMS.md
(param_accounting ... block_numerics), each with the papers it draws on and one record per
published value (value, unit, source, table/figure, setup, hardware, exact, verification tag). A value the
papers do not print but the suite computes from printed ones carries ``derived``: its formula, a Python expression
over numbers and the claim's other keys, which :func:`validate` evaluates and checks against the value, and which
the pages print beside it (:func:`derived_text`).
Judges read their thresholds and the paper's numbers from it, metric rows name the entry they are compared with
(``repro.io.metric(..., published_key=...)``), and reports show it beside the measurements; no claim module, plot or
page types a published number, and no measured number is stored here. Judge-side: a change here re-judges the
stored measurements and measures nothing again (repro.provenance).

Public API (pure Python + PyYAML; pandas is imported only by :func:`values_frame`):

- :func:`load` -> the parsed, validated YAML (cached; a fresh deep copy per call)
- :func:`claim_ids` -> claim ids in C1..C11 order
- :func:`implemented_claims` -> the ids that have a claim module and config in the checkout
- :func:`claim` -> one claim's dict
- :func:`published` -> one value record plus its ``citation`` string
- :func:`values_frame` -> a pandas DataFrame, one row per value, with a ``citation`` column
- :func:`with_published` -> metrics rows (a DataFrame or dicts) with the published value, unit and citation each
  row's ``published_key`` (and ``published_index``) names, read from the registry now: a measured row stores only
  the key, so a corrected paper number reaches every verdict, page and plot without measuring again
- :func:`validate` -> check a registry dict; raises :class:`RegistryError` naming claim and key
- :func:`derived_text` -> a derived value's formula with the printed numbers in place of the keys
- :func:`location_problem` -> why a record does not say where its paper prints it ('' when it does)
"""

from __future__ import annotations

import copy
import functools
import math
import re
from pathlib import Path
from typing import Any

import yaml

from repro import yamlload
from repro.errors import RegistryError

__all__ = [
    "REGISTRY_PATH",
    "VERIFIED_TAGS",
    "RegistryError",
    "load",
    "validate",
    "claim_ids",
    "claim",
    "published",
    "citation",
    "values_frame",
    "with_published",
    "PUBLISHED_COLUMNS",
    "derived_text",
    "location_problem",
]

REGISTRY_PATH = Path(__file__).with_name("published.yaml")

#: F full text read; T page-referenced transcription; A abstract only; unverified; computed =
#: derived by arithmetic from the stated configuration or formula (see each record's note).
VERIFIED_TAGS = frozenset({"F", "T", "A", "unverified", "computed"})

_SOURCE_FIELDS = ("authors", "title", "venue", "arxiv")
_CLAIM_FIELDS = ("code", "title", "statement", "values")
_VALUE_FIELDS = ("key", "value", "unit", "source", "where", "setup", "exact", "verified")
_KEY_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_CODE_RE = re.compile(r"^C([1-9][0-9]*)$")
_YEAR_RE = re.compile(r"(19|20)\d{2}")


# ------------------------------------------------------------------------------------------------
# validation


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _check_value(where: str, value: Any) -> None:
    """A value is a finite number, null, or a non-empty list of numbers/nulls."""
    if value is None or _is_number(value):
        return
    if isinstance(value, list) and value:
        bad = [v for v in value if not (v is None or _is_number(v))]
        if not bad:
            return
        raise RegistryError(f"{where}: list value has non-numeric items {bad!r}")
    raise RegistryError(
        f"{where}: value must be a number, null or a list of numbers, got {value!r} "
        f"({type(value).__name__}); note YAML reads 1e-8 as a string, write 1.0e-8"
    )


def _validate_sources(sources: Any) -> None:
    if not isinstance(sources, dict) or not sources:
        raise RegistryError("registry: 'sources' must be a non-empty mapping")
    for skey, src in sources.items():
        if not isinstance(src, dict):
            raise RegistryError(f"source {skey!r}: must be a mapping")
        for field in _SOURCE_FIELDS:
            if field not in src:
                raise RegistryError(f"source {skey!r}: missing field {field!r}")
        for field in ("authors", "title", "venue"):
            if not isinstance(src[field], str) or not src[field].strip():
                raise RegistryError(f"source {skey!r}: {field!r} must be a non-empty string")
        if src["arxiv"] is not None and not isinstance(src["arxiv"], str):
            raise RegistryError(
                f"source {skey!r}: 'arxiv' must be a quoted string or null, got {src['arxiv']!r}"
            )
        if not _YEAR_RE.search(src["venue"]):
            raise RegistryError(f"source {skey!r}: 'venue' must contain the year, got {src['venue']!r}")


def validate(data: Any) -> None:
    """Check a registry dict (as parsed from YAML); raise :class:`RegistryError` on the first problem.

    Rules: top level has ``sources`` and ``claims``; every source has authors/title/venue/arxiv;
    every claim has code (``C<n>``, unique)/title/statement/values and its ``sources`` list names
    known sources; every value record has the fields of ``_VALUE_FIELDS``, a snake_case key unique
    within its claim, a numeric/list/null value, a known source and a known verification tag.
    """
    if not isinstance(data, dict):
        raise RegistryError(f"registry: top level must be a mapping, got {type(data).__name__}")
    for top in ("sources", "claims"):
        if top not in data:
            raise RegistryError(f"registry: missing top-level key {top!r}")
    sources = data["sources"]
    _validate_sources(sources)
    claims = data["claims"]
    if not isinstance(claims, dict) or not claims:
        raise RegistryError("registry: 'claims' must be a non-empty mapping")

    codes: dict[str, str] = {}
    for cid, c in claims.items():
        if not isinstance(cid, str) or not _KEY_RE.match(cid):
            raise RegistryError(f"claim {cid!r}: id must be snake_case")
        if not isinstance(c, dict):
            raise RegistryError(f"claim {cid!r}: must be a mapping")
        for field in _CLAIM_FIELDS:
            if field not in c:
                raise RegistryError(f"claim {cid!r}: missing field {field!r}")
        for field in ("title", "statement"):
            if not isinstance(c[field], str) or not c[field].strip():
                raise RegistryError(f"claim {cid!r}: {field!r} must be a non-empty string")
        code = c["code"]
        if not isinstance(code, str) or not _CODE_RE.match(code):
            raise RegistryError(f"claim {cid!r}: code must look like 'C1', got {code!r}")
        if code in codes:
            raise RegistryError(f"claim {cid!r}: code {code} already used by claim {codes[code]!r}")
        codes[code] = cid
        for s in c.get("sources", []) or []:
            if s not in sources:
                raise RegistryError(f"claim {cid!r}: 'sources' lists unknown source {s!r}")
        ps = c.get("paper_setup")
        if ps is not None and (not isinstance(ps, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                                    and v.strip() for k, v in ps.items())):
            raise RegistryError(f"claim {cid!r}: 'paper_setup' must map aspects to non-empty strings")
        values = c["values"]
        if not isinstance(values, list) or not values:
            raise RegistryError(f"claim {cid!r}: 'values' must be a non-empty list")
        seen: set[str] = set()
        for i, v in enumerate(values):
            if not isinstance(v, dict):
                raise RegistryError(f"claim {cid!r}, value #{i}: must be a mapping")
            key = v.get("key")
            where = f"claim {cid!r}, key {key!r}" if key is not None else f"claim {cid!r}, value #{i}"
            for field in _VALUE_FIELDS:
                if field not in v:
                    raise RegistryError(f"{where}: missing field {field!r}")
            if not isinstance(key, str) or not _KEY_RE.match(key):
                raise RegistryError(f"{where}: key must be snake_case")
            if key in seen:
                raise RegistryError(f"{where}: duplicate key within the claim")
            seen.add(key)
            _check_value(where, v["value"])
            if v["source"] not in sources:
                raise RegistryError(f"{where}: unknown source {v['source']!r} (not in 'sources')")
            if not isinstance(v["exact"], bool):
                raise RegistryError(f"{where}: 'exact' must be true or false, got {v['exact']!r}")
            if v["verified"] not in VERIFIED_TAGS:
                raise RegistryError(
                    f"{where}: 'verified' must be one of {sorted(VERIFIED_TAGS)}, got {v['verified']!r}"
                )
            for field in ("unit", "where", "setup"):
                if not isinstance(v[field], str) or not v[field].strip():
                    raise RegistryError(f"{where}: {field!r} must be a non-empty string")
            for field in ("hardware", "note"):
                if field in v and not isinstance(v[field], str):
                    raise RegistryError(f"{where}: {field!r} must be a string")
            if v["value"] is None and not v.get("note"):
                raise RegistryError(f"{where}: a null (qualitative) value needs a 'note' stating it")
        for v in values:
            if "derived" in v:
                _check_derived(f"claim {cid!r}, key {v['key']!r}", v, values)


# ------------------------------------------------------------------------------------------------
# derived values and where the papers print their numbers

# what a derived formula may call besides the claim's keys (the registry file is the repository's own text)
_FORMULA_NAMES = {"mean": lambda xs: sum(xs) / len(xs), "sum": sum, "len": len, "min": min, "max": max,
                  "sqrt": math.sqrt, "exp": math.exp, "erf": math.erf, "tanh": math.tanh}


def _evaluate(formula: str, values: list[dict]) -> Any:
    names = {v["key"]: v["value"] for v in values if v.get("key")}
    return eval(compile(formula, "<derived>", "eval"), {"__builtins__": {}, **_FORMULA_NAMES, **names})  # noqa: S307


def _decimals(x: float) -> int:
    text = repr(float(x))
    return 0 if float(x).is_integer() else len(text.split(".")[1]) if "e" not in text else 16


def _agrees(computed: Any, value: Any) -> bool:
    """``computed`` rounds to ``value`` at the decimals ``value`` is written with (element by element for lists)."""
    if isinstance(value, list):
        return isinstance(computed, (list, tuple)) and len(computed) == len(value) and all(
            _agrees(c, v) for c, v in zip(computed, value))
    return _is_number(computed) and _is_number(value) and round(float(computed), _decimals(value)) == float(value)


def _check_derived(where: str, v: dict, values: list[dict]) -> None:
    """A ``derived`` formula is a non-empty string whose value, from the claim's keys and numbers, rounds to the
    record's value, and the record is tagged ``computed``."""
    formula = v["derived"]
    if not isinstance(formula, str) or not formula.strip():
        raise RegistryError(f"{where}: 'derived' must be the formula as a non-empty string")
    if v["verified"] != "computed":
        raise RegistryError(f"{where}: a derived value is tagged 'computed', not {v['verified']!r}")
    try:
        got = _evaluate(formula, values)
    except Exception as exc:  # noqa: BLE001 - any failure of the formula is the registry's error, said with the key
        raise RegistryError(f"{where}: derived formula {formula!r} does not evaluate: {exc}") from None
    if not _agrees(got, v["value"]):
        raise RegistryError(f"{where}: derived formula {formula!r} gives {got!r}, not the value {v['value']!r}")


def _shown(value: Any) -> str:
    """A key's value as the formula text shows it: '21..29' for a run of consecutive integers, else its numbers."""
    if isinstance(value, list):
        ints = all(isinstance(x, int) for x in value)
        if ints and len(value) > 2 and value == list(range(value[0], value[0] + len(value))):
            return f"{value[0]}..{value[-1]}"
        return "[" + ", ".join(f"{x:g}" if _is_number(x) else str(x) for x in value) + "]"
    return f"{value:g}" if _is_number(value) and not float(value).is_integer() else str(value)


def derived_text(claim_id: str, key: str) -> str:
    """The formula of a derived value with the values of the keys it names in their place ('mean(21..29) / (32 -
    1)'); '' for a value the paper prints."""
    values = claim(claim_id)["values"]
    record = next((v for v in values if v["key"] == key), None)
    if not record or not record.get("derived"):
        return ""
    known = {v["key"]: v["value"] for v in values}
    return re.sub(r"[a-z][a-z0-9_]*", lambda m: _shown(known[m.group(0)]) if m.group(0) in known else m.group(0),
                  record["derived"])


# the words that name a place in a paper (or, for a paper whose numbers its authors released beside it, the README
# of that release): a published number is quoted with one of them
LOCATION_WORDS = ("table", "fig", "section", "sec.", "appendix", "eq", "theorem", "lemma", "abstract", "algorithm",
                  "readme")


def location_problem(record: dict) -> str:
    """Why a value record does not say where its number comes from: a derived value without its formula, or a
    printed value whose ``where`` names no table, figure, section (or another place of :data:`LOCATION_WORDS`);
    '' when it says. A derived value names the places of its inputs, which are records of their own."""
    if record.get("derived"):
        return ""
    if record.get("verified") == "computed" or "derived" in str(record.get("where", "")).lower():
        return "a derived value without its formula ('derived')"
    where = str(record.get("where") or "").lower()
    if not any(re.search(rf"\b{re.escape(w)}", where) for w in LOCATION_WORDS):
        return f"'where' ({record.get('where')!r}) names no table, figure or section"
    return ""


# ------------------------------------------------------------------------------------------------
# loading


@functools.lru_cache(maxsize=None)
def _load_cached(path: str) -> dict:
    p = Path(path)
    if not p.is_file():
        raise RegistryError(f"registry file not found: {p}")
    with p.open(encoding="utf-8") as fh:
        try:
            data = yamlload.load(fh)
        except yaml.YAMLError as exc:
            raise RegistryError(f"registry file {p}: YAML error: {exc}") from exc
    try:
        validate(data)
    except RegistryError as exc:
        raise RegistryError(f"{p}: {exc}") from None
    return data


def load(path: str | Path | None = None) -> dict:
    """The parsed, validated registry (``{'sources': ..., 'claims': ...}``).

    Parsed once per path and cached; each call returns a deep copy so callers may mutate freely.
    """
    return copy.deepcopy(_load_cached(str(Path(path or REGISTRY_PATH).resolve())))


def _data() -> dict:
    # internal read-only access without the copy
    return _load_cached(str(REGISTRY_PATH.resolve()))


def claim_ids() -> list[str]:
    """Claim ids ordered by their code, C1..C11."""
    claims = _data()["claims"]
    return sorted(claims, key=lambda cid: int(_CODE_RE.match(claims[cid]["code"]).group(1)))


def implemented_claims(root: str | Path | None = None) -> list[str]:
    """Registered claims that have a module (repro/claims/<id>.py) and a config (config/claims/<id>.yaml): the one
    claim rule of the workflow runs them; the others are listed as not_implemented in the index."""
    root = Path(root) if root else Path(__file__).resolve().parents[2]
    return [c for c in claim_ids() if (root / "repro" / "claims" / f"{c}.py").is_file()
            and (root / "config" / "claims" / f"{c}.yaml").is_file()]


def claim(claim_id: str) -> dict:
    """One claim's record (code, title, statement, sources, values); KeyError lists valid ids."""
    claims = _data()["claims"]
    if claim_id not in claims:
        raise KeyError(f"unknown claim id {claim_id!r}; valid ids: {', '.join(claim_ids())}")
    return copy.deepcopy(claims[claim_id])


def _short_authors(authors: str) -> str:
    names = [a.strip() for a in authors.split(",") if a.strip() and a.strip() != "et al."]
    if len(names) == 1:
        return names[0]
    if len(names) == 2:
        return f"{names[0]} & {names[1]}"
    return f"{names[0]} et al."


def citation(source_key: str, where: str | None = None) -> str:
    """'Vaswani et al. 2017, NeurIPS 2017, arXiv 1706.03762, Table 3' for a source key."""
    sources = _data()["sources"]
    if source_key not in sources:
        raise KeyError(f"unknown source {source_key!r}; valid sources: {', '.join(sorted(sources))}")
    src = sources[source_key]
    year = _YEAR_RE.search(src["venue"]).group(0)
    parts = [f"{_short_authors(src['authors'])} {year}", src["venue"]]
    if src.get("arxiv"):
        parts.append(f"arXiv {src['arxiv']}")
    if where:
        parts.append(where)
    return ", ".join(parts)


def published(claim_id: str, key: str) -> dict:
    """The value record ``key`` of ``claim_id`` plus a ``citation`` string; KeyError lists valid keys."""
    c = claim(claim_id)
    for v in c["values"]:
        if v["key"] == key:
            v["citation"] = citation(v["source"], v["where"])
            return v
    keys = ", ".join(v["key"] for v in c["values"])
    raise KeyError(f"claim {claim_id!r} has no published value {key!r}; valid keys: {keys}")


_FRAME_COLUMNS = [
    "claim", "code", "key", "value", "unit", "source", "where", "setup", "hardware",
    "exact", "verified", "note", "citation",
]


def values_frame(claim_id: str | None = None):
    """All published values (or one claim's) as a pandas DataFrame, one row per value.

    Columns: claim, code, key, value (number, list or None), unit, source, where, setup,
    hardware, exact, verified, note, citation, plus any extra fields a record carries (e.g. input).
    """
    import pandas as pd  # lazy: keep `import repro.registry` light

    ids = [claim_id] if claim_id is not None else claim_ids()
    rows = []
    for cid in ids:
        c = claim(cid)
        for v in c["values"]:
            row = {"claim": cid, "code": c["code"], "hardware": None, "note": None}
            row.update(v)
            row["citation"] = citation(v["source"], v["where"])
            rows.append(row)
    extra = sorted({k for r in rows for k in r} - set(_FRAME_COLUMNS))
    return pd.DataFrame(rows, columns=_FRAME_COLUMNS + extra)


#: the columns :func:`with_published` fills beside a metrics row from the registry (never stored by a measurement)
PUBLISHED_COLUMNS = ("published_value", "published_unit", "source")


def _present(x: Any) -> bool:
    return x is not None and not (isinstance(x, float) and math.isnan(x))


def _resolved(row) -> tuple | None:
    """(value, unit, citation) of the registry value ``row`` names, or None where it names none that resolves: no
    key, a key the registry no longer has, or an index past the list. A row stored before rows carried
    ``published_index`` that holds one element of a list-valued entry keeps it (its index was not recorded)."""
    key, claim_id = row.get("published_key"), row.get("claim")
    if not (isinstance(key, str) and key and isinstance(claim_id, str)):
        return None
    index = row.get("published_index")
    try:
        pub = published(claim_id, key)
        value = pub["value"]
        if isinstance(value, list) and _present(index):
            value = value[int(index)]
    except (KeyError, IndexError):
        return None
    if isinstance(value, list) and not _present(index) and _is_number(row.get("published_value")):
        return None
    return value, pub["unit"], pub["citation"]


def with_published(rows):
    """Metrics rows with ``published_value``, ``published_unit`` and ``source`` (the citation) filled from the
    registry as it is now, for every row whose ``published_key`` resolves (:func:`_resolved`); values an older
    metrics.csv stored in those columns are overridden, and kept only where the key no longer resolves. Takes a
    pandas DataFrame (returns a new one) or an iterable of mappings (returns a list of new dicts)."""
    if hasattr(rows, "columns") and hasattr(rows, "to_dict"):  # a DataFrame: pandas only when the caller has it
        import pandas as pd  # lazy: keep `import repro.registry` light (the caller already holds a frame)

        frame = rows.copy()
        resolved = [_resolved(r) for r in frame.to_dict("records")]
        for i, column in enumerate(PUBLISHED_COLUMNS):
            old = list(frame[column]) if column in frame else [None] * len(frame)
            new = [got[i] if got else o for got, o in zip(resolved, old)]
            frame[column] = pd.Series(new, index=frame.index, dtype=object)
        return frame
    out = []
    for r in rows:
        r = dict(r)
        got = _resolved(r)
        if got:
            r.update(zip(PUBLISHED_COLUMNS, got))
        out.append(r)
    return out
