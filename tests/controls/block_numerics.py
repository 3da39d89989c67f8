"""block_numerics: paper-false = normalisations and activations off, the residual chain vanishing like the plain one,
the fp16 epsilon result reversed; the learned-control gate (shallow plain, deep residual) kept. Ties = every
published function value measured exactly on its band's edge, published + ``value_tolerance`` as the judge computes it (a tie)."""
from controls import default_thresholds, edit

OUTPUTS = ("layernorm_output", "rmsnorm_output", "gelu_output", "silu_output", "relu_output")


def paper_false(rows):
    rows = edit(rows, OUTPUTS, lambda r: float(r["value"]) * 1.5 + 0.3)
    rows = edit(rows, "residual_chain_gradient_gain", lambda r: 1e-3)
    rows = edit(rows, ("plain_chain_gradient_gain",), lambda r: 1.0)
    rows = edit(rows, "copy_task_final_loss_ratio", lambda r: 0.02, sweep_stack="deep_plain")
    return rows


def ties(rows):
    tol = default_thresholds("block_numerics")["value_tolerance"]
    return [edit(rows, OUTPUTS, lambda r: float(r["published_value"]) + tol
                 if isinstance(r.get("published_value"), (int, float)) and r["published_value"] == r["published_value"]
                 else r["value"])]


def threshold_rows(rows, key):
    """Rows on which ``key`` matters where the reference's cannot show it: the residual chain's per-layer factor 2%
    above its bound sqrt(1 + (c g)^2) (a chain growing a little faster than the Jensen bound), which the 5% slack
    accepts and no slack rejects."""
    import math

    if key != "residual_growth_tolerance":
        return None

    def above(r):
        c, g, depth = r["sweep"]["branch_gain"], r["sweep"]["gain"], r["sweep"]["depth"]
        return (math.sqrt(1 + (c * g) ** 2) * 1.02) ** depth

    return edit(rows, "residual_chain_gradient_gain", above)
