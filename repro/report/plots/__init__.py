"""Per-claim plot modules: ``repro.report.plots.<claim_id>.plots(metrics, results_dir, out_dir)``.

Each returns a list of (PNG file name, caption) it wrote into ``out_dir``; the claim page embeds them.
"""
import matplotlib

matplotlib.use("Agg")


def with_sweep(frame, *keys):
    """A copy of a metrics frame with the named sweep variables as columns (None where a row lacks one)."""
    frame = frame.copy()
    for k in keys:
        frame[k] = frame["sweep"].map(lambda s, k=k: s.get(k))
    return frame


def save(fig, out_dir, name: str) -> None:
    """Tight layout, PNG at 110 dpi into ``out_dir``, figure closed."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(out_dir / name, dpi=110)
    plt.close(fig)
