"""C4 rmsnorm_speed: RMSNorm vs LayerNorm running time.

Reproduces Zhang & Sennrich 2019 (NeurIPS, arXiv 1910.07467): replacing LayerNorm by RMSNorm "reduces the running
time by 7%~64%" (Table 4: Transformer-base 248 -> 231 s/1k steps, 6.9%; Tables 2-3, 6, 8, 10 for the other models),
reported as the paper does: % running-time reduction = 100 (1 - t_RMS / t_LN). Also ScaleNorm (Nguyen & Salazar 2019,
arXiv 1910.05895, Sec. 3.2: "around 5% faster" than LayerNorm).

- The op alone: the kernel benchmark's norm sweep (repro.bench.kernels.run_norm_sweep: RMSNorm and LayerNorm
  interleaved per provider, forward and forward+backward, hidden sizes and dtypes from config). Providers: ``torch``
  (F.rms_norm / F.layer_norm), ``eager`` (the hand-written formula of the model's ``norm_impl: manual``,
  repro.model.norms.rms_norm_manual / layer_norm_manual), ``compile`` (torch.compile of it) and ``triton``
  (the suite's fused kernels; recorded as skipped on CPU, where Triton runs only under its interpreter).
- The whole model: the training-step time (forward, backward, Adam step) of the shared DecoderLM with
  norm = layernorm / rmsnorm / scalenorm for each ``norm_impl`` (torch, manual, triton), all variants interleaved
  round by round in one process; the reduction is the median of the per-round paired ratios, with a distribution-free
  confidence interval of that median (order statistics, :func:`median_interval`), which narrows as rounds are added.

How many rounds (:func:`timed_rounds`, the ``model`` keys ``reps``, ``min_time_s``, ``max_rounds``, ``max_time_s``,
``confidence``, ``stop_floor_pct``, all fixed in the config before any round is timed): at least ``reps`` rounds and
``min_time_s`` seconds, then looks at a fixed doubling schedule (n0, 2 n0, 4 n0, ... up to ``max_rounds``). At each
look the rounds stop early only when, for every pair of norms written the same way (``manual``, ``triton``), the
interval of the median RMS/LN ratio excludes the ratio of ``stop_floor_pct`` (the registry's Transformer reduction,
6.9%: a test holds the two equal; a measurement never imports the registry). Otherwise they stop at ``max_rounds`` or
at the first round past ``max_time_s`` (the cap, a last look). Stopping when the interval excludes the judge's
threshold is optional stopping: a plain 95% interval checked at every look would exclude a true floor more often than
5%. So the number of looks is bounded in advance (K = 1 + ceil(log2(max_rounds / reps)); the time cap only ends the
schedule early) and every interval, at every look and in the rows, is the plain fixed-n order-statistic interval at
the Bonferroni level 1 - (1 - ``confidence``) / K: over all looks together the chance that any of them excludes the
true median is at most 1 - ``confidence`` (conservative). The rows record n, the level, the looks taken and why the
rounds stopped (``stop``: decided / max_rounds / time_cap); the interval is kept as its distances below and above the
median (``ci_below``, ``ci_above``), and out/model_rounds.csv keeps every round's times. (The interval treats the
rounds as independent; interleaving pairs each round's variants against drift, not against load that persists across
rounds.)
This module only measures; repro/judges/rmsnorm_speed.py gives a verdict per implementation: does RMSNorm run faster
than LayerNorm by the paper's smallest reduction (the registry's Transformer 6.9%), at the op (median over sizes and
dtypes of the fwd+bwd time ratio) and in the model (the interval of the median paired ratio)?
"""
from __future__ import annotations

import csv
import logging
import math
import time
from pathlib import Path

import repro

repro.openmp_default_wait()  # before torch loads OpenMP: this claim times work alone on the idle machine

import torch  # noqa: E402 (after the OpenMP wait is chosen)
import torch.nn.functional as F

from repro.bench import kernels, timing
from repro.bench.timing import median_interval, summarize, time_once
from repro.config import resolve_device
from repro.io import metric
from repro.model import BlockConfig, DecoderLM, ModelConfig
from repro.vocabulary.rmsnorm_speed import CLAIM

log = logging.getLogger("repro.rmsnorm_speed")
KERNEL_TIME_RATIO = ("rmsnorm_vs_layernorm", "time_ratio")  # (op, metric) of the kernel sweep's paired-ratio rows
ARTIFACTS = ("model_rounds.csv",)  # every round's step times per variant (declared in verdict.json)
SAME_WAY_IMPLS = ("manual", "triton")  # model norm_impl values with both norms written the same way (the headline)


# ----------------------------------------------------------------------------------------------- the statistic
def look_schedule(reps: int, max_rounds: int, first: int | None = None) -> list[int]:
    """The round counts at which the sequential stop looks: ``first`` (default ``reps``), doubling, capped at
    ``max_rounds`` (always the last look). Its length with ``first=reps`` bounds the number of looks (K)."""
    n, out = max(first or reps, 1), []
    while n < max_rounds:
        out.append(n)
        n *= 2
    return out + [max(max_rounds, first or reps)]


def paired_ratios(samples: dict, numerator: str, denominator: str) -> list[float]:
    """Per-round ratios numerator/denominator (paired by interleaving round)."""
    return [a / b for a, b in zip(samples[numerator], samples[denominator]) if b > 0]


def timed_rounds(fns: dict, m: dict, device, decisive: list[tuple[str, str]]) -> tuple[dict, dict]:
    """Interleaved rounds of ``fns`` (all variants per round, in order) under the sequential stop of the module's
    docstring; ``decisive``: the (RMSNorm, LayerNorm) variant pairs whose intervals must all exclude the floor for an
    early stop. Returns (per-variant seconds, the stop record: rounds, looks, planned looks K, level, stop, seconds)."""
    planned = len(look_schedule(m["reps"], m["max_rounds"]))
    level = 1 - (1 - m["confidence"]) / planned
    ceiling = 1 - m["stop_floor_pct"] / 100  # the floor as a time ratio

    def excluded(num, den):
        lo, hi, _ = median_interval(paired_ratios(samples, num, den), level)
        return hi < ceiling or lo > ceiling

    log_ = logging.getLogger("repro.timing")
    timing.sample_load()
    for _ in range(m["warmup"]):
        for fn in fns.values():
            fn()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    start, rounds, looks, schedule, stop = time.perf_counter(), 0, 0, None, None
    while stop is None:
        for name, fn in fns.items():
            samples[name].append(time_once(fn, device))
        rounds += 1
        elapsed = time.perf_counter() - start
        log_.info("model step timing: round %d, %.0f s (%s)", rounds, elapsed,
                  ", ".join(f"{k} {1e3 * v[-1]:.1f} ms" for k, v in samples.items()))
        if schedule is None:
            if rounds < m["reps"] or (elapsed < m["min_time_s"] and rounds < m["max_rounds"]):
                continue
            schedule = look_schedule(m["reps"], m["max_rounds"], first=rounds)  # never longer than `planned`
        capped = elapsed >= m["max_time_s"]
        if rounds not in schedule and not capped:
            continue
        looks += 1
        if all(excluded(*pair) for pair in decisive):
            stop = "decided"
        elif rounds >= schedule[-1]:
            stop = "max_rounds"
        elif capped:
            stop = "time_cap"
        log_.info("model step timing: look %d of at most %d at %d rounds (level %.4f): %s", looks, planned, rounds,
                  level, stop or "undecided, continuing")
    timing.sample_load()
    return samples, {"rounds": rounds, "looks": looks, "planned_looks": planned, "confidence": level, "stop": stop,
                     "seconds": round(time.perf_counter() - start, 1)}


def write_rounds(samples: dict, path: Path) -> None:
    """Every round's time per variant (seconds), one row per round."""
    names = list(samples)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["round", *names])
        for i, times in enumerate(zip(*(samples[k] for k in names))):
            w.writerow([i, *(f"{t:.6f}" for t in times)])


# ----------------------------------------------------------------------------------------------- the op
def op_level(p: dict, device, out: Path) -> list[dict]:
    """RMSNorm vs LayerNorm per provider via the kernel benchmark's sweep; raw rows go to out/kernels_norms.csv."""
    sweep = {**p["op_sweep"], "device": device.type}
    if "compile" in sweep.get("providers", ()):
        import torch._inductor.config as inductor_config  # lazy: slow import, only for the compile provider
        inductor_config.compile_threads = p["compile_threads"]  # no compile-worker pool competing with the timing
    krows = kernels.run_norm_sweep(sweep, log=log.info)
    kernels.write_csv(krows, out / "kernels_norms.csv")
    rows = []
    for r in krows:
        common = dict(provider=r["provider"], dtype=r["dtype"], hidden=r["hidden"], rows=r["rows"], **{"pass": r["pass"]})
        if r["op"] in ("rmsnorm", "layernorm"):
            if r["status"] == "ok":
                rows.append(metric(CLAIM, "op_time", r["median_ms"] / 1e3, "s", spread=r["iqr_ms"] / 1e3, n=r["n"],
                                   op=r["op"], **common))
                rows.append(metric(CLAIM, "op_bandwidth", r["gbps"], "GB/s", op=r["op"], **common))
                if r.get("peak_mb") is not None:
                    rows.append(metric(CLAIM, "op_peak_memory", r["peak_mb"], "MiB", op=r["op"], **common))
            else:
                rows.append(metric(CLAIM, "op_time", None, "s", op=r["op"], status=r["status"], reason=r["reason"],
                                   **common))
        elif (r["op"], r["metric"]) == KERNEL_TIME_RATIO:
            rows.append(metric(CLAIM, "op_time_ratio_rms_over_ln", r["value"], "ratio", spread=r.get("value_iqr"),
                               n=r["n"], kind="ratio_time", **common))
            rows.append(metric(CLAIM, "op_time_reduction", 100 * (1 - r["value"]), "percent", n=r["n"],
                               kind="ratio_time", published_key="reduction_range", **common))
    return rows


# ----------------------------------------------------------------------------------------------- the model
def _variants(p: dict, device) -> tuple[dict, dict]:
    """(norm, impl) variants to time; triton variants are skipped off CUDA (the interpreter is not a speed path)."""
    run, skipped = {}, {}
    for impl in p["model_impls"]:
        for norm in p["model_norms"]:
            if norm == "scalenorm" and impl != p["model_impls"][0]:
                continue  # ScaleNorm has one implementation (eager); time it once
            name = f"{norm}/{impl if norm != 'scalenorm' else 'eager'}"
            if impl == "triton" and device.type != "cuda":
                skipped[name] = kernels.INTERPRETER_REASON
                continue
            run[name] = (norm, impl)
    return run, skipped


def model_level(p: dict, device, out: Path) -> list[dict]:
    m = p["model"]
    variants, skipped = _variants(p, device)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[m["dtype"]]
    g = torch.Generator(device="cpu").manual_seed(p["seed"])
    tokens = torch.randint(1, m["vocab"], (m["batch"], m["seq_len"] + 1), generator=g).to(device)
    fns = {}
    for name, (norm, impl) in variants.items():
        torch.manual_seed(p["seed"])
        cfg = ModelConfig(block=BlockConfig(d_model=m["d_model"], n_heads=m["n_heads"], d_ff=m["d_ff"], norm=norm,
                                            norm_impl=impl if norm != "scalenorm" else "torch", ffn=m["ffn"],
                                            attention=m["attention"]),
                          vocab_size=m["vocab"], n_decoder_layers=m["layers"], max_seq_len=m["seq_len"],
                          positional="learned")
        model = DecoderLM(cfg).to(device=device, dtype=dtype).train()
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)

        def step(model=model, opt=opt):
            logits = model(tokens[:, :-1])
            loss = F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())
            opt.zero_grad(set_to_none=False)
            loss.backward()
            opt.step()

        fns[name] = step
    decisive = [(f"rmsnorm/{i}", f"layernorm/{i}") for i in SAME_WAY_IMPLS
                if f"rmsnorm/{i}" in fns and f"layernorm/{i}" in fns]
    log.info("model: timing %d variants interleaved (%s); skipped: %s", len(fns), ", ".join(fns), skipped or "none")
    samples, stop = timed_rounds(fns, m, device, decisive)
    write_rounds(samples, out / "model_rounds.csv")
    log.info("model: %d rounds in %.0f s, %d look(s) of at most %d, stop: %s", stop["rounds"], stop["seconds"],
             stop["looks"], stop["planned_looks"], stop["stop"])
    common = dict(layers=m["layers"], d_model=m["d_model"], seq_len=m["seq_len"], batch=m["batch"], dtype=m["dtype"])
    rows = []
    for name, sm in samples.items():
        s = summarize(sm)
        norm, impl = name.split("/")
        rows.append(metric(CLAIM, "step_time", s["median"], "s", spread=s["iqr"], n=s["n"], norm=norm, impl=impl,
                           **common))
        log.info("model %s: %.1f ms/step (IQR %.1f ms, n=%d)", name, 1e3 * s["median"], 1e3 * s["iqr"], s["n"])
    for name, reason in skipped.items():
        norm, impl = name.split("/")
        rows.append(metric(CLAIM, "step_time", None, "s", norm=norm, impl=impl, status="skipped", reason=reason,
                           **common))
    seq = dict(confidence=stop["confidence"], looks=stop["looks"], planned_looks=stop["planned_looks"],
               stop=stop["stop"], **common)
    for impl in p["model_impls"]:
        pairs = [(f"rmsnorm/{impl}", "rms")] + ([("scalenorm/eager", "scale")] if impl == p["model_impls"][0] else [])
        for name, short in pairs:
            if name in samples and f"layernorm/{impl}" in samples:
                ratios = paired_ratios(samples, name, f"layernorm/{impl}")
                r = summarize(ratios)
                lo, hi, _ = median_interval(ratios, stop["confidence"])
                # the interval as distances from the median (None: too few rounds for any interval at this level)
                below, above = (r["median"] - lo, hi - r["median"]) if math.isfinite(hi - lo) else (None, None)
                rows.append(metric(CLAIM, f"step_time_ratio_{short}_over_ln", r["median"], "ratio", spread=r["iqr"],
                                   n=r["n"], kind="ratio_time", impl=impl, ci_below=below, ci_above=above, **seq))
                rows.append(metric(CLAIM, f"step_time_reduction_{short}", 100 * (1 - r["median"]), "percent",
                                   spread=100 * r["iqr"], n=r["n"], kind="ratio_time", impl=impl,
                                   ci_below=None if above is None else 100 * above,
                                   ci_above=None if below is None else 100 * below,
                                   published_key="transformer_reduction" if short == "rms" else None, **seq))
                log.info("model %s vs layernorm/%s: %.1f%% running-time reduction (paired ratio %.3f, %.2f%% "
                         "interval %.3f-%.3f, n=%d)", name, impl, 100 * (1 - r["median"]), r["median"],
                         100 * stop["confidence"], lo, hi, r["n"])
    return rows


def run(params: dict, scale: str, out) -> tuple[list[dict], dict]:
    """Op-level sweep (kernel benchmark) and whole-model training-step time with LayerNorm / RMSNorm / ScaleNorm."""
    timing.flush_subnormals()  # first, before torch starts its threads (repro/bench/timing.py)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    device = resolve_device(params["device"], "rmsnorm_speed.device")
    torch.manual_seed(params["seed"])
    log.info("device %s: op sweep, then the model", device)
    rows = op_level(params, device, out)
    rows += model_level(params, device, out)
    return rows, {"device": str(device), "load": timing.load_summary()}


if __name__ == "__main__":
    from repro.claims._cli import main

    raise SystemExit(main(CLAIM, run))
