"""Chapter 7's learning effects (issue 11, item 2): the techniques that change *which* samples are trained on,
compared by held-out accuracy at a fixed budget (the same number of GRPO steps, the same prompts drawn by
TRL's sampler, the same reward), on the ``chain`` task.

Three arms, each one GRPO run through :func:`rlm_lab.train.run` (SFT warm start from the shared cache, TRL's
``GRPOTrainer``), differing only in the ``rollout_func`` passed to the trainer:

* ``baseline``: :class:`rlm_lab.longtail.trl_hooks.FusedRollout` (generate, score each sample as it ends);
* ``overprovision``: :class:`OverProvisionRollout`: APRIL's selection (arXiv 2509.18521) at the group level
  GRPO needs: ``ratio`` times the batch's groups are generated and the groups that finish first (the smallest
  longest member) are kept; the others' prompts are recycled into the next step. Emulated for the *learning*
  effect only: every group is generated to its end (no time is saved here, the speed is chapter 7 section 1)
  and a recycled prompt is generated afresh, not resumed from its partial response;
* ``dynamic_sampling``: :class:`rlm_lab.longtail.trl_hooks.DynamicSamplingRollout` (DAPO, arXiv 2503.14476).

Each record gets ``learning.json`` next to it: the generated length distribution per training stage
(:class:`rlm_lab.longtail.callbacks.LengthLog`, TRL's own completion-length logs), the lengths generated and
kept, the groups generated per group trained on, and the held-out accuracy by number of operations (where a
bias toward short answers would show).

    flock -x /tmp/rlm-lab-measure.lock .venv/bin/rlm-lab chapter 7 learning --size cpu --out data/runs/cpu
"""

from __future__ import annotations

import argparse
import random
import statistics
from pathlib import Path

from ...errors import RlmLabError
from ...host import load_average
from ...longtail.trl_hooks import FIELD, DynamicSamplingRollout, FusedRollout, fused_reward
from ...record import atomic_write_json, runs_root
from ...sizes import check_size, long_tail_learning
from ...tasks import correctness_reward, ensure_data, ensure_files, parse_task
from ...train.config import make_config
from ...train.evaluate import generate, test_rows
from ...train.run import cache_root
from ...train.run import run as train_run
from ...train.sft import sft_cache_key
from .cases import params

ARMS = ("baseline", "overprovision", "dynamic_sampling")


class OverProvisionRollout(FusedRollout):
    """Over-provisioning's selection inside GRPOTrainer: generate ``ratio`` x the batch's groups (the extra
    prompts: recycled ones first, then drawn from ``pool``), keep the groups whose longest completion is
    shortest, recycle the prompts of the rest. ``kept`` / ``generated``: the lengths of each step."""

    def __init__(self, reward_func, pool, ratio: float = 1.5, seed: int = 0, force_length=None):
        super().__init__(reward_func, seed, force_length)
        if not pool:
            raise RlmLabError("over-provisioning needs a pool of prompts to draw the extra groups from (empty)")
        if not ratio >= 1:
            raise RlmLabError(f"over-provisioning needs n' >= n (ratio >= 1), got ratio={ratio}")

        self.pool, self.ratio, self.rng = list(pool), float(ratio), random.Random(seed)
        self.recycled: list[str] = []
        self.kept: list[list[int]] = []
        self.generated: list[list[int]] = []

    def __call__(self, prompts, trainer) -> dict:
        g = trainer.num_generations
        prompts = list(prompts)
        n = len(prompts) // g
        extra = max(0, round(n * self.ratio) - n)
        more = [self.recycled.pop(0) if self.recycled else self.rng.choice(self.pool) for _ in range(extra)]
        allp = prompts + [p for p in more for _ in range(g)]
        out = self._generate_scored(allp, trainer)
        comps = out["completion_ids"]
        groups = range(len(allp) // g)
        finish = {k: max(len(c) for c in comps[k * g:(k + 1) * g]) for k in groups}
        keep = sorted(groups, key=lambda k: (finish[k], k))[:n]
        self.recycled.extend(allp[k * g] for k in groups if k not in keep)
        rows = [k * g + m for k in keep for m in range(g)]
        self.generated.append([len(c) for c in comps])
        self.kept.append([len(comps[i]) for i in rows])
        self.last["prompts"] = [allp[i] for i in rows]
        return {"prompt_ids": [out["prompt_ids"][i] for i in rows], "completion_ids": [comps[i] for i in rows],
                "logprobs": [[0.0] * len(comps[i]) for i in rows], FIELD: [out[FIELD][i] for i in rows]}


def _ops(row) -> int:
    return row["answer"].count(",") + 1


def accuracy_by_ops(model, tokenizer, task, rows, max_new_tokens: int) -> dict:
    """Greedy held-out accuracy per number of operations (1, 2, 3, 4+), with the count of each."""
    outs = generate(model, tokenizer, [r["prompt"] for r in rows], max_new_tokens, 500)
    buckets: dict = {}
    for c, r in zip(outs, rows):
        b = str(min(_ops(r), 4)) if _ops(r) < 4 else "4+"
        buckets.setdefault(b, []).append(task.is_correct(c, r))
    return {b: {"n": len(v), "accuracy": sum(v) / len(v)} for b, v in sorted(buckets.items())}


def _config(size: str, arm: str, root: Path, seed: int, steps: int | None):
    s = long_tail_learning(size)
    model = s["model"]
    name = f"ch07_learn_{arm}" + (f"_seed{seed}" if seed else "")
    cfg = make_config("grpo", size=size, task=params(size)["task"], model=model,
                      rl_steps=steps or s["rl_steps"], max_completion_length=s["max_completion_length"],
                      eval_max_new_tokens=s["max_completion_length"], eval_problems=s["eval_problems"],
                      eval_every=0, trace=False, seed=0, name=name, out=str(root / name))
    if seed:  # other seeds: the same SFT warm start as seed 0 (its cached checkpoint), the RL phase reseeded

        sft = cache_root() / "sft" / sft_cache_key(cfg, ensure_files(parse_task(cfg.task))["train"])
        if not (sft / "config.json").is_file():
            raise RlmLabError(f"seed {seed} starts from seed 0's SFT model, not cached yet: run seed 0 first")
        cfg = cfg.replace(seed=seed, sft_checkpoint=str(sft))
    return cfg


def learn(size: str, out=None, arms=ARMS, seed: int = 0, steps: int | None = None, force: bool = False) -> dict:
    """One GRPO run per arm at ``size``; returns ``{arm: record}``. Records go under ``out`` (default
    ``_build/runs/<size>``)."""
    from ...longtail.callbacks import LengthLog  # noqa: PLC0415  heavy: rlm_lab.longtail.callbacks imports transformers at its top

    size = check_size(size)
    if size == "gpu":  # the rollouts generate with CPU tensors only (rlm_lab.longtail.engine), so far
        raise RlmLabError("chapter 7's learning runs are CPU only so far; use --size smoke or --size cpu")
    bad = [a for a in arms if a not in ARMS]
    if bad:
        raise RlmLabError(f"unknown arm {bad[0]!r}; choose from: {', '.join(ARMS)}")
    root = Path(out) if out is not None else runs_root(size)
    cfgs = {a: _config(size, a, root, seed, steps) for a in arms}  # every config checked before any work
    task = parse_task(cfgs[arms[0]].task)
    pool = [r["prompt"] for r in ensure_data(task)["train"]]
    reward = correctness_reward(task)
    records = {}
    for arm in arms:
        cfg = cfgs[arm]
        roll = {"baseline": lambda: FusedRollout(reward, seed=seed),
                "overprovision": lambda: OverProvisionRollout(reward, pool, long_tail_learning(size)["ratio"], seed=seed),
                "dynamic_sampling": lambda: DynamicSamplingRollout(reward, pool, seed=seed)}[arm]()
        log = LengthLog()
        load_before = load_average()
        rec = train_run(cfg, callbacks=[log], reward_funcs=[fused_reward], rollout_func=roll, force=force,
                            command=f"rlm_lab.chapters.ch07_long_tail.learning.learn({size!r}, arms=[{arm!r}], seed={seed})")
        model = rec.trainer.accelerator.unwrap_model(rec.trainer.model)
        extra = {"arm": arm, "length_log": log.rows, "loadavg_before": load_before, "loadavg": load_average(),
                 "accuracy_by_ops": accuracy_by_ops(model, rec.trainer.processing_class, task,
                                                    test_rows(task, cfg.eval_problems), cfg.max_completion_length),
                 "generated_mean_length_per_call": [statistics.mean(x) for x in roll.lengths]}
        if arm == "overprovision":
            extra.update(kept_mean_length=[statistics.mean(x) for x in roll.kept],
                         generated_mean_length=[statistics.mean(x) for x in roll.generated],
                         ratio=roll.ratio)
        if arm == "dynamic_sampling":
            extra.update(groups_generated=roll.groups_generated, groups_returned=roll.groups_returned,
                         all_equal_left=roll.all_equal_left,
                         inflation=roll.groups_generated / max(1, roll.groups_returned))
        atomic_write_json(rec.dir / "learning.json", extra)
        records[arm] = rec
    return records


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="rlm-lab chapter 7 learning")
    ap.add_argument("--size", default="smoke")
    ap.add_argument("--out", default=None)
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--force", action="store_true")
    a = ap.parse_args(argv)
    try:
        for arm, rec in learn(a.size, a.out, tuple(a.arms), a.seed, a.steps, a.force).items():
            print("recorded", arm, rec.dir, flush=True)
    except RlmLabError as e:
        print(f"rlm-lab: error: {e}")
        return 2
    return 0
