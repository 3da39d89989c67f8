"""C9 rank_collapse: pure attention loses rank doubly exponentially (Dong, Cordonnier, Loukas, ICML 2021,
arXiv 2103.03404) and rank collapse makes query/key gradients vanish at initialization unless the residual
branches are scaled with depth (Noci et al., NeurIPS 2022, arXiv 2206.03126).

Part 1 (Dong et al., main theorem and Section 3): stacks of L layers built from the shared block at random init,
over several seeds, in float64 (so the residual can fall to about 1e-16 before it hits rounding):

- ``attention``: x <- MHA(x) (repro.model.MultiHeadAttention alone);
- ``attention_skip``: x <- x + MHA(x);
- ``attention_mlp``: x <- FFN(MHA(x)) (repro.model Block with residual=False, norm "none");
- ``full``: x <- x + MHA(x), x <- x + FFN(x) (Block with residual=True, norm "none").

The relative residual is r(X) = ||X - 1 x^T||_F / ||X||_F with x the column mean of X (the Frobenius-optimal
token-uniform rank-1 fit), per sequence and averaged over the batch; the composite ||.||_{1,inf} version
(sqrt(||R||_1 ||R||_inf), the norm of the theorem) is recorded beside it. The theorem's rate is cubic per layer,
res_{L+1} <~ C res_L^3, i.e. log r_L ~ 3^L: we fit log r_{L+1} = a log r_L + b over consecutive layers whose
residuals are between ``fit_floor`` and ``fit_ceiling`` (a = 3 for the doubly exponential collapse, a ~ 1 for at
most exponential decay), and count the layers until r falls below ``collapse_threshold``.

Part 2 (Noci et al., abstract and Fig 1): L-layer stacks of full blocks with LayerNorm (Pre-LN and Post-LN), at
init, with residual scale 1 and 1/sqrt(L); a random readout with cross entropy on random labels gives the
gradients. Measured: ||dL/dW_Q||_F / ||dL/dW_V||_F and ||dL/dW_K||_F / ||dL/dW_V||_F per layer, their mean log
over layers against depth, and the mean pairwise token cosine at the output.

Weights: ``init: xavier`` (Xavier uniform, gain 1, zero biases) or ``fairseq``/``pytorch`` (see
repro.claims.prepost_gradients.init_weights). Verdict rules are in :func:`judge`.
"""
from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from repro.bench.records import atomic_write_json, check, metric, verdict_from_checks
from repro.claims.prepost_gradients import fit_slope, init_weights, mean_std
from repro.config import resolve_device
from repro.model import BlockConfig, MultiHeadAttention, make_norm
from repro.model.block import Block

CLAIM = "rank_collapse"
log = logging.getLogger("repro.rank_collapse")
VARIANTS = ("attention", "attention_skip", "attention_mlp", "full")
DTYPES = {"float64": torch.float64, "float32": torch.float32}


# ------------------------------------------------------------------------------------------------ residuals
def relative_residual(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(B,) relative residuals of each sequence x (B, n, d): Frobenius and composite (1, inf) norm."""
    res = x - x.mean(1, keepdim=True)  # X - 1 x^T, x = column mean
    fro = res.flatten(1).norm(dim=1) / x.flatten(1).norm(dim=1)

    def norm_1inf(m):  # sqrt(||M||_1 ||M||_inf): max column abs sum times max row abs sum
        a = m.abs()
        return (a.sum(1).amax(-1) * a.sum(2).amax(-1)).sqrt()

    return fro, norm_1inf(res) / norm_1inf(x)


class SkipAttention(nn.Module):
    """x + MHA(x): attention with a skip connection and nothing else."""

    def __init__(self, cfg: BlockConfig):
        super().__init__()
        self.attn = MultiHeadAttention(cfg)

    def forward(self, x):
        return x + self.attn(x)


def build_stack(variant: str, p: dict, layers: int, seed: int, init: str) -> nn.ModuleList:
    cfg = BlockConfig(d_model=p["d_model"], n_heads=p["n_heads"], d_ff=p["d_ff"], norm="none",
                      attention=p["attention"], ffn="relu", residual=variant == "full")
    torch.manual_seed(seed)
    if variant == "attention":
        mods = [MultiHeadAttention(cfg) for _ in range(layers)]
    elif variant == "attention_skip":
        mods = [SkipAttention(cfg) for _ in range(layers)]
    elif variant in ("attention_mlp", "full"):
        mods = [Block(cfg) for _ in range(layers)]
    else:
        raise ValueError(f"dong.variants: unknown variant {variant!r} (valid: {', '.join(VARIANTS)})")
    stack = nn.ModuleList(mods)
    init_weights(stack, init, p["d_model"])
    return stack


def residual_curves(p: dict, device, dtype) -> list[dict]:
    """Relative residual after each layer, per variant and seed (layer 0 = the input)."""
    q, rows = p["dong"], []
    for variant in q["variants"]:
        for seed in p["seeds"]:
            stack = build_stack(variant, q, q["depth"], seed, p["init"]).to(device=device, dtype=dtype)
            gen = torch.Generator().manual_seed(50_000 + seed)
            x = torch.randn(q["batch"], q["n_tokens"], q["d_model"], generator=gen, dtype=dtype).to(device)
            curve = []
            with torch.no_grad():
                for layer in range(q["depth"] + 1):
                    if layer:
                        x = stack[layer - 1](x)
                    fro, n1inf = relative_residual(x)
                    curve.append(fro.mean().item())
                    rows.append(metric(CLAIM, "relative_residual", fro.mean().item(), "ratio", variant=variant,
                                       layer=layer, seed=seed, norm="frobenius"))
                    rows.append(metric(CLAIM, "relative_residual_1inf", n1inf.mean().item(), "ratio", variant=variant,
                                       layer=layer, seed=seed, norm="1,inf"))
            log.info("residual %s seed %d: %s", variant, seed, " ".join(f"{v:.2e}" for v in curve))
    return rows


def per_layer_exponent(curve: list[float], floor: float, ceiling: float) -> tuple[float | None, int]:
    """Fit log r_{L+1} = a log r_L + b over consecutive pairs with both residuals inside (floor, ceiling].

    The source residual is also required to be at most ``ceiling`` so log r_L is far from 0. Returns (a, pairs);
    a is None with fewer than 2 pairs."""
    pairs = [(math.log(a), math.log(b)) for a, b in zip(curve, curve[1:])
             if floor < a <= ceiling and floor < b <= ceiling]
    if len(pairs) < 2:
        return None, len(pairs)
    return fit_slope([a for a, _ in pairs], [b for _, b in pairs]), len(pairs)


def collapse_depth(curve: list[float], threshold: float, never: float) -> float:
    """Fractional layer at which r first falls below ``threshold`` (linear in log r between the two layers
    around the crossing); ``never`` when it stays above."""
    for i in range(1, len(curve)):
        if curve[i] < threshold:
            a, b, t = math.log(curve[i - 1]), math.log(curve[i]), math.log(threshold)
            return float(i) if curve[i - 1] < threshold else i - 1 + (a - t) / (a - b)
    return float(0 if curve and curve[0] < threshold else never)


def residual_summary(rows: list[dict], p: dict) -> list[dict]:
    q, out = p["dong"], []
    res = [r for r in rows if r["metric"] == "relative_residual"]
    for variant in q["variants"]:
        exps, depths, finals, pooled, curves = [], [], [], [], []
        for seed in p["seeds"]:
            curve = [r["value"] for r in sorted((r for r in res if r["sweep"]["variant"] == variant
                                                 and r["sweep"]["seed"] == seed), key=lambda r: r["sweep"]["layer"])]
            curves.append(curve)
            a, _ = per_layer_exponent(curve, q["fit_floor"], q["fit_ceiling"])
            if a is not None:
                exps.append(a)
            pooled += [(math.log(x), math.log(y)) for x, y in zip(curve, curve[1:])
                       if q["fit_floor"] < x <= q["fit_ceiling"] and q["fit_floor"] < y <= q["fit_ceiling"]]
            depths.append(collapse_depth(curve, q["collapse_threshold"], q["depth"] + 1))
            finals.append(curve[-1])
        for layer in range(1, q["depth"]):  # ratio of successive log-residuals, 3 for a pure cubic map
            ratios = [math.log(c[layer + 1]) / math.log(c[layer]) for c in curves
                      if q["fit_floor"] < c[layer + 1] and q["fit_floor"] < c[layer] <= q["fit_ceiling"]]
            if ratios:
                m, s = mean_std(ratios)
                out.append(metric(CLAIM, "log_residual_ratio", m, "ln r_(L+1) / ln r_L", spread=s, n=len(ratios),
                                  variant=variant, layer=layer))
        a_pool = fit_slope(*zip(*pooled)) if len(pooled) >= 2 else None
        spread = float(np.std(exps, ddof=1)) if len(exps) > 1 else None
        out.append(metric(CLAIM, "per_layer_exponent", a_pool, "d ln r_{L+1} / d ln r_L", spread=spread,
                          n=len(pooled), published_key="dong_rate_exponent_base" if variant == "attention" else None,
                          variant=variant, fit="pooled over seeds", seeds_fitted=len(exps)))
        m, s = mean_std(depths)
        out.append(metric(CLAIM, "collapse_depth", m, "layers", spread=s, n=len(depths), variant=variant,
                          threshold=q["collapse_threshold"], never=q["depth"] + 1))
        out.append(metric(CLAIM, "collapsed_fraction", float(np.mean([d <= q["depth"] for d in depths])), "fraction",
                          n=len(depths), variant=variant, threshold=q["collapse_threshold"], depth=q["depth"]))
        # never-collapsing seeds count as depth + 1 in collapse_depth
        out.append(metric(CLAIM, "final_relative_residual", float(np.exp(np.mean(np.log(finals)))), "ratio",
                          spread=float(np.std(np.log(finals), ddof=1)) if len(finals) > 1 else None, n=len(finals),
                          published_key="dong_skip_prevents_collapse" if variant == "attention_skip" else None,
                          variant=variant, depth=q["depth"], mean="geometric"))
        log.info("%s: per-layer exponent %s, collapse depth %.1f, residual at depth %d %.2e", variant,
                 "n/a" if a_pool is None else f"{a_pool:.2f}", m, q["depth"], out[-1]["value"])
    return out


# ------------------------------------------------------------------------------------------------ Noci et al.
def qkv_gradients(p: dict, device, dtype) -> list[dict]:
    """Per-layer ||dW_Q||, ||dW_K||, ||dW_V|| and the output token cosine, with and without 1/sqrt(L) scaling."""
    q, rows = p["noci"], []
    for position in q["norm_positions"]:
        for L in q["depths"]:
            for scaled in (False, True):
                for seed in p["seeds"]:
                    cfg = BlockConfig(d_model=q["d_model"], n_heads=q["n_heads"], d_ff=q["d_ff"], norm="layernorm",
                                      norm_position=position, attention=q["attention"], ffn="relu",
                                      residual_scale=L ** -0.5 if scaled else 1.0)
                    torch.manual_seed(seed)
                    blocks = nn.ModuleList(Block(cfg) for _ in range(L))
                    init_weights(blocks, p["init"], q["d_model"])
                    blocks.to(device=device, dtype=dtype)
                    final = make_norm("layernorm", q["d_model"]).to(device=device, dtype=dtype) \
                        if position == "pre" else nn.Identity()
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
                    common = dict(position=position, depth=L, scaled=scaled, seed=seed)
                    rows.append(metric(CLAIM, "token_cosine", cos.mean().item(), "cosine", **common))
                    for i, b in enumerate(blocks):
                        for m in ("q_proj", "k_proj", "v_proj"):
                            rows.append(metric(CLAIM, "attn_weight_grad_norm",
                                               getattr(b.self_attn, m).weight.grad.norm().item(), "frobenius",
                                               layer=i + 1, matrix=m, **common))
            last = [r for r in rows if r["metric"] == "token_cosine" and r["sweep"]["position"] == position
                    and r["sweep"]["depth"] == L]
            log.info("Noci %s-LN depth %d: token cosine plain %.3f, scaled %.3f", position, L,
                     np.mean([r["value"] for r in last if not r["sweep"]["scaled"]]),
                     np.mean([r["value"] for r in last if r["sweep"]["scaled"]]))
    return rows


def qkv_summary(rows: list[dict], p: dict) -> list[dict]:
    """Per (position, scaled): mean over layers of ln(||dW_Q|| / ||dW_V||) (and K) per depth and seed, its slope
    against ln(depth) per seed (mean +- std), and the token cosine per depth."""
    q, out = p["noci"], []
    g = [r for r in rows if r["metric"] == "attn_weight_grad_norm"]
    index = {(r["sweep"]["position"], r["sweep"]["depth"], r["sweep"]["scaled"], r["sweep"]["seed"],
              r["sweep"]["layer"], r["sweep"]["matrix"]): r["value"] for r in g}
    cos = {(r["sweep"]["position"], r["sweep"]["depth"], r["sweep"]["scaled"], r["sweep"]["seed"]): r["value"]
           for r in rows if r["metric"] == "token_cosine"}
    for position in q["norm_positions"]:
        for scaled in (False, True):
            label = "1/sqrt(L)" if scaled else "1"
            for m in ("q_proj", "k_proj"):
                per_seed = {}
                for L in q["depths"]:
                    vals = []
                    for seed in p["seeds"]:
                        lr = [math.log(index[(position, L, scaled, seed, i, m)] / index[(position, L, scaled, seed, i, "v_proj")])
                              for i in range(1, L + 1)]
                        vals.append(float(np.mean(lr)))
                        per_seed.setdefault(seed, []).append(vals[-1])
                    mu, sd = mean_std(vals)
                    out.append(metric(CLAIM, f"log_{m[0]}_over_v_grad", mu, "mean over layers of ln ratio", spread=sd,
                                      n=len(vals), position=position, depth=L, scaled=scaled, residual_scale=label))
                lx = [math.log(L) for L in q["depths"]]
                slopes = [fit_slope(lx, v) for v in per_seed.values()]
                mu, sd = mean_std(slopes)
                # the registry's noci_residual_scaling_exponent (-0.5) is the scaling applied (residual_scale
                # L^-0.5), not a measured quantity, so no measured row carries it
                key = "noci_qk_gradients_vanish" if m == "q_proj" and not scaled else None
                out.append(metric(CLAIM, f"{m[0]}_over_v_depth_slope", mu, "d ln(ratio) / d ln(L)", spread=sd,
                                  n=len(slopes), published_key=key, position=position, scaled=scaled,
                                  residual_scale=label))
            for L in q["depths"]:
                mu, sd = mean_std([cos[(position, L, scaled, s)] for s in p["seeds"]])
                out.append(metric(CLAIM, "token_cosine_mean", mu, "cosine", spread=sd, n=len(p["seeds"]),
                                  published_key="noci_fig1_token_cosine", position=position, depth=L, scaled=scaled,
                                  residual_scale=label))
    return out


# ------------------------------------------------------------------------------------------------ verdict
def _one(rows, name, **sweep):
    return next((r for r in rows if r["metric"] == name and all(r["sweep"].get(k) == v for k, v in sweep.items())),
                None)


def judge(rows: list[dict], params: dict, scale: str) -> dict:
    """Checks (thresholds in params["checks"]; SE = seeds' std / sqrt(seeds)):

    1. Pure attention collapses doubly exponentially: its pooled per-layer exponent a (log r_{L+1} vs log r_L) is
       within ``cubic_tolerance`` of 3, and every seed falls below ``collapse_threshold`` inside the stack.
    2. Skip connections stop it: attention+skip and the full block keep r >= ``skip_min_residual`` at the last
       layer and their exponent (when fittable) is below ``not_doubly_max``.
    3. MLPs slow it: attention+MLP needs more layers than pure attention to fall below ``collapse_threshold``
       (fractional layer of the crossing, interpolated in log r; seed means).
    4. Noci et al., each norm position: without scaling, mean ln(||dW_Q||/||dW_V||) and ln(||dW_K||/||dW_V||) fall
       with depth (slope vs ln L + 2 SE < -``qk_slope_min``); with 1/sqrt(L) scaling the |slope| is at most
       ``scaled_ratio_max`` of the unscaled one.
    5. Noci Fig 1, each position: the output token cosine rises by more than ``cosine_rise_min`` from the shallowest
       to the deepest stack without scaling, and by less than that with scaling.
    """
    c, checks = params["checks"], []
    q = params["dong"]
    att = _one(rows, "per_layer_exponent", variant="attention")
    att_depth = _one(rows, "collapse_depth", variant="attention")
    frac = _one(rows, "collapsed_fraction", variant="attention")
    if att and att_depth and frac:
        ok = att["value"] is not None and abs(att["value"] - 3) <= c["cubic_tolerance"]
        all_collapse = frac["value"] == 1.0
        a_txt = "n/a (fewer than 2 layer pairs above the floor)" if att["value"] is None else \
            f"{att['value']:.2f} (pooled, {att['n']} layer pairs; per-seed std {att['spread'] or 0:.2f})"
        checks.append(check("pure attention: doubly exponential (cubic per layer) collapse",
                            ok and all_collapse,
                            f"per-layer exponent {a_txt}; r < {q['collapse_threshold']:g} after "
                            f"{att_depth['value']:.2f} +- {att_depth['spread']:.2f} layers in {frac['value']:.0%} of seeds",
                            f"exponent 3 +- {c['cubic_tolerance']} (res_(L+1) ~ res_L^3); collapse within "
                            f"{q['depth']} layers"))
    for variant in ("attention_skip", "full"):
        fin = _one(rows, "final_relative_residual", variant=variant)
        exp_ = _one(rows, "per_layer_exponent", variant=variant)
        if fin:
            ok = fin["value"] >= c["skip_min_residual"] and (exp_["value"] is None or exp_["value"] < c["not_doubly_max"])
            checks.append(check(f"skip connections stop the collapse ({variant})", ok,
                                f"r at layer {q['depth']}: {fin['value']:.3g} (geometric mean over seeds); per-layer "
                                f"exponent {'n/a' if exp_['value'] is None else format(exp_['value'], '.2f')}",
                                f"r >= {c['skip_min_residual']}, exponent < {c['not_doubly_max']}"))
    mlp = _one(rows, "collapse_depth", variant="attention_mlp")
    if mlp and att_depth:
        checks.append(check("MLPs slow the collapse (attention + MLP, no skip)", mlp["value"] > att_depth["value"],
                            f"layers to r < {q['collapse_threshold']:g}: attention+MLP {mlp['value']:.2f} +- {mlp['spread']:.2f}, "
                            f"attention {att_depth['value']:.2f} +- {att_depth['spread']:.2f}", "more layers with the MLP than without"))
    for position in params["noci"]["norm_positions"]:
        parts, ok = [], True
        for m in ("q", "k"):
            plain = _one(rows, f"{m}_over_v_depth_slope", position=position, scaled=False)
            scaled = _one(rows, f"{m}_over_v_depth_slope", position=position, scaled=True)
            if not (plain and scaled):
                continue
            se = plain["spread"] / math.sqrt(plain["n"])
            ok &= plain["value"] + 2 * se < -c["qk_slope_min"] and \
                abs(scaled["value"]) <= c["scaled_ratio_max"] * abs(plain["value"])
            parts.append(f"{m.upper()}/V: scale 1 {plain['value']:+.2f} +- {plain['spread']:.2f}, "
                         f"1/sqrt(L) {scaled['value']:+.2f} +- {scaled['spread']:.2f}")
        if parts:
            checks.append(check(f"Noci {position}-LN: Q/K gradients vanish with depth unless branches are scaled", ok,
                                "d mean ln(grad ratio) / d ln(L): " + "; ".join(parts),
                                f"scale 1 < -{c['qk_slope_min']}; |1/sqrt(L)| <= {c['scaled_ratio_max']} x scale 1 "
                                "(residual branches scaled by L^-0.5, Noci et al.)"))
        cos = {s: sorted((r for r in rows if r["metric"] == "token_cosine_mean" and r["sweep"]["position"] == position
                          and r["sweep"]["scaled"] == s), key=lambda r: r["sweep"]["depth"]) for s in (False, True)}
        if cos[False] and cos[True]:
            rise = {s: v[-1]["value"] - v[0]["value"] for s, v in cos.items()}
            d0, d1 = cos[False][0]["sweep"]["depth"], cos[False][-1]["sweep"]["depth"]
            checks.append(check(f"Noci {position}-LN: token cosine rises with depth unless branches are scaled",
                                rise[False] > c["cosine_rise_min"] and rise[True] < c["cosine_rise_min"],
                                f"cosine at depth {d0} -> {d1}: scale 1 {cos[False][0]['value']:.3f} -> "
                                f"{cos[False][-1]['value']:.3f}; 1/sqrt(L) {cos[True][0]['value']:.3f} -> "
                                f"{cos[True][-1]['value']:.3f}",
                                f"rise > {c['cosine_rise_min']} with scale 1, < {c['cosine_rise_min']} with 1/sqrt(L)"))
    return verdict_from_checks(CLAIM, checks, scale)


def run(params: dict, scale: str, out) -> tuple[list[dict], dict]:
    """Residual vs depth for the four stacks, and Q/K vs V gradients with and without residual scaling."""
    device = resolve_device(params["device"], "rank_collapse.device")
    dtype = DTYPES[params["dtype"]]
    atomic_write_json(Path(out) / "setup.json", {"device": str(device), "dtype": params["dtype"], "init": params["init"]})
    rows = residual_curves(params, device, dtype)
    rows += residual_summary(rows, params)
    grads = qkv_gradients(params, device, dtype)
    rows += grads + qkv_summary(grads, params)
    return rows, judge(rows, params, scale)


if __name__ == "__main__":
    from repro.claims._cli import main

    raise SystemExit(main(CLAIM, run))
