"""The matmul path where the default run spends its time (issue 38 item 3): GFLOP/s of the models' own shapes.

For every matrix multiply shape of the default run's models (the shared translation model and LM at d 256, FFN 1024,
8000-piece vocabulary, ~2048 tokens per batch; warmup_stability's d 64 models at 1024 tokens), in one process of one
torch thread, interleaved: fp32 as the suite runs it (``torch.backends.mkldnn.matmul.fp32_precision = "ieee"``) and
fp32 with oneDNN's reduced-precision path (``"bf16"``: bf16 multiplies with fp32 accumulation, AMX tiles where the CPU
has them), each against the machine's own fp32 ceiling (the best of one 2048^3 matmul). Then one whole training step
(forward, backward, Adam) of each model in both modes, since a faster matmul only matters if the step gets faster.
Process time, median over rounds; it changes nothing in the suite (numbers for docs/pilots/matmul.md).

    python scripts/pilots/matmul.py [OUT.json]
"""
from __future__ import annotations

import json
import platform
import statistics
import sys
import time
from types import SimpleNamespace

import torch

from repro import config
from repro.train.loop import model_loss
from repro.train.pipeline import build_model

MODES = ("ieee", "bf16")
SHAPES = {  # (M, K, N): tokens x in x out
    "translation/LM attention projection": (2048, 256, 256),
    "translation/LM FFN in": (2048, 256, 1024),
    "translation/LM FFN out": (2048, 1024, 256),
    "translation/LM output projection (8000)": (2048, 256, 8000),
    "warmup_stability attention projection": (1024, 64, 64),
    "warmup_stability FFN in": (1024, 64, 256),
    "warmup_stability output projection (1000)": (1024, 64, 1000),
}


def _timed(fn, reps: int) -> float:
    fn()
    t = time.process_time()
    for _ in range(reps):
        fn()
    return (time.process_time() - t) / reps


def _mode(m: str) -> None:
    torch.backends.mkldnn.matmul.fp32_precision = m


def matmuls(rounds: int = 5) -> dict:
    out = {}
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    _mode("ieee")
    ceiling = max(2 * 2048 ** 3 / _timed(lambda: a @ b, 3) / 1e9 for _ in range(3))
    for name, (m, k, n) in SHAPES.items():
        x, w = torch.randn(m, k), torch.randn(k, n)
        reps = max(3, int(2e9 / (2 * m * k * n)))
        times = {md: [] for md in MODES}
        for _ in range(rounds):
            for md in MODES:
                _mode(md)
                times[md].append(_timed(lambda: x @ w, reps))
        out[name] = {md: 2 * m * k * n / statistics.median(t) / 1e9 for md, t in times.items()}
    _mode("ieee")
    return {"fp32_ceiling_gflops": ceiling, "shapes": out}


def _step_fn(model, vocab: int, batch: int, src_len: int, tgt_len: int):
    g = torch.Generator().manual_seed(0)
    tgt = torch.randint(4, vocab, (batch, tgt_len + 1), generator=g)
    b = SimpleNamespace(src=torch.randint(4, vocab, (batch, src_len), generator=g), tgt_in=tgt[:, :-1],
                        tgt_out=tgt[:, 1:], src_pad_mask=torch.zeros(batch, src_len, dtype=torch.bool),
                        tgt_pad_mask=torch.zeros(batch, tgt_len, dtype=torch.bool))
    opt = torch.optim.Adam(model.parameters(), lr=1e-5, fused=True)

    def step():
        opt.zero_grad()
        loss, _, _ = model_loss(model, b, 0.1, 1)
        loss.backward()
        opt.step()
    return step


def steps(rounds: int = 3) -> dict:
    tr = config.section("translation", "default")
    ws = config.section("warmup_stability", "default")["model"]
    models = {
        "translation model (6+3, d 256), 2048 target tokens": (build_model(tr["model"], 8000, 1), 8000, 64, 32),
        "LM (4 layers, d 256), 2048 tokens": (build_model(tr["lm"]["model"], 8000, 1, kind="lm"), 8000, 64, 32),
        "warmup_stability (3+3, d 64), 1024 target tokens": (
            build_model({**ws, "block": {**ws["block"], "norm_position": "post"}}, 1000, 1), 1000, 32, 32),
    }
    out = {}
    for name, (model, vocab, batch, length) in models.items():
        step = _step_fn(model, vocab, batch, length, length)
        times = {md: [] for md in MODES}
        for _ in range(rounds):
            for md in MODES:
                _mode(md)
                times[md].append(_timed(step, 3))
        out[name] = {md: statistics.median(t) for md, t in times.items()}
    _mode("ieee")
    return out


def main(argv: list[str]) -> int:
    torch.set_num_threads(1)
    flags = open("/proc/cpuinfo").read() if platform.system() == "Linux" else ""
    res = {"cpu": platform.processor() or platform.machine(), "torch": torch.__version__,
           "amx_bf16": "amx_bf16" in flags, "avx512_bf16": "avx512_bf16" in flags, **matmuls(), "steps": steps()}
    print(f"fp32 ceiling (2048^3, one thread): {res['fp32_ceiling_gflops']:.0f} GFLOP/s; "
          f"amx_bf16 {res['amx_bf16']}, avx512_bf16 {res['avx512_bf16']}, torch {res['torch']}")
    print("| shape | M x K x N | fp32 GFLOP/s (of ceiling) | oneDNN bf16 GFLOP/s | bf16 / fp32 |\n|---|---|---:|---:|---:|")
    for name, r in res["shapes"].items():
        m, k, n = SHAPES[name]
        print(f"| {name} | {m} x {k} x {n} | {r['ieee']:.0f} ({r['ieee'] / res['fp32_ceiling_gflops']:.0%}) | "
              f"{r['bf16']:.0f} | {r['bf16'] / r['ieee']:.2f}x |")
    print("| training step (forward, backward, Adam) | fp32 s | oneDNN bf16 s | fp32 / bf16 |\n|---|---:|---:|---:|")
    for name, r in res["steps"].items():
        print(f"| {name} | {r['ieee']:.3f} | {r['bf16']:.3f} | {r['ieee'] / r['bf16']:.2f}x |")
    if len(argv) > 1:
        with open(argv[1], "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
