"""One module per claim id; each exposes ``run(params, scale, out, progress) -> (metrics, verdict)`` and a
``python -m repro.claims.<id>`` entry that the workflow's one claim rule (workflows/common.smk) calls."""
