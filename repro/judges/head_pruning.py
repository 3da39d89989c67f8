"""The judge of head_pruning (C5: most attention heads of a trained Transformer can be removed): the verdict from the
rows repro/claims/head_pruning.py measured, with the thresholds of the judge: section of
config/claims/head_pruning.yaml (paper numbers from repro/registry/published.yaml).

- Michel, Levy, Neubig, "Are Sixteen Heads Really Better than One?", NeurIPS 2019: Table 1 (a minority of heads
  changes BLEU significantly when ablated alone; enc-dec attention the most sensitive), Fig. 3 (importance pruning:
  20% (WMT) / 40% (BERT) of the heads without noticeable loss, better than random order), Tables 2-3 (one head per
  layer on MNLI), Table 4 (the pruned model's speed-up grows with batch size, on a GPU);
- Voita, Talbot, Moiseev, Sennrich, Titov, "Analyzing Multi-Head Self-Attention", ACL 2019, Sec. 6: Hard-Concrete L0
  gates prune 38 of 48 encoder heads for a drop of 0.15 BLEU.

:func:`judge` judges the translation rows (WMT path); rows of Michel's BERT experiment (``hf_model``,
repro.claims._heads_mnli) are judged by :func:`_judge_mnli`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from repro import registry
from repro.stats import sample_interval
from repro.verdicts import (Rows, both, check, decide_interval, gate, gated, numbers, setup_table, uses,
                            verdict_from_checks)
from repro.claims.head_pruning import CLAIM

ORDERS = ("importance", "importance_raw")
ORDER_NAMES = {"importance": "Michel's l2-per-layer importance", "importance_raw": "unnormalised importance"}


def _pub(key: str):
    """A published number of this claim (repro/registry/published.yaml)."""
    return registry.published(CLAIM, key)["value"]


def _finite(*xs) -> bool:
    return all(x is not None and isinstance(x, (int, float)) and math.isfinite(float(x)) for x in xs)


def judge(rows: list[dict], thresholds: dict, context: dict) -> dict:
    """Verdict rules. Paper numbers from the registry (repro/registry/published.yaml); ``thresholds`` (the judge:
    section of config/claims/head_pruning.yaml) gives the suite's own margins (``minority_fraction``,
    ``min_bleu_over_copy``, ``normalised_min_heads_fraction``; ``min_accuracy_over_majority`` on the BERT path);
    ``context["params"]`` the measurement's ``significance`` and ``bootstrap_samples``, ``context["device"]`` the
    device the speed-up was timed on.

    "No loss" is an EQUIVALENCE test: a pruned model counts as lossless only when the upper end of the
    (1 - ``significance``) interval of its BLEU drop lies below the tolerance ``tol`` = |Voita's drop| (38 of 48
    encoder heads pruned for -0.15 BLEU). The rows carry the paired-bootstrap delta and two-sided p-value of every
    pruned model (no interval), so the interval is recovered by a normal approximation, se = |delta| / z(1 - p/2)
    (p = 0 read as 2 / bootstrap_samples: the bootstrap's resolution); a level whose p-value gives no interval
    (p = 1, or delta = 0) is undecided, never lossless. A level is lossy when the LOWER end of the drop's interval
    lies above ``tol``.

    1. a minority of encoder self-attention heads changes BLEU significantly when ablated alone (Michel: 8/96):
       holds when 0 < count and count/n < ``minority_fraction``; 0 significant heads is no evidence (undecided);
       enc-dec attention is the most sensitive kind (its mean single-head change strictly lowest);
    2. per pruning order, the mean BLEU over the pruning levels lies above the 95% t-interval of the random
       orders' (fails below it, undecided inside or with < 2 random seeds);
    3. per pruning order, the fraction of heads pruned before the first level that is not lossless is strictly
       above Michel's WMT 20%: holds then; fails when the run stops at a lossy level; undecided when it stops at an
       undecided level;
       rules 2-3 are made for both of the protocol's orders side by side: Michel's l2-per-layer normalised
       importance and the unnormalised one. The scale supports the normalised order only with at least
       ``normalised_min_heads_fraction`` (0.5) of Michel's heads per layer (16): with fewer (4 here), the
       per-layer normalisation gives every layer's least important head a comparable score and spreads pruning
       over every layer (a scale artefact), so the normalised checks are undecided and the unnormalised ones are
       judged; with enough heads per layer the normalised order is judged and the unnormalised one (a
       diagnostic) is undecided;
    4. some L0 run at Voita's head budget (at most 10 of 48 = (48 - 38) / 48 of its gated heads kept: a selection,
       the run is the paper's experiment) loses less than ``tol`` BLEU (equivalence, as above) against both the
       unpruned model and the unpenalised (lambda 0) fine-tune: holds then; fails when every such run is lossy
       against either; undecided when no run reached the budget (the lambdas chose the sparsity, not the paper);
    5. the speed-up of the pruned model grows with batch size and is positive at the largest batch (Michel
       Table 4), decided on a GPU only (a CPU's speed-up follows the FLOPs at every batch size).

    HEADLINE: 3 for the order the scale supports (Michel Fig. 3) and 4 (Voita): "most heads can be removed".
    Gate: checks 1-4 rest on BLEU and are undecided unless the unpruned model beats the copy baseline on the
    evaluation subset by more than ``min_bleu_over_copy``. Every comparison is strict; NaN decides nothing.

    Rows of Michel's BERT experiment (``hf_model``) are judged by :func:`_judge_mnli`."""
    T, params, scale = thresholds, context["params"], context["scale"]
    device = context.get("device") or params.get("device")  # measurements before measured.json: the configured one
    R = Rows(rows)
    if R.metric("mnli_accuracy"):
        return _judge_mnli(R, T, params, scale, device)
    eq = _Equivalence.from_params(params)
    order = _ScaleOrder.from_rows(R, T)
    checks = [*_minority_checks(R, params, T), *_sensitivity_checks(R), *_random_order_checks(R, order, T),
              *_prunable_checks(R, order, eq, T), *_l0_checks(R, eq)]
    gates = _learned_gates(R, params, T)
    checks = [gated(c, gates) for c in checks] + _speedup_checks(R, device)  # the speed-up rests on no BLEU
    return verdict_from_checks(CLAIM, checks, scale, gates=gates, setup=_setup_rows(params, order, device))


@dataclass(frozen=True)
class _Equivalence:
    """The "no loss" equivalence test of the judge: the (1 - ``alpha``) interval of a pruned model's BLEU drop,
    recovered from its paired-bootstrap delta and p-value, against the tolerance ``tol`` = |Voita's drop|."""
    alpha: float
    n_boot: int
    tol: float

    @classmethod
    def from_params(cls, params: dict) -> "_Equivalence":
        return cls(float(params["significance"]), int(params["bootstrap_samples"]),
                   abs(float(_pub("voita_wmt_bleu_drop"))))

    def drop_interval(self, delta, p) -> tuple[float, float] | None:
        """(lo, hi) of the (1 - alpha) interval of the BLEU DROP (= -delta), or None when the row gives none."""
        if not _finite(delta, p) or delta == 0 or p >= 1:
            return None
        z_p = NormalDist().inv_cdf(1 - max(float(p), 2.0 / self.n_boot) / 2)
        if not z_p > 0:
            return None
        half = NormalDist().inv_cdf(1 - self.alpha / 2) * abs(delta) / z_p
        return -delta - half, -delta + half

    def decide(self, delta, p) -> tuple[bool | None, tuple[float, float] | None]:
        """(True: lossless (drop's upper end < tol); False: lossy (lower end > tol); None: undecided, interval)."""
        iv = self.drop_interval(delta, p)
        return (None, None) if iv is None else (decide_interval(iv[0], iv[1], below=self.tol), iv)


@dataclass(frozen=True)
class _ScaleOrder:
    """Which pruning order the scale supports: Michel's per-layer normalisation needs at least ``min_fraction``
    (``normalised_min_heads_fraction``) of his heads per layer (heads per layer read from the rows); with fewer the
    unnormalised order is judged."""
    heads_per_layer: int | None
    paper_per_layer: int
    min_fraction: float
    encoder_only: bool = False  # an imported BERT: no cross-attention to name

    @classmethod
    def from_rows(cls, R: Rows, T: dict) -> "_ScaleOrder":
        per_layer: dict[tuple, set] = {}
        for r in R.metric("ablation_bleu_delta"):
            per_layer.setdefault((r["sweep"]["kind"], r["sweep"].get("layer")), set()).add(r["sweep"].get("head"))
        return cls(min((len(x) for x in per_layer.values()), default=None), _pub("michel_heads_per_layer"),
                   T["normalised_min_heads_fraction"])

    @property
    def min_heads(self) -> float:
        """Heads per layer the normalised order needs."""
        return self.paper_per_layer * self.min_fraction

    @property
    def normalised_ok(self) -> bool:
        return self.heads_per_layer is not None and self.heads_per_layer >= self.min_heads

    @property
    def supported(self) -> str:
        return "importance" if self.normalised_ok else "importance_raw"

    @property
    def note(self) -> str:
        return (f"{self.heads_per_layer} heads per layer: the scale supports {ORDER_NAMES[self.supported]}"
                if self.heads_per_layer is not None else "heads per layer not recorded")

    def why_unsupported(self, name: str) -> str:
        hpl = self.heads_per_layer
        return {
            "importance": (f"scale artefact: {hpl} heads per layer (Michel: {self.paper_per_layer}); the per-layer "
                           "l2 normalisation gives each layer's least important head a comparable score, so this "
                           "order prunes every layer alike" + ("" if self.encoder_only else " (cross-attention "
                                                                "included)") + " and says nothing about the "
                           "paper; the unnormalised order is judged instead"),
            "importance_raw": (f"diagnostic only: with {hpl} heads per layer the scale supports Michel's normalised "
                               "order, which is judged instead")}[name]


def _minority_checks(R: Rows, params: dict, T: dict) -> list[dict]:
    """Rule 1: a minority of the encoder self-attention heads (or of all heads) matters when ablated alone."""
    fractions = R.metric("significant_heads_fraction")
    sig = fractions.where(kind="encoder_self") or fractions.where(kind="all")
    if not sig:
        return []
    r, alpha = sig[0], float(params["significance"])
    kind = r["sweep"]["kind"]
    cnt = R.metric("significant_heads").where(kind=kind)[0]["value"]
    up = R.metric("significant_heads_raising_bleu").where(kind=kind)[0]["value"]
    frac = r["value"]
    m_sig, m_total = _pub("michel_significant_heads"), _pub("michel_heads_total")
    if not _finite(cnt, frac):
        passed, why = None, "the count of significant heads is not a number"
    elif not cnt > 0:
        passed, why = None, (f"0 of {int(r['n'])} heads significant at p<{alpha}: no evidence that any head "
                             f"matters on {params['eval_sentences']} sentences (too little power), so 'a "
                             "minority matters' cannot be told from 'none detected'")
    else:
        passed, why = frac < T["minority_fraction"], None
    return [check(f"a minority of {kind} heads matter when ablated alone", passed,
                  f"{int(cnt)} of {int(r['n'])} ({100 * frac:.0f}%) significant at p<{alpha}, {int(up)} raise BLEU",
                  f"{m_sig} of {m_total} ({100 * m_sig / m_total:.0f}%) (Michel Table 1); need more than 0 "
                  f"and < {100 * T['minority_fraction']:.0f}%", undecided_because=why,
                  thresholds=uses(T, "minority_fraction"))]


def _sensitivity_checks(R: Rows) -> list[dict]:
    """Rule 1, second part: enc-dec attention has the strictly lowest mean single-head BLEU change."""
    by_kind = {k: rs.values() for k, rs in R.metric("ablation_bleu_delta").by("kind").items()}
    if not ("cross" in by_kind and len(by_kind) > 1):
        return []
    mean = {k: float(np.mean(x)) if all(_finite(y) for y in x) else math.nan for k, x in by_kind.items()}
    ok = all(math.isfinite(x) for x in mean.values())
    return [check("enc-dec attention is the most sensitive to single-head ablation",
                  all(mean["cross"] < x for k, x in mean.items() if k != "cross") if ok else None,
                  "mean BLEU change " + ", ".join(f"{k}: {x:+.2f}" for k, x in mean.items()),
                  "enc-dec attention most sensitive (Michel Sec. 3-4); strictly lowest mean change",
                  undecided_because="a mean single-head change is not a number")]


def _random_order_checks(R: Rows, order: _ScaleOrder, T: dict) -> list[dict]:
    """Rule 2, for both orders: the mean BLEU over the pruning levels above the random orders' 95% interval."""
    rnd = R.metric("pruning_mean_bleu").where(order="random").values()
    out = []
    for name in ORDERS:
        imp = R.metric("pruning_mean_bleu").where(order=name)
        if imp and rnd:
            out.append(_beats_random_check(name, imp.value(), rnd, order, T))
    return out


def _beats_random_check(name: str, x: float, rnd: list, order: _ScaleOrder, T: dict,
                        quantity: str = "BLEU") -> dict:
    if len(rnd) < 2 or not all(_finite(y) for y in rnd + [x]):
        passed, why, iv = None, f"{len(rnd)} random order(s) (needs >= 2 for an interval)", None
    else:
        _, lo, hi, _ = sample_interval(rnd)
        passed = True if x > hi else False if x < lo else None
        why, iv = f"{x:.2f} lies inside the random orders' interval [{lo:.2f}, {hi:.2f}]", \
            f"random orders' mean {quantity}, 95% t-interval [{lo:.2f}, {hi:.2f}] over {len(rnd)} seeds"
    if name != order.supported:
        passed, why = None, order.why_unsupported(name)
    return check(f"pruning by {ORDER_NAMES[name]} beats random order", passed,
                 f"mean {quantity} over the pruning levels {x:.2f} vs random " + ", ".join(f"{y:.2f}" for y in rnd)
                 + f" ({order.note})",
                 "importance order above random (Michel Fig. 3); above the random orders' 95% interval",
                 interval=iv, undecided_because=why, thresholds=uses(T, "normalised_min_heads_fraction"))


def _prunable_checks(R: Rows, order: _ScaleOrder, eq: _Equivalence, T: dict) -> list[dict]:
    """Rule 3, for both orders: the fraction of heads pruned before the first level that is not lossless."""
    out = []
    for name in ORDERS:
        curve = sorted(R.metric("pruning_bleu").where(order=name), key=lambda r: r["sweep"]["pruned"])
        if curve:
            out.append(_prunable_check(R, name, curve, order, eq, T))
    return out


def _lossless_prefix(curve: list[dict], eq: _Equivalence) -> tuple[float, float, tuple | None, list[str]]:
    """Walk the curve up from the unpruned model: the percent and fraction of heads at the last lossless level,
    the first level that is not lossless as (state, percent, no interval) or None, and each level's text."""
    base_bleu = Rows(curve).where(pruned=0).value()
    ok_frac, ok_fr, stop, shown = 0.0, 0.0, None, []
    for r in curve:
        if r["sweep"]["pruned"] == 0:
            continue
        delta = r["value"] - base_bleu if _finite(r["value"], base_bleu) else math.nan
        state, iv = eq.decide(delta, r["sweep"].get("p_value"))
        fr = float(r["sweep"]["fraction"])
        frac = 100 * fr
        shown.append(f"{frac:.0f}%: {delta:+.2f}" + (f" [drop {iv[0]:+.2f}, {iv[1]:+.2f}]" if iv else
                                                     " [no interval]"))
        if state is True:
            ok_frac, ok_fr = frac, fr
            continue
        stop = (state, frac, iv is None)
        break
    return ok_frac, ok_fr, stop, shown


def _prunable_decision(ok_frac: float, ok_fr: float, stop: tuple | None, tol: float) -> tuple[bool | None, str | None]:
    m_prunable = _pub("michel_prunable_wmt")
    if ok_fr > m_prunable / 100:  # fractions, not percent: 100 * 0.2 is 20.000000000000004
        return True, None
    if stop is None:
        return None, f"the curve ends at {ok_frac:.0f}% (no level above {m_prunable}%)"
    if stop[0] is False:
        return False, None
    return None, ((f"the row at {stop[1]:.0f}% gives no interval (p-value 1 or a zero change)"
                   if stop[2] else f"the drop's interval at {stop[1]:.0f}% straddles the tolerance "
                   f"{tol} BLEU") + ": this evaluation subset cannot tell 'no loss' from a small loss")


def _prunable_check(R: Rows, name: str, curve: list[dict], order: _ScaleOrder, eq: _Equivalence, T: dict) -> dict:
    ok_frac, ok_fr, stop, shown = _lossless_prefix(curve, eq)
    passed, why = _prunable_decision(ok_frac, ok_fr, stop, eq.tol)
    if name != order.supported:
        passed, why = None, order.why_unsupported(name)
    sd = R.metric("sharp_drop_fraction").where(order=name)
    m_prunable, m_bert, m_sharp = _pub("michel_prunable_wmt"), _pub("michel_prunable_bert"), \
        _pub("michel_sharp_drop_fraction")
    return check(f"a substantial fraction of heads prunes ({ORDER_NAMES[name]}) without loss", passed,
                 f"{ok_frac:.0f}% prunable within {eq.tol} BLEU (equivalence); "
                 + "; ".join(shown[:6]) + (f"; steepest drop after {sd[0]['value']:.0f}%" if sd else "")
                 + f" ({order.note})",
                 f"{m_prunable}% (WMT), {m_bert}% (BERT) without noticeable loss; sharp drop past "
                 f"~{m_sharp}% (Michel Fig. 3); need > {m_prunable}% with the drop's upper end < {eq.tol} BLEU",
                 headline=name == order.supported,
                 interval=f"(1 - {eq.alpha}) interval of each level's BLEU drop, from its paired-bootstrap "
                          "p-value (normal approximation)", undecided_because=why,
                 numbers=numbers(ok_frac, "% of heads prunable", paper=float(m_prunable), compare="difference"),
                 thresholds=uses(T, "normalised_min_heads_fraction"))


def _l0_checks(R: Rows, eq: _Equivalence) -> list[dict]:
    """Rule 4: some L0 run at Voita's head budget loses less than ``tol`` BLEU against the unpruned model and the
    unpenalised fine-tune."""
    kept = R.metric("l0_heads_kept").filter(lambda r: _finite(r["sweep"]["lam"]) and r["sweep"]["lam"] > 0)
    if not kept:
        return []
    voita_pruned, voita_total = _pub("voita_wmt_heads_pruned"), _pub("voita_wmt_encoder_heads")
    kept_max = (voita_total - voita_pruned) / voita_total
    runs, states = [], []
    for r in kept:
        state, at_budget, text = _l0_run(R, r, eq, kept_max)
        if at_budget:
            states.append(state)
        runs.append(text)
    passed, why = _l0_decision(states, kept_max, eq.tol)
    return [check("L0 gates reach a sparse head budget with a small BLEU loss", passed, "; ".join(runs),
                  f"{voita_pruned} of {voita_total} encoder heads pruned for {_pub('voita_wmt_bleu_drop')} "
                  f"BLEU (Voita Sec. 6); need a run keeping <= {100 * kept_max:.1f}% of its heads whose "
                  f"drop's upper end is < {eq.tol} BLEU against the unpruned model and the unpenalised "
                  "fine-tune", headline=True, undecided_because=why,
                  numbers=numbers(_sparsest_kept_percent(kept), "% of heads kept (sparsest L0 run)",
                                  paper=100 * (voita_total - voita_pruned) / voita_total, compare="difference"))]


def _l0_run(R: Rows, r: dict, eq: _Equivalence, kept_max: float) -> tuple[bool | None, bool, str]:
    """One penalised L0 run: its equivalence state against both references, whether it reached the budget, text."""
    lam = r["sweep"]["lam"]
    comps = R.metric("l0_bleu_delta").where(lam=lam) + R.metric("l0_bleu_delta_vs_control").where(lam=lam)
    at_budget = _finite(r["value"], r["n"]) and r["n"] > 0 and r["value"] / r["n"] <= kept_max
    st = [eq.decide(c["value"], c["sweep"].get("p_value"))[0] for c in comps]
    state = both(*st) if st else None
    text = (f"lambda {lam:g}: {r['value']:.0f}/{r['n']:.0f} kept" + (" (at the budget)" if at_budget else "") + ", "
            + ", ".join(f"{c['value']:+.2f} (p={c['sweep'].get('p_value')})" for c in comps))
    return state, at_budget, text


def _l0_decision(states: list, kept_max: float, tol: float) -> tuple[bool | None, str | None]:
    if not states:
        return None, (f"no L0 run reached Voita's budget (at most {100 * kept_max:.0f}% of the gated heads "
                      "kept): the lambdas set the sparsity, so the run did not make the paper's experiment")
    if any(s is True for s in states):
        return True, None
    if all(s is False for s in states):
        return False, None
    return None, (f"at the budget, the BLEU drop's interval straddles the tolerance {tol} BLEU "
                  "(against the unpruned model or the unpenalised fine-tune)")


def _sparsest_kept_percent(kept: Rows) -> float | None:
    fractions = [r["value"] / r["n"] for r in kept if _finite(r["value"], r["n"]) and r["n"] > 0]
    return 100 * min(fractions) if fractions else None


def _learned_gates(R: Rows, params: dict, T: dict) -> list[dict]:
    """Gate of rules 1-4: the unpruned model beats the copy baseline on the evaluation subset."""
    base, copy_bl = R.metric("bleu_unpruned").where(subset="eval"), R.metric("bleu_copy_baseline").where(subset="eval")
    if not (base and copy_bl):
        return []
    margin = T["min_bleu_over_copy"]
    b0, c0 = base.value(), copy_bl.value()
    return [gate("the unpruned model learned to translate", _finite(b0, c0) and b0 > c0 + margin,
                 f"BLEU {b0:.2f} vs copying the source {c0:.2f} on the "
                 f"{params['eval_sentences']}-sentence evaluation subset",
                 f"more than {margin} BLEU above the copy baseline")]


def _speedup_checks(R: Rows, device: str | None) -> list[dict]:
    """Rule 5: the pruned model's speed-up grows with batch size (decided on a GPU only: ``device``, the one the
    measurement timed on)."""
    sp = sorted(R.metric("speedup"), key=lambda r: r["sweep"]["batch"])
    if len(sp) < 2:
        return []
    first, last = sp[0]["value"], sp[-1]["value"]
    on_gpu = str(device).startswith("cuda")
    ok = _finite(first, last)
    ref = ", ".join(f"+{_pub(f'michel_speedup_bs{b}')}% at bs {b}" for b in (1, 4, 16, 64))
    return [check("the pruned model's speed-up grows with batch size",
                  (last > first and last > 0) if (on_gpu and ok) else None,
                  ", ".join(f"bs {r['sweep']['batch']}: {r['value']:+.1f}%" for r in sp),
                  f"{ref} (Michel Table 4, GTX 1080Ti)",
                  undecided_because=("a speed-up is not a number" if on_gpu else
                                     "CPU stand-in: Michel measured GPU throughput, launch-bound at batch "
                                     "1; a CPU speed-up follows the FLOPs at every batch size"))]


# ------------------------------------------------------------------------------------------------ verdict (BERT, MNLI)
def _judge_mnli(R: Rows, T: dict, params: dict, scale: str, device: str | None) -> dict:
    """Verdict rules of Michel et al.'s BERT experiment (``hf_model``; repro.claims._heads_mnli).

    "No loss" is an equivalence test on each pruned model's (1 - ``significance``) interval of the accuracy drop
    (matched pairs, in points) against tol = |Michel's largest one-head-per-layer change on MNLI| (Tables 2-3: 0.96
    points, none significant: the paper's own measure of a change that is not noticeable): lossless when the drop's
    upper end lies below tol, lossy when its lower end lies above it, undecided otherwise.

    1. HEADLINE (Fig. 3, BERT): pruning in the order the scale supports (as :class:`_ScaleOrder`, with
       ``normalised_min_heads_fraction``) is lossless at
       every level up to the one at Michel's 40% (the first grid level whose rounded percentage reaches it): holds
       then; fails when a level up to it is lossy; undecided otherwise, or when the curve stops short of it. The
       level is a point of the experiment's grid (10% of the heads per step), not a measured quantity, so reaching
       it is no tie; each level's own test is strict;
    2. the mean accuracy over the pruning levels lies above the random orders' 95% t-interval (fails below it);
    3. keeping one head in any one layer is lossless in every layer (Tables 2-3): fails when some layer is lossy;
    4. the pruned model's speed-up grows with batch size (Table 4), decided on a GPU only (:func:`_speedup_checks`).
    Gate of 1-3: the lower end of the unpruned accuracy's interval lies more than ``min_accuracy_over_majority``
    points above the majority class's share (the classifier learned the task)."""
    tol = abs(float(_pub("michel_one_head_bert_max_delta")))
    shape = R.metric("mnli_heads").first()
    order = _ScaleOrder(int(shape["sweep"]["heads_per_layer"]) if shape else None, _pub("michel_heads_per_layer"),
                        T["normalised_min_heads_fraction"], encoder_only=True)
    checks = [*_mnli_prunable_checks(R, order, tol, T), *_mnli_random_checks(R, order, T),
              *_mnli_one_head_checks(R, tol)]
    gates = _mnli_gates(R, T)
    checks = [gated(c, gates) for c in checks] + _speedup_checks(R, device)
    return verdict_from_checks(CLAIM, checks, scale, gates=gates, setup=_setup_rows(params, order, device))


def _drop_state(r: dict, tol: float) -> tuple[bool | None, tuple[float, float] | None]:
    """(lossless / lossy / undecided, the drop's interval) of one compared row (``lo``, ``hi``: the change's)."""
    lo, hi = r["sweep"].get("lo"), r["sweep"].get("hi")
    if not _finite(lo, hi):
        return None, None
    return decide_interval(-float(hi), -float(lo), below=tol), (-float(hi), -float(lo))


def _mnli_prunable_checks(R: Rows, order: _ScaleOrder, tol: float, T: dict) -> list[dict]:
    """Rule 1, for each importance order measured (the unsupported one undecided, as in the WMT rules)."""
    paper = float(_pub("michel_prunable_bert"))
    out = []
    for name in ORDERS:
        curve = sorted(R.metric("mnli_pruning_accuracy").where(order=name), key=lambda r: r["sweep"]["pruned"])
        if not curve:
            continue
        passed, why, shown, ok = _mnli_prunable_decision(curve, tol, paper)
        if name != order.supported:
            passed, why = None, order.why_unsupported(name)
        out.append(check(f"{paper:.0f}% of BERT's heads prune ({ORDER_NAMES[name]}) without loss on MNLI", passed,
                         f"lossless up to {ok:.0f}% of the heads within {tol} accuracy points (equivalence); "
                         + "; ".join(shown[:7]) + f" ({order.note})",
                         f"{paper:.0f}% of the heads without noticeable loss (Michel Fig. 3, BERT on MNLI); need "
                         f"every level up to {paper:.0f}% with the drop's upper end < {tol} points",
                         headline=name == order.supported, undecided_because=why,
                         interval="(1 - alpha) interval of each level's accuracy drop (matched pairs, Agresti-Min)",
                         numbers=numbers(ok, "% of heads prunable", paper=paper, compare="difference"),
                         thresholds=uses(T, "normalised_min_heads_fraction")))
    return out


def _mnli_prunable_decision(curve: list[dict], tol: float, paper: float) -> tuple[bool | None, str | None, list, float]:
    """(decision on the levels up to the paper's fraction, why undecided, each level's text, the percent of heads
    pruned at the end of the lossless run of levels, which may go past the paper's)."""
    shown, ok, states, decided = [], 0.0, [], None
    for r in curve:
        if r["sweep"]["pruned"] == 0:
            continue
        state, iv = _drop_state(r, tol)
        frac = 100 * float(r["sweep"]["fraction"])
        shown.append(f"{frac:.0f}%: {r['sweep'].get('delta', math.nan):+.2f}"
                     + (f" [drop {iv[0]:+.2f}, {iv[1]:+.2f}]" if iv else " [no interval]"))
        states.append(state)
        ok = frac if all(x is True for x in states) else ok
        if decided is None and round(frac) >= paper:  # the level at the paper's fraction: decide on it and below
            decided = list(states)
    if decided is None:
        return None, f"the curve ends at {ok:.0f}%, short of {paper:.0f}%", shown, ok
    if all(s is True for s in decided):
        return True, None, shown, ok
    if any(s is False for s in decided):
        return False, None, shown, ok
    return None, (f"a level's drop interval straddles the tolerance {tol} points (or gives none): these "
                  "evaluation pairs cannot tell 'no loss' from a small loss"), shown, ok


def _mnli_random_checks(R: Rows, order: _ScaleOrder, T: dict) -> list[dict]:
    """Rule 2, for each importance order measured."""
    rnd = R.metric("mnli_pruning_mean_accuracy").where(order="random").values()
    return [_beats_random_check(name, x, rnd, order, T, quantity="MNLI accuracy (%)") for name in ORDERS
            if rnd and (x := R.metric("mnli_pruning_mean_accuracy").where(order=name).value()) is not None]


def _mnli_one_head_checks(R: Rows, tol: float) -> list[dict]:
    """Rule 3: one head kept in one layer (every layer in turn) loses nothing noticeable."""
    rows = sorted(R.metric("mnli_one_head_delta"), key=lambda r: r["sweep"]["layer"])
    if not rows:
        return []
    states = [_drop_state(r, tol) for r in rows]
    passed = both(*(s for s, _ in states))
    worst = max(rows, key=lambda r: -r["value"] if _finite(r["value"]) else math.inf)
    return [check("keeping one head in any one BERT layer loses nothing noticeable", passed,
                  f"worst layer {worst['sweep']['layer']}: {worst['value']:+.2f} points; "
                  + "; ".join(f"L{r['sweep']['layer']}: {r['value']:+.2f}" + (f" [drop {iv[0]:+.2f}, {iv[1]:+.2f}]"
                                                                             if iv else "")
                              for r, (_, iv) in zip(rows, states)),
                  f"every layer within {_pub('michel_one_head_bert_max_delta')} points, none significant (Michel "
                  f"Tables 2-3, BERT); need each layer's drop upper end < {tol} points",
                  undecided_because=f"a layer's drop interval straddles {tol} points (or gives none)")]


def _mnli_gates(R: Rows, T: dict) -> list[dict]:
    """Gate of rules 1-3: the classifier learned MNLI (well above always answering the majority class)."""
    acc, maj = R.metric("mnli_accuracy").first(), R.metric("mnli_majority_baseline").value()
    margin = T["min_accuracy_over_majority"]
    lo = acc["sweep"].get("lo") if acc else None
    return [gate("the unpruned classifier learned MNLI", _finite(lo, maj) and float(lo) > maj + margin,
                 f"accuracy {acc['value']:.2f}% [{float(lo):.2f}, {float(acc['sweep'].get('hi')):.2f}] on "
                 f"{acc['n']} pairs vs the majority class's {maj:.2f}%" if _finite(lo, maj) else
                 "no accuracy interval or majority baseline",
                 f"the interval's lower end more than {margin} points above the majority class")]


def _setup_rows(params: dict, order: _ScaleOrder, device: str | None) -> list[dict]:
    return setup_table(CLAIM, {**this_setup(params, device), "pruning order judged": order.note + (
        "" if order.normalised_ok else f" (Michel's normalised order is reported beside it, undecided: with fewer "
        f"than {order.min_heads:g} heads per layer its per-layer normalisation is a scale artefact)")})


def this_setup(params: dict, device: str | None = None) -> dict:
    """This run's side of the "Setup beside the paper" table (``device``: the one measured on, else the
    configured one)."""
    pr, l0, device = params["pruning"], params["l0"], device or params["device"]
    if params.get("hf_model"):
        m = params["mnli"]
        return {"model": f"Hugging Face BERT classifier {params['hf_model']} (imported into the suite's block); the "
                         "paper's counterpart is its BERT experiment (BERT-base-uncased fine-tuned on MNLI, "
                         "MNLI-matched), not the WMT model",
                "data": f"MNLI pairs of {params['mnli_path']}: {m['importance_examples']} score the heads, "
                        f"{m['eval_examples'] or 'the rest'} measure accuracy (seed {m['seed']}, {m['max_length']} "
                        "tokens)",
                "significance": f"paired bootstrap, {params['bootstrap_samples']} samples, p < "
                                f"{params['significance']}; 'no loss' by matched-pairs intervals (Agresti-Min)",
                "pruning": f"{100 * pr['step_fraction']:.0f}% of heads per step up to "
                           f"{100 * pr['max_fraction']:.0f}%, orders {pr['orders']} + {len(pr['random_seeds'])} "
                           "random; no L0 gates (Voita's experiment is on translation)",
                "speed": f"heads physically removed ({100 * params['throughput']['prune_fraction']:.0f}%), batch "
                         f"sizes {params['throughput']['batch_sizes']}, device {device}"}
    src = (f"fairseq checkpoint {params['fairseq_checkpoint']}" if params.get("fairseq_checkpoint") else
           "the suite's shared translation model (results/<hw>/<scale>/_models/translation)")
    return {"model": src,
            "data": f"{params['eval_sentences']} test sentences of the committed gettext de-en corpus (or the "
                    "configured corpus); BLEU by sacrebleu beside the copy baseline",
            "significance": f"paired bootstrap, {params['bootstrap_samples']} samples, p < {params['significance']}",
            "pruning": f"{100 * pr['step_fraction']:.0f}% of heads per step up to {100 * pr['max_fraction']:.0f}%, "
                       f"orders {pr['orders']} + {len(pr['random_seeds'])} random; L0 gates on {l0['targets']}, "
                       f"lambdas {l0['lambdas']}, {l0['steps']} fine-tune steps",
            "speed": f"heads physically removed ({100 * params['throughput']['prune_fraction']:.0f}%), batch sizes "
                     f"{params['throughput']['batch_sizes']}, device {device}"}

