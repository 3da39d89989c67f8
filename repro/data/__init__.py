"""Data for the translation claims: corpus extraction and loading, sentencepiece
tokenizer, token-based batching, fairseq dictionary and indexed-dataset formats.

Submodules: :mod:`.mo` (gettext .mo reader/writer), :mod:`.gettext_corpus` (default de-en corpus
from Debian catalogs), :mod:`.corpus` (loading), :mod:`.tokenizer`, :mod:`.batching`,
:mod:`.fairseq_io`.  Names below are imported lazily (``from repro.data import load_corpus``),
so running a submodule as a script does not import torch or the other submodules.
"""
from importlib import import_module

_EXPORTS = {
    "batching": ["Batch", "EncodedCorpus", "batch_indices", "collate", "encode_corpus", "token_batches"],
    "corpus": ["Corpus", "CorpusError", "load_corpus", "load_parallel_text"],
    "fairseq_io": ["DataBin", "FairseqDictionary", "FairseqFormatError", "load_data_bin", "read_fairseq_dictionary",
                   "read_index", "read_indexed_dataset", "write_fairseq_dictionary", "write_indexed_dataset"],
    "gettext_corpus": ["FilterConfig", "Pair", "SplitConfig", "build_corpus", "extract_pairs", "split_pairs"],
    "tokenizer": ["BOS_ID", "EOS_ID", "PAD_ID", "UNK_ID", "Tokenizer", "train_sentencepiece"],
}
_WHERE = {name: mod for mod, names in _EXPORTS.items() for name in names}
__all__ = sorted(_WHERE)


def __getattr__(name):
    if name in _WHERE:
        return getattr(import_module(f"repro.data.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'repro.data' has no attribute {name!r}")
