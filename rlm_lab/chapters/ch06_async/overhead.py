"""The runtime's own cost: chapter 6's synchronous Ray placement against plain ``trl.GRPOTrainer`` on the same cores.

One arm per process (``rlm-lab chapter 6 overhead --arm ARM --size cpu --out DIR``; the measurement
protocol, :mod:`rlm_lab.protocol`, runs each repeat afresh and pairs two arms). Every arm trains the same GRPO
config (chapter 6's campaign config, :func:`rlm_lab.chapters.ch06_async.cases.campaign_config`, ``steps`` steps) from the
same SFT start, with the same trainer code (:class:`rlm_lab.placement.workers.TrainerWorker`: TRL's
``GRPOTrainer`` built by ``rlm_lab.train.rl.make_trainer``, the same metrics callback and stage tracer), on this
machine's cores; they differ only in what :data:`ARMS` says:

``plain``      TRL's own generate, in this process, torch on every core: no Ray, no ``rollout_func``.
``colocated``  the Ray runtime's colocated placement: the trainer in a Ray actor on every core, generating through
               the ``rollout_func`` glue on its own module (:class:`rlm_lab.placement.trl_rollout.RolloutFunc`).
``sync``       chapter 6's synchronous mode as the campaign ran it: rollout worker and trainer each in a Ray actor
               on one core of their own (disaggregated), weights broadcast before every generation, and, without
               correction, the glue re-scoring every batch for the record (``importance``).
``sync_lean``  ``sync`` without that re-scoring (the record's importance weights are instrumentation, not work of
               the mode).
``sync_all``   ``sync_lean`` with every core for each role: at η = 0 the roles take turns (the trainer waits for
               generation, the worker for the weights), so each may use every core without contending.

**The same work in every arm** (``--lengths``, default ``fixed``): each completion is generated to exactly
``max_completion_length`` tokens (``min_new_tokens`` in TRL's ``generation_kwargs``, which TRL's generate and the
rollout workers' engine both read from the trainer's ``GenerationConfig``), so every arm generates and trains on the
same shapes from the same prompts in the same order. With ``sampled`` lengths (every record made before
the option existed) each arm samples its own completions: on 2026-12-04 the Ray arm's completions ran longer (per
step a longest completion of 46 tokens against plain TRL's 38, a mean of 22 against 19), so its steps did more work
than plain TRL's, which tokens per second corrects only in part (generation and padding grow with the longest
completion, TRL's token count with the mean).

The metric is tokens per second after the first step (:func:`rlm_lab.train.tracer.window_throughput`: TRL's
``num_tokens`` over the wall time from the end of step 1 to the end of the last, so logging and callbacks count and
one-time start-up does not); the median step time is reported too. The child reports both to the protocol
(:func:`rlm_lab.protocol.report`) and keeps its own run record under ``--out``.

The goal's run (issue 20, item 5; fixed on 2026-12-04 before it ran): ``sync_all`` against ``plain`` with
``--pairs 12`` at cpu size, its own interval standing alone (not pooled with the two windows of 4 pairs whose
intervals straddled the goal); the page reads the newest record whatever it says::

    rlm-lab chapter 6 overhead --arm sync_all --against plain --pairs 12 --size cpu \
        --out data/runs/cpu/ch06_overhead --lengths sampled

It ran with sampled lengths (the option's default then) and its arms did not do the same work (above): 0.85 with an
interval across the goal, in its record. The same work's run, fixed before it ran: the same command with
``--lengths fixed`` (12 pairs, its own interval; the goal is read from it). It gave 0.91 [0.87, 0.96]: across the
goal again. Fixed before the next run: ``--arm colocated`` against plain, ``--lengths fixed``, 12 pairs (the placement
without a second process: what the actor and the rollout_func glue cost by themselves).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path
from statistics import median

from ...asynchrony.modes import run_mode
from ...cost.placement_spec import get_placement
from ...errors import RlmLabError, unknown
from ...evidence import at_least_word, ratio_interval, ratio_word
from ...host import load_average
from ...placement.runtime import _sft_checkpoint, algo_roles, run_placement
from ...placement.workers import TrainerWorker
from ...protocol import Arm, child_main, compare
from ...record import RunRecord, atomic_write_json, repo_root, runs_root
from ...sizes import check_size, get
from ...tables import format_table
from ..ch05_placement.cases import cluster
from ..registry import step_argv
from .cases import _now, campaign_config
from .run import latest_in

ARMS = ("plain", "colocated", "sync", "sync_lean", "sync_all")
LENGTHS = ("fixed", "sampled")  # the completions' lengths (module docstring); fixed: the same work in every arm


def arm_config(size: str, steps: int, lengths: str = "fixed"):
    """Every arm's GRPO config: chapter 6's campaign config at seed 0, ``steps`` steps, and with ``fixed`` lengths
    every completion generated to ``max_completion_length`` tokens (TRL's ``generation_kwargs``)."""
    if lengths not in LENGTHS:
        raise unknown("lengths", lengths, LENGTHS)
    cfg = campaign_config(size, 0, steps)
    if lengths == "fixed":
        gk = dict(cfg.extra.get("generation_kwargs") or {}, min_new_tokens=cfg.max_completion_length)
        cfg = cfg.replace(extra={**cfg.extra, "generation_kwargs": gk})
    return cfg


def _plain(cfg, folder: Path, command) -> dict:
    """TRL's GRPOTrainer in this process (TrainerWorker's code without Ray and without a rollout_func), a record."""
    record = RunRecord(folder, {"run": cfg.to_dict(), "arm": "plain"}, command, cfg.seed)
    with record:
        record.update(load_average_start=load_average(2))
        worker = TrainerWorker(os.cpu_count() or 1)
        out = worker.train({"cfg": cfg.to_dict(), "model_path": str(_sft_checkpoint(cfg)),
                            "metrics_path": str(record.metrics_path), "rollouts": [], "sync": "none", "chunks": 1,
                            "timeout_s": 120.0, "bucket_bytes": 1, "rollout_func": False})
        summary = out["tracer_summary"]
        record.update(throughput=out["throughput"], step_seconds_median=summary.get("step_wall_s", {}).get("median"),
                      tracer=summary, trainer_threads=out["threads"], steps=out["steps"],
                      train_seconds=round(out["train_seconds"], 3), load_average_end=load_average(2))
    return record.results


def run_arm(arm: str, size: str, out, steps: int | None = None, command=None, lengths: str = "fixed") -> dict:
    """Run one arm (module docstring); returns ``{"tokens_per_s", "step_s", "record", "lengths"}``."""
    if arm not in ARMS:
        raise unknown("arm", arm, ARMS)
    size = check_size(size)
    if not get(size).async_overhead_steps:
        raise RlmLabError(f"the overhead arms run at smoke or cpu size, not {size!r}")
    steps = steps or get(size).async_overhead_steps
    if steps < 3:
        raise RlmLabError(f"{steps} steps: the throughput window needs at least 3 (the first is left out)")
    cfg = arm_config(size, steps, lengths)  # checks lengths, before any work
    folder = Path(out or runs_root(size)) / f"overhead_{arm}" / _now()
    if arm == "plain":
        res = _plain(cfg, folder, command)
    elif arm == "colocated":
        res = run_placement(get_placement("colocated", cluster(), algo_roles(cfg)), cfg, folder, command=command,
                            extra_results={"arm": arm})
    else:
        threads = {"actor": 2, "rollout": 2} if arm == "sync_all" else None
        res = run_mode("sync", cfg, folder, importance=arm == "sync", command=command, role_threads=threads)
    tp = res.get("throughput") or {}
    if not tp.get("tokens_per_s"):
        raise RlmLabError(f"arm {arm}: the run logged no tokens after its first step ({folder})")
    return {"tokens_per_s": tp["tokens_per_s"], "step_s": res.get("step_seconds_median"), "record": str(folder),
            "lengths": lengths}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="rlm-lab chapter 6 overhead",
                                 description="one arm of the runtime-overhead comparison (one process, one run)")
    ap.add_argument("--arm", required=True, help=f"one of {', '.join(ARMS)}")
    ap.add_argument("--against", default=None, help="run the protocol: --arm against this arm (paired repeats, each "
                                                    "in a fresh process), instead of one run")
    ap.add_argument("--size", default="smoke")
    ap.add_argument("--out", default=None, help="root of the records (default _build/runs/<size>)")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--lengths", default="fixed", choices=LENGTHS,
                    help="fixed (default): every completion max_completion_length tokens, the same work in every arm; "
                         "sampled: each arm's own sampled lengths (every record made before this option existed)")
    ap.add_argument("--pairs", type=int, default=None, help="paired repeats of --against (default: the size's "
                                                            "protocol_repeats); fix it before the run")
    a = ap.parse_args(argv)
    if a.pairs is not None and not a.against:
        ap.error("--pairs goes with --against (one run has no pairs)")

    def work():
        if a.against:
            res = compare_arms(a.arm, a.size, a.out or runs_root(a.size), a.against, a.steps, pairs=a.pairs,
                               lengths=a.lengths)
            for arm, st in res["stages"].items():
                print(arm, " ".join(f"{k} {v:.4f}" for k, v in st.items()))
            return 0
        return run_arm(a.arm, a.size, a.out, a.steps, command=sys.argv, lengths=a.lengths)

    return child_main(work, lambda out: print(f"{a.arm}: {out['tokens_per_s']:.0f} tokens/s, step "
                                              f"{out['step_s']:.3f} s -> {out['record']}"))



def command(arm: str, size: str, out, steps: int | None = None, lengths: str = "fixed") -> tuple:
    """The argv of one repeat of ``arm`` (this interpreter, this module)."""
    argv = [*step_argv(6, "overhead"), "--arm", arm, "--size", size, "--out", str(out), "--lengths", lengths]
    return tuple(argv + (["--steps", str(steps)] if steps else []))


def compare_arms(arm: str, size: str, out, base: str = "plain", steps: int | None = None, say=print,
                 pairs: int | None = None, lengths: str = "fixed") -> dict:
    """``arm`` against ``base`` under the protocol (paired, ABBA, fresh processes, load gate), tokens per second;
    the protocol's record under ``<out>/overhead_<arm>_vs_<base>/<UTC>``, the runs' records under ``<out>/runs``.
    ``pairs``: the repeat count (default the size's ``protocol_repeats``), checked by the protocol before any run.
    ``lengths``: :data:`LENGTHS`; the protocol's record goes to :func:`comparison_folder`."""
    for a in (arm, base):
        if a not in ARMS:
            raise unknown("arm", a, ARMS)
    if lengths not in LENGTHS:
        raise unknown("lengths", lengths, LENGTHS)
    runs = Path(out) / "runs"
    folder = comparison_folder(out, arm, base, lengths) / _now()
    res = compare(Arm(arm, command(arm, size, runs, steps, lengths)), Arm(base, command(base, size, runs, steps, lengths)),
                  "tokens_per_s", folder, size=size, repeats=pairs, higher_is_better=True, say=say)

    stages = stage_table(res, out)
    atomic_write_json(folder / "stages.json", stages)  # beside the protocol's record: where the seconds differ
    return res | {"stages": stages}


def repeat_records(results: dict, root, base=None):
    """``(arm name, RunRecord)`` of every repeat of a protocol record's ``results``, read from the path each child
    reported (relative paths from ``base``, default the working directory, where the children ran); a path that
    leaves ``root`` is refused with one line."""
    root, base = Path(root).resolve(), Path(base) if base is not None else Path.cwd()
    for row in results.get("repeats", []):
        path = Path(row["report"]["record"])
        path = (path if path.is_absolute() else base / path).resolve()
        if not path.is_relative_to(root):
            raise RlmLabError(f"a repeat's record path leaves {root}: {row['report']['record']}")
        yield row["name"], RunRecord.load(path)


def stage_table(results: dict, root) -> dict:
    """Per arm, the median over its repeats of each stage's mean seconds per step (the tracer's, after the first
    step) and of the step: where the two arms' seconds differ. Read from each repeat's own run record under
    ``root``."""
    per: dict = {}
    for name, rec in repeat_records(results, root):
        tr = rec.results.get("tracer") or {}
        st = {k: v["mean_s"] for k, v in (tr.get("stages") or {}).items()}
        st["step"] = (tr.get("step_wall_s") or {}).get("median")
        per.setdefault(name, []).append(st)
    return {arm: {k: statistics.median(r[k] for r in rows if r.get(k) is not None)
                  for k in sorted({k for r in rows for k in r}) if any(r.get(k) is not None for r in rows)}
            for arm, rows in per.items()}


GOAL = 0.90  # issue 20, fixed before the runs: the Ray placement's tokens/s within 10 % of plain TRL's
WHAT = {"sync": "campaign's sync: a core per role, re-scoring", "sync_lean": "sync, no re-scoring",
        "sync_all": "sync, every core per role", "colocated": "one actor, rollout_func glue"}


def comparison_folder(root, arm: str, base: str = "plain", lengths: str = "fixed") -> Path:
    """Where the protocol records of ``arm`` against ``base`` go: ``overhead_<arm>_vs_<base>`` for sampled lengths
    (the folder's name since the first records), ``..._fixed_lengths`` for the same work in every arm."""
    return Path(root) / (f"overhead_{arm}_vs_{base}" + ("_fixed_lengths" if lengths == "fixed" else ""))


def _root(root) -> Path:
    """``root``, or the committed records of the comparisons, ``data/runs/cpu/ch06_overhead``."""
    return Path(root) if root is not None else repo_root() / "data" / "runs" / "cpu" / "ch06_overhead"


def comparisons(root=None) -> list[dict]:
    """The newest completed protocol record of each arm against plain, per completion lengths, under ``root``
    (default: the committed ``data/runs/cpu/ch06_overhead``), in :data:`ARMS` then :data:`LENGTHS` order: arm,
    lengths, per-arm tokens/s, the window."""
    root = _root(root)
    out = []
    for arm in ARMS[1:]:
        for lengths in LENGTHS:
            rec = latest_in(comparison_folder(root, arm, "plain", lengths))
            summ = (rec.results.get("summary") or {}) if rec is not None and rec.status == "completed" else {}
            vals = summ.get("values") or {}
            if arm in vals and "plain" in vals:
                out.append({"arm": arm, "lengths": lengths, "arm_tps": vals[arm], "plain_tps": vals["plain"],
                            "window": rec.results.get("window")})
    return out


def completion_lengths(root=None, arm: str = "sync_all", lengths: str = "sampled") -> dict:
    """Per arm of the newest ``arm``-against-plain comparison with ``lengths``: the median over its repeats of each
    run's mean per-step longest and mean completion (TRL's ``completions/max_length`` and ``.../mean_length``, steps
    after the first), read from each repeat's run record. Whether the arms did the same work: with sampled lengths
    they need not. A record path that leaves ``root`` is refused (one line)."""
    root = _root(root)
    rec = latest_in(comparison_folder(root, arm, "plain", lengths))
    if rec is None or rec.status != "completed":
        return {}
    per: dict = {}
    for name, run in repeat_records(rec.results, root, base=repo_root()):  # committed paths: from the repository root
        steps = [r for r in run.metrics() if "completions/max_length" in r and r.get("step", 0) > 1]
        if steps:
            per.setdefault(name, []).append((statistics.mean(r["completions/max_length"] for r in steps),
                                             statistics.mean(r["completions/mean_length"] for r in steps)))
    return {name: {"max": statistics.median(m for m, _ in v), "mean": statistics.median(a for _, a in v)}
            for name, v in per.items()}


def section(root=None) -> tuple[str, dict]:
    """The runtime's own cost against plain ``trl.GRPOTrainer`` on the same cores: per arm and completion lengths
    the median of the paired tokens/s ratios (arm / plain) with its bootstrap 95 % interval, the word it decides
    (faster / slower / undecided) and the goal (ratio >= :data:`GOAL`: met / not met / undecided, from the whole
    interval). Glue keys ``ch06_ovh_<arm>[_word|_goal|_pairs]`` for sampled lengths, ``ch06_ovh_<arm>_fixed...``
    for fixed ones (the same work in every arm)."""
    rows, values = [], {"ch06_ovh_goal": f"{GOAL:.2f}"}
    for c in comparisons(root):
        iv = ratio_interval(c["arm_tps"], c["plain_tps"])
        word, goal = ratio_word(iv), at_least_word(iv, GOAL)
        rows.append({"arm": c["arm"], "completions": c["lengths"], "pairs": iv.n,
                     "plain tok/s": f"{median(c['plain_tps']):,.0f}", "arm tok/s": f"{median(c['arm_tps']):,.0f}",
                     "arm / plain [95 %]": iv.text(), "word": word, f"goal >= {GOAL:.2f}": goal,
                     "what": WHAT.get(c["arm"], ""), "window": c["window"] or "-"})
        key = f"ch06_ovh_{c['arm']}" + ("_fixed" if c["lengths"] == "fixed" else "")
        values |= {key: iv.text(), f"{key}_word": word, f"{key}_goal": goal, f"{key}_pairs": str(iv.n)}
    for arm, v in completion_lengths(root).items():  # did the sampled-length arms do the same work?
        values |= {f"ch06_ovh_len_{arm}_max": f"{v['max']:.0f}", f"ch06_ovh_len_{arm}_mean": f"{v['mean']:.0f}"}
    if not rows:
        return "no overhead records (rlm-lab chapter 6 overhead --help)", values
    return format_table(rows) + ("\n(tokens/s medians over the paired repeats; each pair in fresh processes, ABBA, each row "
                                 "one window, rows of other windows are not comparable in tokens/s; completions fixed: every arm generates and trains on the same shapes)"), values
