"""block_numerics: paper-false = normalisations and activations off, the residual chain vanishing like the plain one,
the fp16 epsilon result reversed; the learned-control gate (shallow plain, deep residual) kept."""
from controls import edit


def paper_false(rows):
    rows = edit(rows, ("layernorm_output", "rmsnorm_output", "gelu_output", "silu_output", "relu_output"),
                lambda r: float(r["value"]) * 1.5 + 0.3)
    rows = edit(rows, "residual_chain_gradient_gain", lambda r: 1e-3)
    rows = edit(rows, ("plain_chain_gradient_gain",), lambda r: 1.0)
    rows = edit(rows, "copy_task_final_loss_ratio", lambda r: 0.02, sweep_stack="deep_plain")
    return rows
