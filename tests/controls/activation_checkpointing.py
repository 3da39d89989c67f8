"""activation_checkpointing (Korthikanti et al. 2022, Chen et al. 2016): paper-false = every saved-activation
coefficient double the paper's and sqrt(n) checkpointing growing linearly with depth. Ties = the headline total
34 sbh coefficient exactly ``coeff_rel`` off the paper's, and the sqrt(n) log-log slope exactly on its band's lower
edge."""
from controls import default_thresholds, edit, on_edge

from repro import registry


def paper_false(rows):
    rows = edit(rows, "saved_coeff_16bit", lambda r: float(r["value"]) * 2 + 1)
    return edit(rows, "loglog_slope_peak_bytes_fwd_bwd", lambda r: 1.0)


def ties(rows):
    tol = default_thresholds("activation_checkpointing")
    pub = registry.published("activation_checkpointing", "korthikanti_total_sbh_coeff")["value"]
    coeff = edit(rows, "saved_coeff_16bit", lambda r: on_edge(pub, tol["coeff_rel"] * pub), sweep_section="total",
                 sweep_kind="sbh", sweep_policy="none", sweep_backend="math", sweep_dtype="float32", sweep_dropout=0.1)
    slope = edit(rows, "loglog_slope_peak_bytes_fwd_bwd", lambda r: float(tol["sqrt_slope"][0]), sweep_axis="depth",
                 sweep_policy="sqrt")
    return [coeff, slope]
