"""Per-claim plot modules: ``repro.report.plots.<claim_id>.plots(metrics, results_dir, out_dir)``.

Each returns a list of (PNG file name, caption) it wrote into ``out_dir``; the claim page embeds them.
"""
import matplotlib

matplotlib.use("Agg")
