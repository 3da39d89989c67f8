"""What every command line of the suite shares: logging to stderr, ``--params JSON`` / ``--scale`` read and checked
against the config schema (an error names the key before anything runs), and argparse types.

Used by the claims' command line (repro.claims._cli) and by the translation steps (repro.train.prepare, train,
evaluate).
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Mapping

from repro import config


def setup_logging() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (``--threads -3`` is refused before anything runs)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {n}")
    return n


def out_folder(text: str) -> Path:
    """argparse type of ``--out``: a folder, or a path that does not exist yet (made when results are written); an
    existing file (``--out README.md``) is refused before anything runs."""
    path = Path(text)
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a folder, got an empty path")
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a file, not a folder; name a folder (existing or new)")
    return path


def add_params_arguments(parser: argparse.ArgumentParser, section: str, *, scale_default: str | None = None,
                         params_help: str | None = None) -> None:
    """``--params JSON`` and ``--scale`` (required unless ``scale_default`` is given)."""
    parser.add_argument("--params", help=params_help or f"JSON parameters (default: config/claims/{section}.yaml at "
                                                        "--scale)")
    if scale_default is None:
        parser.add_argument("--scale", required=True, choices=config.SCALES)
    else:
        parser.add_argument("--scale", default=scale_default, choices=config.SCALES)


def load_json_option(parser: argparse.ArgumentParser, option: str, text: str | None, validate, default):
    """``option``'s JSON ``text`` passed through ``validate`` (a ConfigError names the key), or ``default()`` when
    it is not given; errors exit through ``parser.error`` (status 2) naming the option."""
    try:
        if text is not None:
            try:
                given = json.loads(text)
            except json.JSONDecodeError as exc:
                parser.error(f"{option}: not valid JSON ({exc}); expected a JSON object, e.g. {option} '{{...}}'")
            return validate(given)
        return default()
    except config.ConfigError as exc:
        parser.error(f"{option}: {exc}")


def json_object(option: str):
    """A ``validate`` for :func:`load_json_option`: the JSON must be an object (a mapping), else a ConfigError
    saying what was given."""
    def check(given):
        if not isinstance(given, Mapping):
            raise config.ConfigError(f"expected a JSON object ({{...}}), got {type(given).__name__} {given!r:.60}")
        return dict(given)
    return check


def load_keys(parser: argparse.ArgumentParser, text: str | None) -> dict | None:
    """``--keys JSON``: the provenance keys the workflow computed (an object; its ``judge`` a string), or None when
    not given (computed by the caller)."""
    keys = load_json_option(parser, "--keys", text, json_object("--keys"), lambda: None)
    if keys is not None and not isinstance(keys.get("judge", ""), str):
        parser.error(f"--keys: judge: expected a string (the judge key), got {keys['judge']!r:.60}")
    return keys


def load_params(parser: argparse.ArgumentParser, section: str, scale: str, text: str | None) -> dict:
    """The parameters of ``section``: ``--params`` JSON checked like the config files (a hand-written '{}' names the
    first missing key, not a KeyError later), or config/claims/<section>.yaml at ``scale``. Errors exit through
    ``parser.error`` (status 2) with the key named."""
    return load_json_option(parser, "--params", text, lambda p: config.validate_params(section, scale, p),
                            lambda: config.section(section, scale))
