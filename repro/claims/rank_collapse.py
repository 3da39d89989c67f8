"""C9 rank_collapse: pure attention loses rank doubly exponentially (Dong, Cordonnier, Loukas, ICML 2021,
arXiv 2103.03404) and rank collapse makes query/key gradients vanish at initialization unless the residual
branches are scaled with depth (Noci et al., NeurIPS 2022, arXiv 2206.03126).

Part 1 (Dong et al., main theorem and Section 3): stacks of L layers built from the shared block at random init,
for each weight init users meet (``inits``: PyTorch's default ``nn.Linear`` init, fairseq's Xavier with q/k/v gain
1/sqrt(2), plain Xavier gain 1), over several seeds, in float64 (the residual can fall to ~1e-16 before rounding):

- ``attention``: x <- MHA(x) (repro.model.MultiHeadAttention alone: Dong et al.'s SAN);
- ``attention_skip``: x <- x + MHA(x);
- ``attention_mlp``: x <- FFN(MHA(x)) (Block with residual=False, no norm);
- ``full_post`` / ``full_pre``: the real block, x <- LN(x + MHA(x)), x <- LN(x + FFN(x)) (Post-LN) or
  x <- x + MHA(LN(x)), x <- x + FFN(LN(x)) (Pre-LN).

The measure is the theorem's: res(X) = X - 1 x^T with x the column mean of X (the Frobenius-optimal token-uniform
rank-1 fit), and the residual ratio rho_L = ||res(X_L)|| / ||res(X_0)||, the ABSOLUTE residual after L layers
relative to the input's (Dong et al.: res(SAN(X)) against res(X)); Frobenius, with the composite ||.||_{1,inf}
(sqrt(||R||_1 ||R||_inf), the theorem's norm) beside it. Two diagnostics are recorded next to it: the relative
residual r = ||res(X)|| / ||X|| (which falls when the token-mean component 1 x^T grows even though res(X) does not:
with Xavier gain 1 on W_V and W_O and no normalisation, x grows geometrically in x + MHA(x), since attention at init
nearly averages the tokens), and the residual after LayerNorm, r(LN(X)) (each token normalised to zero mean and unit
variance over its features; its square is 1 minus the mean cosine over all token pairs, self-pairs included, of the
feature-centred tokens, so it measures the directional collapse a following layer sees whatever the scale of the
stream; it does NOT remove a shared token direction, so in the norm-less stacks it tracks the relative residual). A
layer whose relative residual is below ``fit_floor`` is at float64 rounding and is left out of the fits.

Doubly exponential collapse: the theorem's rate is cubic per layer, res_{L+1} <~ C res_L^3, i.e. ln rho_{L+1} =
a ln rho_L + b with a = 3; at most exponential decay (skip connections, Section 3) has a ~ 1. ``a`` is fitted per
seed over consecutive layers from the input (rho_0 = 1) on, and the seeds' 95% t-interval decides the checks. A seed
whose ln rho spans less than ``min_log_span`` over the stack (the residual did not move: PyTorch's default init with
skips changes rho by ~0.3% in 12 layers) has no exponent to fit; such a stack is judged by rho at its last layer.

Part 2 (Noci et al., abstract and Fig 1): L-layer stacks of full blocks with LayerNorm (Pre-LN and Post-LN), at
init, with residual scale 1 and 1/sqrt(L); a random readout with cross entropy on random labels gives the
gradients. Measured: ||dL/dW_Q||_F / ||dL/dW_V||_F and ||dL/dW_K||_F / ||dL/dW_V||_F per layer, their mean log
over layers against depth, and the mean pairwise token cosine at the output.

Weights: repro.model.init.init_weights. Verdict rules are in :func:`judge`.
"""
from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from repro.config import resolve_device
from repro.io import atomic_write_json, metric
from repro.model import BlockConfig, MultiHeadAttention, make_norm
from repro.model.block import Block
from repro.model.init import init_weights
from repro.stats import fit_slope, mean_std
from repro.rows import Rows
from repro.vocabulary.rank_collapse import CLAIM

log = logging.getLogger("repro.rank_collapse")
VARIANTS = ("attention", "attention_skip", "attention_mlp", "full_post", "full_pre")
DTYPES = {"float64": torch.float64, "float32": torch.float32}
MEASURES = ("residual_ratio", "residual_ratio_1inf", "relative_residual", "layernorm_residual")

# ------------------------------------------------------------------------------------------------ residuals
def _norm_1inf(m: torch.Tensor) -> torch.Tensor:
    """sqrt(||M||_1 ||M||_inf) per matrix of m (B, n, d): max column abs sum times max row abs sum."""
    a = m.abs()
    return (a.sum(1).amax(-1) * a.sum(2).amax(-1)).sqrt()


def relative_residual(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(B,) relative residuals ||X - 1 x^T|| / ||X|| of each sequence x (B, n, d): Frobenius and composite norm."""
    res = x - x.mean(1, keepdim=True)  # X - 1 x^T, x = column mean
    return res.flatten(1).norm(dim=1) / x.flatten(1).norm(dim=1), _norm_1inf(res) / _norm_1inf(x)


def residual_norms(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(B,) absolute residuals ||X - 1 x^T|| per sequence: Frobenius and composite (1, inf) norm."""
    res = x - x.mean(1, keepdim=True)
    return res.flatten(1).norm(dim=1), _norm_1inf(res)


def measures(x: torch.Tensor, res0: tuple[torch.Tensor, torch.Tensor]) -> dict[str, float]:
    """The batch means of the residual measures of x (B, n, d) given the input's absolute residuals ``res0``:
    residual_ratio(_1inf) = ||res(X)|| / ||res(X_0)|| (Dong et al.'s), relative_residual = ||res(X)|| / ||X||,
    layernorm_residual = the relative residual of LayerNorm(X) (no affine)."""
    fro, n1 = residual_norms(x)
    ln = relative_residual(F.layer_norm(x, x.shape[-1:]))[0]
    return {"residual_ratio": (fro / res0[0]).mean().item(), "residual_ratio_1inf": (n1 / res0[1]).mean().item(),
            "relative_residual": (fro / x.flatten(1).norm(dim=1)).mean().item(), "layernorm_residual": ln.mean().item()}


class SkipAttention(nn.Module):
    """x + MHA(x): attention with a skip connection and nothing else."""

    def __init__(self, cfg: BlockConfig):
        super().__init__()
        self.attn = MultiHeadAttention(cfg)

    def forward(self, x):
        return x + self.attn(x)


def build_stack(variant: str, p: dict, layers: int, seed: int, init: str) -> nn.ModuleList:
    full = variant in ("full_post", "full_pre")
    cfg = BlockConfig(d_model=p["d_model"], n_heads=p["n_heads"], d_ff=p["d_ff"], norm="layernorm" if full else "none",
                      norm_position="post" if variant == "full_post" else "pre", attention=p["attention"], ffn="relu",
                      residual=full)
    torch.manual_seed(seed)
    if variant == "attention":
        mods = [MultiHeadAttention(cfg) for _ in range(layers)]
    elif variant == "attention_skip":
        mods = [SkipAttention(cfg) for _ in range(layers)]
    elif variant == "attention_mlp" or full:
        mods = [Block(cfg) for _ in range(layers)]
    else:
        raise ValueError(f"dong.variants: unknown variant {variant!r} (valid: {', '.join(VARIANTS)})")
    stack = nn.ModuleList(mods)
    init_weights(stack, init)
    return stack


def residual_curves(p: dict, device, dtype) -> list[dict]:
    """The residual measures after each layer, per init, variant and seed (layer 0 = the input, the same Gaussian
    input for every init and variant of a seed)."""
    q, rows = p["dong"], []
    for init in p["inits"]:
        for variant in q["variants"]:
            for seed in p["seeds"]:
                stack = build_stack(variant, q, q["depth"], seed, init).to(device=device, dtype=dtype)
                gen = torch.Generator().manual_seed(50_000 + seed)
                x = torch.randn(q["batch"], q["n_tokens"], q["d_model"], generator=gen, dtype=dtype).to(device)
                res0, curve = residual_norms(x), []
                with torch.no_grad():
                    for layer in range(q["depth"] + 1):
                        if layer:
                            x = stack[layer - 1](x)
                        m = measures(x, res0)
                        curve.append(m["residual_ratio"])
                        rows += [metric(CLAIM, name, value, "ratio", kind="statistic", init=init, variant=variant, layer=layer, seed=seed)
                                 for name, value in m.items()]
                log.info("residual ratio %s %s seed %d: %s", init, variant, seed, " ".join(f"{v:.2e}" for v in curve))
    return rows


def per_layer_exponent(rho: list[float], r: list[float], floor: float, min_span: float) -> tuple[float | None, int]:
    """Fit ln rho_{L+1} = a ln rho_L + b over consecutive layers (from the input on) whose relative residuals ``r``
    are both above ``floor`` (float64 rounding). Returns (a, pairs); a is None with fewer than 2 pairs or when
    ln rho_L spans less than ``min_span`` over them (the residual did not move: there is no decay to fit)."""
    pairs = [(math.log(rho[i]), math.log(rho[i + 1])) for i in range(len(rho) - 1)
             if r[i] > floor and r[i + 1] > floor and rho[i] > 0 and rho[i + 1] > 0]
    xs = [a for a, _ in pairs]
    if len(pairs) < 2 or max(xs) - min(xs) < min_span:
        return None, len(pairs)
    return fit_slope(xs, [b for _, b in pairs]), len(pairs)


def collapse_depth(curve: list[float], threshold: float, never: float) -> float:
    """Fractional layer at which the residual first falls below ``threshold`` (linear in log between the two layers
    around the crossing); ``never`` when it stays above."""
    for i in range(1, len(curve)):
        if curve[i] < threshold:
            a, b, t = math.log(curve[i - 1]), math.log(curve[i]), math.log(threshold)
            return float(i) if curve[i - 1] < threshold else i - 1 + (a - t) / (a - b)
    return float(0 if curve and curve[0] < threshold else never)


def _curves(rows: list[dict]) -> dict[tuple, list[float]]:
    """{(measure, init, variant, seed): values by layer} of the per-layer rows."""
    out: dict[tuple, dict[int, float]] = {}
    for r in Rows(rows).metric(*MEASURES):
        s = r["sweep"]
        out.setdefault((r["metric"], s["init"], s["variant"], s["seed"]), {})[s["layer"]] = r["value"]
    return {k: [v[i] for i in sorted(v)] for k, v in out.items()}


def _geo(values: list[float]) -> tuple[float, float | None]:
    """Geometric mean and the std of the logs."""
    logs = np.log(np.maximum(values, 1e-300))
    return float(np.exp(logs.mean())), float(logs.std(ddof=1)) if len(logs) > 1 else None


def residual_summary(rows: list[dict], p: dict) -> list[dict]:
    """Per init and variant: the per-layer exponent (mean +- std over the seeds whose curve could be fitted), the
    paired exponent gap between pure attention and attention + skip, the layers to collapse, and the measures at the
    last layer (geometric means over seeds; spread = std of the logs)."""
    q, out, cur = p["dong"], [], _curves(rows)
    for init in p["inits"]:
        exps: dict[str, dict[int, float]] = {}
        for variant in q["variants"]:
            exps[variant], depths, pairs = {}, [], 0
            for seed in p["seeds"]:
                rho, r = cur[("residual_ratio", init, variant, seed)], cur[("relative_residual", init, variant, seed)]
                a, n = per_layer_exponent(rho, r, q["fit_floor"], q["min_log_span"])
                pairs += n
                if a is not None:
                    exps[variant][seed] = a
                depths.append(collapse_depth(rho, q["collapse_threshold"], q["depth"] + 1))
            m, s = mean_std(list(exps[variant].values())) if exps[variant] else (None, None)
            out.append(metric(CLAIM, "per_layer_exponent", m, "d ln rho_(L+1) / d ln rho_L", spread=s,
                              n=len(exps[variant]), published_key="dong_rate_exponent_base" if variant == "attention"
                              else None, init=init, variant=variant, pairs=pairs, fit="per seed, mean over seeds"))
            m, s = mean_std(depths)
            out.append(metric(CLAIM, "collapse_depth", m, "layers", spread=s, n=len(depths), init=init,
                              variant=variant, threshold=q["collapse_threshold"], never=q["depth"] + 1))
            out.append(metric(CLAIM, "collapsed_fraction", float(np.mean([d <= q["depth"] for d in depths])),
                              "fraction", kind="statistic", n=len(depths), init=init, variant=variant,
                              threshold=q["collapse_threshold"], depth=q["depth"]))
            for name in MEASURES:
                g, s = _geo([cur[(name, init, variant, seed)][-1] for seed in p["seeds"]])
                key = ("dong_skip_prevents_collapse" if name == "residual_ratio" and variant == "attention_skip"
                       else None)
                out.append(metric(CLAIM, f"final_{name}", g, "ratio", spread=s, n=len(p["seeds"]), published_key=key,
                                  kind="statistic",
                                  init=init, variant=variant, depth=q["depth"], mean="geometric",
                                  spread_of="ln value"))
            log.info("%s %s: per-layer exponent %s, residual ratio at depth %d %.2e (relative %.2e, after LN %.2e)",
                     init, variant, {k: round(v, 2) for k, v in exps[variant].items()}, q["depth"],
                     out[-4]["value"], out[-2]["value"], out[-1]["value"])
        if "attention" in exps and "attention_skip" in exps:
            gap = [exps["attention"][s] - exps["attention_skip"][s] for s in p["seeds"]
                   if s in exps["attention"] and s in exps["attention_skip"]]
            m, s = mean_std(gap) if gap else (None, None)
            out.append(metric(CLAIM, "exponent_gap_vs_skip", m, "exponent difference", spread=s, n=len(gap),
                              init=init, variant="attention", minus="attention_skip", paired="by seed"))
    return out


# ------------------------------------------------------------------------------------------------ Noci et al.
def qkv_gradients(p: dict, device, dtype) -> list[dict]:
    """Per-layer ||dW_Q||, ||dW_K||, ||dW_V|| and the output token cosine, with and without 1/sqrt(L) scaling."""
    q, rows = p["noci"], []
    for init in p["inits"]:
        for position in q["norm_positions"]:
            for L in q["depths"]:
                for scaled in (False, True):
                    for seed in p["seeds"]:
                        rows += _qkv_one(q, init, position, L, scaled, seed, device, dtype)
                last = Rows(rows).metric("token_cosine").where(position=position, depth=L, init=init)
                log.info("Noci %s %s-LN depth %d: token cosine plain %.3f, scaled %.3f", init, position, L,
                         np.mean(last.filter(lambda r: not r["sweep"]["scaled"]).values()),
                         np.mean(last.filter(lambda r: r["sweep"]["scaled"]).values()))
    return rows


def _qkv_one(q: dict, init: str, position: str, L: int, scaled: bool, seed: int, device, dtype) -> list[dict]:
    cfg = BlockConfig(d_model=q["d_model"], n_heads=q["n_heads"], d_ff=q["d_ff"], norm="layernorm",
                      norm_position=position, attention=q["attention"], ffn="relu",
                      residual_scale=L ** -0.5 if scaled else 1.0)
    torch.manual_seed(seed)
    blocks = nn.ModuleList(Block(cfg) for _ in range(L))
    init_weights(blocks, init)
    blocks.to(device=device, dtype=dtype)
    for name, w in blocks.named_parameters():  # only W_Q, W_K, W_V's gradients are read: skip the others' (~30% of time)
        w.requires_grad_(name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight")))
    final = make_norm("layernorm", q["d_model"]).to(device=device, dtype=dtype) if position == "pre" else nn.Identity()
    gen = torch.Generator().manual_seed(60_000 + seed)
    x = torch.randn(q["batch"], q["n_tokens"], q["d_model"], generator=gen, dtype=dtype)
    readout = torch.empty(q["classes"], q["d_model"], dtype=dtype)
    nn.init.xavier_uniform_(readout, generator=gen)
    labels = torch.randint(0, q["classes"], (q["batch"], q["n_tokens"]), generator=gen)
    h = x.to(device)
    for b in blocks:
        h = b(h)
    loss = F.cross_entropy((final(h) @ readout.to(device).t()).flatten(0, 1), labels.to(device).flatten())
    loss.backward()
    with torch.no_grad():
        hn = F.normalize(h, dim=-1)
        n = q["n_tokens"]
        cos = ((hn @ hn.transpose(1, 2)).sum((1, 2)) - hn.pow(2).sum((1, 2))) / (n * (n - 1))
    common = dict(init=init, position=position, depth=L, scaled=scaled, seed=seed)
    rows = [metric(CLAIM, "token_cosine", cos.mean().item(), "cosine", **common)]
    for i, b in enumerate(blocks):
        for m in ("q_proj", "k_proj", "v_proj"):
            rows.append(metric(CLAIM, "attn_weight_grad_norm", getattr(b.self_attn, m).weight.grad.norm().item(),
                               "frobenius", layer=i + 1, matrix=m, **common))
    return rows


def qkv_summary(rows: list[dict], p: dict) -> list[dict]:
    """Per (init, position, scaled): mean over layers of ln(||dW_Q|| / ||dW_V||) (and K) per depth and seed, its
    slope against ln(depth) per seed (mean +- std), the token cosine per depth, and its rise from the shallowest to
    the deepest stack per seed (mean +- std)."""
    q, out = p["noci"], []
    index = {(r["sweep"]["init"], r["sweep"]["position"], r["sweep"]["depth"], r["sweep"]["scaled"],
              r["sweep"]["seed"], r["sweep"]["layer"], r["sweep"]["matrix"]): r["value"]
             for r in Rows(rows).metric("attn_weight_grad_norm")}
    cos = {(r["sweep"]["init"], r["sweep"]["position"], r["sweep"]["depth"], r["sweep"]["scaled"], r["sweep"]["seed"]):
           r["value"] for r in Rows(rows).metric("token_cosine")}
    for init in p["inits"]:
        for position in q["norm_positions"]:
            for scaled in (False, True):
                label = "1/sqrt(L)" if scaled else "1"
                common = dict(init=init, position=position, scaled=scaled, residual_scale=label)
                for m in ("q_proj", "k_proj"):
                    per_seed = {}
                    for L in q["depths"]:
                        vals = []
                        for seed in p["seeds"]:
                            k = (init, position, L, scaled, seed)
                            vals.append(float(np.mean([math.log(index[(*k, i, m)] / index[(*k, i, "v_proj")])
                                                       for i in range(1, L + 1)])))
                            per_seed.setdefault(seed, []).append(vals[-1])
                        mu, sd = mean_std(vals)
                        out.append(metric(CLAIM, f"log_{m[0]}_over_v_grad", mu, "mean over layers of ln ratio",
                                          spread=sd, n=len(vals), depth=L, **common))
                    lx = [math.log(L) for L in q["depths"]]
                    mu, sd = mean_std([fit_slope(lx, v) for v in per_seed.values()])
                    # the registry's noci_residual_scaling_exponent (-0.5) is the scaling applied (residual_scale
                    # L^-0.5), not a measured quantity, so no measured row carries it
                    key = "noci_qk_gradients_vanish" if m == "q_proj" and not scaled else None
                    out.append(metric(CLAIM, f"{m[0]}_over_v_depth_slope", mu, "d ln(ratio) / d ln(L)", spread=sd,
                                      n=len(per_seed), published_key=key, **common))
                for L in q["depths"]:
                    mu, sd = mean_std([cos[(init, position, L, scaled, s)] for s in p["seeds"]])
                    out.append(metric(CLAIM, "token_cosine_mean", mu, "cosine", spread=sd, n=len(p["seeds"]),
                                      published_key="noci_fig1_token_cosine", depth=L, **common))
                d0, d1 = min(q["depths"]), max(q["depths"])
                mu, sd = mean_std([cos[(init, position, d1, scaled, s)] - cos[(init, position, d0, scaled, s)]
                                   for s in p["seeds"]])
                out.append(metric(CLAIM, "token_cosine_rise", mu, "cosine", spread=sd, n=len(p["seeds"]),
                                  from_depth=d0, to_depth=d1, **common))
    return out


def run(params: dict, scale: str, out) -> tuple[list[dict], dict]:
    """Residual vs depth for the stacks and inits, and Q/K vs V gradients with and without residual scaling."""
    device = resolve_device(params["device"], "rank_collapse.device")
    dtype = DTYPES[params["dtype"]]
    atomic_write_json(Path(out) / "setup.json", {"device": str(device), "dtype": params["dtype"],
                                                 "inits": params["inits"]})
    rows = residual_curves(params, device, dtype)
    rows += residual_summary(rows, params)
    grads = qkv_gradients(params, device, dtype)
    rows += grads + qkv_summary(grads, params)
    return rows, {"device": str(device)}


if __name__ == "__main__":
    from repro.claims._cli import main

    raise SystemExit(main(CLAIM, run))
