"""param_accounting (Kaplan et al. / the model cards' parameter counts): paper-false = every count 30% off."""
from controls import edit


def paper_false(rows):
    return edit(rows, tuple({r["metric"] for r in rows}), lambda r: float(r["value"]) * 1.3)
