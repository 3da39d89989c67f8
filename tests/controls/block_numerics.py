"""block_numerics: paper-false = normalisations and activations off, the residual chain vanishing like the plain one,
the fp16 epsilon result reversed; the learned-control gate (shallow plain, deep residual) kept. Ties = every
published function value measured exactly ``value_tolerance`` away from the published one (the band's edge)."""
from controls import default_params, edit, on_edge

OUTPUTS = ("layernorm_output", "rmsnorm_output", "gelu_output", "silu_output", "relu_output")


def paper_false(rows):
    rows = edit(rows, OUTPUTS, lambda r: float(r["value"]) * 1.5 + 0.3)
    rows = edit(rows, "residual_chain_gradient_gain", lambda r: 1e-3)
    rows = edit(rows, ("plain_chain_gradient_gain",), lambda r: 1.0)
    rows = edit(rows, "copy_task_final_loss_ratio", lambda r: 0.02, sweep_stack="deep_plain")
    return rows


def ties(rows):
    tol = default_params("block_numerics")["value_tolerance"]
    return [edit(rows, OUTPUTS, lambda r: on_edge(float(r["published_value"]), tol)
                 if isinstance(r.get("published_value"), (int, float)) and r["published_value"] == r["published_value"]
                 else r["value"])]
