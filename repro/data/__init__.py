"""Data for the translation claims: corpus extraction and loading, sentencepiece tokenizer, token-based batching,
fairseq dictionary and indexed-dataset formats.

Submodules (import names from them, e.g. ``from repro.data.corpus import load_corpus``): :mod:`.mo` (gettext .mo
reader/writer), :mod:`.gettext_corpus` (default de-en corpus from Debian catalogs), :mod:`.corpus` (loading),
:mod:`.tokenizer`, :mod:`.batching`, :mod:`.fairseq_io`. The package re-exports nothing: a measurement's key
(repro.provenance) follows its imports from the source, and an import it cannot read (a lazy re-export) would leave
the module it loads out of the key.
"""
