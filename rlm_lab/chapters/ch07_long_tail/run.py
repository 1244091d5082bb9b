"""Chapter 7's measurements: each technique switched off and on at one size, with its prediction made from
the cost model (:mod:`rlm_lab.cost.longtail`) before the measurement, each a RunRecord ``ch07_<technique>``.

Writes to ``_build/runs/<size>/`` by default; the committed reference records (``data/runs/cpu/ch07_*``) are
written only with an explicit ``--out``: ``flock -x /tmp/rlm-lab-measure.lock .venv/bin/rlm-lab
longtail --size cpu --out data/runs/cpu``.
"""

from __future__ import annotations

import random
import statistics
from pathlib import Path

from ...cost import longtail as cost
from ...errors import RlmLabError, check_output_location
from ...host import load_average
from ...longtail import engine
from ...longtail import techniques as T
from ...models import build_model
from ...record import RunRecord, runs_root
from ...sizes import check_size
from ...tasks import correctness_reward, parse_task
from ...tasks.chain import answer_length, predicted_length
from .cases import params
from .predict import Predictor

TECHNIQUES = ("overprovision", "tail_batching", "dispatch", "packing", "dynamic_sampling", "fusion")


def _setup(p, seed):
    model, tok = build_model(p["model"], seed=seed)
    model.eval()
    task = parse_task(p["task"])
    rows, _ = task.split(p["pool"], 1, seed)
    # warm-up: the first calls of a shape allocate and dispatch lazily; cover every batch size used below
    for b in sorted({1, 2, p["n"], p["n_prime"], p["batch"], p["fusion_n"]}):
        engine.generate(model, engine.encode(tok, [rows[0]["prompt"]] * b), [8] * b, seed=seed)
    return model, tok, task, rows


def _alternating(fns: dict, reps: int, times: dict | None = None) -> dict:
    """Median seconds of each variant, the variants run in turn (A B, B A, A B ...) so that a load change on
    the shared machine does not fall on one variant only. ``times``, when given, receives every repeat's
    seconds per variant (the spread the chapter reports next to the median)."""
    times = {} if times is None else times
    times.update({k: [] for k in fns})
    order = list(fns)
    for r in range(reps):
        for k in (order if r % 2 == 0 else order[::-1]):
            times[k].append(fns[k]())
    return {k: statistics.median(v) for k, v in times.items()}


def _spread(times: dict, base: str, other: str) -> dict:
    """The gain (base / other seconds) of every repeat, each repeat's pair run back to back: its min and max
    are the noise band the median gain is read against."""
    gains = [a / b for a, b in zip(times[base], times[other])]
    return {"reps": gains, "min": min(gains), "max": max(gains)}


def _width(prompts) -> int:
    return max(len(x) for x in prompts)


def overprovision(p, pr, model, tok, task, rows, seed):
    lengths = [answer_length(r) for r in rows]
    prompts = engine.encode(tok, [r["prompt"] for r in rows])
    pred = pr.overprovision(_width(prompts), lengths, p["n"], p["n_prime"])  # before the run
    full_s, full_steps, steps = [], [], []
    op = T.OverProvisioner(prompts, lengths, p["n"], p["n_prime"])

    def baseline(s):  # n fresh prompts per step, wait for all
        idx = list(range(s * p["n"], (s + 1) * p["n"]))
        full_s.append(engine.generate(model, [prompts[i] for i in idx], [lengths[i] for i in idx], seed=seed + s).seconds)
        full_steps.append(max(lengths[i] for i in idx))

    for s in range(p["op_steps"]):  # baseline and over-provisioned steps in turn, the order alternating
        if s % 2 == 0:
            baseline(s)
            steps.append(op.step(model, seed + s))
        else:
            steps.append(op.step(model, seed + s))
            baseline(s)
    kept = [x for st in steps for x in st["kept_lengths"]]
    m = {"full_s": full_s, "early_s": [st["seconds"] for st in steps], "full_steps": full_steps,
         "early_steps": [st["steps"] for st in steps], "first_kept_mean": statistics.mean(steps[0]["kept_lengths"]),
         "kept_mean": statistics.mean(kept), "pool_mean": statistics.mean(lengths),
         "resumed": [st["resumed"] for st in steps], "recycled": [st["recycled"] for st in steps]}
    m["speedup_spread"] = _spread({"full": full_s, "early": m["early_s"]}, "full", "early")  # step by step
    # one estimator in every row (issue 20): the median of the paired ratios (each pair: a baseline step and an
    # over-provisioned step run back to back), not a ratio of means
    m["speedup"] = statistics.median(m["speedup_spread"]["reps"])
    # throughput of responses trained on: the baseline keeps all it generates; over-provisioning keeps the n
    # done per step (tokens of resumed rows made in an earlier step count when kept; the carried-over ones do not)
    m["tokens_per_s_full"] = sum(sum(lengths[i] for i in range(s * p["n"], (s + 1) * p["n"]))
                                 for s in range(p["op_steps"])) / sum(full_s)
    m["tokens_per_s_early"] = sum(kept) / sum(m["early_s"])
    m["speedup_steps"] = statistics.mean(full_steps) / statistics.mean(m["early_steps"])
    m["short_bias_first"] = m["first_kept_mean"] / m["pool_mean"] - 1
    m["short_bias_all"] = m["kept_mean"] / m["pool_mean"] - 1
    return {"predicted": pred, "measured": m}


def tail_batching(p, pr, model, tok, task, rows, seed):
    sub = rows[:p["rounds_n"]]
    lengths = [answer_length(r) for r in sub]
    predicted = [predicted_length(r["prompt"]) for r in sub]  # read off the prompt: the length predictor
    plan = T.tail_rounds(lengths, p["batch"], predicted, p["tail_fraction"])
    prompts = engine.encode(tok, [r["prompt"] for r in sub])
    pl, w = plan["plan"], _width(prompts)
    pred = {k: pl[k] for k in ("steps_mixed", "steps_tail_batched", "bubble_mixed", "bubble_tail_batched")}
    pred.update(speedup_steps=pl["speedup"], mixed_s=pr.rounds(w, pl["mixed"]),
                tail_batched_s=pr.rounds(w, pl["tail_batched"]))
    pred["speedup"] = pred["mixed_s"] / pred["tail_batched_s"]

    def run(name):
        return lambda: sum(engine.generate(model, [prompts[i] for i in r], [lengths[i] for i in r],
                                           seed=seed).seconds for r in plan[name])

    times: dict = {}
    out = _alternating({k: run(k) for k in ("mixed", "tail_batched")}, p["reps"], times)
    return {"predicted": pred, "measured": {"mixed_s": out["mixed"], "tail_batched_s": out["tail_batched"],
                                            "speedup": out["mixed"] / out["tail_batched"], "times": times,
                                            "speedup_spread": _spread(times, "mixed", "tail_batched"),
                                            "tokens_per_s_mixed": sum(lengths) / out["mixed"],
                                            "tokens_per_s_tail_batched": sum(lengths) / out["tail_batched"]}}


def dispatch(p, pr, model, tok, task, rows, seed):
    """Sequential simulation of ``workers`` rollout workers (one after another on this machine, makespan =
    the slowest worker); each decodes its share one sequence at a time, the per-token cost of a saturated
    continuous-batching engine that the LPT makespan formula assumes."""
    sub = rows[:p["dispatch_n"]]
    lengths = [answer_length(r) for r in sub]
    prompts = engine.encode(tok, [r["prompt"] for r in sub])
    shares = {pol: T.dispatch_shares(lengths, p["workers"], pol) for pol in ("round_robin", "lpt")}
    tokens = {pol: cost.dispatch_makespan(lengths, p["workers"], pol) for pol in shares}
    secs = {pol: pr.dispatch(_width(prompts), [[lengths[i] for i in s] for s in sh]) for pol, sh in shares.items()}
    pred = {"makespan_tokens": tokens, "speedup_steps": tokens["round_robin"] / tokens["lpt"],
            "bounds": cost.lpt_bound(lengths, p["workers"]), "makespan_s": secs,
            "speedup": secs["round_robin"] / secs["lpt"]}
    worker_s = {pol: [] for pol in shares}

    def run(pol):
        def go():
            t = [sum(engine.generate(model, [prompts[i]], [lengths[i]], seed=seed).seconds for i in share)
                 for share in shares[pol]]
            worker_s[pol].append(t)
            return max(t)
        return go

    times: dict = {}
    out = _alternating({pol: run(pol) for pol in shares}, p["reps"], times)
    return {"predicted": pred,
            "measured": {"makespan_s": out, "worker_s": worker_s, "speedup": out["round_robin"] / out["lpt"],
                         "times": times, "speedup_spread": _spread(times, "round_robin", "lpt")},
            "simulated": "sequential: workers run one after another on this machine"}


def packing(p, pr, model, tok, task, rows, seed):
    sub = rows[:p["pack_n"]]
    seqs = [ids + engine.encode(tok, [r["answer"]])[0] + [engine.EOS]
            for ids, r in zip(engine.encode(tok, [r["prompt"] for r in sub]), sub)]
    lens = [len(s) for s in seqs]
    mb = p["micro"]
    chunks = [seqs[i:i + mb] for i in range(0, len(seqs), mb)]
    budget = max(max(lens), mb * round(statistics.mean(lens)))
    bins = cost.token_budget_microbatches(lens, budget)
    frac = cost.padded_fraction(lens, mb)
    pred = {"padded_useful_fraction": frac, "speedup_slots": 1 / frac, "budget": budget, "bins": len(bins),
            "budget_useful_fraction": sum(lens) / (len(bins) * budget),
            **pr.packing([[len(s) for s in c] for c in chunks], [[lens[i] for i in b] for b in bins])}
    pred["speedup"] = pred["padded_s"] / pred["packed_s"]
    pred["token_budget_speedup"] = pred["padded_s"] / pred["token_budget_s"]
    batches = {"padded": (chunks, "padded"), "packed": (chunks, "packed"),
               "token_budget": ([[seqs[i] for i in b] for b in bins], "packed")}
    model.train()
    try:
        for how in ("padded", "packed"):  # warm-up: the first backward allocates its buffers
            T.train_forward_backward(model, chunks[0], how)
        every: dict = {}
        times = _alternating({k: (lambda bs=bs, how=how: sum(T.train_forward_backward(model, b, how) for b in bs))
                              for k, (bs, how) in batches.items()}, p["reps"], every)
    finally:
        model.eval()
        model.zero_grad(set_to_none=True)
    return {"predicted": pred,
            "measured": {**{f"{k}_s": v for k, v in times.items()}, "speedup": times["padded"] / times["packed"],
                         "token_budget_speedup": times["padded"] / times["token_budget"], "times": every,
                         "speedup_spread": _spread(every, "padded", "packed"),
                         "token_budget_speedup_spread": _spread(every, "padded", "token_budget")}}


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


def dynamic_sampling(p, pr, model, tok, task, rows, seed):
    p_of, sample_group = _simulated_policy(task, seed)
    ps = [p_of(r) for r in rows]
    pred = {"inflation": cost.dynamic_sampling_inflation_dist(ps, p["group_size"]), "mean_p": statistics.mean(ps)}
    sampler = T.DynamicSampler(rows, sample_group, correctness_reward(task), p["group_size"], seed)
    kept = sampler.fill(p["groups"])
    return {"predicted": pred,
            "measured": {"generated": sampler.generated, "kept": len(kept), "inflation": sampler.generated / len(kept)},
            "simulated": "policy: solves a k-step chain with probability 0.85^k (no trained model yet)"}


def fusion(p, pr, model, tok, task, rows, seed):
    import torch

    ref, _ = build_model(p["model"], seed=seed + 1)  # the reference model: a second copy, scored per sample
    ref.eval()
    reward = correctness_reward(task)
    sub = rows[:p["fusion_n"]]
    lengths = [answer_length(r) for r in sub]
    prompts = engine.encode(tok, [r["prompt"] for r in sub])
    pred = pr.fusion(_width(prompts), lengths)

    def score(ids):
        with torch.no_grad():
            ref(ids.unsqueeze(0)).logits.log_softmax(-1)
        reward([tok.decode(ids.tolist(), skip_special_tokens=True)], answer=[sub[0]["answer"]])

    score(torch.tensor(prompts[0] + [engine.EOS]))  # warm-up: the reference model's first forward allocates
    runs = {"after": [], "fused": []}

    def run(fused):
        def go():
            r = T.fused_scoring(model, prompts, lengths, score, fused=fused, seed=seed)
            runs["fused" if fused else "after"].append(r)
            return r["wall_s"]
        return go

    times: dict = {}
    out = _alternating({"after": run(False), "fused": run(True)}, max(2, p["reps"]), times)
    after = runs["after"][0]
    return {"predicted": pred,
            "measured": {"after_s": out["after"], "fused_s": out["fused"], "gen_s": after["gen_s"],
                         "score_s": statistics.median(after["score_s"]), "speedup": out["after"] / out["fused"],
                         "times": times, "speedup_spread": _spread(times, "after", "fused")}}


def measure(size: str, only=None, out: str | Path | None = None, seed: int = 0, force: bool = False
            ) -> dict[str, RunRecord]:
    """Measure the techniques (all, or ``only``) at ``size``; one record each under ``out`` (default: the
    build tree's ``runs_root(size)``). Every target folder is checked before any work: one that already
    holds a run outside the build tree is refused unless ``force`` (which sets the old run aside)."""
    size = check_size(size)
    if size == "gpu":  # the engine, the packing forward and the scorer run on CPU tensors only, so far
        raise RlmLabError("chapter 7 measures on CPU only so far; use --size smoke or --size cpu")
    names = list(only or TECHNIQUES)
    bad = [n for n in names if n not in TECHNIQUES]
    if bad:
        raise RlmLabError(f"unknown technique {bad[0]!r}; choose from: {', '.join(TECHNIQUES)}")
    root = Path(out) if out is not None else runs_root(size)
    check_output_location(root, "output folder")
    if out is not None and not force:
        taken = [n for n in names if (root / f"ch07_{n}" / "record.json").exists()]
        if taken:
            raise RlmLabError(f"{root / ('ch07_' + taken[0])} already holds a run; measure the others with --only, "
                              "or pass --force to set the old runs aside")
    p = params(size)
    pr = Predictor(size, p["model"])
    load_before = load_average()
    model, tok, task, rows = _setup(p, seed)
    records = {}
    for name in names:
        rec = RunRecord(root / f"ch07_{name}", {"size": size, **p}, command=f"rlm_lab.chapters.ch07_long_tail.measure({size!r}, "
                        f"only=[{name!r}])", seed=seed, force=force)
        try:
            result = globals()[name](p, pr, model, tok, task, rows, seed)
        except BaseException as e:  # SIGINT / SIGTERM (KeyboardInterrupt, Terminated): interrupted
            rec.interrupt() if isinstance(e, KeyboardInterrupt) else rec.fail(e)
            raise
        rec.complete(**result, hardware_profile=pr.profile_name, loadavg_before=load_before, loadavg=load_average())
        records[name] = rec
    return records
