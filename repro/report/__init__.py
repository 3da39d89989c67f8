"""Reports: claim pages, plots and the index, written from results files and the published registry only.

The report never runs experiments; claims never import the report. Per-claim plots live in
``repro.report.plots.<claim_id>`` as ``plots(metrics, files, out_dir) -> [(file name, caption)]`` (``files``: the
claim's declared result files only).
"""
