"""C11 block_numerics: the worked numbers of a block, computed by the suite's own modules.

- LayerNorm and RMSNorm of [2, 4, 6, 8] (Ba et al. 2016; Zhang & Sennrich 2019, eq. 4).
- ReLU / GELU / SiLU at -2, -0.5, 0, 0.5, 2 (the activations of repro.model.ffn).
- A 40-layer chain without residuals multiplies the gradient by 0.9^40 = 0.0148 or 1.1^40 = 45.3; with residual
  connections each layer passes 1 + F'(x) (He et al. 2016).
- A norm epsilon of 1e-8 underflows to 0 in fp16 (a constant input then normalises to NaN); 1e-5 does not.
- A deep stack without residual connections does not train where a shallow one, and a deep residual one, do.
"""
from __future__ import annotations

import logging
import math

import torch
import torch.nn.functional as F

from repro.io import metric
from repro.model import BlockConfig, EncoderModel, ModelConfig, make_norm
from repro.model.ffn import ACTIVATIONS
from repro.progress import Progress
from repro.vocabulary.block_numerics import CLAIM

log = logging.getLogger("repro.block_numerics")


def norm_values(params) -> list[dict]:
    x = torch.tensor([params["norm_input"]])
    rows = []
    for kind, key in (("layernorm", "layernorm_2468"), ("rmsnorm", "rmsnorm_2468")):
        y = make_norm(kind, x.shape[-1], eps=params["norm_eps"])(x)[0]
        rows += [metric(CLAIM, f"{kind}_output", float(v), "", published_key=key, published_index=i, index=i)
                 for i, v in enumerate(y.tolist())]
    return rows


def activation_values(params) -> list[dict]:
    x = torch.tensor(params["activation_points"])
    return [metric(CLAIM, f"{name}_output", float(v), "", published_key=f"{name}_points", published_index=i, x=float(xi))
            for name in ("relu", "gelu", "silu") for i, (xi, v) in enumerate(zip(x.tolist(), ACTIVATIONS[name](x)))]


def chain_gradients(params) -> list[dict]:
    """Gradient of a depth-L chain of linear layers with gain g, with and without residual connections."""
    depth, rows = params["chain_depth"], []
    d = 64
    for g in params["chain_gains"]:
        torch.manual_seed(0)
        q, _ = torch.linalg.qr(torch.randn(d, d))
        w = g * q  # orthogonal times g: every singular value is g, so each layer scales gradients by exactly g
        x = torch.randn(1, d, requires_grad=True)
        # gradient gain through the chain: ||dL/dx|| / ||dL/dh_L|| for L = <h_L, v>
        torch.manual_seed(1)
        v = torch.randn(1, d)
        x.grad = None
        h = x
        for _ in range(depth):
            h = h @ w
        (h * v).sum().backward()
        ratio = (x.grad.norm() / v.norm()).item()
        key = {0.9: "gain_0p9_pow_40", 1.1: "gain_1p1_pow_40"}.get(round(g, 3)) if depth == 40 else None
        rows.append(metric(CLAIM, "plain_chain_gradient_gain", ratio, "ratio", kind="statistic", published_key=key, gain=g, depth=depth))
        # residual: h <- h + c * (h @ W_l) with a fresh orthogonal W_l = g Q_l per layer (branch gain c, about 1).
        # The Jacobian of each layer is I + c W_l ("the gradient passes through 1 + F'(x)"): the identity path
        # keeps the gradient from vanishing, and for random Q_l each layer multiplies E||grad||^2 by 1 + (c g)^2.
        c = params["residual_branch_gain"]
        for seed in params["residual_seeds"]:
            gen = torch.Generator().manual_seed(100 + seed)
            qs = [torch.linalg.qr(torch.randn(d, d, generator=gen))[0] for _ in range(depth)]
            x.grad = None
            h = x
            for q_l in qs:
                h = h + c * (h @ (g * q_l))
            (h * v).sum().backward()
            rows.append(metric(CLAIM, "residual_chain_gradient_gain", (x.grad.norm() / v.norm()).item(), "ratio",
                               kind="statistic", gain=g, depth=depth, branch_gain=c, seed=seed))
    return rows


def fp16_epsilon(params) -> list[dict]:
    rows = []
    for eps in params["fp16_eps"]:
        stored = torch.tensor(eps, dtype=torch.float16).item()
        x = torch.full((1, 8), 3.0, dtype=torch.float16)  # constant row: variance exactly 0
        var = (x - x.mean(-1, keepdim=True)).pow(2).mean(-1, keepdim=True)
        y = (x - x.mean(-1, keepdim=True)) / torch.sqrt(var + torch.tensor(eps, dtype=torch.float16))
        key = {1e-8: "fp16_eps_1e8_underflows", 1e-5: "fp16_eps_1e5_representable"}.get(eps)
        rows.append(metric(CLAIM, "fp16_stored_eps", stored, "", published_key=key, eps=eps))
        rows.append(metric(CLAIM, "fp16_norm_of_constant_is_finite", float(torch.isfinite(y).all()), "bool", eps=eps))
    return rows


def train_copy_task(p: dict, layers: int, residual: bool, seed: int) -> tuple[float, float]:
    """Train a Pre-LN encoder stack to copy its input tokens; returns (initial loss, final loss)."""
    torch.manual_seed(seed)
    cfg = ModelConfig(block=BlockConfig(d_model=p["d_model"], n_heads=p["n_heads"], d_ff=2 * p["d_model"],
                                        residual=residual), vocab_size=p["vocab"], n_encoder_layers=layers,
                      max_seq_len=p["seq_len"], positional="learned")
    model, head = EncoderModel(cfg), torch.nn.Linear(p["d_model"], p["vocab"])
    opt = torch.optim.Adam([*model.parameters(), *head.parameters()], lr=p["lr"])
    gen = torch.Generator().manual_seed(1000 + seed)
    losses = []
    steps = Progress(f"deep stack {layers} layers, residual={residual}, seed {seed}", p["steps"], "steps",
                     every_s=30.0, logger=log)
    for _ in range(p["steps"]):
        x = torch.randint(1, p["vocab"], (p["batch"], p["seq_len"]), generator=gen)
        loss = F.cross_entropy(head(model(x)).flatten(0, 1), x.flatten())
        opt.zero_grad(); loss.backward(); opt.step()
        losses.append(loss.item())
        steps.update(note=f"loss {losses[-1]:.3f}")
    k = max(1, len(losses) // 10)
    return sum(losses[:k]) / k, sum(losses[-k:]) / k


def deep_stack(params) -> list[dict]:
    p, rows = params["deep_stack"], []
    stacks = (("shallow_plain", p["shallow_layers"], False), ("deep_plain", p["deep_layers"], False),
              ("deep_residual", p["deep_layers"], True))
    # the sub-experiments weighted by their layer count, so the ETA reflects the deep stacks' cost
    done = Progress("deep stack experiments", sum(n for _, n, _ in stacks) * len(p["seeds"]), "layer-runs", logger=log)
    for name, layers, residual in stacks:
        for seed in p["seeds"]:
            first, last = train_copy_task(p, layers, residual, seed)
            done.update(layers, note=f"{name} ({layers} layers, residual={residual}, seed {seed}): "
                                     f"loss {first:.3f} -> {last:.3f}")
            rows.append(metric(CLAIM, "copy_task_final_loss_ratio", last / math.log(p["vocab"]), "ratio", kind="quality",
                               published_key="deep_plain_stack_degrades" if name == "deep_plain" else None,
                               stack=name, layers=layers, residual=residual, seed=seed))
    return rows


def run(params: dict, scale: str, out) -> tuple[list[dict], dict]:
    """Compute the worked numbers with the suite's modules and train the deep-stack experiment."""
    rows = norm_values(params) + activation_values(params) + chain_gradients(params) + fp16_epsilon(params)
    rows += deep_stack(params)
    return rows, {"device": "cpu"}


if __name__ == "__main__":
    from repro.claims._cli import main

    raise SystemExit(main(CLAIM, run))
