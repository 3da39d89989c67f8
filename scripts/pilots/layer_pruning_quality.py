"""Which quality layer_pruning's headline permutation test (Gromov et al. 2025 Fig 1-2; ShortGPT Table 3: similarity
rules prune better than random) compares the rules with random on, chosen on EXPLORATION data only: the committed
rows of two spent shared models, read from git at the commits that published them (the references are regenerated
later; these rows are not read again for confirmation).

For each model, the judge's own test (repro.judges.layer_pruning: exact over every ordering of each stack's layers,
stacks combined) is run twice on the same rows: with the translation stacks compared in BLEU on the test subset (the
design measured so far) and in teacher-forced validation NLL (lower is better). The LM is compared in perplexity in
both. Nothing is measured.

    python scripts/pilots/layer_pruning_quality.py
"""
from __future__ import annotations

import math
import subprocess
import tempfile
from pathlib import Path

from repro.io import read_metrics
from repro.judges import layer_pruning as lp
from repro.verdicts import Rows

# (what the rows are, the commit that published them, their folder): spent shared models, exploration only
SOURCES = [
    ("cpu-intel-xeon-2c/default of 7102fcd (older models)", "43c1aa3",
     "references/results/cpu-intel-xeon-2c/default/layer_pruning"),
    ("cpu-amd-epyc-2c/default of b999281 (the models spent on the BLEU design)", "b0f7b9e",
     "references/results/cpu-amd-epyc-2c/default/layer_pruning"),
]


def rows_at(commit: str, folder: str) -> list[dict]:
    text = subprocess.run(["git", "show", f"{commit}:{folder}/metrics.csv"], check=True, capture_output=True,
                          text=True).stdout
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "metrics.csv").write_text(text)
        frame = read_metrics(Path(tmp) / "metrics.csv", verify=False)
    return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
            for r in frame.to_dict("records")]


def main() -> None:
    for what, commit, folder in SOURCES:
        R = Rows(rows_at(commit, folder))
        n_layers = {s: int(R.metric("n_layers").where(stack=s).value()) for s in lp.STACKS
                    if R.metric("n_layers").where(stack=s)}
        for quality in ("bleu", "valid_nll"):
            params = {"random_quality": quality}
            tests = [t for s, L in n_layers.items() for t in lp._stack_tests(R, s, L, params)]
            for rule in lp.SIMILARITY_RULES:
                ts = [t for t in tests if t.rule == rule]
                better, worse, pool = lp._combined_p(ts)
                ranks = ", ".join(f"{t.stack} {t.rank}/{len(t.pool)}" for t in ts)
                print(f"{what} | {quality:9s} | {rule:7s} | p better {float(better):.4f} | p worse "
                      f"{float(worse):.4f} | ranks {ranks}")


if __name__ == "__main__":
    main()
