"""Pilot for the quantization claim's GPTQ-vs-RTN headline (GPTQ, Frantar et al. 2023, Tables 3-5) on the LM's
function-preserving outlier copy (repro.quant.outliers).

On the suite's small LM 4-bit RTN barely hurts (+0.07% perplexity on the reference of b999281), so GPTQ's gain at
4 bits is too small for any sample to decide. The copy makes a few hidden dimensions' inputs ``scale`` times larger
and their weight columns ``scale`` times smaller, the situation of the OPT-size models where RTN fails and GPTQ's
Hessian-aware updates hold. This script measures RTN and GPTQ at the default config's bits and group settings on the
copy (repro.claims.quantization.run_model, the code the claim runs, on the copy's first ``outlier_copy.sentences``
scored sentences) with EXPLORATION calibration seeds, and computes the judge's own intervals and power
(repro.judges.quantization: the pooled per-bit-width interval, every setting's, and power= at 90%). The record is
committed in docs/pilots/quantization_copy.md.

    python scripts/pilots/quantization_copy.py LM_FOLDER OUT.json COPY_OVERRIDES SEED [SEED ...]

COPY_OVERRIDES: JSON merged into the default section's ``outlier_copy`` (e.g. '{"group_sizes": [64],
"sentences": 1000}'); the copy's methods are fp32 and RTN and GPTQ (repro.claims.quantization.copy_methods).
COPY_OVERRIDES ``plain``: the plain LM instead, on every scored sentence, at the default section's RTN and GPTQ bits
and group settings (the design that replaced the copy's comparison: docs/pilots/quantization_plain.md).

Seeds must be below 1000 (repro.plan.CONFIRMATION_MIN): confirmation seeds are never looked at here.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch


def main(argv: list[str]) -> int:
    # imported here, after the thread count is fixed, so no torch pool starts with the machine's default
    torch.set_num_threads(1)
    from repro import artefacts, config, plan, quant as Q
    from repro.claims import quantization as C
    from repro.judges import quantization as J
    from repro.rows import Rows

    lm, out, seeds = Path(argv[0]), Path(argv[1]), [int(s) for s in argv[3:]]
    if not seeds or max(seeds) >= plan.CONFIRMATION_MIN:
        raise SystemExit(f"exploration seeds only (< {plan.CONFIRMATION_MIN}): {seeds}")
    plain = argv[2] == "plain"
    params = config.section("quantization", "default",
                            {"quantization": {"lm_model": str(lm), "calibration": {"seeds": seeds}, "outlier_copy": {
                                **({} if plain else json.loads(argv[2])), "methods": ["rtn", "gptq"]}}})
    t0 = time.perf_counter()
    t = artefacts.load_trained_model(lm, device="cpu")
    t.model.eval()
    data = C.load_data(t, "lm", params)
    if plain:
        return _plain(t, params, data, out, seeds, t0)
    oc = params["outlier_copy"]
    twin, dims = Q.with_outliers(t.model, int(oc["dims"]), float(oc["scale"]))
    sub = dict(data, valid=C._first_sentences(data, int(oc["sentences"])))
    grid = C.copy_methods(params)
    rows, _ = C.run_model(twin, C.OUTLIER_MODEL, params, "cpu", sub,
                          lambda m: C.evaluate(t, m, "lm", sub, params, "cpu"), grid=grid)
    R, m = Rows(rows), C.OUTLIER_MODEL
    rec = {"lm": str(lm), "calibration_seeds": seeds, "dims": dims, "scale": oc["scale"],
           "sentences": oc["sentences"], "group_sizes": oc["group_sizes"],
           "wall_seconds": time.perf_counter() - t0, "torch_threads": 1,
           "ppl": {}, "seconds": {}, "pooled": {}, "settings": {}}
    for r in R.metric("valid_ppl"):
        rec["ppl"].setdefault(r["sweep"]["method"], []).append(r["value"])
    for r in R.metric("method_seconds"):
        rec["seconds"].setdefault(r["sweep"]["method"], []).append(round(r["value"], 2))
    for bits in sorted({g["bits"] for g in grid if g["family"] == "gptq"}):
        iv, settings = J._pooled(R, m, bits)
        rec["pooled"][f"{bits}-bit"] = _summary(iv, J, settings=settings)
    for meth in sorted(J._gptq_methods(R, m)):
        rec["settings"][meth] = _summary(J._diff(R, m, meth, meth.replace("gptq", "rtn", 1)), J)
    for meth in [g["method"] for g in grid if g["family"] == "rtn"]:
        rec["settings"][f"{meth} vs fp32"] = _summary(J._diff(R, m, meth, "fp32"), J)
    out.write_text(json.dumps(rec, indent=1, default=float) + "\n")
    print(json.dumps({k: rec[k] for k in ("pooled", "settings", "wall_seconds")}, indent=1, default=float))
    return 0


def _plain(t, params: dict, data: dict, out: Path, seeds: list[int], t0: float) -> int:
    """The plain LM's fp32, RTN and GPTQ on every scored sentence: the judge's pooled interval per bit width."""
    from repro.claims import quantization as C  # as in main: after the thread count is fixed
    from repro.judges import quantization as J
    from repro.rows import Rows

    grid = [g for g in C.methods(params) if g["family"] in ("fp32", "rtn", "gptq")]
    rows, _ = C.run_model(t.model, "lm", params, "cpu", data,
                          lambda m: C.evaluate(t, m, "lm", data, params, "cpu"), grid=grid)
    R = Rows(rows)
    rec = {"lm": params["lm_model"], "model": "lm (plain)",
           "calibration_seeds": seeds, "group_sizes": params["gptq"]["group_sizes"],
           "wall_seconds": time.perf_counter() - t0, "torch_threads": 1, "ppl": {}, "pooled": {}}
    for r in R.metric("valid_ppl"):
        rec["ppl"].setdefault(r["sweep"]["method"], []).append(r["value"])
    for bits in sorted({g["bits"] for g in grid if g["family"] == "gptq"}):
        iv, settings = J._pooled(R, "lm", bits)
        rec["pooled"][f"{bits}-bit"] = _summary(iv, J, settings=settings)
    out.write_text(json.dumps(rec, indent=1, default=float) + "\n")
    print(json.dumps({k: rec[k] for k in ("pooled", "wall_seconds")}, indent=1, default=float))
    return 0


def _summary(iv: dict, J, **extra) -> dict:
    """The judge's interval of D = ln ppl(a) - ln ppl(b) in % perplexity, with its 90%-power sample size."""
    pw = J._power_two(iv, 0.0, J._pct) if iv["k"] > 1 else J._power_sentences(iv, 0.0, J._pct)
    return {"d_pct": J._pct(iv["d"]), "lo_pct": J._pct(iv["lo"]), "hi_pct": J._pct(iv["hi"]),
            "seed_half_pct": J._pct(iv["seed_half"]) if np.isfinite(iv["seed_half"]) else None,
            "eval_half_pct": J._pct(iv["eval_half"]), "se_nats": iv["se"], "units": iv["n"], "k": iv["k"],
            "n_needed": pw.get("n_needed"), "n_unit": pw.get("unit"), "why": pw.get("why"), **extra}


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
