"""Chapter 10's runs, each a RunRecord ``ch10_*`` under ``root`` (default ``_build/runs/<size>``; the committed
reference records are written only with an explicit ``--out data/runs/cpu``).

Parallel reasoning (``ch10_par_*``), in this order, the prediction first:

* ``predict``: work, depth, Brent's bounds and latency of the reference traces (:func:`predict_parallel`);
* ``sft_{seq,par}``: TRL ``SFTTrainer`` on the sequential traces, and on the parallel traces as trie rows;
* ``grpo_{seq,par}_seed{k}``: TRL ``GRPOTrainer`` from each SFT model through :func:`rlm_lab.train.run`, the
  parallelism-aware reward, the fork-join decoder as ``rollout_func`` for ``par``; the final policy is kept in
  the cache (``_build/cache/ch10/``) for the measurement;
* ``measure``: greedy accuracy, work and depth of every seed's final policies on the held-out problems, and the
  wall latency per problem of the seed-0 policies, paired and interleaved (:func:`measure_parallel`).

Multi-domain RLVR (``ch10_md_*``):

* ``predict``: the reference answer lengths per task and the bubble of a mixed and of a one-task batch;
* ``{mixed,<task>}_seed{k}``: GRPO with a LoRA adapter on the mixture, and on each task alone with a quarter of
  the steps, all from the mixture's SFT model (the seed-0 mixed run trains and caches it);
* ``matrix_seed{k}``: held-out accuracy per task of the SFT model, each specialist, the mixed model and each
  merge of the specialists (PEFT ``add_weighted_adapter``);
* ``systems``: the length distribution, bubble and generation time of mixed and one-task GRPO batches, sampled
  from the SFT policy, interleaved.
"""

from __future__ import annotations

import random
import statistics
import time
from functools import partial
from pathlib import Path

from ... import models
from ...cost import load_profile, model_spec
from ...cost.forkjoin import batch_bubble, fork_join_dag, latency, sequential_dag, sequential_latency
from ...cost.hardware import profile_for
from ...errors import RlmLabError
from ...forkjoin import ForkJoinRollout, fork_join_generate, on_trace, sequential_generate, text
from ...forkjoin.evaluate import decode, evaluate
from ...forkjoin.sft import trie_dataset
from ...forkjoin.trie import install
from ...host import load_average
from ...longtail import engine
from ...models import load
from ...multidomain import balanced_rows, check_methods, folded, lora_config, merged_model, per_task
from ...record import RunRecord, atomic_write_json, finished, runs_root
from ...records.portable import portable
from ...sizes import check_size
from ...tasks import ensure_data, ensure_files, parallelism_aware_reward, parse_task
from ...tasks.mix import COMPONENTS
from ...tasks.psum import parse_trace
from ...train.callbacks import step_clock
from ...train.config import from_dict
from ...train.run import cache_root, cpu_time, publish, run
from ...train.sft import sft_cache_key, sft_dataset, train_sft
from . import cases

EXTRA = "ch10.json"
PAR_STEPS = ("predict", "sft", "grpo", "measure")
MD_STEPS = ("predict", "train", "matrix", "systems")  # written next to a GRPO run's record: its step clock and the rollout's work and depth


def root_of(size: str, out=None) -> Path:
    return Path(out) if out is not None else runs_root(check_size(size))


def cache_dir(*bits) -> Path:
    return cache_root() / "ch10" / "_".join(map(str, bits))


def _save(model, tokenizer, folder: Path) -> Path:
    """Save a model next to its final place, then rename it there (:func:`publish`)."""
    return publish(folder, lambda tmp: models.save(model, tokenizer, tmp))


# ---- parallel reasoning -------------------------------------------------------------------------------------

def eval_rows(size: str, arm: str) -> list[dict]:
    n = cases.parallel(size)["eval_problems"]
    rows = ensure_data(parse_task(cases.task_spec(size, arm)))["test"]
    if n > len(rows):
        raise RlmLabError(f"{n} held-out problems asked, the task has {len(rows)}")
    return rows[:n]


def predict_parallel(size: str, root: Path, force: bool = False) -> RunRecord:
    """Work, depth, Brent's bounds and predicted latency of the reference traces of the held-out problems:
    the prediction, recorded before any model is trained."""
    p = cases.parallel(size)
    seq_rows, par_rows = eval_rows(size, "seq"), eval_rows(size, "par")
    profile, spec = load_profile(profile_for(size)), model_spec(p["model"])
    per = []
    for s, q in zip(seq_rows, par_rows):
        ts, tp = parse_trace(s["answer"]), parse_trace(q["answer"])
        ds = sequential_dag(ts.work)
        dp = fork_join_dag(len(tp.outline), [len(b) for b in tp.bodies], len(tp.join) + 1)
        k = len(tp.bodies)
        lo, hi = dp.brent(k)
        per.append({"branches": k, "work_seq": ds.work, "work_par": dp.work, "depth_seq": ds.depth,
                    "depth_par": dp.depth, "brent_lo": lo, "brent_hi": hi,
                    "latency_seq_s": sequential_latency(spec, profile, len(s["prompt"]), ts.work),
                    "latency_par_s": latency(spec, profile, len(q["prompt"]), len(tp.outline),
                                             [len(b) for b in tp.bodies], len(tp.join) + 1)["total_s"]})
    mean = lambda key: statistics.mean(r[key] for r in per)  # noqa: E731
    summary = {
        "problems": len(per), "mean_branches": mean("branches"),
        "work_seq": mean("work_seq"), "work_par": mean("work_par"), "depth_seq": mean("depth_seq"),
        "depth_par": mean("depth_par"),
        # decode steps on p = K rows: Brent's lower bound max(W/p, D) = D is reached (every stage's rows run in
        # lock step), the upper bound W/p + D is the schedule that forgets the stages can overlap
        "speedup_steps": mean("depth_seq") / mean("depth_par"),
        "speedup_steps_brent": [mean("depth_seq") / mean("brent_hi"), mean("depth_seq") / mean("brent_lo")],
        "work_ratio": mean("work_par") / mean("work_seq"),
        "latency_speedup": statistics.median(r["latency_seq_s"] / r["latency_par_s"] for r in per),
        "profile": profile_for(size), "model": p["model"],
    }
    rec = RunRecord(root / cases.name("par", "predict"), {"size": size, **p}, "ch10 predict_parallel", 0, force=force)
    rec.complete(predicted=summary, per_problem=per)
    return rec


def sft_arm(size: str, arm: str, root: Path, force: bool = False) -> Path:
    """The arm's SFT model (TRL ``SFTTrainer``; the parallel traces as trie rows), recorded as
    ``ch10_par_sft_<arm>`` and cached; reused when both are there."""
    cfg = cases.sft_config(size, arm)
    task = parse_task(cfg.task)
    key = sft_cache_key(cfg, ensure_files(task)["train"])
    folder, run_dir = cache_dir("sft", arm, key), root / cases.name("par", "sft", arm)
    if finished(run_dir) and (folder / "config.json").is_file() and not force:
        return folder
    rows = ensure_data(task)["train"]
    n = min(len(rows), cfg.sft_steps * cfg.sft_batch_size)
    with RunRecord(run_dir, cfg.to_dict(), f"ch10 sft_arm({size!r}, {arm!r})", 0, force=force) as rec:
        import torch

        torch.set_num_threads(1)
        model, tok = load(cfg.model, seed=cfg.seed)
        if arm == "par":
            install(model, tok)
        data = trie_dataset(rows, tok, n) if arm == "par" else sft_dataset(rows, tok, n)
        t0, c0 = time.perf_counter(), cpu_time()
        trainer = train_sft(model, tok, rows, cfg, rec.scratch("sft"), dataset=data)
        seconds, cpu = time.perf_counter() - t0, cpu_time() - c0
        for row in trainer.state.log_history:
            if "loss" in row:
                rec.log({"phase": "sft", **row})
        ev = evaluate(model, tok, task, eval_rows(size, arm), arm, cases.limits(size), cfg.eval_max_new_tokens)
        rec.update(sft_seconds=round(seconds, 3), sft_cpu_seconds=round(cpu, 3), accuracy=ev["accuracy"],
                   mean_work=ev["mean_work"], mean_depth=ev["mean_depth"], examples=ev["examples"],
                   load_average=load_average(2))
        _save(model, tok, folder)
    return folder


def grpo_arm(size: str, arm: str, seed: int, root: Path, sft_path: Path, force: bool = False) -> RunRecord:
    """One GRPO run of an arm through :func:`rlm_lab.train.run.run`; its final policy is cached."""
    cfg = cases.grpo_config(size, arm, seed, root, sft_path)
    task, lim = parse_task(cfg.task), cases.limits(size)
    reward = parallelism_aware_reward(task)
    rollout = ForkJoinRollout(lim, seed) if arm == "par" else None
    clock = step_clock()
    load_before = load_average()
    rec = run(cfg, callbacks=[clock], reward_funcs=[on_trace(reward) if arm == "par" else reward],
              rollout_func=rollout, evaluate_fn=partial(evaluate, mode=arm, limits=lim,
                                                        max_new_tokens=cfg.eval_max_new_tokens),
              force=force, command=f"ch10 grpo_arm({size!r}, {arm!r}, {seed})")
    model = rec.trainer.accelerator.unwrap_model(rec.trainer.model)
    _save(model, rec.trainer.processing_class, cache_dir(cfg.run_name))
    extra = {"steps": clock.rows, "loadavg_before": load_before, "loadavg": load_average()}
    if rollout is not None:
        extra.update(rollout_work=[statistics.mean(w) for w in rollout.work],
                     rollout_depth=[statistics.mean(d) for d in rollout.depth])
    atomic_write_json(rec.dir / EXTRA, portable(extra))
    return rec


def policy(size: str, arm: str, seed: int, root: Path) -> Path:
    """The cached final policy of a GRPO run (a clear error when the run was not made here)."""
    folder = cache_dir(cases.grpo_name(arm, seed))
    if not (folder / "config.json").is_file():
        raise RlmLabError(f"the final policy of {cases.grpo_name(arm, seed)} is not in {folder}; run its GRPO first")
    return folder


def _timed(fn, *args) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def measure_parallel(size: str, root: Path, force: bool = False) -> RunRecord:
    """Accuracy, work and depth per held-out problem of every seed's final policies (greedy), and the wall
    latency of each of ``latency_problems`` problems decoded alone by the seed-0 policies: the two arms in turn,
    the order alternating, ``latency_reps`` times (each problem's latency: the median of its repeats)."""
    p, lim = cases.parallel(size), cases.limits(size)
    rows = {a: eval_rows(size, a) for a in cases.ARMS}
    tasks = {a: parse_task(cases.task_spec(size, a)) for a in cases.ARMS}
    with RunRecord(root / cases.name("par", "measure"), {"size": size, **p}, "ch10 measure_parallel", 0,
                   force=force) as rec:
        import torch

        torch.set_num_threads(1)
        quality = {}
        for seed in p["seeds"]:
            for arm in cases.ARMS:
                model, tok = load(str(policy(size, arm, seed, root)))
                got = decode(model, tok, [r["prompt"] for r in rows[arm]], arm, lim, p["max_new_tokens"])
                quality[f"{arm}_seed{seed}"] = {
                    "correct": [bool(tasks[arm].is_correct(text(tok, d.trace), r)) for d, r in zip(got, rows[arm])],
                    "work": [d.work for d in got], "depth": [d.depth for d in got]}
        models = {a: load(str(policy(size, a, p["seeds"][0], root))) for a in cases.ARMS}
        decoders = {"seq": lambda q: sequential_generate(*models["seq"], [q], p["max_new_tokens"]),
                    "par": lambda q: fork_join_generate(*models["par"], [q], lim)}
        probe = rows["seq"][0]["prompt"]
        for a in cases.ARMS:  # warm-up: the first calls of a shape allocate
            decoders[a](probe)
        load_before = load_average()
        lat = {a: [] for a in cases.ARMS}
        for i, r in enumerate(rows["seq"][:p["latency_problems"]]):
            reps = {a: [] for a in cases.ARMS}
            for k in range(p["latency_reps"]):
                order = cases.ARMS if (i + k) % 2 == 0 else cases.ARMS[::-1]
                for a in order:
                    reps[a].append(_timed(decoders[a], r["prompt"]))
            for a in cases.ARMS:
                lat[a].append({"prompt": r["prompt"], "reps_s": reps[a], "median_s": statistics.median(reps[a])})
        rec.complete(quality=quality, latency=lat, loadavg_before=load_before, loadavg=load_average(),
                     threads=torch.get_num_threads())
    return rec


def _steps(only, steps: tuple) -> tuple:
    """The steps asked for (all when none), each one of ``steps`` (else one clear error)."""
    only = tuple(only or steps)
    bad = [s for s in only if s not in steps]
    if bad:
        raise RlmLabError(f"unknown step {bad[0]!r}; choose from: {', '.join(steps)}")
    return only


def parallel_campaign(size: str, out=None, seeds=None, force: bool = False, only=None) -> dict:
    """Every parallel-reasoning record at ``size``, in order (prediction first); ``only``: a subset of
    ``("predict", "sft", "grpo", "measure")``."""
    only = _steps(only, PAR_STEPS)
    root = root_of(size, out)
    seeds = tuple(cases.parallel(size)["seeds"] if seeds is None else seeds)
    out_ = {}
    if "predict" in only:
        out_["predict"] = predict_parallel(size, root, force)
    sft = {a: sft_arm(size, a, root, force) for a in cases.ARMS} if {"sft", "grpo"} & set(only) else {}
    if "grpo" in only:
        for seed in seeds:
            for a in cases.ARMS:
                out_[f"grpo_{a}_seed{seed}"] = grpo_arm(size, a, seed, root, sft[a], force)
    if "measure" in only:
        out_["measure"] = measure_parallel(size, root, force)
    return out_


# ---- multi-domain RLVR ----------------------------------------------------------------------------------------

def md_rows(size: str) -> list[dict]:
    """The held-out rows every multi-domain model is scored on: the first ``eval_per_task`` of each task."""
    return balanced_rows(ensure_data(parse_task("mix"))["test"], cases.multidomain(size)["eval_per_task"])


def md_train_rows(size: str) -> list[dict]:
    return ensure_data(parse_task("mix"))["train"]


def predict_multidomain(size: str, root: Path, force: bool = False) -> RunRecord:
    """The reference answer lengths (tokens, EOS included) of each task and the predicted bubble of a GRPO batch
    of ``batch_size / num_generations`` prompts drawn from the mixture or from one task (a group's samples share
    their prompt's length), before any run."""
    p = cases.multidomain(size)
    rows = md_train_rows(size)[:4000]
    lengths = {t: [len(r["answer"]) + 1 for r in rows if r["task"] == t] for t in COMPONENTS}
    n = p["batch_size"] // p["num_generations"]
    mixed = [x for v in lengths.values() for x in v]
    predicted = {"prompts_per_batch": n, "bubble_mixed": batch_bubble(mixed, n),
                 **{f"bubble_{t}": batch_bubble(v, n) for t, v in lengths.items()},
                 "mean_length": {t: statistics.mean(v) for t, v in lengths.items()},
                 "max_length": {t: max(v) for t, v in lengths.items()}}
    rec = RunRecord(root / cases.name("md", "predict"), {"size": size, **p}, "ch10 predict_multidomain", 0,
                    force=force)
    rec.complete(predicted=predicted, lengths=lengths)
    return rec


def md_run(size: str, domain: str | None, seed: int, root: Path, sft_path: Path | None,
           force: bool = False) -> RunRecord:
    """One LoRA GRPO run (TRL ``peft_config``) of the mixture or of one task; its adapter is cached."""
    cfg = cases.md_config(size, domain, seed, root, sft_path)
    clock = step_clock()
    load_before = load_average()
    rec = run(cfg, callbacks=[clock], peft_config=lora_config(), force=force,
              command=f"ch10 md_run({size!r}, {domain!r}, {seed})")
    publish(cache_dir(cfg.run_name, "adapter"), lambda tmp: rec.trainer.model.save_pretrained(str(tmp)))
    atomic_write_json(rec.dir / EXTRA, portable({"steps": clock.rows, "loadavg_before": load_before,
                                                 "loadavg": load_average(), "sft_model": str(_sft_of(rec))}))
    return rec


def _sft_of(rec_or_cfg) -> Path:
    """The SFT model a multi-domain run started from (its config, or the cache it trained)."""
    cfg = from_dict(rec_or_cfg.config) if isinstance(rec_or_cfg, RunRecord) else rec_or_cfg
    if cfg.sft_checkpoint:
        return Path(cfg.sft_checkpoint)
    return cache_root() / "sft" / sft_cache_key(cfg, ensure_files(parse_task(cfg.task))["train"])


def shared_sft(size: str, root: Path) -> Path:
    """The mixture's SFT model every multi-domain run starts from (trained by the seed-0 mixed run)."""
    folder = _sft_of(cases.md_config(size, None, 0, root))
    if not (folder / "config.json").is_file():
        raise RlmLabError(f"the mixture's SFT model is not in {folder}: run the seed-0 mixed run first")
    return folder


def md_models(size: str, seed: int, root: Path) -> dict:
    """``{paradigm: model folder or (method, adapters)}`` of one seed, from the cache."""
    adapters = {}
    for d in (None, *COMPONENTS):
        folder = cache_dir(cases.md_name(d, seed), "adapter")
        if not (folder / "adapter_config.json").is_file():
            raise RlmLabError(f"the adapter of {cases.md_name(d, seed)} is not in {folder}; run it first")
        adapters[d or "mixed"] = folder
    return adapters


def md_matrix(size: str, seed: int, root: Path, force: bool = False) -> RunRecord:
    """Held-out accuracy per task of: the SFT model, each specialist, the mixed model and each merge of the four
    specialists, all of seed ``seed`` (the task x paradigm matrix of one seed)."""
    p = cases.multidomain(size)
    methods = check_methods(p["methods"])
    adapters = md_models(size, seed, root)
    sft = shared_sft(size, root)
    task, rows = parse_task("mix"), md_rows(size)
    with RunRecord(root / cases.name("md", "matrix", f"seed{seed}"), {"size": size, "seed": seed, **p},
                   f"ch10 md_matrix({size!r}, {seed})", seed, force=force) as rec:
        import torch

        torch.set_num_threads(1)
        tok = load(str(sft))[1]
        score = partial(per_task, tokenizer=tok, task=task, rows=rows, max_new_tokens=p["max_new_tokens"])
        matrix = {"sft": score(load(str(sft))[0])}
        for name, folder in adapters.items():
            matrix[name] = score(folded(sft, folder))
        specialists = {t: adapters[t] for t in COMPONENTS}
        for m in methods:
            matrix[f"merge_{m}"] = score(merged_model(sft, specialists, m, seed=seed))
        rec.complete(matrix=matrix, problems_per_task=p["eval_per_task"], sft_model=str(sft))
    return rec


def md_systems(size: str, root: Path, force: bool = False) -> RunRecord:
    """GRPO batches sampled from the mixture's SFT policy the way each paradigm draws them (mixed: prompts from
    every task; separate: prompts of one task), ``systems_batches`` of each, ``systems_reps`` times in
    alternating order: each row's generated length (``rlm_lab.longtail.engine.generate``, chapter 7's engine:
    sampling, per-row finish steps), the batch's bubble 1 - sum R / (n R_max) and its generate seconds."""
    p = cases.multidomain(size)
    sft = shared_sft(size, root)
    rows = md_train_rows(size)
    pools = {"mixed": rows, **{t: [r for r in rows if r["task"] == t] for t in COMPONENTS}}
    n, g = p["batch_size"] // p["num_generations"], p["num_generations"]
    with RunRecord(root / cases.name("md", "systems"), {"size": size, **p}, "ch10 md_systems", 0, force=force) as rec:
        import torch

        torch.set_num_threads(1)
        model, tok = load(str(sft))
        model.eval()
        rng = random.Random(0)
        batches = {k: [[r["prompt"] for r in rng.sample(v, n) for _ in range(g)] for _ in range(p["systems_batches"])]
                   for k, v in pools.items()}
        engine.generate(model, engine.encode(tok, batches["mixed"][0]), None, seed=0, max_new_tokens=p["max_new_tokens"])
        load_before = load_average()
        got = {k: [] for k in pools}
        order = list(pools)
        for rep in range(p["systems_reps"]):
            for k in (order if rep % 2 == 0 else order[::-1]):
                for b, prompts in enumerate(batches[k]):
                    gen = engine.generate(model, engine.encode(tok, prompts), None, seed=1000 * rep + b,
                                          max_new_tokens=p["max_new_tokens"])
                    lengths = [len(x) for x in gen.new_tokens]
                    got[k].append({"rep": rep, "batch": b, "seconds": gen.seconds, "lengths": lengths,
                                   "bubble": 1 - sum(lengths) / (len(lengths) * max(lengths))})
        rec.complete(batches=got, loadavg_before=load_before, loadavg=load_average(), prompts_per_batch=n,
                     generations=g, sft_model=str(sft))
    return rec


def md_campaign(size: str, out=None, seeds=None, force: bool = False, only=None) -> dict:
    """Every multi-domain record at ``size``, in order; ``only``: a subset of
    ``("predict", "train", "matrix", "systems")``."""
    only = _steps(only, MD_STEPS)

    check_methods(cases.multidomain(size)["methods"])
    root = root_of(size, out)
    seeds = tuple(cases.multidomain(size)["seeds"] if seeds is None else seeds)
    got = {}
    if "predict" in only:
        got["predict"] = predict_multidomain(size, root, force)
    if "train" in only:
        sft = None
        for seed in seeds:
            if sft is None and seed != 0:  # every run starts from seed 0's SFT model
                sft = shared_sft(size, root)
            first = got[f"mixed_seed{seed}"] = md_run(size, None, seed, root, sft, force)
            sft = sft or _sft_of(first)
            for d in COMPONENTS:
                got[f"{d}_seed{seed}"] = md_run(size, d, seed, root, sft, force)
    if "matrix" in only:
        for seed in seeds:
            got[f"matrix_seed{seed}"] = md_matrix(size, seed, root, force)
    if "systems" in only:
        got["systems"] = md_systems(size, root, force)
    return got
