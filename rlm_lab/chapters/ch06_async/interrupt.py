"""What an interruptible rollout costs and what it buys, measured in one process on one core (as a rollout
worker runs), on the chapter's model, task and batch (``rlm_lab.chapters.ch05_placement.run.run_config(size)``: the
SFT warm start, one generation call of ``batch_size`` prompt entries, ``max_completion_length`` tokens):

    flock -x /tmp/rlm-lab-measure.lock .venv/bin/rlm-lab chapter 6 interrupt --size cpu \\
        --out data/runs/cpu/ch06_interrupt/<UTC time>

Per repeat (the order of the runs rotates from repeat to repeat), with the same sampling seed:

- ``none``       no update: the generation time T;
- ``keep``       one update at the middle decode step k (half the decode steps of a warm-up request), the
                 cache kept;
- ``reprefill``  the same update, prompt + k tokens re-prefilled under the new weights;
- ``wait_today`` an update arriving at T/2 (a timer thread) to a worker that applies it after the request
                 (chapter 5 and 6's workers today: the push waits in the actor's queue);
- ``wait_interruptible`` the same arrival, applied at the next decode step.

The update is a stand-in for one optimizer step (every weight moved by 1e-3 of its tensor's RMS, fixed seed): its
values do not change the cost of a step, only which tokens are sampled. The weights are restored after each run.

The prediction is made from the cost model (``rlm_lab.cost.timing``, profile ``cpu-2core-epyc``, fp32) before
anything is measured and stored in the record first: the re-prefill's extra time over ``keep`` is one prefill of
b rows of P + k tokens in place of the decode step it replaces, t_prefill(b, P + k) - t_step(b, P + k); the
interruption itself (``keep`` over ``none``) is one more ``generate`` call's setup plus the weight copy (the
parameters read and written at the profile's bandwidth). A waiting update waits, today, the rest of the request,
and at most one decode step when interruptible.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import statistics
import sys
import threading
from pathlib import Path

from ...asynchrony.interrupt import InterruptibleEngine
from ...cost import decode_step_time, forward_time, generate_time, load_profile, model_spec
from ...errors import RlmLabError
from ...evidence import bar_word, error_interval, repeat_interval
from ...host import load_average
from ...models import load
from ...placement.rollout import chunk_seed
from ...placement.runtime import _sft_checkpoint
from ...placement.weights import load_synced, state_for_object_store
from ...record import RunRecord, runs_root
from ...sizes import check_size
from ...tasks import ensure_data, parse_task
from ..ch05_placement.cases import run_config
from .run import latest_in

PROFILE = "cpu-2core-epyc"
GOAL = 0.25  # error bar on the predicted extra seconds, fixed before measuring
REPEATS = 30  # requests of each kind (a request takes milliseconds to tens of milliseconds here)
RUNS = ("none", "keep", "reprefill", "wait_today", "wait_interruptible")
PERTURB = 1e-3


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def trl_generation(cfg, tokenizer) -> dict:
    """The generation settings TRL 1.16's GRPOTrainer builds on its transformers path (grpo_trainer.py,
    ``generation_kwargs``), from the run config and GRPOConfig's own defaults."""
    from trl import GRPOConfig

    d = {f.name: f.default for f in dataclasses.fields(GRPOConfig)}
    gen = {"max_new_tokens": cfg.max_completion_length, "do_sample": True, "pad_token_id": tokenizer.pad_token_id,
           "bos_token_id": tokenizer.bos_token_id, "eos_token_id": [tokenizer.eos_token_id],
           "temperature": cfg.temperature, "top_p": d["top_p"], "top_k": d["top_k"], "min_p": d["min_p"],
           "repetition_penalty": d["repetition_penalty"], "cache_implementation": d["cache_implementation"]}
    return gen


def workload(size: str):
    """(cfg, model, tokenizer, prompt_ids): the chapter's SFT-warm-started policy and one generation call's
    prompt entries (the first batch_size / G training prompts, each G times, as TRL's RepeatSampler orders them)."""
    cfg = run_config(size)
    model, tok = load(str(_sft_checkpoint(cfg)))
    rows = ensure_data(parse_task(cfg.task))["train"]
    g = cfg.num_generations
    prompts = [r["prompt"] for r in rows[: cfg.batch_size // g] for _ in range(g)]
    return cfg, model, tok, tok(text=prompts)["input_ids"]


def predict(cfg, prompt_ids, params_bytes: int, steps: int) -> dict:
    """The cost model's seconds, made before measuring, for an update at the middle decode step k = steps // 2
    of a request of ``steps`` decode steps (the warm-up request's: the SFT policy answers in fewer tokens than
    ``max_completion_length``)."""
    prof, spec = load_profile(PROFILE), model_spec(cfg.model)
    b, p, r = len(prompt_ids), max(len(x) for x in prompt_ids), steps
    k = max(1, r // 2)
    t_prefill = forward_time(spec, prof, b, p + k, b, "fp32", 4)
    t_step = decode_step_time(spec, b, p + k, prof, "fp32", 4)
    setup = prof.call_overhead("generate_base_s")
    load = 2 * params_bytes / prof.bandwidth()  # load_synced: read the payload, write the parameters
    return {"made": _now(), "profile": PROFILE, "dtype": "fp32", "batch": b, "prompt_len": p, "tokens": r,
            "at_token": k, "t_prefill_s": t_prefill, "t_step_s": t_step, "generate_setup_s": setup, "load_s": load,
            "generate_s": generate_time(spec, prof, p, [r] * b, b, "static", "fp32", 4),
            "reprefill_extra_s": t_prefill - t_step, "keep_extra_s": setup + load,
            "wait_today_s": "the rest of the request: T/2 for an arrival at T/2",
            "wait_interruptible_max_s": t_step, "goal": GOAL,
            "how": "reprefill - keep = t_prefill(b, P+k) - t_step(b, P+k); keep - none = generate setup + weight copy "
                   "(rlm_lab.cost.timing.forward_time / decode_step_time, profile cpu-2core-epyc)"}


def perturbed(model, scale: float = PERTURB, seed: int = 1234) -> dict:
    """A stand-in update: every synced parameter moved by ``scale`` times its RMS, Gaussian, fixed seed."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    out = {}
    for n, t in state_for_object_store(model).items():
        rms = t.float().pow(2).mean().sqrt().item() or 1.0
        out[n] = t + scale * rms * torch.randn(t.shape, generator=gen, dtype=t.dtype)
    return out


def _one(engine, prompt_ids, seed, kind, new, k, arrive_s):
    """One timed request of kind ``kind``; returns its row for metrics.jsonl."""
    old = state_for_object_store(engine.model)
    engine.updates.clear()
    engine.interruptible = kind != "wait_today"
    engine.policy = "reprefill" if kind == "reprefill" else "keep"
    timer = None
    schedule = {k: (new, engine.version + 1)} if kind in ("keep", "reprefill") else None
    if kind.startswith("wait"):
        timer = threading.Timer(arrive_s, engine.offer, (new, engine.version + 1))
        timer.start()
    res = engine.generate(prompt_ids, seed, schedule=schedule)
    if timer is not None:
        timer.join()
    steps = engine.step_times
    row = {"kind": kind, "seconds": res["seconds"], "tokens": max(len(c) for c in res["completion_ids"]),
           "steps": len(steps) - 1, "step_s": [b - a for a, b in zip(steps, steps[1:])]}
    ups = [u for u in engine.updates if "wait_s" in u]
    if ups:
        u = ups[0]
        row.update(wait_s=u["wait_s"], load_s=u["load_s"], where=u["where"], at_token=u["at_token"])
    if res["interrupts"]:
        it = res["interrupts"][0]
        j = it["at_token"]  # step_times[j + 1]: the first step of the resumed call
        row["resume_s"] = steps[j + 1] - (it["t"] + it["load_s"]) if len(steps) > j + 1 else None
        row["interrupted_at"] = j
    load_synced(engine.model, old)
    engine.version = 0
    return row


def measure(size: str, run_dir, repeats: int | None = None, command=None) -> dict:
    import torch

    repeats = repeats or REPEATS
    if repeats < 1:
        raise RlmLabError(f"--repeats must be >= 1, got {repeats}")
    torch.set_num_threads(1)  # one core, as a rollout worker (rlm_lab.placement.proc.pin)
    cfg, model, tok, prompt_ids = workload(size)
    params_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    record = RunRecord(run_dir, {"size": size, "run": cfg.to_dict(), "repeats": repeats, "runs": list(RUNS),
                                 "threads": 1, "perturb": PERTURB}, command, cfg.seed)
    with record:
        engine = InterruptibleEngine(model, trl_generation(cfg, tok), tok.pad_token_id, tok.eos_token_id)
        new, warm = perturbed(model), chunk_seed(cfg.seed, 10_000, 0)
        steps = _one(engine, prompt_ids, warm, "none", new, 0, 0.0)["steps"]  # warm-up: its length only
        pred = predict(cfg, prompt_ids, params_bytes, steps)
        record.update(prediction=pred, load_average_start=load_average(2))
        k = pred["at_token"]
        for kind in ("keep", "reprefill"):  # warm-up (first calls allocate), not recorded
            _one(engine, prompt_ids, warm, kind, new, k, 0.0)
        t_half = None
        rows = []
        for rep in range(repeats):
            order = RUNS[rep % len(RUNS):] + RUNS[:rep % len(RUNS)]
            seed = chunk_seed(cfg.seed, rep, 0)
            for kind in sorted(order, key=lambda x: x.startswith("wait")):  # the waits last: T/2 from 'none'
                row = {"repeat": rep, **_one(engine, prompt_ids, seed, kind, new, k, t_half or 0.0)}
                if kind == "none":
                    t_half = row["seconds"] / 2 if t_half is None else t_half
                rows.append(row)
                record.log(row)
        record.update(**summary(rows, pred), load_average_end=load_average(2))
    return record.results


def _stats(xs) -> dict:
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return {"n": 0}
    q = statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3
    return {"n": len(xs), "median": statistics.median(xs), "min": xs[0], "max": xs[-1], "q1": q[0], "q3": q[2]}


def summary(rows: list[dict], pred: dict) -> dict:
    """Medians and spreads per kind; the paired (same repeat) extra seconds against the prediction."""
    by = {}
    for r in rows:
        by.setdefault(r["kind"], {})[r["repeat"]] = r
    reps = sorted(set(by.get("none", {})) & set(by.get("keep", {})) & set(by.get("reprefill", {})))
    sec = {kind: _stats(r["seconds"] for r in v.values()) for kind, v in by.items()}
    pair = {"keep_extra_s": _stats(by["keep"][i]["seconds"] - by["none"][i]["seconds"] for i in reps),
            "reprefill_extra_s": _stats(by["reprefill"][i]["seconds"] - by["keep"][i]["seconds"] for i in reps),
            "resume_extra_s": _stats(by["reprefill"][i].get("resume_s") - by["keep"][i].get("resume_s")
                                     for i in reps if by["keep"][i].get("resume_s") is not None
                                     and by["reprefill"][i].get("resume_s") is not None)}
    steps = [s for r in by.get("none", {}).values() for s in r["step_s"][1:]]  # decode steps (not the prefill)
    waits = {kind: _stats(r.get("wait_s") for r in by.get(kind, {}).values())
             for kind in ("wait_today", "wait_interruptible")}
    where = {kind: sorted({r.get("where") for r in by.get(kind, {}).values()}, key=str)
             for kind in ("wait_today", "wait_interruptible")}
    errors = {}
    diffs = {"reprefill_extra_s": [by["reprefill"][i]["seconds"] - by["keep"][i]["seconds"] for i in reps],
             "keep_extra_s": [by["keep"][i]["seconds"] - by["none"][i]["seconds"] for i in reps]}
    for key in ("reprefill_extra_s", "keep_extra_s"):
        m = pair[key].get("median")
        errors[key] = {"predicted": pred[key], "measured": m,
                       "error": None if not m else (pred[key] - m) / m, "met": extra_word(pred[key], diffs[key])}
    return {"seconds": sec, "paired": pair, "decode_step_s": _stats(steps), "wait": waits, "wait_where": where,
            "comparison": errors, "goal": GOAL}


def extra_word(predicted: float, paired_extra: list) -> str:
    """The goal's word for a predicted extra time against the paired repeats' extras (:mod:`rlm_lab.evidence`: the
    median's bootstrap interval, the error at both ends): "met" only when the whole error interval is within
    :data:`GOAL`; an interval that reaches 0 s (the extra may not exist) or a single pair is "undecided"."""
    if not paired_extra:
        return "undecided (no pairs)"
    iv = repeat_interval(paired_extra)
    if not iv.decided:
        return "undecided (one pair, no interval)"
    if iv.lo <= 0:
        return f"undecided (the interval {iv.text('{:.3f}')} s reaches 0)"
    return bar_word(error_interval(predicted, iv), GOAL)


def latest(root: str | Path):
    """The newest loadable record under ``<root>/ch06_interrupt/`` (None if there is none)."""
    return latest_in(Path(root) / "ch06_interrupt")


def report(rec) -> dict:
    """The record's headline numbers for the book (seconds; ``met`` from the live numbers against the goal):
    per policy the generation time, the paired extra over the lighter run with its prediction, the update's wait
    today and interruptible, and where a miss comes from: the measured decode step and the prefill implied by
    the two resumed steps (reprefill's resume - keep's resume + one measured decode step) against the cost
    model's t_step and t_prefill."""
    r = rec.results
    pred, pair = r["prediction"], r["paired"]
    c = summary(list(rec.metrics()), pred)["comparison"]  # the words recomputed from the rows, never stored ones
    step = r["decode_step_s"]["median"]
    rows = {}
    by = {}
    for row in rec.metrics():
        by.setdefault(row["kind"], []).append(row)
    resume = {k: statistics.median(x["resume_s"] for x in by[k] if x.get("resume_s") is not None)
              for k in ("keep", "reprefill")}
    rows.update(
        batch=pred["batch"], prompt_len=pred["prompt_len"], tokens=pred["tokens"], at_token=pred["at_token"],
        repeats=rec.config["repeats"], goal=r["goal"], load=r.get("load_average_start"),
        none_s=r["seconds"]["none"]["median"], keep_s=r["seconds"]["keep"]["median"],
        reprefill_s=r["seconds"]["reprefill"]["median"],
        reprefill_extra_s=pair["reprefill_extra_s"]["median"], reprefill_extra_iqr=(
            pair["reprefill_extra_s"]["q1"], pair["reprefill_extra_s"]["q3"]),
        reprefill_extra_pred_s=pred["reprefill_extra_s"], reprefill_error=c["reprefill_extra_s"]["error"],
        reprefill_met=c["reprefill_extra_s"]["met"],
        keep_extra_s=pair["keep_extra_s"]["median"],
        keep_extra_iqr=(pair["keep_extra_s"]["q1"], pair["keep_extra_s"]["q3"]),
        keep_extra_pred_s=pred["keep_extra_s"], keep_error=c["keep_extra_s"]["error"],
        keep_met=c["keep_extra_s"]["met"],
        wait_today_s=r["wait"]["wait_today"]["median"], wait_today_max_s=r["wait"]["wait_today"]["max"],
        wait_interruptible_s=r["wait"]["wait_interruptible"]["median"],
        wait_interruptible_max_s=r["wait"]["wait_interruptible"]["max"],
        decode_step_s=step, decode_step_max_s=r["decode_step_s"]["max"], t_step_pred_s=pred["t_step_s"],
        t_prefill_pred_s=pred["t_prefill_s"], prefill_implied_s=resume["reprefill"] - resume["keep"] + step)
    return rows


def plot(rec):
    """Left: generation time per run (median, quartiles); right: how long an update waits, today and interruptible,
    against one measured decode step."""
    import matplotlib.pyplot as plt

    r = rec.results
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
    for a, kinds, src, title in ((axes[0], ("none", "keep", "reprefill"), r["seconds"], "generation of one batch"),
                                 (axes[1], ("wait_today", "wait_interruptible"), r["wait"], "an update's wait")):
        med = [src[k]["median"] * 1e3 for k in kinds]
        err = [[m - src[k]["q1"] * 1e3 for m, k in zip(med, kinds)],
               [src[k]["q3"] * 1e3 - m for m, k in zip(med, kinds)]]
        a.bar(range(len(kinds)), med, yerr=err, capsize=4, color=["#888", "#4c72b0", "#dd8452"][:len(kinds)])
        a.set_xticks(range(len(kinds)), [k.replace("wait_", "") for k in kinds])
        a.set_ylabel("ms (median, quartiles)")
        a.set_title(title)
    axes[1].axhline(r["decode_step_s"]["median"] * 1e3, color="k", ls=":", label="one decode step (median)")
    axes[1].legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    return fig


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="rlm-lab chapter 6 interrupt",
                                 description="chapter 6: the cost and the benefit of interruptible rollouts")
    ap.add_argument("--size", default="smoke")
    ap.add_argument("--out", default=None,
                    help="the record's folder (default _build/runs/<size>/ch06_interrupt/<UTC time>)")
    ap.add_argument("--repeats", type=int, default=None)
    a = ap.parse_args(argv)
    try:
        check_size(a.size)
        if a.repeats is not None and a.repeats < 1:
            raise RlmLabError(f"--repeats must be >= 1, got {a.repeats}")
        out = Path(a.out) if a.out else runs_root(a.size) / "ch06_interrupt" / _now()
        res = measure(a.size, out, a.repeats, command=sys.argv)
    except RlmLabError as e:
        print(f"rlm-lab: error: {e}", file=sys.stderr)
        return 2
    c = res["comparison"]
    for key, v in c.items():
        print(f"{key:18s} predicted {v['predicted'] * 1e3:8.2f} ms  measured {v['measured'] * 1e3:8.2f} ms  "
              f"-> {'met' if v['met'] else 'not met'} (goal {GOAL:.0%})")
    w = res["wait"]
    print(f"update wait: today {w['wait_today'].get('median', float('nan')) * 1e3:.1f} ms, interruptible "
          f"{w['wait_interruptible'].get('median', float('nan')) * 1e3:.1f} ms  -> {out}")
    return 0
