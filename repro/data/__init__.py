"""Data for the translation claims (issue 4): corpus extraction and loading, sentencepiece
tokenizer, token-based batching, fairseq dictionary and indexed-dataset formats.

Submodules: :mod:`.mo` (gettext .mo reader/writer), :mod:`.gettext_corpus` (default de-en corpus
from Debian catalogs), :mod:`.corpus` (loading), :mod:`.tokenizer`, :mod:`.batching`,
:mod:`.fairseq_io`.
"""
from repro.data.batching import Batch, EncodedCorpus, batch_indices, collate, encode_corpus, token_batches
from repro.data.corpus import Corpus, CorpusError, load_corpus, load_parallel_text
from repro.data.fairseq_io import (
    DataBin,
    FairseqDictionary,
    FairseqFormatError,
    load_data_bin,
    read_fairseq_dictionary,
    read_index,
    read_indexed_dataset,
    write_fairseq_dictionary,
    write_indexed_dataset,
)
from repro.data.gettext_corpus import FilterConfig, Pair, SplitConfig, build_corpus, extract_pairs, split_pairs
from repro.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer, train_sentencepiece

__all__ = [
    "Batch", "EncodedCorpus", "batch_indices", "collate", "encode_corpus", "token_batches",
    "Corpus", "CorpusError", "load_corpus", "load_parallel_text",
    "DataBin", "FairseqDictionary", "FairseqFormatError", "load_data_bin", "read_fairseq_dictionary",
    "read_index", "read_indexed_dataset", "write_fairseq_dictionary", "write_indexed_dataset",
    "FilterConfig", "Pair", "SplitConfig", "build_corpus", "extract_pairs", "split_pairs",
    "BOS_ID", "EOS_ID", "PAD_ID", "UNK_ID", "Tokenizer", "train_sentencepiece",
]
