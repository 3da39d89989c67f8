"""Training, decoding, BLEU and fairseq interop for the translation claims.

Submodules: :mod:`.loop` (training loop: schedules, checkpoints, resume, divergence), :mod:`.decode` (greedy and
beam search), :mod:`.bleu` (sacrebleu BLEU, copy baseline, paired bootstrap), :mod:`.fairseq_import`,
:mod:`.pipeline` (the artefact from config), and the command lines :mod:`.train` and :mod:`.evaluate`.
Names below are imported lazily (``from repro.train import train``).
"""
from importlib import import_module

_EXPORTS = {
    "loop": ["OptimConfig", "RunConfig", "ScheduleConfig", "TrainResult", "configs_from_params", "evaluate_loss",
             "load_checkpoint", "lr_at", "model_loss", "save_checkpoint", "train", "write_curve_csv"],
    "decode": ["DecodeConfig", "beam_decode", "beam_search", "decode_ids", "greedy_decode", "translate"],
    "bleu": ["BleuScore", "bleu_report", "corpus_bleu", "paired_bootstrap", "sentence_stats", "subset_bleu"],
    "pipeline": ["Trained", "batches_fn", "build_model", "encode_splits", "load_data", "load_tokenizer",
                 "load_trained", "train_from_params", "valid_batches"],
    "fairseq_import": ["FairseqImportError", "import_fairseq_checkpoint"],
}
_WHERE = {name: mod for mod, names in _EXPORTS.items() for name in names}
__all__ = sorted(_WHERE)


def __getattr__(name):
    if name in _WHERE:
        return getattr(import_module(f"repro.train.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'repro.train' has no attribute {name!r}")
