"""activation_checkpointing (Korthikanti et al. 2022, Chen et al. 2016): paper-false = every saved-activation
coefficient double the paper's and sqrt(n) checkpointing growing linearly with depth."""
from controls import edit


def paper_false(rows):
    rows = edit(rows, "saved_coeff_16bit", lambda r: float(r["value"]) * 2 + 1)
    return edit(rows, "loglog_slope_peak_bytes_fwd_bwd", lambda r: 1.0)
