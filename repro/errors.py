"""The suite's errors: one hierarchy, in one place. Every message names the offending key or file.

- ``ReproError``: base of all (a ``ValueError``: bad input, refused before anything runs where possible).
- ``ConfigError``: a config or ``--params`` value is missing or invalid; the message starts with the file or the
  dotted key. ``TrainConfigError`` (training parameters, repro.train.loop) and ``RegistryError`` (the published
  numbers, repro/registry/published.yaml) are kinds of it, as are the claims' own parameter errors
  (head_pruning's ClaimParamError, LayerPruningError, QuantizationError).
- ``ResultsError``: a results file is missing, damaged or does not match its integrity record; ``FolderBusy``: a
  results folder is being written by another process (its writer lock is held; the message names the holder's pid).
- ``ArtefactError``: an input artefact (corpus, tokenizer, checkpoint, imported model) is missing or malformed; the
  shared trained artefacts of repro.artefacts raise it naming the claim's config key. Kinds:
  ``CorpusError``, ``MoFormatError`` (.mo catalogs), ``FairseqFormatError`` (fairseq data-bins and dictionaries),
  ``CheckpointError`` (the suite's checkpoints), ``FairseqImportError`` and ``HFImportError`` (imported models).
"""
from __future__ import annotations


class ReproError(ValueError):
    """Bad input to the suite; the message names the key or file at fault."""


class ConfigError(ReproError):
    """Bad configuration; the message names the file and key (or starts with the dotted key)."""


class TrainConfigError(ConfigError):
    """A training parameter is invalid; the message names the key."""


class RegistryError(ConfigError):
    """The registry file or dict is malformed; the message names the claim and key at fault."""


class ResultsError(ReproError):
    """A results file is missing, damaged or does not match its integrity record; the message names the file."""


class FolderBusy(ResultsError):
    """Another process holds a results folder's writer lock; the message names the folder and the holder's pid."""


class ArtefactError(ReproError):
    """An input artefact is missing or malformed; the message names the file."""


class CorpusError(ArtefactError):
    """A corpus file is missing, malformed or does not match its manifest; names the file."""


class MoFormatError(ArtefactError):
    """A file is not a valid .mo catalog; the message names the file."""


class FairseqFormatError(ArtefactError):
    """A fairseq file is missing or malformed; the message names the file."""


class CheckpointError(ArtefactError):
    """A checkpoint cannot be loaded (empty, truncated, not a checkpoint, or refused by the safe loader); the
    message names the file."""


class FairseqImportError(ArtefactError):
    """The checkpoint cannot be imported; the message names the file and the offending keys."""


class HFImportError(ArtefactError):
    """The folder cannot be imported; the message names the folder and the key, tensor or file at fault."""
