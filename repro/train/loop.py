"""Training loop for the translation claims: encoder-decoder (Vaswani et al. 2017) and decoder-only LM.

Used by head pruning (Michel et al. 2019: train, then fine-tune with a gate penalty), warm-up stability
(Xiong et al. 2020: Post-LN vs Pre-LN with and without warm-up, divergence counted) and layer pruning
(Fan et al. 2020: heal pruned models).  Everything is a parameter:

* token-based batches (``repro.data.token_batches``), label-smoothed cross entropy with pad ignored;
* Adam/AdamW (betas, eps, weight decay), optional gradient clipping;
* schedules ``inverse_sqrt`` (linear warm-up from ``warmup_init_lr``, then ``lr * sqrt(warmup / step)``),
  ``linear_warmup_constant`` and ``constant`` (no warm-up);
* stop at ``max_steps`` and/or after ``max_minutes`` of training (summed over resumes);
* periodic validation loss; atomic checkpoints (model, optimizer, schedule step, RNG states, batch position,
  curves) every N steps or minutes; ``resume=True`` continues from ``<ckpt_dir>/checkpoint_last.pt``;
* divergence (NaN/inf loss, or loss above ``explode_loss``) ends the run with ``TrainResult.diverged=True``
  instead of raising, so warm-up experiments can count it.

Main entry point::

    train(model, train_batches_fn, valid_batches, optim_cfg, schedule_cfg, run_cfg,
          ckpt_dir=None, extra_loss=None, curve_path=None, resume=True, device="cpu") -> TrainResult

``train_batches_fn(epoch) -> iterable of Batch`` (deterministic for a given epoch, so a resumed run skips the
batches it had already used); ``valid_batches``: a list of Batch (or None).
"""
from __future__ import annotations

import contextlib
import csv
import ctypes
import io
import json
import logging
import math
import os
import platform
import random
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Callable, Iterable, Mapping

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from repro.errors import CheckpointError, TrainConfigError
from repro.io import atomic_temp, atomic_write_json, atomic_write_text, remove_stale_temps
from repro.layout import CKPT_NAME  # the one spelling of a model folder's checkpoint (re-exported)
from repro.progress import Progress

log = logging.getLogger("repro.train")


def _from(cls, data, prefix: str):
    if isinstance(data, cls):
        return data
    if data is None:
        return cls()
    known = {f.name for f in fields(cls)}
    bad = sorted(set(data) - known)
    if bad:
        raise TrainConfigError(f"{prefix}.{bad[0]}: unknown key (valid: {', '.join(sorted(known))})")
    return cls(**data)


@dataclass
class OptimConfig:
    lr: float = 5e-4
    betas: tuple = (0.9, 0.98)
    eps: float = 1e-8
    weight_decay: float = 0.0
    clip_norm: float = 0.0  # 0: no clipping
    label_smoothing: float = 0.1

    def __post_init__(self):
        if not self.lr > 0:
            raise TrainConfigError(f"optimizer.lr: must be > 0, got {self.lr}")
        if len(self.betas) != 2:
            raise TrainConfigError(f"optimizer.betas: need two values, got {self.betas}")
        self.betas = tuple(float(b) for b in self.betas)


SCHEDULES = ("inverse_sqrt", "linear_warmup_constant", "constant")


@dataclass
class ScheduleConfig:
    kind: str = "inverse_sqrt"
    warmup_steps: int = 4000
    warmup_init_lr: float = 1e-7

    def __post_init__(self):
        if self.kind not in SCHEDULES:
            raise TrainConfigError(f"schedule.kind: {self.kind!r} is not one of {', '.join(SCHEDULES)}")
        if self.warmup_steps < 0:
            raise TrainConfigError(f"schedule.warmup_steps: must be >= 0, got {self.warmup_steps}")


@dataclass
class RunConfig:
    seed: int = 0
    max_steps: int | None = None
    max_minutes: float | None = None
    log_every: int = 100
    valid_every: int = 1000
    ckpt_every_steps: int = 1000
    ckpt_every_minutes: float = 10.0
    explode_loss: float = 50.0
    budget_clock: str = "wall"  # wall | process (CPU seconds of this process / torch threads)
    progress: bool = True  # tqdm bar on stderr when stderr is a terminal
    progress_every_s: float = 30.0  # a log line with an ETA at least this often (and every log_every steps)

    def __post_init__(self):
        if self.max_steps is None and self.max_minutes is None:
            raise TrainConfigError("training: set max_steps or max_minutes (or both); neither bounds the run")
        if self.budget_clock not in ("wall", "process"):
            raise TrainConfigError(f"training.budget_clock: {self.budget_clock!r} is not wall or process")


def configs_from_params(training: Mapping) -> tuple[OptimConfig, ScheduleConfig, RunConfig]:
    """Split a ``training`` section of config/claims/translation.yaml into the three config objects."""
    t = dict(training)
    opt = dict(t.get("optimizer") or {})
    opt["label_smoothing"] = t.get("label_smoothing", 0.1)
    run_keys = {f.name for f in fields(RunConfig)}
    run = {k: v for k, v in t.items() if k in run_keys}
    return (_from(OptimConfig, opt, "training.optimizer"), _from(ScheduleConfig, t.get("schedule"), "training.schedule"),
            _from(RunConfig, run, "training"))


def lr_at(step: int, base_lr: float, sched: ScheduleConfig) -> float:
    """Learning rate used for update number ``step`` (0-based)."""
    if sched.kind == "constant":
        return base_lr
    w = sched.warmup_steps
    if w > 0 and step < w:
        return sched.warmup_init_lr + (base_lr - sched.warmup_init_lr) * (step + 1) / w
    if sched.kind == "linear_warmup_constant":
        return base_lr
    return base_lr * math.sqrt(max(w, 1) / (step + 1))  # inverse_sqrt: lr * sqrt(warmup / step)


@dataclass
class TrainResult:
    steps: int
    epochs: int
    diverged: bool
    diverged_step: int | None
    stop_reason: str  # max_steps | max_minutes | diverged
    final_loss: float | None  # mean training loss over the last log window
    best_valid_loss: float | None
    last_valid_loss: float | None
    train_minutes: float
    tokens_per_s: float  # target (non-pad) tokens per second of training (budget clock)
    train_tokens: int
    curve: list[dict] = field(default_factory=list)  # per update: step, loss, nll, lr, grad_norm, tokens
    valid_curve: list[dict] = field(default_factory=list)  # step, valid_loss, valid_nll
    resumed_from: int | None = None
    budget_clock: str = "wall"
    wall_minutes: float | None = None  # wall-clock minutes of the update loops (all calls)

    def summary(self) -> dict:
        d = asdict(self)
        d.pop("curve"), d.pop("valid_curve")
        return d


def model_loss(model, batch, label_smoothing: float, pad_id: int):
    """(label-smoothed loss, nll) summed over non-pad targets, and the logits at those targets (N, V).  Works for
    EncoderDecoder (``model(src, tgt_in, src_pad_mask, tgt_pad_mask)``) and DecoderLM (``model(tgt_in,
    tgt_pad_mask)``). The output projection and the loss run at the real target positions only: the padded ones
    (about an eighth of a length-sorted batch) cost vocabulary-sized work for nothing (the same sums up to float
    rounding: tests/test_train.py)."""
    keep = batch.tgt_out != pad_id
    if hasattr(model, "encoder"):
        logits = model(batch.src, batch.tgt_in, batch.src_pad_mask, batch.tgt_pad_mask, keep=keep)
    else:
        logits = model(batch.tgt_in, batch.tgt_pad_mask, keep=keep)
    loss, nll = smoothed_cross_entropy(logits, batch.tgt_out[keep], label_smoothing, pad_id)
    return loss, nll, logits


def smoothed_cross_entropy(logits, target, label_smoothing: float, pad_id: int):
    """(loss, nll) summed over targets that are not ``pad_id``: ``F.cross_entropy(..., label_smoothing=eps,
    reduction="sum")``, i.e. ``(1 - eps) * nll + eps / V * sum_v(-log p_v)`` (Szegedy et al. 2016; fairseq's
    label_smoothed_cross_entropy), and the plain NLL (detached) from the same log-softmax, so one pass over the
    (tokens x vocabulary) logits serves both (two ``F.cross_entropy`` calls would compute it twice). The gradient
    is written out (:class:`_SmoothedCrossEntropy`)."""
    return _SmoothedCrossEntropy.apply(logits, target, float(label_smoothing), int(pad_id))


class _SmoothedCrossEntropy(torch.autograd.Function):
    """The loss of :func:`smoothed_cross_entropy` with its gradient in closed form: d loss / d logits =
    softmax - q per kept row, q = (1 - eps) onehot(target) + eps / V (zero rows at pad targets). Autograd's chain
    (nll_loss's zero-filled scatter, the smoothing sum's expand, their sum, log_softmax's backward) makes four
    (tokens x vocabulary) passes where this makes two: 84 vs 127 ms an update for the translation model's 1705 x
    8000 logits, 2.1 vs 4.0 ms for warmup_stability's 822 x 1000 (one AMD EPYC thread). The forward values are the
    autograd version's exactly; the gradient differs from it by float rounding only (tests/test_throughput.py).
    First-order only (nothing differentiates the loss twice)."""

    @staticmethod
    def forward(ctx, logits, target, label_smoothing: float, pad_id: int):
        lprobs = F.log_softmax(logits.float(), dim=-1)
        nll = F.nll_loss(lprobs, target, ignore_index=pad_id, reduction="sum")
        if label_smoothing > 0:
            smooth = -lprobs.sum(-1).masked_fill(target == pad_id, 0.0).sum()
            loss = (1.0 - label_smoothing) * nll + (label_smoothing / lprobs.shape[-1]) * smooth
        else:
            loss = nll.clone()
        ctx.mark_non_differentiable(nll)
        ctx.save_for_backward(lprobs, target)
        ctx.label_smoothing, ctx.pad_id, ctx.dtype = label_smoothing, pad_id, logits.dtype
        return loss, nll

    @staticmethod
    def backward(ctx, grad_loss, _grad_nll):
        lprobs, target = ctx.saved_tensors
        eps, keep = ctx.label_smoothing, target != ctx.pad_id
        grad = lprobs.exp()  # the softmax
        if eps > 0:
            grad.sub_(eps / lprobs.shape[-1])
        index = torch.where(keep, target, 0)[:, None]  # pad rows are zeroed below, whatever their index
        grad.scatter_add_(1, index, grad.new_full(index.shape, eps - 1.0))
        grad.mul_((grad_loss * keep.to(grad.dtype))[:, None])
        return grad.to(ctx.dtype), None, None, None


@torch.no_grad()
def evaluate_loss(model, batches: Iterable, pad_id: int, label_smoothing: float = 0.0, device="cpu") -> dict:
    """Per-token loss and NLL (nats) over ``batches``; the model is put in eval mode and restored."""
    was = model.training
    model.eval()
    tot, tot_nll, n = 0.0, 0.0, 0
    for b in batches:
        b = b.to(device)
        loss, nll, _ = model_loss(model, b, label_smoothing, pad_id)
        tot += float(loss)
        tot_nll += float(nll)
        n += b.ntokens
    model.train(was)
    return {"loss": tot / max(n, 1), "nll": tot_nll / max(n, 1), "ppl": math.exp(min(tot_nll / max(n, 1), 50)),
            "tokens": n}


def _rng_state() -> dict:
    """RNG states as tensors/ints only, so checkpoints load with ``torch.load(weights_only=True)``."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    return {"torch": torch.get_rng_state(), "numpy": {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)),
                                                      "pos": int(pos), "has_gauss": int(has_gauss),
                                                      "gauss": float(gauss)},
            "python": random.getstate(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def _set_rng_state(s: dict) -> None:
    torch.set_rng_state(s["torch"].cpu())
    n = s["numpy"]
    np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    random.setstate(s["python"])
    if s.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(s["cuda"])


def save_checkpoint(path: str | Path, state: dict) -> None:
    """``torch.save`` to a temporary file in the same folder, then rename: a crash never leaves half a file."""
    path = Path(path)
    tmp = atomic_temp(path)  # umask permissions, like every results file
    try:
        torch.save(state, tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# RunConfig keys that change how a run is logged or checkpointed, not what it computes
COSMETIC_KEYS = frozenset({"log_every", "progress", "progress_every_s", "ckpt_every_steps", "ckpt_every_minutes"})


def run_identity(opt_c: OptimConfig, sch_c: ScheduleConfig, run_c: RunConfig, ckpt_extra: Mapping | None) -> dict:
    """What a run computes: optimizer, schedule, run limits and the caller's ``ckpt_extra`` (model config, data,
    tokenizer; the ``params`` blob is left out because it also holds unrelated sections). A saved state whose
    identity differs is never resumed."""
    extra = dict(ckpt_extra or {})
    extra.pop("params", None)
    ident = {"optimizer": asdict(opt_c), "schedule": asdict(sch_c),
             "run": {k: v for k, v in asdict(run_c).items() if k not in COSMETIC_KEYS}, "extra": extra}
    return json.loads(json.dumps(ident, sort_keys=True, default=str))  # tuples -> lists, as when saved


def _flat(d, prefix="") -> dict:
    if isinstance(d, Mapping):
        out = {}
        for k, v in d.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix.rstrip("."): d}


def _identity_changes(st: Mapping, identity: dict) -> list[str]:
    """Dotted keys whose saved value differs from this run's (old checkpoints without an identity record are
    compared on the optimizer and run settings they stored)."""
    if "identity" in st:
        old = json.loads(st["identity"])
    else:
        old = {"optimizer": st.get("optim_cfg"),
               "run": {k: v for k, v in (st.get("run_cfg") or {}).items() if k not in COSMETIC_KEYS}}
        old = json.loads(json.dumps(old, default=str))
        identity = {k: identity[k] for k in ("optimizer", "run")}
    a, b = _flat(old), _flat(identity)
    return sorted(k for k in a.keys() | b.keys() if a.get(k, "<unset>") != b.get(k, "<unset>"))


def set_aside(path: Path) -> Path:
    """Rename a state that must not be resumed to ``<name>.stale.pt`` (replacing an older one), so it is kept
    for inspection rather than deleted, and never picked up again."""
    stale = path.with_name(path.stem + ".stale" + path.suffix)
    os.replace(path, stale)
    return stale


def load_checkpoint(path: str | Path, map_location="cpu") -> dict:
    """Load a checkpoint written by :func:`save_checkpoint` (safe loading: ``weights_only=True``)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: checkpoint not found")
    if path.stat().st_size == 0:
        raise CheckpointError(f"{path}: damaged checkpoint: the file is empty (delete it, or move it aside, to "
                              "train afresh)")
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # EOFError, UnpicklingError (also the safe loader's refusal), RuntimeError (zip)
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else "no detail from the loader"
        raise CheckpointError(f"{path}: damaged or unsafe checkpoint, not loadable with weights_only=True "
                              f"({type(exc).__name__}: {detail})") from exc


def write_curve_csv(path: str | Path, curve: list[dict], valid_curve: list[dict]) -> None:
    """One row per update (step, loss, nll, lr, grad_norm, tokens, elapsed_s) with valid_loss/valid_nll on the
    updates where validation ran."""
    vmap = {v["step"]: v for v in valid_curve}
    cols = ["step", "epoch", "loss", "nll", "lr", "grad_norm", "tokens", "elapsed_s", "valid_loss", "valid_nll"]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore")
    w.writeheader()
    for r in curve:
        v = vmap.get(r["step"], {})
        w.writerow({**r, "valid_loss": v.get("valid_loss", ""), "valid_nll": v.get("valid_nll", "")})
    atomic_write_text(path, buf.getvalue())


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2 ** 32))
    torch.manual_seed(seed)


def make_optimizer(params: list, opt_c: OptimConfig, device) -> torch.optim.Optimizer:
    """Adam (AdamW with weight decay), fused into one kernel over all parameters where torch has it (CPU and CUDA
    float parameters): the same update as the per-parameter loop, 3x faster on CPU (repro.peers.throughput)."""
    decay = opt_c.weight_decay
    opt_cls = torch.optim.AdamW if decay > 0 else torch.optim.Adam
    fused = torch.device(device).type in ("cpu", "cuda") and all(p.is_floating_point() for p in params)
    return opt_cls(params, lr=opt_c.lr, betas=opt_c.betas, eps=opt_c.eps, fused=fused or None,
                   **({"weight_decay": decay} if decay > 0 else {}))


def _budget_clock(run_c: RunConfig, device: torch.device) -> Callable[[], float]:
    """The clock ``max_minutes`` and the tokens-per-second rate are measured on."""
    if run_c.budget_clock == "process":  # CPU time per thread: the same budget on a busy or an idle machine
        nthreads = max(1, torch.get_num_threads()) if device.type == "cpu" else 1
        return lambda: time.process_time() / nthreads
    return time.perf_counter


def _resumable_state(ckpt_path: Path | None, resume: bool, identity: dict, device) -> dict | None:
    """The saved state to continue from, or None: half-written checkpoints of a killed run are removed, and a state
    trained with another configuration is set aside (never resumed)."""
    if ckpt_path is None:
        return None
    remove_stale_temps(ckpt_path.parent)  # half-written checkpoints of a killed run
    if not (resume and ckpt_path.exists()):
        return None
    st = load_checkpoint(ckpt_path, map_location=device)
    changed = _identity_changes(st, identity)
    if changed:
        stale = set_aside(ckpt_path)
        log.warning("%s was trained with another configuration (changed: %s): starting afresh; the old state "
                    "is kept as %s", ckpt_path, ", ".join(changed[:8]), stale)
        return None
    return st


def _grad_norm(params: list, clip_norm: float) -> float:
    """Global norm of the gradients of ``params`` (before clipping); they are clipped to norm ``clip_norm`` when it
    is > 0. Unclipped: the per-tensor norms in one foreach call (0.43 vs 0.75 ms a step for a small model's ~130
    tensors, the same value). ``params`` is the model's parameter list, gathered once per training call: walking
    the module tree for it every update cost ~0.8 ms of a 60 ms warmup_stability update."""
    params = [p for p in params if p.grad is not None]
    if clip_norm > 0:
        return float(torch.nn.utils.clip_grad_norm_(params, clip_norm, foreach=True))
    if not params:
        return 0.0
    return float(torch.nn.utils.get_total_norm([p.grad for p in params], foreach=True))


class _Training:
    """One call of :func:`train`: the run's counters and curves (restored from a checkpoint on resume), this
    call's clocks, and the steps of the loop (an update, its log line, validation, checkpoints, the end)."""

    def __init__(self, model, optimizer, opt_c: OptimConfig, sch_c: ScheduleConfig, run_c: RunConfig,
                 valid_batches: list | None, ckpt_path: Path | None, ckpt_extra: Mapping | None, identity: dict,
                 curve_path, device: torch.device, pad: int):
        self.model, self.optimizer, self.opt_c, self.sch_c, self.run_c = model, optimizer, opt_c, sch_c, run_c
        self.valid_batches, self.ckpt_path, self.ckpt_extra = valid_batches, ckpt_path, ckpt_extra
        self.params = list(model.parameters())  # the gradient norm's tensors (the model is not changed in a call)
        self.identity, self.curve_path, self.device, self.pad = identity, curve_path, device, pad
        self.step, self.epoch, self.pos_in_epoch, self.elapsed, self.n_tokens, self.wall_prev = 0, 0, 0, 0.0, 0, 0.0
        self.curve: list[dict] = []
        self.valid_curve: list[dict] = []
        self.resumed_from = None
        self.stop_reason, self.diverged_step = None, None

    def restore(self, st: dict) -> TrainResult | None:
        """Continue from the saved state ``st``; the result when it is a finished run (nothing left to do)."""
        self.model.load_state_dict(st["model"])
        self.optimizer.load_state_dict(st["optimizer"])
        self.step, self.epoch, self.pos_in_epoch = st["step"], st["epoch"], st["pos_in_epoch"]
        self.elapsed, self.n_tokens, self.wall_prev = st["elapsed_s"], st["train_tokens"], st.get("wall_s", 0.0)
        self.curve, self.valid_curve = st["curve"], st["valid_curve"]
        _set_rng_state(st["rng"])
        self.resumed_from = self.step
        if st.get("finished"):
            log.info("checkpoint %s is a finished run (step %d, %s); nothing to do", self.ckpt_path, self.step,
                     st["stop_reason"])
            return self._result(st["stop_reason"], st.get("diverged_step"), self.wall_prev)
        log.info("resumed from %s at step %d (epoch %d, batch %d, %.1f min trained)", self.ckpt_path, self.step,
                 self.epoch, self.pos_in_epoch, self.elapsed / 60)
        return None

    def start(self) -> None:
        """Progress bar and log lines, training mode, and this call's clocks (the budget clock continues from the
        minutes already trained)."""
        run_c = self.run_c
        self.clock = _budget_clock(run_c, self.device)
        self.bar = None
        if run_c.progress and sys.stderr.isatty():
            self.bar = tqdm(total=run_c.max_steps, initial=self.step, file=sys.stderr, unit="upd", dynamic_ncols=True)
        self.progress = Progress("training", run_c.max_steps, "steps", run_c.progress_every_s, log, done=self.step)
        self.model.train()
        self.calls = 0
        self.t_last_ckpt = time.perf_counter()
        self.window = {"loss": 0.0, "tok": 0, "t": time.perf_counter(), "n": 0}
        self.t_start = self.clock() - self.elapsed
        self.wall0 = time.perf_counter()

    def _wall_s(self) -> float:
        return self.wall_prev + time.perf_counter() - self.wall0

    def _result(self, stop_reason, diverged_step, wall_s) -> TrainResult:
        return _result(stop_reason, self.step, self.epoch, self.elapsed, self.n_tokens, self.curve, self.valid_curve,
                       self.resumed_from, diverged_step, self.run_c.budget_clock, wall_s)

    def state(self, finished=False, stop_reason=None, diverged_step=None) -> dict:
        """What a checkpoint holds: model, optimizer, schedule, counters, curves, RNG states, the run's settings and
        identity, and the caller's ``ckpt_extra``."""
        opt_c, sch_c = self.opt_c, self.sch_c
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "schedule": {**asdict(sch_c), "step": self.step, "lr": lr_at(self.step, opt_c.lr, sch_c)},
                "step": self.step, "epoch": self.epoch, "pos_in_epoch": self.pos_in_epoch, "elapsed_s": self.elapsed,
                "train_tokens": self.n_tokens, "wall_s": self._wall_s(), "curve": self.curve,
                "valid_curve": self.valid_curve, "rng": _rng_state(),
                "finished": finished, "stop_reason": stop_reason, "diverged_step": diverged_step,
                "optim_cfg": asdict(opt_c), "run_cfg": asdict(self.run_c), **(dict(self.ckpt_extra or {})),
                "identity": json.dumps(self.identity, sort_keys=True, default=str)}

    def checkpoint(self, **kw) -> None:
        if self.ckpt_path is not None:
            save_checkpoint(self.ckpt_path, self.state(**kw))

    def validate(self) -> None:
        if not self.valid_batches:
            return
        r = evaluate_loss(self.model, self.valid_batches, self.pad, self.opt_c.label_smoothing, self.device)
        self.valid_curve.append({"step": self.step, "valid_loss": r["loss"], "valid_nll": r["nll"]})
        log.info("step %d: valid loss %.4f nll %.4f ppl %.2f", self.step, r["loss"], r["nll"], r["ppl"])

    def epoch_pass(self, train_batches_fn, extra_loss, stop_after_steps) -> TrainResult | None:
        """The rest of epoch ``self.epoch``: sets ``stop_reason`` when the run ends; returns the result when this
        call stops early (``stop_after_steps``)."""
        batches = iter(train_batches_fn(self.epoch))
        # skip batches already used before a resume; a checkpoint written on an epoch's last batch skips them
        # all, which is a finished epoch (not an empty training set)
        skipped = sum(1 for _ in zip(range(self.pos_in_epoch), batches))
        got_any = skipped > 0
        for batch in batches:
            got_any = True
            self.stop_reason = self._limit_reached() or self._update(batch, extra_loss)
            if self.stop_reason is not None:
                return None
            self._every_n_steps()
            if stop_after_steps is not None and self.calls >= stop_after_steps:
                return self._interrupt()
        if not got_any:
            raise ValueError("train_batches_fn returned no batches (empty training set?)")
        self.epoch += 1
        self.pos_in_epoch = 0
        return None

    def _limit_reached(self) -> str | None:
        run_c = self.run_c
        if run_c.max_steps is not None and self.step >= run_c.max_steps:
            return "max_steps"
        if run_c.max_minutes is not None and self.elapsed >= run_c.max_minutes * 60:
            return "max_minutes"
        return None

    def _curve_row(self, lval: float, nll_sum, ntok: int, lr: float, gn: float, elapsed: float) -> dict:
        return {"step": self.step, "epoch": self.epoch, "loss": lval, "nll": float(nll_sum) / max(ntok, 1), "lr": lr,
                "grad_norm": gn, "tokens": ntok, "elapsed_s": elapsed}

    def _diverged(self, row: dict, message: str, *args) -> str:
        self.diverged_step = self.step
        self.curve.append(row)
        log.warning(message, *args)
        return "diverged"

    def _update(self, batch, extra_loss) -> str | None:
        """One optimizer update on ``batch``; "diverged" (and no update) on a non-finite or exploding loss or a
        non-finite gradient norm."""
        opt_c, model = self.opt_c, self.model
        batch = batch.to(self.device)
        lr = lr_at(self.step, opt_c.lr, self.sch_c)
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        ntok = batch.ntokens
        loss_sum, nll_sum, _ = model_loss(model, batch, opt_c.label_smoothing, self.pad)
        loss = loss_sum / max(ntok, 1)
        if extra_loss is not None:
            loss = loss + extra_loss(model)
        lval = float(loss.detach())
        if not math.isfinite(lval) or lval > self.run_c.explode_loss:
            return self._diverged(self._curve_row(lval, nll_sum, ntok, lr, float("nan"), self.elapsed),
                                  "step %d: loss %s (explode threshold %g): diverged", self.step, lval,
                                  self.run_c.explode_loss)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        gn = _grad_norm(self.params, opt_c.clip_norm)
        if not math.isfinite(gn):
            return self._diverged(self._curve_row(lval, nll_sum, ntok, lr, gn, self.elapsed),
                                  "step %d: gradient norm %s: diverged", self.step, gn)
        self.optimizer.step()
        self._count(lval, nll_sum, ntok, lr, gn)
        self._log_window(lr, gn)
        return None

    def _count(self, lval: float, nll_sum, ntok: int, lr: float, gn: float) -> None:
        """Counters, curve, log window and progress bar after an update."""
        self.step += 1
        self.progress.done = self.step
        self.pos_in_epoch += 1
        self.calls += 1
        self.n_tokens += ntok
        self.elapsed = self.clock() - self.t_start
        self.curve.append(self._curve_row(lval, nll_sum, ntok, lr, gn, round(self.elapsed, 3)))
        self.window["loss"] += lval
        self.window["tok"] += ntok
        self.window["n"] += 1
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(loss=f"{lval:.3f}", lr=f"{lr:.2e}")

    def _log_window(self, lr: float, gn: float) -> None:
        """One line per log window (or per progress_every_s): loss, speed and an ETA (tail -f the job log)."""
        run_c, window = self.run_c, self.window
        now = time.perf_counter()
        if self.step % run_c.log_every == 0 or time.monotonic() - self.progress.last >= run_c.progress_every_s:
            eta = self.progress.eta_s()
            if run_c.max_minutes is not None:
                left = max(run_c.max_minutes * 60 - self.elapsed, 0.0)
                eta = left if eta is None else min(eta, left)
            note = (f"ep {self.epoch} loss {window['loss'] / window['n']:.4f} lr {lr:.3e} gnorm {gn:.2f} "
                    f"{window['tok'] / max(now - window['t'], 1e-9):.0f} tok/s")
            self.progress.update(0, note=note, eta_s=eta, force=True)
            self.window = {"loss": 0.0, "tok": 0, "t": now, "n": 0}

    def _every_n_steps(self) -> None:
        """Validation every ``valid_every`` steps and a checkpoint every ``ckpt_every_steps`` steps or
        ``ckpt_every_minutes``; neither counts as training time."""
        run_c = self.run_c
        if self.step % run_c.valid_every == 0:
            t0, c0 = time.perf_counter(), self.clock()
            self.validate()
            self.t_start += self.clock() - c0  # validation time is not training time
            self.window["t"] += time.perf_counter() - t0
        if self.step % run_c.ckpt_every_steps == 0 or \
                time.perf_counter() - self.t_last_ckpt >= run_c.ckpt_every_minutes * 60:
            c0 = self.clock()
            self.checkpoint()
            self.t_last_ckpt = time.perf_counter()
            self.t_start += self.clock() - c0

    def _interrupt(self) -> TrainResult:
        """End this call (``stop_after_steps``) with a checkpoint to resume from, without ending the run."""
        self.checkpoint()
        if self.bar is not None:
            self.bar.close()
        if self.curve_path:
            write_curve_csv(self.curve_path, self.curve, self.valid_curve)
        log.info("stopping this call after %d updates (step %d); resume to continue", self.calls, self.step)
        return self._result("interrupted", None, self._wall_s())

    def finish(self) -> TrainResult:
        """End the run: a last validation (unless it diverged or just validated), the finished checkpoint, the
        curve file and the closing log line."""
        if self.bar is not None:
            self.bar.close()
        if self.stop_reason != "diverged" and (not self.valid_curve or self.valid_curve[-1]["step"] != self.step):
            self.validate()
        self.checkpoint(finished=True, stop_reason=self.stop_reason, diverged_step=self.diverged_step)
        if self.curve_path:
            write_curve_csv(self.curve_path, self.curve, self.valid_curve)
        res = self._result(self.stop_reason, self.diverged_step, self._wall_s())
        log.info("training stopped (%s) at step %d after %.1f min: loss %s, valid %s, %.0f tok/s", self.stop_reason,
                 self.step, self.elapsed / 60, res.final_loss, res.last_valid_loss, res.tokens_per_s)
        return res


def train(model, train_batches_fn: Callable[[int], Iterable], valid_batches: list | None,
          optim_cfg: OptimConfig | Mapping, schedule_cfg: ScheduleConfig | Mapping, run_cfg: RunConfig | Mapping,
          ckpt_dir: str | Path | None = None, extra_loss: Callable | None = None, curve_path: str | Path | None = None,
          resume: bool = True, device: str | torch.device = "cpu", pad_id: int | None = None,
          stop_after_steps: int | None = None, ckpt_extra: Mapping | None = None) -> TrainResult:
    """Train ``model`` in place; see the module docstring.

    ``extra_loss(model) -> scalar tensor`` is added to the per-token loss (e.g. an L0/L1 head-gate penalty).
    ``stop_after_steps`` stops this call (saving a checkpoint) after that many updates in *this* call without
    ending the run, which is how an interruption is simulated in tests.  ``ckpt_extra`` is stored in each
    checkpoint (e.g. the model config and tokenizer path, so the checkpoint can be reloaded on its own).
    """
    opt_c = _from(OptimConfig, optim_cfg, "training.optimizer")
    sch_c = _from(ScheduleConfig, schedule_cfg, "training.schedule")
    run_c = _from(RunConfig, run_cfg, "training")
    pad = model.cfg.pad_id if pad_id is None else pad_id
    device = torch.device(device)
    model.to(device)
    optimizer = make_optimizer([p for p in model.parameters() if p.requires_grad], opt_c, device)
    ckpt_path = Path(ckpt_dir) / CKPT_NAME if ckpt_dir else None
    seed_everything(run_c.seed)
    identity = run_identity(opt_c, sch_c, run_c, ckpt_extra)
    st = _resumable_state(ckpt_path, resume, identity, device)
    t = _Training(model, optimizer, opt_c, sch_c, run_c, valid_batches, ckpt_path, ckpt_extra, identity, curve_path,
                  device, pad)
    if st is not None:
        finished = t.restore(st)
        if finished is not None:
            return finished
    with heap_allocations():
        t.start()
        while t.stop_reason is None:
            interrupted = t.epoch_pass(train_batches_fn, extra_loss, stop_after_steps)
            if interrupted is not None:
                return interrupted
        return t.finish()


_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # glibc's mallopt parameters (malloc.h)


@contextlib.contextmanager
def heap_allocations():
    """Within: glibc serves every allocation from its heap and keeps freed memory there (mallopt M_MMAP_MAX 0, a
    2 GiB M_TRIM_THRESHOLD); after: its defaults again, the free memory returned (malloc_trim). glibc maps each block
    over 32 MiB afresh, so every update's (tokens x vocabulary) logits, log-probabilities and their gradient (54 MB
    each for the translation model) paid ~18 ms of page faults per tensor: the translation model's update took 1670
    instead of 1525 ms (same batches, AMD EPYC, one thread). The computation is the same; the peak memory is too (the
    same tensors live at once). Other C libraries: nothing changes."""
    libc = ctypes.CDLL(None) if platform.libc_ver()[0] == "glibc" else None
    if libc is None:
        yield
        return
    libc.mallopt(_M_MMAP_MAX, 0)
    libc.mallopt(_M_TRIM_THRESHOLD, 2 ** 31 - 1)
    try:
        yield
    finally:
        libc.mallopt(_M_MMAP_MAX, 65536)  # glibc's defaults
        libc.mallopt(_M_TRIM_THRESHOLD, 128 * 1024)
        libc.malloc_trim(0)


def _result(stop_reason, step, epoch, elapsed, n_tokens, curve, valid_curve, resumed_from, diverged_step,
            budget_clock="wall", wall_s=None):
    ok = [r["loss"] for r in curve[-50:] if math.isfinite(r["loss"])]
    vl = [v["valid_loss"] for v in valid_curve]
    return TrainResult(steps=step, epochs=epoch, diverged=stop_reason == "diverged", diverged_step=diverged_step,
                       stop_reason=stop_reason, final_loss=float(np.mean(ok)) if ok else None,
                       best_valid_loss=min(vl) if vl else None, last_valid_loss=vl[-1] if vl else None,
                       train_minutes=elapsed / 60, tokens_per_s=n_tokens / elapsed if elapsed > 0 else 0.0,
                       train_tokens=n_tokens, curve=curve, valid_curve=valid_curve, resumed_from=resumed_from,
                       budget_clock=budget_clock, wall_minutes=None if wall_s is None else wall_s / 60)


def write_summary(path: str | Path, result: TrainResult, **extra) -> None:
    atomic_write_json(path, {**result.summary(), **extra})
