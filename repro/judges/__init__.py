"""The judges: one module per claim (and the translation benchmark), ``judge(rows, thresholds, context) -> verdict``.

A judge decides a verdict from a claim's stored rows (metrics.csv), the thresholds of its config's ``judge:`` section
and the context the measurement recorded (``repro.claims._cli.judge_context``: scale, the measured parameters,
hardware, device, ...). Judge-side code (repro.provenance.JUDGE_SIDE): changing a judge or a threshold re-judges the
stored measurement and never re-measures it; a measurement module never imports one.
"""
