# The report view, used only by `snakemake --report report.html` (repro/report/site.py): a landing page with the
# verdict matrix of every machine and scale under results/ and references/results/, and one category per claim holding the claim's HTML
# page (verdict, reason, checks, gates, setup beside the paper, figures) and its figures with captions made from
# the results. Its one rule takes the pages and figures that exist as input and makes nothing, so the report needs
# no job metadata (no "missing metadata" warnings) and works on a fresh checkout from the committed results.
from repro.report.site import landing_html, report_inputs

# the landing page's HTML, rendered into report/workflow.rst (its Jinja template sees only the config);
# the Snakefile defines the one rule, report_view (a default target must be defined in the Snakefile itself)
config["_report_landing"] = landing_html(W.cfg["results_dir"], W.cfg["reports_dir"], W.hw, W.scale, W.refs)


report: "../report/workflow.rst"
