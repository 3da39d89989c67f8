"""The names a claim's measurement and its judge both use, and nothing else: the claim's id and the row names both
sides spell (repro/vocabulary/<id>.py, one small torch-free module per claim; ``kernels`` for the kernel benchmark's).

A judge imports no measurement module (docs/architecture.md), so a name the measurement writes into rows and the
judge reads back lives here, once. A module here is part of both keys (repro.provenance): changing it measures the
claim again and re-judges it. A name only the judge uses belongs in the judge; one only the measurement uses, in
the measurement.
"""
