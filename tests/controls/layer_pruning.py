"""layer_pruning (Gromov et al. 2024, Men et al. 2024): paper-false = the least influential layers are the shallow
ones (block influence reversed in depth) and the similarity rules prune worse than random; the translation model's
learned gates kept (the unpruned BLEU untouched)."""
from controls import edit


def paper_false(rows):
    for stack in ("encoder", "decoder", "lm"):
        bi = {r["sweep.layer"]: r["value"] for r in rows if r.get("metric") == "block_influence"
              and r.get("sweep.stack") == stack and r.get("value") is not None}
        top = max(bi) if bi else 0
        rows = edit(rows, "block_influence", lambda r, bi=bi, top=top: bi[top - r["sweep.layer"]], sweep_stack=stack)
    return edit(rows, "bleu", lambda r: 0.0, sweep_rule=("bi", "angular"), sweep_healed=False)
