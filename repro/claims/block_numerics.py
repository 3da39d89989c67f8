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
from repro.verdicts import Rows, check, gate, gated, numbers, setup_table, verdict_from_checks

CLAIM = "block_numerics"
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


def judge(rows: list[dict], params: dict, scale: str) -> dict:
    """Headline: the worked values (norms, activations, 0.9^40 / 1.1^40) match the published ones to their
    rounding. Secondary: the residual chain's gradient (1 + F'(x), branch gain about 1), fp16 epsilon, and the
    deep-stack trainability experiment, which is decided only when its two controls (the shallow plain stack and
    the deep residual stack) learned in every seed and the deep plain stack agrees across seeds."""
    R = Rows(rows)
    deep_checks, gates = _deep_stack_checks(R, params)
    checks = [*_worked_value_checks(R, params), *_plain_chain_checks(R), *_residual_chain_checks(R, params),
              *_fp16_checks(R), *deep_checks]
    return verdict_from_checks(CLAIM, checks, scale, gates=gates, setup=_setup(params))


def _worked_value_checks(R: Rows, params: dict) -> list[dict]:
    """The norm and activation outputs against their published values (to ``value_tolerance``)."""
    tol, checks = params["value_tolerance"], []
    for r in R.filter(lambda r: r["metric"].endswith("_output")):
        pv = r.get("published_value")
        if isinstance(pv, (int, float)):
            checks.append(check(f"{r['metric']}[{r['sweep'].get('index', r['sweep'].get('x'))}]",
                                abs(r["value"] - pv) < tol, f"{r['value']:.4f}", f"{pv} ({r['source']})",
                                headline=True, numbers=numbers(r["value"], r.get("unit") or "value", paper=pv,
                                                               compare="difference")))
    return checks


def _plain_chain_checks(R: Rows) -> list[dict]:
    """g^L through a plain chain of L layers of gain g, against the published 0.9^40 and 1.1^40."""
    checks = []
    for r in R.metric("plain_chain_gradient_gain"):
        if isinstance(r.get("published_value"), (int, float)):
            pv = r["published_value"]
            checks.append(check(f"gradient through {r['sweep']['depth']} layers of gain {r['sweep']['gain']}",
                                abs(r["value"] - pv) < 0.005 * pv + 0.00005, f"{r['value']:.4g}", f"{pv}",
                                headline=True, numbers=numbers(r["value"], "gradient gain", paper=pv, compare="ratio")))
    return checks


def _residual_chain_checks(R: Rows, params: dict) -> list[dict]:
    """The residual chain's gradient passes through 1 + F'(x): never below 1, per-layer factor below the bound."""
    res, plain = R.metric("residual_chain_gradient_gain"), R.metric("plain_chain_gradient_gain")
    if not res:
        return []
    tol_rel = params["residual_growth_tolerance"]
    # 1 + F'(x) with F' = c g Q (random orthogonal): each layer multiplies E||grad||^2 by 1 + (c g)^2, so the
    # geometric-mean factor per layer lies between 1 and sqrt(1 + (c g)^2) (Jensen); no skip would give g < 1
    parts, ok = [], []
    for g in sorted(res.sweep("gain")):
        vals = res.where(gain=g).values()
        c, depth = res[0]["sweep"]["branch_gain"], res[0]["sweep"]["depth"]
        per_layer = [v ** (1 / depth) for v in vals]
        pred = math.sqrt(1 + (c * g) ** 2)
        plain_g = plain.where(gain=g).value(float("nan"))
        ok.append(min(vals) >= 1.0 and all(1.0 <= pl < pred * (1 + tol_rel) for pl in per_layer))
        parts.append(f"gain {g}: residual {min(vals):.3g}..{max(vals):.3g} over {len(vals)} seeds (plain "
                     f"{plain_g:.3g}); per layer {min(per_layer):.4f}..{max(per_layer):.4f} vs sqrt(1+(cg)^2) = "
                     f"{pred:.4f}")
    return [check("residual chain: the gradient passes through 1 + F'(x) and does not vanish", all(ok),
                  "; ".join(parts), f"every seed >= 1 where the plain chain gives g^{depth}; per-layer "
                  f"factor between 1 (the identity path) and sqrt(1 + (c g)^2) (+{tol_rel:.0%}), the root of "
                  f"E||(I + c W)u||^2 / ||u||^2 for random orthogonal W (branch gain c = {c})")]


def _fp16_checks(R: Rows) -> list[dict]:
    """An fp16 norm epsilon of 1e-8 underflows to 0 (a constant row normalises to NaN); 1e-5 does not."""
    stored = {r["sweep"]["eps"]: r["value"] for r in R.metric("fp16_stored_eps")}
    finite = {r["sweep"]["eps"]: r["value"] for r in R.metric("fp16_norm_of_constant_is_finite")}
    if not (1e-8 in stored and 1e-5 in stored):
        return []
    return [check("fp16: eps 1e-8 underflows, 1e-5 does not",
                  stored[1e-8] == 0.0 and stored[1e-5] > 0 and finite[1e-8] == 0 and finite[1e-5] == 1,
                  f"1e-8 -> {stored[1e-8]:g} (norm finite: {bool(finite[1e-8])}), 1e-5 -> {stored[1e-5]:.4g} "
                  f"(norm finite: {bool(finite[1e-5])})", "1e-8 underflows to 0; 1e-5 is representable")]


def _deep_stack_checks(R: Rows, params: dict) -> tuple[list[dict], list[dict]]:
    """(checks, gates) of the copy task: the deep plain stack does not train, gated on its two controls learning."""
    frac = params["deep_stack"].get("learned_fraction", 0.5)
    by = {stack: g.values() for stack, g in R.metric("copy_task_final_loss_ratio").by("stack").items()}
    if not by:
        return [], []
    controls = {k: v for k, v in by.items() if k != "deep_plain"}
    gates = [gate("the control stacks learned (shallow plain, deep residual)",
                  all(max(v) < frac for v in controls.values()) and len(controls) == 2,
                  ", ".join(f"{k}: final/initial loss {min(v):.2f}..{max(v):.2f}" for k, v in controls.items()),
                  f"every seed below {frac} of ln(vocab)")]
    deep = by.get("deep_plain", [])
    fails_all, learns_all = all(v > frac for v in deep), all(v < frac for v in deep)
    c = check("a deep stack without residuals does not train where shallow and residual ones do",
              True if fails_all else False if learns_all else None,
              f"deep plain: final/initial loss {min(deep):.2f}..{max(deep):.2f} over {len(deep)} seeds",
              f"deep plain stays above {frac} of ln(vocab) in every seed",
              interval=f"range over {len(deep)} seeds",
              undecided_because=None if fails_all or learns_all else "the seeds disagree")
    return [gated(c, gates)], gates


def _setup(params: dict) -> list[dict]:
    """The page's "Setup beside the paper" rows."""
    p = params["deep_stack"]
    return setup_table(CLAIM, {
        "source": "the suite's own modules (repro.model norms and activations), chains of orthogonal matrices",
        "training claim": f"copy task on Pre-LN encoder stacks ({p['shallow_layers']} vs {p['deep_layers']} layers, "
                          f"d {p['d_model']}, {p['steps']} Adam steps, seeds {p['seeds']}), with and without skips"})


def run(params: dict, scale: str, out) -> tuple[list[dict], dict]:
    """Compute the worked numbers with the suite's modules and train the deep-stack experiment."""
    rows = norm_values(params) + activation_values(params) + chain_gradients(params) + fp16_epsilon(params)
    rows += deep_stack(params)
    return rows, judge(rows, params, scale)


if __name__ == "__main__":
    from repro.claims._cli import main

    raise SystemExit(main(CLAIM, run))
