"""What ``snakemake -s workflows/report.smk --report report.html`` shows (workflows/report.smk): the verdict matrix as the landing page and,
per claim (one report category each), the claim's HTML page (verdict, reason, checks, gates, setup beside the
paper, figures inline) and its figures with captions written from the results.

The report workflow runs nothing: its only rule takes as input the pages and figures that exist under
``reports/`` (this checkout's runs) and ``references/reports/`` (the committed references, labelled as such) for
every machine and scale, so the report never needs job metadata of files it did not make (no "missing metadata"
warnings) and never fails on a machine that has not run yet; the landing page says so when this machine has no
results.
"""
from __future__ import annotations

import glob
import html
import json
import os
import re
from pathlib import Path

from snakemake.io import report

from repro import registry
from repro.report.matrix import matrix_html

LANDING_CSS = """<style>
div.prose.max-w-lg{max-width:none}
.repro-landing{font-size:14px;max-width:none;max-height:calc(100vh - 48px);overflow:auto}
.repro-landing table.repro-matrix{border-collapse:collapse;font-size:12.5px;margin:.5em 0}
.repro-landing table.repro-matrix th,.repro-landing table.repro-matrix td{border:1px solid #ccc;padding:4px 6px;
vertical-align:top;text-align:left}
.repro-landing .verdict{font-weight:600}
.repro-landing code::before,.repro-landing code::after{content:none}
.repro-landing .v-reproduced{background:#e6f4ea}.repro-landing .v-partially{background:#fff6d5}
.repro-landing .v-not_reproduced{background:#fde2e1}.repro-landing .v-inconclusive{background:#ececec}
.repro-landing .flag{color:#b00020;font-weight:700}
.repro-landing td.stale{opacity:.5;filter:grayscale(1)}
</style>"""


def pages(reports_root: str | Path) -> list[tuple[str, str, str, Path]]:
    """(hardware, scale, claim, page.html) for every claim page found under ``reports_root/<hw>/<scale>/``."""
    out = []
    for path in sorted(glob.glob(os.path.join(str(reports_root), "*", "*", "*.html"))):
        p = Path(path)
        hw, scale, claim = p.parent.parent.name, p.parent.name, p.stem
        if hw.startswith(("_", ".")) or hw == "compare" or claim.startswith(("_", ".")):
            continue
        out.append((hw, scale, claim, p))
    return out


def report_inputs(reports_root: str | Path, references_root: str | Path | None = None) -> list:
    """The report's items: every claim page (HTML) and figure (PNG, caption from ``captions/<figure>.rst``) of this
    checkout's runs and of the committed references, as Snakemake ``report()`` inputs, category = claim id,
    subcategory = hardware and scale (``, reference`` for a reference)."""
    items = []
    found = [(p, "") for p in pages(reports_root)]
    if references_root is not None:
        found += [(p, ", reference") for p in pages(Path(references_root) / "reports")]
    for (hw, scale, claim, page), suffix in found:
        sub = f"{hw} ({scale}{suffix})"
        items.append(report(page.as_posix(), category=claim, subcategory=sub,
                            labels={"hardware": hw, "scale": scale, "item": "page: verdict, checks, setup, figures"}))
        fig_dir = page.with_suffix("")
        for png in sorted(fig_dir.glob("*.png")):
            caption = fig_dir / "captions" / f"{png.stem}.rst"
            items.append(report(png.as_posix(), caption=str(caption.resolve()) if caption.exists() else None,
                                category=claim, subcategory=sub,
                                labels={"hardware": hw, "scale": scale, "item": f"figure: {png.stem}"}))
    return items


def _open_page_js(page: Path) -> str:
    key = json.dumps(page.as_posix())
    return (f"javascript:app.setView({{content:'html',contentPath:results[{key}].data_uri,"
            f"resultPath:{key}}})").replace('"', "&quot;")


def landing_html(results_root: str | Path, reports_root: str | Path, hardware: str, scale: str,
                 references_root: str | Path | None = None) -> str:
    """The landing page: this machine's status, the verdict matrix (cells open the claim pages), and how to read it.
    One line of HTML (it is embedded in reST as a raw block)."""
    found = {("run", hw, sc, claim): page for hw, sc, claim, page in pages(reports_root)}
    if references_root is not None:
        found.update({("reference", hw, sc, claim): page
                      for hw, sc, claim, page in pages(Path(references_root) / "reports")})
    mine = [k for k in found if k[:3] == ("run", hardware, scale)]
    if mine:
        status = (f"<p>This machine (<code>{html.escape(hardware)}</code>) has results at scale "
                  f"<code>{html.escape(scale)}</code>; the matrix shows them beside every other machine's.</p>")
    else:
        status = (f"<p><strong>This machine (<code>{html.escape(hardware)}</code>) has no results at scale "
                  f"<code>{html.escape(scale)}</code> yet</strong> (run <code>snakemake reproduce_all --cores all"
                  f"</code>, then <code>snakemake -s workflows/report.smk --report report.html</code>). The report shows the committed "
                  f"reference runs (<code>{html.escape(str(references_root))}/</code>, labelled reference) for the "
                  f"machines below.</p>")

    def link(cell) -> str | None:
        page = found.get((cell.kind, cell.hardware, cell.scale, cell.claim))
        return _open_page_js(page) if page is not None else None

    claims = [c for c in registry.claim_ids()]
    guide = ("<p>Click a verdict to open that claim's page (verdict, reason, checks, gates, setup beside the paper, "
             "what the verdict means, figures); every claim is also a category in the menu (Results), with its "
             "figures and their captions.</p>")
    body = (f'<div class="repro-landing"><h1>Verdict matrix: every claim on every machine and scale</h1>{status}'
            f"{guide}{matrix_html(results_root, link=link, references_root=references_root, reports_root=reports_root)}"
            f"<p>Registered claims: {html.escape(', '.join(claims))}. The same matrix in markdown: "
            f"<code>{html.escape(str(reports_root))}/matrix.md</code>.</p></div>")
    # one line per table row / block (docutils refuses lines over 10,000 characters; report/workflow.rst indents
    # every line under its raw directive with Jinja's indent filter)
    return LANDING_CSS.replace("\n", "") + "\n" + re.sub(r"(</tr>|</p>|</table>|</h[1-6]>|</li>|</ul>|</ol>)",
                                                         r"\1\n", body.replace("\n", " ")).rstrip("\n")
