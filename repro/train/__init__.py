"""Training, decoding, BLEU and fairseq interop for the translation claims.

Submodules (import names from them, e.g. ``from repro.train.loop import train``): :mod:`.loop` (training loop:
schedules, checkpoints, resume, divergence), :mod:`.decode` (greedy and beam search), :mod:`.bleu` (sacrebleu BLEU,
copy baseline, paired bootstrap), :mod:`.fairseq_import`, :mod:`.pipeline` (the artefact from config), and the
command lines :mod:`.train` and :mod:`.evaluate`. The package re-exports nothing: a measurement's key
(repro.provenance) follows its imports from the source, and an import it cannot read (a lazy re-export) would leave
the module it loads out of the key.
"""
