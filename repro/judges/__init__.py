"""The judges: one module per claim (and the translation benchmark), ``judge(rows, thresholds, context) -> verdict``.

A judge decides a verdict from a claim's stored rows (metrics.csv), the thresholds of its config's ``judge:`` section
and the context the result recorded (``repro.judging.judge_context``: scale, the measured parameters, hardware,
device, measured.json's context, fingerprint.json's software and torch threads). Judge-side code
(repro.provenance.JUDGE_SIDE): changing a judge or a threshold re-judges the stored measurement and never re-measures
it; a measurement module never imports one, and a judge imports no measurement module and no torch (it meets the
measurement only in its result files; the names both sides spell live in repro.vocabulary).
"""
