"""One module per claim id; each exposes ``run(params, scale, out, progress) -> (metrics, verdict)`` and a
``python -m repro.claims.<id>`` entry that the claim's workflows/<id>.smk calls."""
