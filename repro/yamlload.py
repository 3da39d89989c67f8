"""Reading the suite's YAML (config files, schemas, the registry, the headlines): PyYAML's safe loader, except that
a mapping naming a key twice is refused with the key and both lines, where PyYAML keeps the last value silently (a
config file with two ``scale:`` lines would run at whichever scale came second)."""
from __future__ import annotations

import copy
import functools
from typing import IO, Any

import yaml


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A mapping names the same key twice (a kind of yaml.YAMLError: the callers' YAML error handling applies)."""


class UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """yaml.SafeLoader (libyaml's parser where PyYAML has it: the pure-Python one took ~3 s of each Snakemake start)
    that raises DuplicateKeyError on a key given twice in one mapping."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # "<<:" merges are not keys of their own
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node.start_mark)
                except TypeError:  # an unhashable key: SafeLoader's own error says so
                    continue
                if first is not key_node.start_mark:
                    raise DuplicateKeyError(
                        "while reading a mapping", node.start_mark,
                        f"duplicate key {key!r} (first on line {first.line + 1}; a key may appear once)",
                        key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def load(stream: str | bytes | IO) -> Any:
    """``yaml.safe_load`` refusing duplicate keys. A text is parsed once per process (the workflow reads each claim
    file many times); each call gets its own copy, which the caller may change."""
    if isinstance(stream, str):
        return copy.deepcopy(_parsed(stream))
    return yaml.load(stream, Loader=UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)


@functools.lru_cache(maxsize=256)
def _parsed(text: str) -> Any:
    return yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
