"""Chapter 7's measurements: each technique switched off and on at one size, with its prediction made from
the cost model (:mod:`rlm_lab.cost.longtail`) before the measurement, each a RunRecord ``ch07_<technique>``.

Writes to ``_build/runs/<size>/`` by default; the committed reference records (``data/runs/cpu/ch07_*``) are
written only with an explicit ``--out``: ``flock -x /tmp/rlm-lab-measure.lock .venv/bin/python -m
rlm_lab.longtail --size cpu --out data/runs/cpu``.
"""

from __future__ import annotations

import os
import random
import statistics
from pathlib import Path

from ..cost import longtail as cost
from ..errors import RlmLabError
from ..record import RunRecord, runs_root
from ..sizes import check_size
from ..tasks import correctness_reward, parse_task
from ..tasks.chain import answer_length, predicted_length
from . import engine, techniques as T
from .params import params

TECHNIQUES = ("overprovision", "tail_batching", "dispatch", "packing", "dynamic_sampling", "fusion")


def _loadavg():
    try:
        return list(os.getloadavg())
    except OSError:
        return None


def _setup(p, seed):
    from ..models import build_model

    model, tok = build_model(p["model"], seed=seed)
    model.eval()
    task = parse_task(p["task"])
    rows, _ = task.split(p["pool"], 1, seed)
    for b in (1, 2):  # warm-up: the first calls of a shape allocate and dispatch lazily
        engine.generate(model, engine.encode(tok, [rows[0]["prompt"]] * b), [4] * b, seed=seed)
    return model, tok, task, rows


def _median_time(fn, reps):
    return statistics.median(fn() for _ in range(reps))


def overprovision(p, model, tok, task, rows, seed):
    lengths = [answer_length(r) for r in rows]
    pred = cost.overprovision(lengths, p["n"], p["n_prime"])
    prompts = engine.encode(tok, [r["prompt"] for r in rows])
    full_s, full_steps, fresh = [], [], 0
    for s in range(p["op_steps"]):  # the baseline: n fresh prompts, wait for all
        idx = list(range(fresh, fresh + p["n"]))
        fresh += p["n"]
        g = engine.generate(model, [prompts[i] for i in idx], [lengths[i] for i in idx], seed=seed + s)
        full_s.append(g.seconds)
        full_steps.append(max(lengths[i] for i in idx))
    op = T.OverProvisioner(prompts, lengths, p["n"], p["n_prime"])
    steps = [op.step(model, seed + s) for s in range(p["op_steps"])]
    kept = [x for st in steps for x in st["kept_lengths"]]
    measured = {"full_s": full_s, "early_s": [st["seconds"] for st in steps], "full_steps": full_steps,
                "early_steps": [st["steps"] for st in steps], "first_kept_mean": statistics.mean(steps[0]["kept_lengths"]),
                "kept_mean": statistics.mean(kept), "pool_mean": statistics.mean(lengths),
                "resumed": [st["resumed"] for st in steps], "recycled": [st["recycled"] for st in steps]}
    measured["speedup"] = statistics.mean(full_s) / statistics.mean(measured["early_s"])
    measured["short_bias_first"] = measured["first_kept_mean"] / measured["pool_mean"] - 1
    measured["short_bias_all"] = measured["kept_mean"] / measured["pool_mean"] - 1
    return {"predicted": pred, "measured": measured}


def tail_batching(p, model, tok, task, rows, seed):
    sub = rows[:p["rounds_n"]]
    lengths = [answer_length(r) for r in sub]
    predicted = [predicted_length(r["prompt"]) for r in sub]  # read off the prompt: the length predictor
    plan = T.tail_rounds(lengths, p["batch"], predicted, p["tail_fraction"])
    prompts = engine.encode(tok, [r["prompt"] for r in sub])
    out = {}
    for name in ("mixed", "tail_batched"):
        def run(name=name):
            return sum(engine.generate(model, [prompts[i] for i in r], [lengths[i] for i in r], seed=seed).seconds
                       for r in plan[name])
        out[name] = _median_time(run, p["reps"])
    pl = plan["plan"]
    return {"predicted": {k: pl[k] for k in ("steps_mixed", "steps_tail_batched", "speedup", "bubble_mixed",
                                             "bubble_tail_batched")},
            "measured": {"mixed_s": out["mixed"], "tail_batched_s": out["tail_batched"],
                         "speedup": out["mixed"] / out["tail_batched"]}}


def dispatch(p, model, tok, task, rows, seed):
    """Sequential simulation of ``workers`` rollout workers (one after another on this machine, makespan =
    the slowest worker); each decodes its share one sequence at a time, the per-token cost of a saturated
    continuous-batching engine that the LPT makespan formula assumes."""
    sub = rows[:p["dispatch_n"]]
    lengths = [answer_length(r) for r in sub]
    prompts = engine.encode(tok, [r["prompt"] for r in sub])
    pred = {pol: cost.dispatch_makespan(lengths, p["workers"], pol) for pol in ("round_robin", "lpt")}
    meas = {}
    for pol in ("round_robin", "lpt"):
        shares = T.dispatch_shares(lengths, p["workers"], pol)
        meas[pol] = [sum(engine.generate(model, [prompts[i]], [lengths[i]], seed=seed).seconds for i in share)
                     for share in shares]
    return {"predicted": {"makespan_tokens": pred, "speedup": pred["round_robin"] / pred["lpt"],
                          "bounds": cost.lpt_bound(lengths, p["workers"])},
            "measured": {"worker_s": meas, "speedup": max(meas["round_robin"]) / max(meas["lpt"])},
            "simulated": "sequential: workers run one after another on this machine"}


def packing(p, model, tok, task, rows, seed):
    import torch

    sub = rows[:p["pack_n"]]
    seqs = [ids + engine.encode(tok, [r["answer"]])[0] + [engine.EOS]
            for ids, r in zip(engine.encode(tok, [r["prompt"] for r in sub]), sub)]
    lens = [len(s) for s in seqs]
    mb = p["micro"]
    chunks = [seqs[i:i + mb] for i in range(0, len(seqs), mb)]
    budget = max(max(lens), mb * round(statistics.mean(lens)))
    bins = cost.token_budget_microbatches(lens, budget)
    model.train()
    try:
        for how in ("padded", "packed"):  # warm-up: the first backward allocates its buffers
            T.train_forward_backward(model, chunks[0], how)
        times = {}
        for mode, batches, how in (("padded", chunks, "padded"), ("packed", chunks, "packed"),
                                   ("token_budget", [[seqs[i] for i in b] for b in bins], "packed")):
            times[mode] = _median_time(lambda: sum(T.train_forward_backward(model, b, how) for b in batches),
                                       p["reps"])
    finally:
        model.eval()
        model.zero_grad(set_to_none=True)
    frac = cost.padded_fraction(lens, mb)
    del torch
    return {"predicted": {"padded_useful_fraction": frac, "speedup": 1 / frac, "budget": budget, "bins": len(bins),
                          "budget_useful_fraction": sum(lens) / (len(bins) * budget)},
            "measured": {**{f"{k}_s": v for k, v in times.items()}, "speedup": times["padded"] / times["packed"],
                         "token_budget_speedup": times["padded"] / times["token_budget"]}}


def _simulated_policy(task, seed):
    """A stand-in policy (labelled so in the chapter): it solves a chain of k operations with probability
    0.85^k, answering the reference chain or the chain with its last result off by one. Its completions go
    through the task's real reward function. A trained model replaces it at ``cpu`` size once one exists."""
    rng = random.Random(seed)

    def p_of(row):
        return 0.85 ** len(row["answer"].split(","))

    def sample_group(row, g):
        head, _, last = row["answer"].rpartition("=")
        wrong = f"{head}={int(last) + 1}"
        return [row["answer"] if rng.random() < p_of(row) else wrong for _ in range(g)]

    return p_of, sample_group


def dynamic_sampling(p, model, tok, task, rows, seed):
    p_of, sample_group = _simulated_policy(task, seed)
    sampler = T.DynamicSampler(rows, sample_group, correctness_reward(task), p["group_size"], seed)
    kept = sampler.fill(p["groups"])
    ps = [p_of(r) for r in rows]
    return {"predicted": {"inflation": cost.dynamic_sampling_inflation_dist(ps, p["group_size"]),
                          "mean_p": statistics.mean(ps)},
            "measured": {"generated": sampler.generated, "kept": len(kept), "inflation": sampler.generated / len(kept)},
            "simulated": "policy: solves a k-step chain with probability 0.85^k (no trained model yet)"}


def fusion(p, model, tok, task, rows, seed):
    import torch

    from ..models import build_model

    ref, _ = build_model(p["model"], seed=seed + 1)  # the reference model: a second copy, scored per sample
    ref.eval()
    reward = correctness_reward(task)
    sub = rows[:p["fusion_n"]]
    lengths = [answer_length(r) for r in sub]
    prompts = engine.encode(tok, [r["prompt"] for r in sub])

    def score(ids):
        with torch.no_grad():
            ref(ids.unsqueeze(0)).logits.log_softmax(-1)
        reward([tok.decode(ids.tolist(), skip_special_tokens=True)], answer=[sub[0]["answer"]])

    after = T.fused_scoring(model, prompts, lengths, score, fused=False, seed=seed)
    fused = T.fused_scoring(model, prompts, lengths, score, fused=True, seed=seed)
    s = statistics.median(after["score_s"])
    pred = cost.fusion_time([f for f in after["finish_s"] if f is not None], s)
    return {"predicted": {**pred, "score_s": s},
            "measured": {"after_s": after["wall_s"], "fused_s": fused["wall_s"], "gen_s": after["gen_s"],
                         "speedup": after["wall_s"] / fused["wall_s"]}}


def measure(size: str, only=None, out: str | Path | None = None, seed: int = 0) -> dict[str, RunRecord]:
    """Measure the techniques (all, or ``only``) at ``size``; one record each under ``out`` (default: the
    build tree's ``runs_root(size)``)."""
    size = check_size(size)
    names = list(only or TECHNIQUES)
    bad = [n for n in names if n not in TECHNIQUES]
    if bad:
        raise RlmLabError(f"unknown technique {bad[0]!r}; choose from: {', '.join(TECHNIQUES)}")
    root = Path(out) if out is not None else runs_root(size)
    p = params(size)
    load_before = _loadavg()
    model, tok, task, rows = _setup(p, seed)
    records = {}
    for name in names:
        rec = RunRecord(root / f"ch07_{name}", {"size": size, **p}, command=f"rlm_lab.longtail.measure({size!r}, "
                        f"only=[{name!r}])", seed=seed)
        result = globals()[name](p, model, tok, task, rows, seed)
        rec.complete(**result, loadavg_before=load_before, loadavg=_loadavg())
        records[name] = rec
    return records
