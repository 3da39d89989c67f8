"""layer_pruning (Gromov et al. 2024, Men et al. 2024): paper-false = the least influential layers are the shallow
ones (block influence reversed in depth) and the similarity rules prune worse than random; the translation model's
learned gates kept (the unpruned BLEU untouched).

The LM's checks rest on a gate (its NLL clearly below a unigram model's). Rows measured before the measurement wrote
the LM's ``unigram_ppl`` row lack it, so every control first gives such rows a unigram baseline the LM clearly beats
(``_learned``): the gate passes and the judge decides, as on a regenerated reference."""
import math

from controls import _eq, edit


def _learned(rows):
    if any(r.get("metric") == "unigram_ppl" and r.get("sweep.stack") == "lm" for r in rows):
        return rows
    base = [r for r in rows if r.get("metric") == "n_layers" and r.get("sweep.stack") == "lm"]
    ppl = [float(r["value"]) for r in rows if r.get("metric") == "valid_ppl" and r.get("sweep.stack") == "lm"
           and r.get("sweep.rule") == "none" and _eq(r.get("sweep.healed"), False)]
    if not base or not ppl:
        return rows
    return rows + [{**base[0], "metric": "unigram_ppl", "unit": "perplexity", "value": ppl[0] * math.e ** 3}]


def _reverse_depth(rows):
    for stack in ("encoder", "decoder", "lm"):
        bi = {r["sweep.layer"]: r["value"] for r in rows if r.get("metric") == "block_influence"
              and r.get("sweep.stack") == stack and r.get("value") is not None}
        top = max(bi) if bi else 0
        rows = edit(rows, "block_influence", lambda r, bi=bi, top=top: bi[top - r["sweep.layer"]], sweep_stack=stack)
    return rows


def paper_false(rows):
    rows = _reverse_depth(_learned(rows))
    return edit(rows, "bleu", lambda r: 0.0, sweep_rule=("bi", "angular"), sweep_healed=False)


def ties(rows):
    """Equal block influence in every layer (no depth structure at all), and every similarity rule exactly as good
    as the best random draw at each removal count."""
    rows = _learned(rows)
    flat = edit(rows, "block_influence", lambda r: 0.25)
    best = {}
    for r in rows:
        if r.get("metric") in ("bleu", "valid_ppl") and r.get("sweep.rule") == "random" and _eq(r.get("sweep.healed"), False):
            k = (r["metric"], r["sweep.stack"], r["sweep.n_removed"])
            v = float(r["value"])
            best[k] = max(best.get(k, v), v) if r["metric"] == "bleu" else min(best.get(k, v), v)
    tied = flat
    for metric in ("bleu", "valid_ppl"):
        tied = edit(tied, metric, lambda r, metric=metric: best.get((metric, r["sweep.stack"], r["sweep.n_removed"]),
                                                                     r["value"]),
                    sweep_rule=("bi", "angular"), sweep_healed=False)
    return [flat, tied]
