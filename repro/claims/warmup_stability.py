"""C3 warmup_stability: training with and without learning-rate warm-up, Post-LN vs Pre-LN (vs ScaleNorm+FixNorm).

Reproduces, on the suite's translation task (the corpus and tokenizer of the shared "translation" artefact; this
claim trains its OWN small models, never the shared one):

- Xiong et al., ICML 2020, arXiv 2002.04745, Section 3.2 and Fig. 2: Post-LN Transformers with Adam need warm-up
  (IWSLT14 De-En, 6+6 layers: 8.45 BLEU without warm-up vs about 34 with it; warm-up 500 steps: 31.16 at lr 5e-4
  and 2.77 at lr 1e-3), while Pre-LN trains without warm-up.  Grid: {Post-LN, Pre-LN} x {warm-up, none} x
  the configured learning rates (paper: 5e-4 and 1e-3, Adam betas (0.9, 0.98)).
- Nguyen & Salazar, "Transformers without Tears", IWSLT 2019, arXiv 1910.05895: PreNorm + ScaleNorm
  (g * x / ||x||, g initialised to sqrt(d); repro.model norm "scalenorm") + FixNorm (word embeddings l2-normalised
  to a fixed length g; implemented HERE as a parametrisation of the shared token embedding, see ``apply_fixnorm``),
  trained without warm-up; and their Table 5 analogue: no-warm-up stability vs depth (PostNorm fails at 5-6 layers
  where PreNorm trains: 18.31 / fails / fails vs 28.33 / 28.13 / 28.32 at 4 / 5 / 6 layers).

Schedules: ``inverse_sqrt`` with linear warm-up (fairseq's, as both papers) when warming up; ``constant`` without.
Initialisation: ``repro.train.pipeline.init_weights`` (fairseq: Xavier-uniform linear weights, zero biases,
embeddings N(0, d^-1/2)); norms keep their own init (LayerNorm (1, 0), ScaleNorm g = sqrt(d)).
Divergence (NaN/inf, or a training loss above ``explode_loss``) is an outcome recorded by ``repro.train.train``;
a run that stays finite but far behind the best run of its learning rate counts as "failed" (``fail_margin_nats``),
since Post-LN without warm-up typically plateaus rather than producing NaN.

Per run: train/validation curves (``curves/<run>.csv``), final and best validation NLL, training loss,
divergence, BLEU of greedy decoding on the first ``eval.test_sentences`` test sentences (full, placeholder-free
subset, and the copy baseline on the same sentences: copying the German source already scores BLEU here).
"""
from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path

import torch
from torch import nn

from repro.bench.records import atomic_write_json, check, metric, verdict_from_checks
from repro.progress import Progress

CLAIM = "warmup_stability"
log = logging.getLogger("repro.warmup_stability")


# ----------------------------------------------------------------------------------------------------------- FixNorm
class FixNormWeight(nn.Module):
    """Parametrisation W -> g * W / ||W_row||: every word embedding has length ``g`` (Nguyen & Chiang 2018, used by
    Nguyen & Salazar 2019).  The pad row (all zeros) stays zero."""

    def __init__(self, g: float, eps: float = 1e-6):
        super().__init__()
        self.g, self.eps = float(g), eps

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return self.g * w / w.norm(dim=-1, keepdim=True).clamp_min(self.eps)


def apply_fixnorm(model, g: float) -> None:
    """FixNorm on the shared (and tied) token embedding of an EncoderDecoder: both the input lookup and the tied
    output projection (``Decoder.logits`` reads ``embed.token.weight``) see the normalised rows.  Uses
    torch.nn.utils.parametrize, so repro.model is not changed."""
    from torch.nn.utils import parametrize

    tokens = {id(m.embed.token): m.embed.token for m in (model.encoder, model.decoder)}
    for emb in tokens.values():
        parametrize.register_parametrization(emb, "weight", FixNormWeight(g))


# -------------------------------------------------------------------------------------------------------- the plan
def _lr_tag(lr: float) -> str:
    return f"{lr:.0e}".replace("e-0", "e-")


def warmup_lengths(params: dict) -> list[int]:
    """The warm-up lengths of the grid, longest first (``warmup_steps``: one length or a list, e.g. Xiong's
    [4000, 500]); the longest is "with warm-up" in the verdict."""
    w = params["warmup_steps"]
    return sorted({int(x) for x in (w if isinstance(w, list) else [w])}, reverse=True)


def plan_runs(params: dict) -> list[dict]:
    """Every training run of the experiment, deduplicated (the depth sweep reuses the main grid's runs)."""
    m = params["model"]
    main_layers = m["n_encoder_layers"]
    warmups = warmup_lengths(params)
    runs: dict[tuple, dict] = {}

    def add(group, norm, position, fixnorm, layers, lr, warmup):
        key = (norm, position, fixnorm, layers, lr, warmup)
        if key in runs:
            runs[key]["groups"].append(group)
            return
        name = (f"{position}_{'scalenorm_fixnorm' if fixnorm else norm}_L{layers}_lr{_lr_tag(lr)}_"
                f"{'warmup' + str(warmup) if warmup else 'nowarmup'}")
        runs[key] = dict(name=name, groups=[group], norm=norm, position=position, fixnorm=fixnorm, layers=layers,
                         lr=lr, warmup=warmup)

    for position in params["positions"]:
        for lr in params["lrs"]:
            for warmup in (*warmups, 0):
                add("xiong", "layernorm", position, False, main_layers, lr, warmup)
    sn = params["scalenorm_fixnorm"]
    if sn["enabled"]:
        for lr in sn["lrs"]:
            add("nguyen", "scalenorm", "pre", True, main_layers, lr, 0)
    dp = params["depth"]
    for layers in sorted(set(dp["layers"]) | {main_layers}):  # the main depth's runs are reused from the grid
        for position in params["positions"]:
            add("depth", "layernorm", position, False, layers, dp["lr"], 0)
    # most informative first (a run cut short still shows the headline): the main depth at the highest lr, then the
    # depth sweep, then the other learning rates
    hi = max(params["lrs"])
    return sorted(runs.values(), key=lambda r: (0 if r["layers"] == main_layers and r["lr"] == hi else
                                                1 if r["layers"] != main_layers else 2))


# ------------------------------------------------------------------------------------------------------ data/setup
def _translation_params(params: dict, scale: str) -> dict:
    t = params.get("translation")
    if t:
        return t
    from repro import config

    return config.section("translation", scale)


def _tokenizer(params: dict, tparams: dict, corpus, out: Path):
    """The translation artefact's tokenizer: ``tokenizer_path`` (set by the workflow to the translation_tokenizer
    rule's ``tokenizer.json``, or a .model / dict.<lang>.txt).  When unset (a hand run or a test) one is made the
    same way into ``out``: the data-bin's dictionary, or a sentencepiece model trained with the translation
    section's tokenizer settings on both sides of the training split."""
    from repro.train.pipeline import load_tokenizer

    path = params.get("tokenizer_path")
    bpe = tparams["corpus"].get("bpe_symbol")
    if path:
        from repro.train.prepare import resolve_tokenizer

        if not Path(path).exists():
            raise FileNotFoundError(f"warmup_stability.tokenizer_path: {path} does not exist")
        real = resolve_tokenizer(path)
        return load_tokenizer(real, bpe), str(real)
    if tparams["corpus"]["format"] == "data_bin":
        tgt = tparams["corpus"]["direction"].split("-")[1]
        p = Path(tparams["corpus"]["path"]) / f"dict.{tgt}.txt"
        if not p.exists():
            raise FileNotFoundError(f"translation.corpus.path: {p} (the fairseq dictionary) does not exist")
        return load_tokenizer(p, bpe), str(p)
    from repro.data.tokenizer import train_sentencepiece

    tk = tparams["tokenizer"]
    prefix = out / "tokenizer" / "spm"
    texts = [s for pair in corpus.train for s in pair]
    tok = train_sentencepiece(texts, prefix, tk["vocab_size"], tk.get("model_type", "unigram"),
                              tk.get("character_coverage", 1.0), tk.get("seed", 0))
    log.info("tokenizer_path unset: trained a %d-piece tokenizer on %d sentences into %s", tok.vocab_size,
             len(texts), prefix)
    return tok, str(prefix) + ".model"


def _model_params(params: dict, run: dict) -> dict:
    m = json.loads(json.dumps(params["model"]))
    m["n_encoder_layers"] = m["n_decoder_layers"] = run["layers"]
    m["block"] = {**m["block"], "norm": run["norm"], "norm_position": run["position"]}
    return m


# ------------------------------------------------------------------------------------------------------------ run
def train_one(params: dict, run: dict, tok, enc: dict, test: dict, out: Path, device: str) -> dict:
    """Train one configuration from scratch; returns its summary (losses, divergence, BLEU)."""
    from repro.train.bleu import bleu_report
    from repro.train.decode import DecodeConfig, decode_ids
    from repro.train.loop import OptimConfig, RunConfig, ScheduleConfig, train
    from repro.train.pipeline import batches_fn, build_model, valid_batches

    tr = params["training"]
    torch.manual_seed(params["seed"])
    model = build_model(_model_params(params, run), tok.vocab_size, tok.pad_id)  # fairseq Xavier init
    if run["fixnorm"]:
        apply_fixnorm(model, params["scalenorm_fixnorm"]["fixnorm_g"])
    opt = OptimConfig(lr=run["lr"], betas=tuple(tr["betas"]), eps=tr["adam_eps"], weight_decay=tr["weight_decay"],
                      clip_norm=tr["clip_norm"], label_smoothing=tr["label_smoothing"])
    sched = (ScheduleConfig("inverse_sqrt", run["warmup"], tr["warmup_init_lr"]) if run["warmup"]
             else ScheduleConfig("constant", 0, tr["warmup_init_lr"]))
    rcfg = RunConfig(seed=params["seed"], max_steps=tr["max_steps"], max_minutes=tr.get("max_minutes"),
                     log_every=tr["log_every"], valid_every=tr["valid_every"], ckpt_every_steps=10 ** 9,
                     ckpt_every_minutes=1e9, explode_loss=tr["explode_loss"], progress=False)
    t0 = time.perf_counter()
    res = train(model, batches_fn(enc["train"], tr["max_tokens"], params["seed"]),
                valid_batches(enc["valid"], tr["max_tokens"]), opt, sched, rcfg, ckpt_dir=None,
                curve_path=out / "curves" / f"{run['name']}.csv", resume=False, device=device)
    train_s = time.perf_counter() - t0
    ev = params["eval"]
    finite = not res.diverged and all(torch.isfinite(p).all() for p in model.parameters())
    t1 = time.perf_counter()
    if finite:
        model.eval()
        dcfg = DecodeConfig(decoder="greedy", max_len_a=ev["max_len_a"], max_len_b=ev["max_len_b"],
                            max_tokens=ev["max_tokens"])
        ids, _ = decode_ids(model, test["src_ids"], enc["train"].bos_id, enc["train"].eos_id, enc["train"].pad_id,
                            dcfg, device)
        hyps = [tok.decode(h) for h in ids]
    else:  # a diverged model has no translation: score empty outputs
        hyps = [""] * len(test["refs"])
    rep = bleu_report(hyps, test["refs"], test["srcs"], test["clean"])
    # a diverged run has no final validation loss (the last one logged predates the divergence)
    valid_nll = res.valid_curve[-1]["valid_nll"] if res.valid_curve and not res.diverged else None
    best_nll = min(v["valid_nll"] for v in res.valid_curve) if res.valid_curve else None
    summ = {**{k: run[k] for k in ("name", "groups", "norm", "position", "fixnorm", "layers", "lr", "warmup")},
            "diverged": res.diverged, "diverged_step": res.diverged_step, "stop_reason": res.stop_reason,
            "steps": res.steps, "final_train_loss": res.final_loss, "final_valid_nll": valid_nll,
            "best_valid_nll": best_nll, "bleu": rep["full"]["score"], "bleu_clean": rep["clean"]["score"],
            "bleu_copy": rep["copy_full"]["score"], "bleu_copy_clean": rep["copy_clean"]["score"],
            "bleu_signature": rep["full"]["signature"], "test_sentences": len(hyps),
            "train_seconds": train_s, "eval_seconds": time.perf_counter() - t1, "tokens_per_s": res.tokens_per_s,
            "valid_curve": res.valid_curve}
    log.info("%s: %s after %d steps (%.0f s), valid nll %s, BLEU %.2f (copy %.2f)", run["name"],
             "DIVERGED" if res.diverged else res.stop_reason, res.steps, train_s,
             f"{valid_nll:.3f}" if valid_nll is not None else "-", rep["full"]["score"], rep["copy_full"]["score"])
    return summ


def _published(s: dict, params: dict) -> dict:
    """Registry key (and index) for a run's BLEU where the papers report the same configuration."""
    main_layers = params["model"]["n_encoder_layers"]
    if s["norm"] == "layernorm" and s["position"] == "post" and s["layers"] == main_layers:
        if s["warmup"] == 0 and math.isclose(s["lr"], 5e-4):
            return {"published_key": "xiong_postln_no_warmup_bleu"}
        if s["warmup"] == 500 and math.isclose(s["lr"], 5e-4):
            return {"published_key": "xiong_postln_warmup500_lr5e4_bleu"}
        if s["warmup"] == 500 and math.isclose(s["lr"], 1e-3):
            return {"published_key": "xiong_postln_warmup500_lr1e3_bleu"}
        if s["warmup"] and s["warmup"] == max(warmup_lengths(params)):
            return {"published_key": "xiong_postln_warmup_bleu"}
    if s["norm"] == "layernorm" and s["warmup"] == 0 and s["layers"] in (4, 5, 6) and "depth" in s["groups"]:
        key = "nguyen_no_warmup_postnorm_dev_bleu" if s["position"] == "post" else "nguyen_no_warmup_prenorm_dev_bleu"
        return {"published_key": key, "published_index": s["layers"] - 4}
    return {}


def rows_from_summaries(summaries: list[dict], params: dict) -> list[dict]:
    rows = []
    for s in summaries:
        sw = dict(run=s["name"], group="+".join(s["groups"]), norm=s["norm"], position=s["position"],
                  fixnorm=s["fixnorm"], layers=s["layers"], lr=s["lr"], warmup=s["warmup"])
        n = s["test_sentences"]
        rows += [
            metric(CLAIM, "diverged", float(s["diverged"]), "bool", **sw),
            metric(CLAIM, "steps", s["steps"], "updates", **sw),
            metric(CLAIM, "final_valid_nll", s["final_valid_nll"], "nats/token", **sw),
            metric(CLAIM, "best_valid_nll", s["best_valid_nll"], "nats/token", **sw),
            metric(CLAIM, "final_train_loss", s["final_train_loss"], "nats/token (label-smoothed)", **sw),
            metric(CLAIM, "bleu", s["bleu"], "BLEU", n=n, **_published(s, params), **sw),
            metric(CLAIM, "bleu_clean", s["bleu_clean"], "BLEU", **sw),
            metric(CLAIM, "bleu_copy_baseline", s["bleu_copy"], "BLEU", n=n, **sw),
            metric(CLAIM, "train_seconds", s["train_seconds"], "s", **sw),
            metric(CLAIM, "train_tokens_per_s", s["tokens_per_s"], "tokens/s", **sw),
        ]
        if s["diverged_step"] is not None:
            rows.append(metric(CLAIM, "diverged_step", s["diverged_step"], "update", **sw))
    return rows


# ---------------------------------------------------------------------------------------------------------- verdict
def _table(rows: list[dict]) -> dict[str, dict]:
    """run name -> {sweep..., metric: value}."""
    out: dict[str, dict] = {}
    for r in rows:
        d = out.setdefault(r["sweep"]["run"], dict(r["sweep"]))
        d[r["metric"]] = r["value"]
    return out


def _nll(d: dict) -> float:
    v = d.get("final_valid_nll")
    return math.inf if d.get("diverged") or v is None or not math.isfinite(v) else v


def _find(t: dict, **kw) -> dict | None:
    for d in t.values():
        if all(d.get(k) == v or (isinstance(v, float) and isinstance(d.get(k), float) and math.isclose(d[k], v))
               for k, v in kw.items()):
            return d
    return None


def _fmt(d: dict | None) -> str:
    if d is None:
        return "missing"
    if d.get("diverged"):
        return f"diverged at step {int(d.get('diverged_step') or 0)}"
    return f"valid NLL {_nll(d):.3f}, BLEU {d.get('bleu', float('nan')):.2f}"


def failed(d: dict, t: dict, margin: float) -> bool:
    """Diverged, or final validation NLL more than ``margin`` nats above the best run at the same learning rate."""
    same_lr = [_nll(o) for o in t.values() if math.isclose(o["lr"], d["lr"])]
    return _nll(d) > min(same_lr) + margin


def judge(rows: list[dict], params: dict, scale: str) -> dict:
    """Verdict from the measured runs:

    1. Pre-LN without warm-up reaches within ``pre_tolerance_nats`` of Pre-LN with warm-up (validation NLL) at every
       learning rate (Xiong: Pre-LN trains without warm-up).
    2. Post-LN without warm-up is clearly worse than with warm-up at the highest learning rate: its final validation
       NLL is at least ``post_gap_nats`` higher, or it diverged (Xiong: 8.45 vs ~34 BLEU).
    3. Post-LN without warm-up is worse than Pre-LN without warm-up at the highest learning rate (same margin).
    4. PreNorm + ScaleNorm + FixNorm trains without warm-up: not failed (Nguyen & Salazar).
    5. Depth trend (Nguyen & Salazar Table 5): at the deepest depth Post-LN without warm-up fails while Pre-LN does
       not, and Post-LN's gap to Pre-LN does not shrink with depth.
    """
    v = params["verdict"]
    t = _table(rows)
    checks = []
    main_layers = params["model"]["n_encoder_layers"]
    lrs = sorted(params["lrs"])
    hi = lrs[-1]
    w = warmup_lengths(params)[0]
    pre_ok = []
    for lr in lrs:
        a = _find(t, norm="layernorm", position="pre", layers=main_layers, lr=lr, warmup=w, fixnorm=False)
        b = _find(t, norm="layernorm", position="pre", layers=main_layers, lr=lr, warmup=0, fixnorm=False)
        if a and b:
            pre_ok.append((lr, _nll(b) - _nll(a), a, b))
    if pre_ok:
        checks.append(check("Pre-LN trains without warm-up",
                            all(gap <= v["pre_tolerance_nats"] for _, gap, _, _ in pre_ok),
                            "; ".join(f"lr {lr:g}: no warm-up {_fmt(b)} vs warm-up {_fmt(a)} (gap {gap:+.3f} nats)"
                                      for lr, gap, a, b in pre_ok),
                            f"no-warm-up NLL within {v['pre_tolerance_nats']} nats of warm-up (Xiong Sec. 3.2)"))
    pw = _find(t, norm="layernorm", position="post", layers=main_layers, lr=hi, warmup=w, fixnorm=False)
    pn = _find(t, norm="layernorm", position="post", layers=main_layers, lr=hi, warmup=0, fixnorm=False)
    prn = _find(t, norm="layernorm", position="pre", layers=main_layers, lr=hi, warmup=0, fixnorm=False)
    if pw and pn:
        gap = _nll(pn) - _nll(pw)
        checks.append(check(f"Post-LN without warm-up is clearly worse at lr {hi:g}",
                            bool(pn.get("diverged")) or gap >= v["post_gap_nats"],
                            f"no warm-up {_fmt(pn)} vs warm-up {_fmt(pw)} (gap {gap:+.3f} nats)",
                            f"worse by >= {v['post_gap_nats']} nats or diverged (Xiong: 8.45 vs ~34 BLEU)"))
    if pn and prn:
        gap = _nll(pn) - _nll(prn)
        checks.append(check(f"without warm-up Pre-LN beats Post-LN at lr {hi:g}",
                            gap >= v["post_gap_nats"],
                            f"Post-LN {_fmt(pn)} vs Pre-LN {_fmt(prn)} (gap {gap:+.3f} nats)",
                            f"Post-LN worse by >= {v['post_gap_nats']} nats or diverged"))
    sn = [d for d in t.values() if d["norm"] == "scalenorm" and d["fixnorm"]]
    if sn:
        checks.append(check("PreNorm + ScaleNorm + FixNorm trains without warm-up",
                            not any(failed(d, t, v["fail_margin_nats"]) for d in sn),
                            "; ".join(f"lr {d['lr']:g}: {_fmt(d)}" for d in sn),
                            f"not diverged and within {v['fail_margin_nats']} nats of the best run at its lr "
                            "(Nguyen & Salazar)"))
    dl = params["depth"]["lr"]
    depths = sorted({d["layers"] for d in t.values() if d["norm"] == "layernorm" and d["warmup"] == 0
                     and math.isclose(d["lr"], dl) and not d["fixnorm"]})
    trend = []
    for L in depths:
        po = _find(t, norm="layernorm", position="post", layers=L, lr=dl, warmup=0, fixnorm=False)
        pr = _find(t, norm="layernorm", position="pre", layers=L, lr=dl, warmup=0, fixnorm=False)
        if po and pr:
            trend.append((L, po, pr, _nll(po) - _nll(pr)))
    if len(trend) >= 2:
        L, po, pr, gap = trend[-1]
        deep_fail = (bool(po.get("diverged")) or gap >= v["post_gap_nats"]) and not failed(pr, t, v["fail_margin_nats"])
        gaps = [g for *_, g in trend]
        grows = gaps[-1] >= gaps[0] - v["pre_tolerance_nats"]
        checks.append(check("no warm-up: the deepest Post-LN fails where Pre-LN trains, and the gap grows with depth",
                            deep_fail and grows,
                            "; ".join(f"{L}+{L} layers: Post {_fmt(po)}, Pre {_fmt(pr)}, gap {g:+.3f}"
                                      for L, po, pr, g in trend),
                            "PostNorm 18.31 / fails / fails vs PreNorm 28.33 / 28.13 / 28.32 at 4/5/6 layers "
                            "(Nguyen & Salazar Table 5)"))
    return verdict_from_checks(CLAIM, checks, scale)


# ------------------------------------------------------------------------------------------------------------- run
def run(params: dict, scale: str, out) -> tuple[list[dict], dict]:
    """Train every configuration (Post/Pre-LN x warm-up x lr, ScaleNorm+FixNorm, depth sweep) and judge."""
    from repro.train.pipeline import encode_splits, load_data

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tparams = _translation_params(params, scale)
    device = params["device"]
    t0 = time.time()
    corpus = load_data(tparams)  # fails first, naming translation.corpus.path, when the data path is missing
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("warmup_stability.device: cuda requested but no GPU is available")
    tok, tok_path = _tokenizer(params, tparams, corpus, out)
    tr = params["training"]
    enc = encode_splits(tparams, tok, corpus, tr["max_len"])
    nv = params["eval"]["valid_sentences"]
    if nv:
        enc["valid"] = _head(enc["valid"], nv)
    nt = min(params["eval"]["test_sentences"], len(corpus.test))
    srcs, refs = corpus.sources("test")[:nt], corpus.references("test")[:nt]
    clean = list(corpus.clean_masks["test"][:nt])
    db = getattr(corpus, "data_bin", None)
    if db is not None:
        src_ids = [list(x) for x in db.encoded("test", tr["max_len"], "truncate").src[:nt]]
    else:
        src_ids = [list(e)[: tr["max_len"] - 1] + [tok.eos_id] for e in tok.encode_batch(srcs)]
    test = {"srcs": srcs, "refs": refs, "clean": clean, "src_ids": src_ids}
    plan = plan_runs(params)
    log.info("data: %d train pairs, %d valid, %d test sentences; vocab %d (%s); %d runs planned; %.1f s",
             len(enc["train"]), len(enc["valid"]), nt, tok.vocab_size, tok_path, len(plan), time.time() - t0)
    # runs.json is rewritten after every run; a rerun with the same parameters keeps the finished runs (resume)
    key = json.dumps({k: v for k, v in params.items() if k != "tokenizer_path"}, sort_keys=True, default=str)
    done = {}
    if (out / "runs.json").exists():
        old = json.loads((out / "runs.json").read_text())
        if old.get("params_key") == key:
            done = {s["name"]: s for s in old["runs"] if (out / "curves" / f"{s['name']}.csv").exists()}
    summaries = []
    kept = [r for r in plan if r["name"] in done]
    runs = Progress("warmup_stability training runs", len(plan), "runs", logger=log, done=len(kept))
    for i, r in enumerate(plan):
        if r["name"] in done:
            log.info("run %d/%d: %s already finished (runs.json); kept", i + 1, len(plan), r["name"])
            summaries.append({**done[r["name"]], "groups": r["groups"]})  # groups are plan metadata
            continue
        log.info("run %d/%d: %s (groups %s)", i + 1, len(plan), r["name"], ",".join(r["groups"]))
        summaries.append(train_one(params, r, tok, enc, test, out, device))
        atomic_write_json(out / "runs.json", {"tokenizer": tok_path, "params_key": key, "runs": summaries})
        runs.update(note=r["name"])
    rows = rows_from_summaries(summaries, params)
    return rows, judge(rows, params, scale)


def _head(encoded, n: int):
    """The first ``n`` pairs of an EncodedCorpus (validation subset)."""
    import dataclasses

    return dataclasses.replace(encoded, src=encoded.src[:n], tgt=encoded.tgt[:n], index=encoded.index[:n])


if __name__ == "__main__":
    from repro.claims._cli import main

    raise SystemExit(main(CLAIM, run))
