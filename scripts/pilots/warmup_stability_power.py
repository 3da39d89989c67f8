"""Seeds for warmup_stability's confirmatory default (Xiong et al. 2020, Sec. 3.2), sized at 90% power from the
EXPLORATION data only: the committed rows of the design's own seeds 1-5 (references/results/cpu-intel-xeon-2c/default,
the rows the pilots of docs/pilots/warmup_stability.md chose the design on).

Prints, for the two headline contrasts (Post-LN no warm-up - warm-up, above post_gap_nats; Pre-LN without warm-up -
Post-LN with, below pre_tolerance_nats): the judge's own estimate and interval on those rows with
``repro.verdicts.power``'s 90% size, and a simulation of the judge's decision rule (Welch's interval where the seed
sets differ, the paired t-interval where they match) at candidate sizes, drawing seeds (a) from normal laws with the
exploration means and spreads and (b) by resampling the observed per-seed values (the no-warm-up outcome is
bimodal: plateau or escape). Seeds < 1000 only are read; nothing is trained.

    python scripts/pilots/warmup_stability_power.py [REFERENCE_FOLDER]
"""
from __future__ import annotations

import json
import math
import random
import statistics
import sys
from pathlib import Path

from repro.intervals import sample_interval, welch_interval
from repro.io import read_metrics
from repro.verdicts import decisive_share, power

REF = Path("references/results/cpu-intel-xeon-2c/default/warmup_stability")
POST_GAP, PRE_TOL = 0.5, 0.25  # the judge: section's post_gap_nats and pre_tolerance_nats (config/claims)
PRE_WARMUP_PILOT = 2.625  # docs/pilots/warmup_stability.jsonl, pre_d64L3_lr3e-3_wu300 (seed 1), valid NLL at 1500


def nlls(folder: Path) -> dict[tuple[str, int], list[float]]:
    """final valid NLL per (position, warm-up) of the 3+3 runs at the main lr, by seed order."""
    m = read_metrics(folder)
    m = m[(m["metric"] == "final_valid_nll") & (m["sweep.layers"] == 3)]
    out: dict[tuple[str, int], list[float]] = {}
    for _, r in m.sort_values("sweep.seed").iterrows():
        assert int(r["sweep.seed"]) < 1000, "exploration reads seeds below 1000 only"
        out.setdefault((r["sweep.position"], int(r["sweep.warmup"])), []).append(float(r["value"]))
    return out


def decides(a: list[float], b: list[float], *, above=None, below=None, paired: bool) -> bool:
    """The judge's rule: the 95% interval of mean(a) - mean(b) wholly on the claimed side of the threshold."""
    if paired:
        _, lo, hi, _ = sample_interval([x - y for x, y in zip(a, b)])
    else:
        _, lo, hi = welch_interval([(1, a), (-1, b)])
    return lo > above if above is not None else hi < below


def simulate(draw_a, draw_b, na: int, nb: int, trials: int, rng: random.Random, **side) -> float:
    paired = na == nb
    hits = sum(decides([draw_a(rng) for _ in range(na)], [draw_b(rng) for _ in range(nb)], paired=paired, **side)
               for _ in range(trials))
    return hits / trials


def main(argv: list[str]) -> int:
    folder = Path(argv[0]) if argv else REF
    x = nlls(folder)
    post_n, post_w, pre_n = x[("post", 0)], x[("post", 300)], x[("pre", 0)]
    report: dict = {"exploration": {k[0] + ("_warmup" if k[1] else "_nowarmup"): v for k, v in x.items()}}
    # the judge's own contrasts on the exploration rows and repro.verdicts.power's 90% size
    est, lo, hi = welch_interval([(1, post_n), (-1, post_w)])
    report["post_needs_warmup"] = power(est, lo, hi, POST_GAP, len(post_n), "seeds")
    # the same formula without power()'s "already decided: its own n" shortcut: the size at which the interval
    # excludes the threshold with probability 0.9 if the estimate held (the t quantile of 5 seeds kept: conservative)
    report["post_needs_warmup"]["n_at_90_formula"] = math.ceil(
        len(post_n) * ((hi - lo) / 2 / (abs(est - POST_GAP) * decisive_share())) ** 2)
    k = min(len(pre_n), len(post_w))
    m, lo, hi, _ = sample_interval([a - b for a, b in zip(pre_n[:k], post_w[:k])])
    report["pre_matches_post"] = power(m, lo, hi, PRE_TOL, k, "seeds")
    rng, trials = random.Random(20261206), 4000
    normal = {key: (statistics.fmean(v), statistics.stdev(v)) for key, v in
              (("post_n", post_n), ("post_w", post_w), ("pre_n", pre_n))}

    def gauss(key):
        mu, sd = normal[key]
        return lambda r: r.gauss(mu, sd)

    def resample(v):
        return lambda r: r.choice(v)

    sim = {}
    for n in range(5, 11):  # Post-LN without warm-up: n seeds; the warm-up control: 3 (Welch)
        sim[f"post_needs_warmup n_post_nowarmup={n} n_post_warmup=3"] = {
            "normal": simulate(gauss("post_n"), gauss("post_w"), n, 3, trials, rng, above=POST_GAP),
            "resampled": simulate(resample(post_n), resample(post_w), n, 3, trials, rng, above=POST_GAP)}
    for n in (2, 3, 4):  # Pre-LN without warm-up vs the Post-LN warm-up control, paired over n seeds
        sim[f"pre_matches_post paired n={n}"] = {
            "normal": simulate(gauss("pre_n"), gauss("post_w"), n, n, trials, rng, below=PRE_TOL),
            "resampled": simulate(resample(pre_n), resample(post_w), n, n, trials, rng, below=PRE_TOL)}
    # the secondary "warm-up makes no difference to Pre-LN": Pre-LN with warm-up ran once (pilot 3, seed 1: valid NLL
    # 2.625 at update 1500 of the same schedule), so its spread is taken as Pre-LN's without warm-up
    pre_w = (PRE_WARMUP_PILOT, normal["pre_n"][1])
    for n in (2, 3):
        sim[f"pre_warmup_no_difference n_pre_warmup={n} n_pre_nowarmup=3"] = {"normal": simulate(
            gauss("pre_n"), lambda r: r.gauss(*pre_w), 3, n, trials, rng, below=PRE_TOL)}
    report["simulated_power"] = sim
    print(json.dumps(report, indent=1, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
