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
repro.claims._heads_mnli) are judged by :func:`_judge_mnli`. Michel's protocol is judged as published: his
l2-per-layer normalised importance order is the headline's order whatever the heads per layer, and the unnormalised
order is a secondary check beside it.

Every interval-decided check carries its power (repro.verdicts.power: the sample that would decide it if the point
estimate held). The "no loss" checks rest on an equivalence margin of 0.15 BLEU (Voita's drop); the power says how
many test sentences a pass would need, and the undecided reason says when no size this corpus allows gets there.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from statistics import NormalDist

from repro import registry
from repro.intervals import sample_interval, t_interval, welch_interval
from repro.verdicts import (Rows, both, check, decide_interval, decide_point, decisive_share, gate, gated, numbers,
                            power, setup_table, side, sized, uses, verdict_from_checks)
from repro.vocabulary.head_pruning import CLAIM

ORDERS = ("importance", "importance_raw")
ORDER_NAMES = {"importance": "Michel's l2-per-layer importance", "importance_raw": "unnormalised importance"}
HEADLINE_ORDER = "importance"  # Michel's protocol as published: his normalised order, at any heads per layer


def _pub(key: str):
    """A published number of this claim (repro/registry/published.yaml)."""
    return registry.published(CLAIM, key)["value"]


def _finite(*xs) -> bool:
    return all(x is not None and isinstance(x, (int, float)) and math.isfinite(float(x)) for x in xs)


def judge(rows: list[dict], thresholds: dict, context: dict) -> dict:
    """Verdict rules. Paper numbers from the registry (repro/registry/published.yaml); ``thresholds`` (the judge:
    section of config/claims/head_pruning.yaml) gives the suite's own margins (``minority_fraction``,
    ``min_bleu_over_copy``; ``min_accuracy_over_majority`` on the BERT path); ``context["params"]`` the measurement's
    ``significance``, ``bootstrap_samples`` and ``eval_sentences``, ``context["device"]`` the device the speed-up was
    timed on.

    "No loss" is an EQUIVALENCE test: a pruned model counts as lossless only when the upper end of the
    (1 - ``significance``) interval of its BLEU drop lies below the tolerance ``tol`` = |Voita's drop| (38 of 48
    encoder heads pruned for -0.15 BLEU). The rows carry the paired-bootstrap delta and two-sided p-value of every
    pruned model (no interval), so the interval is recovered by a normal approximation, se = |delta| / z(1 - p/2)
    (p = 0 read as 2 / bootstrap_samples: the bootstrap's resolution); a level whose p-value gives no interval
    (p = 1, or delta = 0) is undecided, never lossless. A level is lossy when the LOWER end of the drop's interval
    lies above ``tol``. The margin is narrow against BLEU's sampling error on a few hundred sentences: each such
    check carries its power (test sentences that would decide it if the estimate held, and those even a true zero
    drop needs), and says so when that is more than the corpus's test set (the ``full_test`` row's n) holds.

    1. a minority of encoder self-attention heads (or of all heads) changes BLEU significantly when ablated alone
       (Michel: 8/96), counted with Holm's correction for the family of single-head tests at family-wise level
       ``significance`` (p = 0 read as 2 / bootstrap_samples): holds when at least one head is significant after
       the correction and even the uncorrected count is below ``minority_fraction`` of the heads; fails when the
       corrected count is above it; undecided otherwise (0 corrected: nothing beyond chance; or on the edge);
    2. enc-dec attention is the most sensitive kind: the 95% Welch interval of the difference between its mean
       single-head change and every other kind's lies below 0 (heads are the sample): holds then; fails when every
       such interval lies above 0 for some kind; undecided otherwise;
    3. per pruning order, the mean BLEU over the pruning levels lies above the 95% t-interval of the random
       orders' (fails below it, undecided inside or with < 2 random seeds);
    4. per pruning order, the heads prunable without loss reach Michel's WMT 20% on the measurement's grid: the level
       that counts as his 20% is the measured level nearest to it (19 of 96 heads, 19.8%, on his own 96-head grid;
       10 of 48, 20.8%, on a 48-head model; equally near: the larger), and the check holds when every level up to and
       including it is lossless, fails when one of them is lossy, undecided otherwise (a level's drop interval
       straddles or touches the tolerance: a tie decides nothing; or the curve stops below 20%). Michel's
       l2-per-layer normalised order is the HEADLINE (his protocol, at any heads per layer); the unnormalised order
       is a secondary check. Its numbers are in the paper's unit, the percent of heads prunable without loss (where
       the lossless run of levels ends, up to the level before the first lossy one) beside Michel's 20%;
    5. some L0 run at Voita's head budget (at most 10 of 48 = (48 - 38) / 48 of its gated heads kept: a selection,
       the run is the paper's experiment) loses less than ``tol`` BLEU (equivalence, as above) against both the
       unpruned model and the unpenalised (lambda 0) fine-tune: holds then; fails when every such run is lossy
       against either; undecided when no run reached the budget (the lambdas chose the sparsity, not the paper);
    6. the speed-up of the pruned model grows with batch size and is positive at the largest batch (Michel
       Table 4), decided on a GPU only (a CPU's speed-up follows the FLOPs at every batch size).

    HEADLINE: 4 for Michel's order (Fig. 3) and 5 (Voita): "most heads can be removed".
    Gate: checks 1-5 rest on BLEU and are undecided unless the unpruned model beats the copy baseline on the
    evaluation subset by more than ``min_bleu_over_copy``. Every comparison is strict (a tie decides nothing);
    NaN decides nothing.

    Rows of Michel's BERT experiment (``hf_model``) are judged by :func:`_judge_mnli`."""
    T, params, scale = thresholds, context["params"], context["scale"]
    device = context.get("device") or params.get("device")  # measurements before measured.json: the configured one
    R = Rows(rows)
    if R.metric("mnli_accuracy"):
        return _judge_mnli(R, T, params, scale, device)
    eq = _Equivalence.from_params(params)
    size = _Sentences.from_rows(R, params)
    checks = [*_minority_checks(R, params, T), *_sensitivity_checks(R), *_random_order_checks(R),
              *_prunable_checks(R, eq, size), *_l0_checks(R, eq, size)]
    gates = _learned_gates(R, params, T)
    checks = [gated(c, gates) for c in checks] + _speedup_checks(R, device)  # the speed-up rests on no BLEU
    return verdict_from_checks(CLAIM, checks, scale, gates=gates,
                               setup=_setup_rows(params, _heads_per_layer(R), device))


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

    @property
    def level(self) -> str:
        return f"{100 * (1 - self.alpha):g}%"


@dataclass(frozen=True)
class _Sentences:
    """The evaluation subset's size (``n``: every BLEU comparison is on it) and the corpus's test set's
    (``n_test``: the most sentences any default run can decode; None when not recorded)."""
    n: int
    n_test: int | None

    @classmethod
    def from_rows(cls, R: Rows, params: dict) -> "_Sentences":
        ev = R.metric("bleu_unpruned").where(subset="eval").first()
        full = R.metric("bleu_unpruned").where(subset="full_test").first()
        n = int(ev["n"]) if ev and _finite(ev.get("n")) else int(params.get("eval_sentences") or 0)
        if full and _finite(full.get("n")):
            n_test = int(full["n"])
        else:  # no full-test row: the subset is the whole test set (eval_sentences null or >= its size), or unknown
            n_test = n if not params.get("eval_sentences") else None
        return cls(n, n_test)


# ------------------------------------------------------------------------------------------------ power
def _drop_power(eq: _Equivalence, size: _Sentences, drop: float, iv: tuple[float, float] | None) -> dict | None:
    """The power of one BLEU-drop interval against ``tol``, in test sentences, with the sentences a true zero drop
    measured as precisely would need (``zero_drop_n``) and those the corpus's test set has (``available``)."""
    if iv is None or not size.n:
        return None
    pw = power(drop, iv[0], iv[1], eq.tol, size.n, "test sentences", confidence=1 - eq.alpha)
    pw["zero_drop_n"] = int(math.ceil(size.n * (pw["half_width"] / (eq.tol * decisive_share(
        pw["confidence"], pw["power"]))) ** 2))  # a true zero drop passes at the power table's power
    pw["available"] = size.n_test
    return pw


def _corpus_words(pw: dict | None, eq: _Equivalence, size: _Sentences) -> str:
    """What the power says about this corpus: whether a pass (and a decision either way, if the estimate held)
    fits in its test set."""
    if not pw:
        return ""
    half, zero, need, avail = pw["half_width"], pw["zero_drop_n"], pw.get("n_needed"), size.n_test
    test = f"the test set has {avail:,} sentences" if avail else "the test set's size is not recorded"
    head = (f"; at {size.n:,} sentences the drop's {eq.level} interval is +-{half:.2f} BLEU against the "
            f"{eq.tol}-BLEU margin (Voita's drop), so even a true zero drop would need ~{zero:,} sentences to pass")
    if avail and zero > avail:
        head += f" and {test}: no size this corpus allows makes 'no loss' hold"
    if need is None:
        return head + ("" if avail and zero > avail else f" ({test})")
    if avail and need > avail:
        return head + (f"; if the estimate held, ~{need:,} sentences would decide it either way: no size this "
                       f"corpus allows decides it ({test})")
    return head + f"; if the estimate held, ~{need:,} sentences would decide it ({test})"


# ------------------------------------------------------------------------------------------------ rule 1
def _holm(ps: list[float], alpha: float) -> list[bool]:
    """Holm's step-down rejections of the p-values ``ps`` at family-wise level ``alpha`` (strict: p < alpha/(m-i))."""
    m, out = len(ps), [False] * len(ps)
    for i, j in enumerate(sorted(range(m), key=lambda k: ps[k])):
        if not ps[j] < alpha / (m - i):
            break
        out[j] = True
    return out


def _minority_checks(R: Rows, params: dict, T: dict) -> list[dict]:
    """Rule 1: a minority of the encoder self-attention heads (or of all heads) matters when ablated alone, counted
    with Holm's correction over the family of single-head tests."""
    abl = R.metric("ablation_bleu_delta")
    fam = abl.where(kind="encoder_self") or abl
    if not fam:
        return []
    kind = "encoder_self" if abl.where(kind="encoder_self") else "all"
    alpha, n_boot = float(params["significance"]), int(params["bootstrap_samples"])
    m, floor = len(fam), 2.0 / n_boot  # a bootstrap p of 0 means "below 2 / samples", no less
    ps = [r["sweep"].get("p_value") for r in fam]
    m_sig, m_total = _pub("michel_significant_heads"), _pub("michel_heads_total")
    expected = (f"{m_sig} of {m_total} ({100 * m_sig / m_total:.0f}%) at p<0.01 (Michel Table 1); need at least one "
                f"head significant after Holm's correction over the {m} tests and fewer than "
                f"{100 * T['minority_fraction']:.0f}% significant even uncorrected")
    if not all(_finite(p, r["value"]) for p, r in zip(ps, fam)):
        return [check(f"a minority of {kind} heads matter when ablated alone", None, "a p-value is not a number",
                      expected, undecided_because="a single-head ablation's p-value or change is not a number",
                      thresholds=uses(T, "minority_fraction"))]
    ps = [max(float(p), floor) for p in ps]
    holm = _holm(ps, alpha)
    n_holm, n_raw = sum(holm), sum(p < alpha for p in ps)
    up = sum(1 for h, r in zip(holm, fam) if h and r["value"] > 0)
    chance = 1 - (1 - alpha) ** m
    measured = (f"{n_holm} of {m} significant after Holm's correction (family-wise p<{alpha}), {up} of them raising "
                f"BLEU; {n_raw} at p<{alpha} uncorrected (chance alone gives at least one with probability "
                f"{100 * chance:.0f}%)")
    too_coarse = not floor < alpha / m
    fails = decide_point(n_holm / m, below=T["minority_fraction"]) is False
    holds = n_holm > 0 and decide_point(n_raw / m, below=T["minority_fraction"]) is True
    passed, why = (False, None) if fails else (True, None) if holds else (None, None)
    if passed is None:
        if n_holm == 0:
            why = (f"no head matters beyond chance after correcting for {m} tests on {params['eval_sentences']} "
                   "sentences, so 'a minority matters' cannot be told from 'none detected'")
            if too_coarse:
                why += (f"; {n_boot} bootstrap samples cannot give a p-value below {floor:g}, above Holm's first "
                        f"step {alpha}/{m} = {alpha / m:.2g}: no head can pass at this resolution (more than "
                        f"{math.ceil(2 * m / alpha):,} samples can)")
        else:
            why = (f"{n_holm} of {m} matter after the correction, {n_raw} uncorrected: on or across the "
                   f"{100 * T['minority_fraction']:.0f}% edge, a minority cannot be told from more")
    return [check(f"a minority of {kind} heads matter when ablated alone", passed, measured, expected,
                  undecided_because=why, thresholds=uses(T, "minority_fraction"))]


# ------------------------------------------------------------------------------------------------ rule 2
def _welch(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """mean(a) - mean(b) and its 95% Welch interval (repro.intervals.welch_interval: Welch-Satterthwaite df rounded
    down, conservative). Fewer than 2 values on a side give an unbounded interval."""
    return welch_interval([(1.0, a), (-1.0, b)])


def _sensitivity_checks(R: Rows) -> list[dict]:
    """Rule 2: enc-dec attention's mean single-head change lies below every other kind's (Welch intervals over the
    heads)."""
    by_kind = {k: rs.values() for k, rs in R.metric("ablation_bleu_delta").by("kind").items()}
    if not ("cross" in by_kind and len(by_kind) > 1):
        return []
    n = min(len(x) for x in by_kind.values())
    expected = ("enc-dec attention most sensitive (Michel Sec. 3-4); need the 95% Welch interval of its mean "
                "single-head change minus every other kind's below 0 (the heads are the sample)")
    if not all(_finite(y) for x in by_kind.values() for y in x):
        return [check("enc-dec attention is the most sensitive to single-head ablation", None,
                      "a single-head change is not a number", expected,
                      undecided_because="a single-head change is not a number")]
    parts, shown, items = [], [], []
    for k, x in by_kind.items():
        if k == "cross":
            continue
        d, lo, hi = _welch(by_kind["cross"], x)
        parts.append(decide_interval(lo, hi, below=0.0))
        pw = power(d, lo, hi, 0.0, n, "heads per kind")
        items.append((side(pw, "below"), pw))
        shown.append(f"cross - {k}: {d:+.2f} [{lo:+.2f}, {hi:+.2f}]")
    passed = both(*parts)
    _, pw = sized(items, "all")
    means = ", ".join(f"{k}: {statistics.fmean(x):+.2f} ({len(x)} heads)" for k, x in by_kind.items())
    return [check("enc-dec attention is the most sensitive to single-head ablation", passed,
                  f"mean BLEU change {means}; difference of means " + "; ".join(shown), expected,
                  interval="95% Welch interval of the difference of the kinds' mean single-head changes",
                  undecided_because="an interval of the difference of means contains 0 (or touches it): these "
                                    "heads cannot tell the kinds apart", power=pw)]


# ------------------------------------------------------------------------------------------------ rule 3
def _random_order_checks(R: Rows) -> list[dict]:
    """Rule 3, for both orders: the mean BLEU over the pruning levels above the random orders' 95% interval."""
    rnd = R.metric("pruning_mean_bleu").where(order="random").values()
    out = []
    for name in ORDERS:
        imp = R.metric("pruning_mean_bleu").where(order=name)
        if imp and rnd:
            out.append(_beats_random_check(name, imp.value(), rnd, unit_s=_order_seconds(R, len(rnd))))
    return out


def _order_seconds(R: Rows, orders: int) -> float | None:
    """What one more random order costs: the measured seconds of the random-orders stage (``stage_seconds``, over
    its parts) per order; None where the rows record no stage times."""
    spent = sum(R.metric("stage_seconds").where(stage="random_orders").values())
    return spent / orders if spent > 0 and orders else None


def _seeds_power(x: float, rnd: list[float], lo: float, hi: float) -> dict:
    """The random orders' power: the seeds at which the t-interval of their mean (t quantile included, not only
    1/sqrt(n)) would exclude ``x`` with the power table's power if the mean and spread held (its half-width within
    repro.verdicts.decisive_share of the distance)."""
    mean, sd = statistics.fmean(rnd), statistics.stdev(rnd)
    pw = power(mean, lo, hi, x, len(rnd), "random orders")
    gap = abs(mean - x)
    if gap > 0 and math.isfinite(sd):
        k = len(rnd)
        while k < 10_000 and not (t_interval(mean, sd, k)[1] - mean) < gap * decisive_share():
            k += 1
        pw["n_needed"] = k if k < 10_000 else None
    return pw


def _beats_random_check(name: str, x: float, rnd: list, quantity: str = "BLEU", unit_s: float | None = None) -> dict:
    pw = None
    if len(rnd) < 2 or not all(_finite(y) for y in rnd + [x]):
        passed, why, iv = None, f"{len(rnd)} random order(s) (needs >= 2 for an interval)", None
    else:
        _, lo, hi, _ = sample_interval(rnd)
        passed = decide_interval(lo, hi, below=x)
        pw = _seeds_power(x, rnd, lo, hi)
        if unit_s:
            pw["unit_s"] = unit_s
        why = f"{x:.2f} lies inside (or on) the random orders' interval [{lo:.2f}, {hi:.2f}]" + (
            f"; ~{pw['n_needed']} random orders would decide it if their mean and spread held"
            if pw.get("n_needed") else "")
        iv = f"random orders' mean {quantity}, 95% t-interval [{lo:.2f}, {hi:.2f}] over {len(rnd)} seeds"
    role = " (Michel's order)" if name == HEADLINE_ORDER else " (secondary: the unnormalised order)"
    return check(f"pruning by {ORDER_NAMES[name]} beats random order", passed,
                 f"mean {quantity} over the pruning levels {x:.2f} vs random " + ", ".join(f"{y:.2f}" for y in rnd)
                 + role,
                 "importance order above random (Michel Fig. 3); above the random orders' 95% interval",
                 interval=iv, undecided_because=why, power=pw)


# ------------------------------------------------------------------------------------------------ rule 4
def _prunable_checks(R: Rows, eq: _Equivalence, size: _Sentences) -> list[dict]:
    """Rule 4, for both orders (Michel's the headline): the fraction of heads prunable without loss."""
    out = []
    for name in ORDERS:
        curve = sorted(R.metric("pruning_bleu").where(order=name), key=lambda r: r["sweep"]["pruned"])
        if curve:
            out.append(_prunable_check(R, name, curve, eq, size))
    return out


def _levels(curve: list[dict], eq: _Equivalence) -> list[tuple[float, float, bool | None, tuple | None]]:
    """(fraction, delta, lossless/lossy/undecided, the drop's interval) of each pruned level of ``curve``."""
    base_bleu = Rows(curve).where(pruned=0).value()
    out = []
    for r in curve:
        if r["sweep"]["pruned"] == 0:
            continue
        delta = r["value"] - base_bleu if _finite(r["value"], base_bleu) else math.nan
        state, iv = eq.decide(delta, r["sweep"].get("p_value"))
        out.append((float(r["sweep"]["fraction"]), delta, state, iv))
    return out


def _paper_level(levels: list[tuple], m: float) -> float | None:
    """The grid level that counts as the paper's fraction ``m``: the measured level nearest to it (19 of 96 heads,
    19.8%, is Michel's 20% on his own grid; 10 of 48, 20.8%, on a 48-head model; equally near: the larger). None
    when the curve stops below ``m`` (no level above it shows the grid reaches it)."""
    if not levels or levels[-1][0] < m:
        return None
    return min((lv[0] for lv in levels), key=lambda fr: (abs(fr - m), -fr))


def _prunable_decision(levels: list[tuple], tol: float) -> tuple[bool | None, str | None, float, list[tuple]]:
    """(decision, why undecided, the fraction pruned at the end of the run of lossless levels, the deciding
    levels: those up to the grid level that counts as Michel's 20%, :func:`_paper_level`) of one curve. Fractions,
    not percent: 100 * 0.2 is 20.000000000000004."""
    m = _pub("michel_prunable_wmt") / 100
    ok = 0.0
    for fr, _, state, _ in levels:
        if state is not True:
            break
        ok = fr
    at = _paper_level(levels, m)
    if at is None:
        return None, f"the curve ends at {100 * (levels[-1][0] if levels else 0):.0f}% (no level above " \
                     f"{100 * m:.0f}%)", ok, list(levels)
    deciding = [lv for lv in levels if lv[0] <= at]
    if any(lv[2] is False for lv in deciding):
        return False, None, ok, deciding
    if all(lv[2] is True for lv in deciding):
        return True, None, ok, deciding
    first = next(lv for lv in deciding if lv[2] is not True)
    return None, ((f"the row at {100 * first[0]:.0f}% gives no interval (p-value 1 or a zero change)"
                   if first[3] is None else f"the drop's interval at {100 * first[0]:.0f}% straddles (or touches) the "
                   f"tolerance {tol} BLEU") + ": this evaluation subset cannot tell 'no loss' from a small loss"), \
        ok, deciding


def _prunable_check(R: Rows, name: str, curve: list[dict], eq: _Equivalence, size: _Sentences) -> dict:
    levels = _levels(curve, eq)
    passed, why, ok, deciding = _prunable_decision(levels, eq.tol)
    items = []
    for _, delta, _, iv in deciding:
        pw = _drop_power(eq, size, -delta, iv)
        items.append((side(pw, "below"), pw))
    _, pw = sized(items, "all")
    if passed is None and why:
        why += _corpus_words(pw, eq, size)
    shown = [f"{100 * fr:.0f}%: {d:+.2f}" + (f" [drop {iv[0]:+.2f}, {iv[1]:+.2f}]" if iv else " [no interval]")
             for fr, d, _, iv in levels]
    sd = R.metric("sharp_drop_fraction").where(order=name)
    m_prunable, m_bert, m_sharp = _pub("michel_prunable_wmt"), _pub("michel_prunable_bert"), \
        _pub("michel_sharp_drop_fraction")
    headline = name == HEADLINE_ORDER
    return check(f"a substantial fraction of heads prunes ({ORDER_NAMES[name]}) without loss", passed,
                 f"{100 * ok:.0f}% prunable within {eq.tol} BLEU (equivalence); "
                 + "; ".join(shown[:6]) + (f"; steepest drop after {sd[0]['value']:.0f}%" if sd else "")
                 + ("" if headline else " (secondary: the unnormalised order beside Michel's)"),
                 f"{m_prunable}% (WMT), {m_bert}% (BERT) without noticeable loss; sharp drop past "
                 f"~{m_sharp}% (Michel Fig. 3); need every level up to the grid's nearest to {m_prunable}% with the "
                 f"drop's upper end < {eq.tol} BLEU",
                 headline=headline,
                 interval=f"({eq.level}) interval of each level's BLEU drop, from its paired-bootstrap p-value "
                          "(normal approximation)", undecided_because=why,
                 numbers=_level_numbers(levels, eq.tol, float(m_prunable), 100 * ok), power=pw)


def _level_numbers(levels: list[tuple], tol: float, paper: float, lossless_pct: float, quantity: str = "BLEU",
                   source: str = "michel_prunable_wmt") -> dict:
    """The headline's numbers in the paper's unit (Michel Fig. 3: the percent of the heads prunable without
    noticeable loss): ``lossless_pct``, where the run of lossless levels ends, with the range the levels' tests
    leave for it, up to the level before the first lossy one (100% when no level is lossy: the curve says nothing
    past its end), against the paper's percent. The range decides as the check does: it holds when its lower end
    reaches the grid's level at the paper's percent, fails when its upper end stays below it. "No noticeable loss"
    is the suite's equivalence margin, a drop below ``tol``."""
    lossy = next((i for i, lv in enumerate(levels) if lv[2] is False), None)
    hi = 100.0 if lossy is None else (100 * levels[lossy - 1][0] if lossy > 0 else 0.0)
    return numbers(lossless_pct if levels else None, f"% of heads prunable (drop < {tol:g} {quantity})",
                   lo=lossless_pct if levels else None, hi=max(hi, lossless_pct) if levels else None, paper=paper,
                   paper_text="without noticeable loss", compare="difference", criterion="suite",
                   rule=f"every level up to {paper:g}% with a drop < {tol:g} {quantity}", source=source)


# ------------------------------------------------------------------------------------------------ rule 5
def _l0_checks(R: Rows, eq: _Equivalence, size: _Sentences) -> list[dict]:
    """Rule 5: some L0 run at Voita's head budget loses less than ``tol`` BLEU against the unpruned model and the
    unpenalised fine-tune."""
    kept = R.metric("l0_heads_kept").filter(lambda r: _finite(r["sweep"]["lam"]) and r["sweep"]["lam"] > 0)
    if not kept:
        return []
    voita_pruned, voita_total = _pub("voita_wmt_heads_pruned"), _pub("voita_wmt_encoder_heads")
    kept_max = (voita_total - voita_pruned) / voita_total
    runs, states, items, worst = [], [], [], []
    for r in kept:
        state, at_budget, text, item, drop = _l0_run(R, r, eq, size, kept_max)
        if at_budget:
            states.append(state)
            items.append(item)
            worst.append((state, drop))
        runs.append(text)
    passed, why = _l0_decision(states, kept_max, eq.tol)
    _, pw = sized(items, "any")
    if passed is None and states:
        why += _corpus_words(pw, eq, size)
    return [check("L0 gates reach a sparse head budget with a small BLEU loss", passed, "; ".join(runs),
                  f"{voita_pruned} of {voita_total} encoder heads pruned for {_pub('voita_wmt_bleu_drop')} "
                  f"BLEU (Voita Sec. 6); need a run keeping <= {100 * kept_max:.1f}% of its heads whose "
                  f"drop's upper end is < {eq.tol} BLEU against the unpruned model and the unpenalised "
                  "fine-tune", headline=True, undecided_because=why,
                  interval=f"({eq.level}) interval of each BLEU drop, from its paired-bootstrap p-value",
                  numbers=_l0_numbers(worst, passed, eq.tol, voita_pruned, voita_total), power=pw)]


def _l0_numbers(worst: list[tuple], passed: bool | None, tol: float, pruned: int, total: int) -> dict:
    """The L0 headline's numbers: the BLEU drop (the worse of its two comparisons, with its interval) of the run at
    the budget that decided (the first lossless one when it holds, else the one nearest lossless), against
    Voita's drop at 38 of 48 heads pruned."""
    paper = -float(_pub("voita_wmt_bleu_drop"))
    rule = f"drop < {tol:g} BLEU at <= {total - pruned} of {total} heads kept"
    text = f"{pruned} of {total} encoder heads pruned"
    found = [(st, d) for st, d in worst if d is not None]
    if not found:
        return numbers(None, "BLEU drop at the head budget", paper=paper, paper_text=text, compare="difference",
                       rule=rule, source="voita_wmt_bleu_drop")
    pick = next((d for st, d in found if st is True), None) if passed is True else None
    drop, lo, hi = pick or min((d for _, d in found), key=lambda d: d[2] if d[2] is not None else math.inf)
    return numbers(drop, "BLEU drop at the head budget", lo=lo, hi=hi, paper=paper, paper_text=text,
                   compare="difference", rule=rule, source="voita_wmt_bleu_drop")


def _l0_run(R: Rows, r: dict, eq: _Equivalence, size: _Sentences, kept_max: float) -> tuple:
    """One penalised L0 run: its equivalence state against both references, whether it reached the budget, text,
    and its projected (side, power) for :func:`_project`."""
    lam = r["sweep"]["lam"]
    comps = R.metric("l0_bleu_delta").where(lam=lam) + R.metric("l0_bleu_delta_vs_control").where(lam=lam)
    at_budget = _finite(r["value"], r["n"]) and r["n"] > 0 and r["value"] / r["n"] <= kept_max
    decided = [eq.decide(c["value"], c["sweep"].get("p_value")) for c in comps]
    state = both(*(s for s, _ in decided)) if decided else None
    pws = [_drop_power(eq, size, -c["value"], iv) if _finite(c["value"]) else None
           for c, (_, iv) in zip(comps, decided)]
    item = sized([(side(pw, "below"), pw) for pw in pws], "all") if pws else (None, None)
    text = (f"lambda {lam:g}: {r['value']:.0f}/{r['n']:.0f} kept" + (" (at the budget)" if at_budget else "") + ", "
            + ", ".join(f"{c['value']:+.2f} (p={c['sweep'].get('p_value')})" for c in comps))
    drops = [(-c["value"], iv[0], iv[1]) if iv else (-c["value"], None, None)
             for c, (_, iv) in zip(comps, decided) if _finite(c["value"])]
    with_iv = [d for d in drops if d[2] is not None]
    drop = max(with_iv, key=lambda d: d[2]) if with_iv else (drops[0] if drops else None)  # the worse one
    return state, at_budget, text, item, drop


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


def _learned_gates(R: Rows, params: dict, T: dict) -> list[dict]:
    """Gate of rules 1-5: the unpruned model beats the copy baseline on the evaluation subset."""
    base, copy_bl = R.metric("bleu_unpruned").where(subset="eval"), R.metric("bleu_copy_baseline").where(subset="eval")
    if not (base and copy_bl):
        return []
    margin = T["min_bleu_over_copy"]
    b0, c0 = base.value(), copy_bl.value()
    return [gate("the unpruned model learned to translate", _finite(b0, c0) and b0 > c0 + margin,
                 f"BLEU {b0:.2f} vs copying the source {c0:.2f} on the "
                 f"{params['eval_sentences']}-sentence evaluation subset",
                 f"more than {margin} BLEU above the copy baseline", thresholds=uses(T, "min_bleu_over_copy"))]


def _speedup_checks(R: Rows, device: str | None) -> list[dict]:
    """Rule 6: the pruned model's speed-up grows with batch size (decided on a GPU only: ``device``, the one the
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


def _heads_per_layer(R: Rows) -> int | None:
    """The fewest heads of any attention layer, read from the rows (single-head ablations, or the BERT shape)."""
    shape = R.metric("mnli_heads").first()
    if shape:
        return int(shape["sweep"]["heads_per_layer"])
    per_layer: dict[tuple, set] = {}
    for r in R.metric("ablation_bleu_delta"):
        per_layer.setdefault((r["sweep"]["kind"], r["sweep"].get("layer")), set()).add(r["sweep"].get("head"))
    return min((len(x) for x in per_layer.values()), default=None)


# ------------------------------------------------------------------------------------------------ verdict (BERT, MNLI)
def _judge_mnli(R: Rows, T: dict, params: dict, scale: str, device: str | None) -> dict:
    """Verdict rules of Michel et al.'s BERT experiment (``hf_model``; repro.claims._heads_mnli).

    "No loss" is an equivalence test on each pruned model's (1 - ``significance``) interval of the accuracy drop
    (matched pairs, in points) against tol = |Michel's largest one-head-per-layer change on MNLI| (Tables 2-3: 0.96
    points, none significant: the paper's own measure of a change that is not noticeable): lossless when the drop's
    upper end lies below tol, lossy when its lower end lies above it, undecided otherwise.

    1. HEADLINE (Fig. 3, BERT): pruning in Michel's l2-per-layer normalised order (his protocol, at any heads per
       layer; the unnormalised order is a secondary check beside it) is lossless at every level up to the one at
       Michel's 40% (the first grid level whose rounded percentage reaches it): holds then; fails when a level up to
       it is lossy; undecided otherwise, or when the curve stops short of it. The level is a point of the
       experiment's grid (10% of the heads per step), not a measured quantity, so reaching it is no tie; each
       level's own test is strict;
    2. the mean accuracy over the pruning levels lies above the random orders' 95% t-interval (fails below it);
    3. keeping one head in any one layer is lossless in every layer (Tables 2-3): fails when some layer is lossy;
    4. the pruned model's speed-up grows with batch size (Table 4), decided on a GPU only (:func:`_speedup_checks`).
    Gate of 1-3: the lower end of the unpruned accuracy's interval lies more than ``min_accuracy_over_majority``
    points above the majority class's share (the classifier learned the task). Checks 1 and 3 carry their power in
    evaluation pairs."""
    tol = abs(float(_pub("michel_one_head_bert_max_delta")))
    acc = R.metric("mnli_accuracy").first()
    n_pairs = int(acc["n"]) if acc and _finite(acc.get("n")) else 0
    checks = [*_mnli_prunable_checks(R, tol, n_pairs), *_mnli_random_checks(R), *_mnli_one_head_checks(R, tol, n_pairs)]
    gates = _mnli_gates(R, T)
    checks = [gated(c, gates) for c in checks] + _speedup_checks(R, device)
    return verdict_from_checks(CLAIM, checks, scale, gates=gates,
                               setup=_setup_rows(params, _heads_per_layer(R), device))


def _drop_state(r: dict, tol: float) -> tuple[bool | None, tuple[float, float] | None]:
    """(lossless / lossy / undecided, the drop's interval) of one compared row (``lo``, ``hi``: the change's)."""
    lo, hi = r["sweep"].get("lo"), r["sweep"].get("hi")
    if not _finite(lo, hi):
        return None, None
    return decide_interval(-float(hi), -float(lo), below=tol), (-float(hi), -float(lo))


def _pairs_power(r: dict, iv: tuple | None, tol: float, n_pairs: int) -> tuple[bool | None, dict | None]:
    """(side, power in MNLI pairs) of one compared row's accuracy-drop interval against ``tol``."""
    if iv is None or not n_pairs:
        return None, None
    d = r["sweep"].get("delta", r["value"])
    pw = power(-float(d) if _finite(d) else (iv[0] + iv[1]) / 2, iv[0], iv[1], tol, n_pairs, "MNLI pairs")
    return side(pw, "below"), pw


def _mnli_prunable_checks(R: Rows, tol: float, n_pairs: int) -> list[dict]:
    """Rule 1, for each importance order measured (Michel's the headline, the unnormalised one secondary)."""
    paper = float(_pub("michel_prunable_bert"))
    out = []
    for name in ORDERS:
        curve = sorted(R.metric("mnli_pruning_accuracy").where(order=name), key=lambda r: r["sweep"]["pruned"])
        if not curve:
            continue
        passed, why, shown, ok, deciding = _mnli_prunable_decision(curve, tol, paper)
        _, pw = sized([_pairs_power(r, _drop_state(r, tol)[1], tol, n_pairs) for r in deciding], "all")
        if passed is None and pw and pw.get("n_needed"):
            why += f"; if the estimates held, ~{pw['n_needed']:,} evaluation pairs would decide it (now {n_pairs:,})"
        headline = name == HEADLINE_ORDER
        out.append(check(f"{paper:.0f}% of BERT's heads prune ({ORDER_NAMES[name]}) without loss on MNLI", passed,
                         f"lossless up to {ok:.0f}% of the heads within {tol} accuracy points (equivalence); "
                         + "; ".join(shown[:7])
                         + ("" if headline else " (secondary: the unnormalised order beside Michel's)"),
                         f"{paper:.0f}% of the heads without noticeable loss (Michel Fig. 3, BERT on MNLI); need "
                         f"every level up to {paper:.0f}% with the drop's upper end < {tol} points",
                         headline=headline, undecided_because=why,
                         interval="(1 - alpha) interval of each level's accuracy drop (matched pairs, Agresti-Min)",
                         numbers=_level_numbers(
                             [(float(r["sweep"]["fraction"]), float(r["sweep"].get("delta", r["value"])),
                               *_drop_state(r, tol)) for r in curve if r["sweep"]["pruned"] != 0],
                             tol, paper, ok, "accuracy points", "michel_prunable_bert"), power=pw))
    return out


def _mnli_prunable_decision(curve: list[dict], tol: float, paper: float) -> tuple:
    """(decision on the levels up to the paper's fraction, why undecided, each level's text, the percent of heads
    pruned at the end of the lossless run of levels, which may go past the paper's, the deciding rows)."""
    shown, ok, states, decided, rows = [], 0.0, [], None, []
    for r in curve:
        if r["sweep"]["pruned"] == 0:
            continue
        state, iv = _drop_state(r, tol)
        frac = 100 * float(r["sweep"]["fraction"])
        shown.append(f"{frac:.0f}%: {r['sweep'].get('delta', math.nan):+.2f}"
                     + (f" [drop {iv[0]:+.2f}, {iv[1]:+.2f}]" if iv else " [no interval]"))
        states.append(state)
        if decided is None:
            rows.append(r)
        ok = frac if all(x is True for x in states) else ok
        if decided is None and round(frac) >= paper:  # the level at the paper's fraction: decide on it and below
            decided = list(states)
    if decided is None:
        return None, f"the curve ends at {ok:.0f}%, short of {paper:.0f}%", shown, ok, rows
    if all(s is True for s in decided):
        return True, None, shown, ok, rows
    if any(s is False for s in decided):
        return False, None, shown, ok, rows
    return None, (f"a level's drop interval straddles the tolerance {tol} points (or gives none): these "
                  "evaluation pairs cannot tell 'no loss' from a small loss"), shown, ok, rows


def _mnli_random_checks(R: Rows) -> list[dict]:
    """Rule 2, for each importance order measured."""
    rnd = R.metric("mnli_pruning_mean_accuracy").where(order="random").values()
    return [_beats_random_check(name, x, rnd, quantity="MNLI accuracy (%)") for name in ORDERS
            if rnd and (x := R.metric("mnli_pruning_mean_accuracy").where(order=name).value()) is not None]


def _mnli_one_head_checks(R: Rows, tol: float, n_pairs: int) -> list[dict]:
    """Rule 3: one head kept in one layer (every layer in turn) loses nothing noticeable."""
    rows = sorted(R.metric("mnli_one_head_delta"), key=lambda r: r["sweep"]["layer"])
    if not rows:
        return []
    states = [_drop_state(r, tol) for r in rows]
    passed = both(*(s for s, _ in states))
    _, pw = sized([_pairs_power(r, iv, tol, n_pairs) for r, (_, iv) in zip(rows, states)], "all")
    worst = max(rows, key=lambda r: -r["value"] if _finite(r["value"]) else math.inf)
    return [check("keeping one head in any one BERT layer loses nothing noticeable", passed,
                  f"worst layer {worst['sweep']['layer']}: {worst['value']:+.2f} points; "
                  + "; ".join(f"L{r['sweep']['layer']}: {r['value']:+.2f}" + (f" [drop {iv[0]:+.2f}, {iv[1]:+.2f}]"
                                                                             if iv else "")
                              for r, (_, iv) in zip(rows, states)),
                  f"every layer within {_pub('michel_one_head_bert_max_delta')} points, none significant (Michel "
                  f"Tables 2-3, BERT); need each layer's drop upper end < {tol} points",
                  undecided_because=f"a layer's drop interval straddles {tol} points (or gives none)", power=pw)]


def _mnli_gates(R: Rows, T: dict) -> list[dict]:
    """Gate of rules 1-3: the classifier learned MNLI (well above always answering the majority class)."""
    acc, maj = R.metric("mnli_accuracy").first(), R.metric("mnli_majority_baseline").value()
    margin = T["min_accuracy_over_majority"]
    lo = acc["sweep"].get("lo") if acc else None
    return [gate("the unpruned classifier learned MNLI", _finite(lo, maj) and float(lo) > maj + margin,
                 f"accuracy {acc['value']:.2f}% [{float(lo):.2f}, {float(acc['sweep'].get('hi')):.2f}] on "
                 f"{acc['n']} pairs vs the majority class's {maj:.2f}%" if _finite(lo, maj) else
                 "no accuracy interval or majority baseline",
                 f"the interval's lower end more than {margin} points above the majority class",
                 thresholds=uses(T, "min_accuracy_over_majority"))]


def _setup_rows(params: dict, heads_per_layer: int | None, device: str | None) -> list[dict]:
    hpl = (f"{heads_per_layer} heads per layer (Michel: {_pub('michel_heads_per_layer')})" if heads_per_layer
           else "heads per layer not recorded")
    return setup_table(CLAIM, {**this_setup(params, device), "pruning order judged": (
        f"Michel's l2-per-layer normalised importance, as published (the headline); the unnormalised order is a "
        f"secondary check beside it; {hpl}")})


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
            "significance": f"paired bootstrap, {params['bootstrap_samples']} samples, p < {params['significance']}; "
                            "single-head counts corrected for multiple testing (Holm)",
            "pruning": f"{100 * pr['step_fraction']:.0f}% of heads per step up to {100 * pr['max_fraction']:.0f}%, "
                       f"orders {pr['orders']} + {len(pr['random_seeds'])} random; L0 gates on {l0['targets']}, "
                       f"lambdas {l0['lambdas']}, {l0['steps']} fine-tune steps",
            "speed": f"heads physically removed ({100 * params['throughput']['prune_fraction']:.0f}%), batch sizes "
                     f"{params['throughput']['batch_sizes']}, device {device}"}

