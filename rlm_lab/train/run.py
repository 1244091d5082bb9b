"""One training run, end to end, recorded: SFT warm start -> eval -> RL -> eval.

``run(cfg)`` returns the :class:`rlm_lab.record.RunRecord` it wrote:

- ``record.json``: the config, provenance (hardware, versions, git commit, command, seed, date) and
  results: greedy held-out accuracy and format rate before/after RL, wall time per phase,
  tokens/s of training and of generation, first/final train reward.
- ``metrics.jsonl``: one row per logged Trainer step (``phase`` = sft | grpo | rloo | ppo, the
  TRL metrics: loss, reward, reward_std, completion lengths, kl, ...), plus a row with
  ``eval_accuracy`` every ``eval_every`` steps, so accuracy and reward curves come from one file.

The SFT model is cached on disk under a hash of what decides it (``sft.sft_cache_key``: the SFT
fields of the config and the task file's contents), so a GRPO run and a PPO run with the same SFT
settings start from the *same* weights, and the second one does not retrain. The record says whether
its SFT phase was cached (its SFT wall time is then the time the cached run took).

Lifecycle (``rlm_lab.records``): the record is opened (folder locked; an existing run there needs
``force``) before any work; it ends ``completed``, ``interrupted`` (Ctrl-C, SIGTERM) or ``failed: why``.
The RL phase checkpoints through the Trainer's own ``save_steps`` into ``<run_dir>/checkpoints``;
``run(cfg, resume=True)`` (``rlm-lab train --resume DIR``) continues an unfinished run from its last
checkpoint with ``Trainer.train(resume_from_checkpoint=...)``: model, optimizer, scheduler, RNG states
and data position come back, so the result equals an uninterrupted run with the same seed
(tests/records/test_resume.py). A completed run deletes its checkpoints.
"""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
import tempfile
import time
from pathlib import Path

from .. import models
from ..errors import RlmLabError
from ..host import load_average
from ..models.tokenizer import char_tokenizer
from ..record import REPO_ROOT, RunRecord, append_jsonl, atomic_write_json, read_jsonl, read_record_file
from ..records.lifecycle import atomic_write_json_lines
from ..tasks import ensure_data, ensure_files, parse_task
from .callbacks import quiet_progress
from .checkpoint import check_checkpoint
from .config import from_dict
from .evaluate import evaluate, test_rows
from .rl import make_trainer
from .sft import sft_cache_key, train_sft
from .tracer import trace

CHECKPOINTS = "checkpoints"


def cache_root() -> Path:
    """Where SFT checkpoints are cached: ``$RLM_CACHE_DIR`` or ``_build/cache`` (not committed)."""
    return Path(os.environ.get("RLM_CACHE_DIR") or REPO_ROOT / "_build" / "cache")


def _record_callback(record: RunRecord, phase: str, evaluator=None, every: int = 0, step_offset: int = 0):
    """A TrainerCallback that appends every Trainer log row (and a periodic held-out eval) to the record.
    A class built here: its base is not imported at this module's top."""
    from transformers import TrainerCallback

    class RecordCallback(TrainerCallback):
        trainer = None  # set after the trainer is built, for mid-run evaluation

        def on_log(self, args, state, control, logs=None, **kwargs):
            if state.is_world_process_zero and logs:
                record.log({"phase": phase, "step": state.global_step,
                            "global_step": step_offset + state.global_step, **logs})

        def on_step_end(self, args, state, control, **kwargs):
            if evaluator and every and state.global_step % every == 0 and state.is_world_process_zero \
                    and state.global_step < state.max_steps:
                model = kwargs.get("model")
                if self.trainer is not None:
                    model = self.trainer.accelerator.unwrap_model(self.trainer.model)
                ev = evaluator(model)
                record.log({"phase": phase, "step": state.global_step, "global_step": step_offset + state.global_step,
                            "eval_accuracy": ev["accuracy"], "eval_format_rate": ev["format_rate"]})

    return RecordCallback()


def _throughput(log_history: list[dict], seconds: float) -> float | None:
    tokens = [row["num_tokens"] for row in log_history if "num_tokens" in row]
    return round(tokens[-1] / seconds, 1) if tokens and seconds > 0 else None


def _train_sft(cfg, task, train_rows, record, evaluator, callbacks, key: str, log_cached: bool = True):
    """Train the SFT model (or reuse the cached one); returns (model_path, info dict)."""
    if cfg.sft_checkpoint:
        return Path(cfg.sft_checkpoint), {"sft_cached": True, "sft_checkpoint": cfg.sft_checkpoint}
    folder = cache_root() / "sft" / key
    _clean_stale_cache_temps(folder.parent)
    info_path = folder / "sft_info.json"
    if info_path.exists() and (folder / "config.json").exists():
        info = json.loads(info_path.read_text())
        if log_cached:
            for row in read_jsonl(folder / "sft_metrics.jsonl"):
                record.log(row)  # the curve starts where the cached SFT run started
        return folder, {**info, "sft_cached": True}

    model, tokenizer = models.load(cfg.model, seed=cfg.seed)
    scratch = record.scratch("sft")  # in the run folder: removed at the end, or by the next start after a SIGKILL
    sft_record = _Tee(record, Path(scratch) / "sft_metrics.jsonl")
    cb = _record_callback(sft_record, "sft", evaluator, cfg.eval_every)
    t0, c0 = time.perf_counter(), cpu_time()
    trainer = train_sft(model, tokenizer, train_rows, cfg, Path(scratch) / "trainer", [cb, *callbacks]) \
        if cfg.sft_steps else None
    seconds = time.perf_counter() - t0
    info = {"sft_seconds": round(seconds, 3), "sft_cpu_seconds": round(cpu_time() - c0, 3),
            "sft_steps": cfg.sft_steps, "sft_key": key,
            "sft_train_tokens_per_s": _throughput(trainer.state.log_history, seconds) if trainer else None}
    if trainer is not None:
        losses = [r["loss"] for r in trainer.state.log_history if "loss" in r]
        info["sft_final_loss"] = losses[-1] if losses else None
    # Write the checkpoint next to its final place, then rename: a crash never leaves a half cache
    # (a killed writer's temp folder carries its pid; the next run removes it if that pid is gone).
    def write(tmp):
        models.save(model, tokenizer, tmp)
        shutil.copy(Path(scratch) / "sft_metrics.jsonl", tmp / "sft_metrics.jsonl") \
            if (Path(scratch) / "sft_metrics.jsonl").exists() else (tmp / "sft_metrics.jsonl").write_text("")
        atomic_write_json(tmp / "sft_info.json", info)

    _mkdir(folder.parent)
    publish(folder, write)
    shutil.rmtree(scratch, ignore_errors=True)
    return folder, {**info, "sft_cached": False}


def publish(folder: Path, write) -> Path:
    """Write a cache folder atomically per run: ``write(tmp)`` fills a temporary folder unique to this call (another
    run, another ``--out``, writes its own), which is then renamed to ``folder``. An older copy is first renamed
    aside (never removed in place while the new one is not there yet) and removed after; when another run put its
    copy in place between the two renames, the same cache key means the same model: theirs stays, ours is dropped.
    A reader sees the old folder, the new one, or (for the instant between two renames) none, never half of one."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    # .<name>.<random>.<pid>.tmp: unique per call; the pid lets _clean_stale_cache_temps remove a killed writer's
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=f".{os.getpid()}.tmp", dir=folder.parent))
    try:
        try:
            write(tmp)
        except OSError as e:   # a full disk under a library's writer (safetensors, tokenizers): name the folder
            if e.filename is None:
                raise OSError(e.errno, e.strerror, str(folder)) from e
            raise
        for _ in range(3):
            try:
                os.rename(tmp, folder)   # succeeds when folder is absent (or an empty folder)
                return folder
            except OSError as e:
                if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
            old = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".old", dir=folder.parent))
            try:
                os.replace(folder, old)  # the old copy aside, atomically (old is an empty folder: replaced)
            except FileNotFoundError:    # another run moved it first
                pass
            shutil.rmtree(old, ignore_errors=True)
        return folder                    # another run keeps publishing the same key: its copy is in place
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _clean_stale_cache_temps(root: Path) -> None:
    """Remove ``.<key>.<pid>.tmp`` folders of SFT cache writers that died (SIGKILL) before the rename."""
    if not root.exists():
        return
    for p in root.glob(".*.tmp"):
        try:
            pid = int(p.name.rsplit(".", 2)[-2])
            os.kill(pid, 0)  # raises if no such process
        except ProcessLookupError:
            shutil.rmtree(p, ignore_errors=True)
        except (ValueError, IndexError, PermissionError):
            continue


def cpu_time() -> float:
    """User + system CPU seconds of this process (all threads). With one torch thread this is close to
    the wall time the same work takes on an idle machine, so it is recorded next to wall times that were
    measured on a shared one."""
    return time.process_time()


def _mkdir(p: Path) -> Path:
    p.mkdir(parents=True, exist_ok=True)
    return p


class _Tee:
    """Log to the run record and to the SFT cache's own metric file."""

    def __init__(self, record: RunRecord, path: Path):
        self._append, self.record, self.path = append_jsonl, record, path

    def log(self, row: dict) -> None:
        self.record.log(row)
        self._append(self.path, row)


def run(cfg, callbacks=(), reward_funcs=None, command=None, *, force: bool = False,
        resume: bool = False, rollout_func=None, evaluate_fn=None, peft_config=None) -> RunRecord:
    """Run ``cfg`` (SFT -> eval -> RL -> eval) and return its completed RunRecord. ``callbacks`` are extra
    ``transformers.TrainerCallback`` objects for the RL trainer; ``reward_funcs`` replace the task's;
    ``rollout_func``: TRL's GRPOTrainer hook that replaces its generation (e.g. ``rlm_lab.longtail.trl_hooks``);
    ``evaluate_fn(model, tokenizer, task, rows)``: the held-out evaluation, in place of greedy ``generate``
    (:func:`rlm_lab.train.evaluate.evaluate`'s keys), for a policy that decodes otherwise (fork-join);
    ``peft_config``: TRL's own ``peft_config=`` (a PEFT ``LoraConfig``: only the adapter is trained).
    ``force``: replace a run already in ``cfg.run_dir`` (moved aside, and said). ``resume``: continue the
    unfinished run in ``cfg.run_dir`` from its last checkpoint."""
    # The folder first (lock, no-overwrite check): a refused run costs no import and no work. A resume checks
    # its checkpoint against the record before it takes the folder over (nothing changes when it is refused).
    if resume:
        check_checkpoint(cfg, last_checkpoint(cfg.run_dir))
    record = RunRecord.reopen(cfg.run_dir) if resume else \
        RunRecord(cfg.run_dir, cfg.to_dict(), command, cfg.seed, force=force)
    try:
        _run(record, cfg, callbacks, reward_funcs, resume, rollout_func, evaluate_fn, peft_config)
    except KeyboardInterrupt:
        record.interrupt()
        raise
    except BaseException as e:
        record.fail(e)
        raise
    return record


def resume_config(run_dir):
    """The RunConfig an unfinished run in ``run_dir`` was started with (from its record)."""
    cfg = from_dict(read_record_file(run_dir)["config"])
    return cfg if Path(cfg.run_dir).resolve() == Path(run_dir).resolve() else cfg.replace(out=str(run_dir))


def last_checkpoint(run_dir) -> Path | None:
    """The newest ``checkpoint-<step>`` the Trainer saved in ``<run_dir>/checkpoints`` (None if none)."""
    from transformers.trainer_utils import get_last_checkpoint

    folder = Path(run_dir) / CHECKPOINTS
    found = get_last_checkpoint(str(folder)) if folder.is_dir() else None
    return Path(found) if found else None


def checkpoint_steps(cfg) -> int:
    """Save every this many RL steps: ~10 checkpoints a run, at least every 50 steps (a killed cpu-size run
    loses minutes, not the run). ``--set extra='{"save_steps": N}'`` overrides it (TRL's own field)."""
    return max(1, min(50, cfg.rl_steps // 10))


def _prepare_resume(record: RunRecord, cfg) -> tuple[Path | None, bool]:
    """Keep the metric rows the checkpoint covers; returns (checkpoint, whether SFT rows are kept)."""
    ckpt = last_checkpoint(record.dir)
    step = int(ckpt.name.rsplit("-", 1)[1]) if ckpt else None
    rows = record.metrics()  # reopen() already dropped a torn last line
    keep = [r for r in rows if r.get("phase") == "sft" or (step is not None and r.get("step", 0) <= step)]
    if ckpt is None:
        keep = []  # nothing to continue from: start the run again, in place (SFT comes from its cache)
    atomic_write_json_lines(record.metrics_path, keep)
    record.data["results"] = {}
    record.update(resumed_from_step=step or 0)
    return ckpt, any(r.get("phase") == "sft" for r in keep)


def _run(record: RunRecord, cfg, callbacks, reward_funcs, resume: bool, rollout_func=None, evaluate_fn=None,
         peft_config=None) -> None:
    import torch

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    if cfg.disable_tqdm:  # no Trainer bar; silence transformers' per-model "Loading weights" bars too
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    t_start, c_start = time.perf_counter(), cpu_time()
    ckpt, sft_logged = _prepare_resume(record, cfg) if resume else (None, False)
    task = parse_task(cfg.task)
    train_rows = ensure_data(task)["train"]
    key = sft_cache_key(cfg, ensure_files(task)["train"])
    eval_rows = test_rows(task, cfg.eval_problems)

    def evaluator(model):
        if evaluate_fn is not None:
            return evaluate_fn(model, tokenizer_, task, eval_rows)
        return evaluate(model, tokenizer_, task, eval_rows, cfg.eval_max_new_tokens, cfg.eval_batch_size)

    hub = "/" in cfg.model and not Path(cfg.model).exists()
    tokenizer_ = models.load(cfg.model)[1] if hub else char_tokenizer()
    results: dict = {"algo": cfg.algo, "task": task.slug, "eval_problems": cfg.eval_problems}
    if resume:
        results["resumed_from_step"] = record.results.get("resumed_from_step", 0)

    if cfg.algo == "sft":
        model, tokenizer_ = models.load(cfg.model, seed=cfg.seed)
        before = evaluator(model)
        path, info = _train_sft(cfg, task, train_rows, record, evaluator, callbacks, key, not sft_logged)
        after = evaluator(models.load(str(path))[0])
        results.update(info, **_eval_results(before, after), total_seconds=round(time.perf_counter() - t_start, 3),
                       total_cpu_seconds=round(cpu_time() - c_start, 3))
        record.complete(**results)
        return

    sft_path, info = _train_sft(cfg, task, train_rows, record, evaluator, (), key, not sft_logged)
    results.update(info)
    model, tokenizer_ = models.load(str(sft_path))
    before = evaluator(model)
    del model

    offset = cfg.sft_steps
    cb = _record_callback(record, cfg.algo, evaluator, cfg.eval_every, step_offset=offset)
    trainer = make_trainer(cfg, sft_path, train_rows, task, record.dir / CHECKPOINTS, [cb, *callbacks], reward_funcs,
                           rollout_func=rollout_func, peft_config=peft_config)
    _checkpointing(trainer, cfg)
    cb.trainer = trainer
    quiet_progress(trainer)
    if cfg.trace:
        trace(trainer, record=record)
    t0, c0 = time.perf_counter(), cpu_time()
    trainer.train(resume_from_checkpoint=str(ckpt) if ckpt else None)
    rl_seconds, rl_cpu = time.perf_counter() - t0, cpu_time() - c0
    model = trainer.accelerator.unwrap_model(trainer.model)
    after = evaluator(model)

    results.update(_eval_results(before, after), **_rl_measures(trainer, cfg, record, rl_seconds, rl_cpu),
                   total_seconds=round(time.perf_counter() - t_start, 3),
                   total_cpu_seconds=round(cpu_time() - c_start, 3), load_average=load_average(2))
    shutil.rmtree(record.dir / CHECKPOINTS, ignore_errors=True)  # a completed run is never resumed
    record.complete(**results)
    record.trainer = trainer  # in memory only: lets a notebook look at the trained model


def _rl_measures(trainer, cfg, record: RunRecord, rl_seconds: float, rl_cpu: float) -> dict:
    """What the RL phase measured: its seconds and CPU seconds, steps, throughputs, the first and last tenth's
    mean reward, and (when traced) the generation tokens per second and generation's share of a step."""
    logs = [r for r in trainer.state.log_history if "reward" in r]
    # a step whose completions no reward function scored logs a missing or NaN reward (TRL's contract):
    # averaged over the scored steps only
    rewards = [r["reward"] for r in logs if isinstance(r["reward"], (int, float)) and math.isfinite(r["reward"])]
    k = max(1, len(rewards) // 10)
    completion_tokens = sum(r.get("completions/mean_length", 0.0) * cfg.batch_size for r in logs)
    out = dict(
        rl_seconds=round(rl_seconds, 3),
        rl_cpu_seconds=round(rl_cpu, 3),
        rl_steps=trainer.state.global_step,
        rl_seconds_per_step=round(rl_seconds / max(1, trainer.state.global_step), 4),
        rl_train_tokens_per_s=_throughput(trainer.state.log_history, rl_seconds),
        rl_completion_tokens_per_s=round(completion_tokens / rl_seconds, 1) if rl_seconds > 0 else None,
        reward_first=round(sum(rewards[:k]) / k, 4) if rewards else None,
        reward_final=round(sum(rewards[-k:]) / k, 4) if rewards else None,
    )
    gen = record.results.get("trace", {}).get("stages", {}).get("generate")
    if gen and gen.get("mean_s") and logs:
        # completion tokens sampled per optimizer step (a batch is reused num_iterations times) over the
        # traced generate time per step (also amortized over the steps that reuse a batch)
        per_step = completion_tokens / len(logs) / cfg.num_iterations
        out["rl_gen_tokens_per_s"] = round(per_step / gen["mean_s"], 1)
        out["rl_generate_share"] = round(gen.get("share", 0.0), 3)
    return out


def _checkpointing(trainer, cfg) -> None:
    """Turn on the Trainer's own step checkpoints (model, optimizer, scheduler, RNG, data position: what
    ``resume_from_checkpoint`` needs), keeping only the newest. Set here, on the built trainer's args,
    because ``trainer_switches`` (shared with SFT, which is cached instead) turns saving off."""
    args = trainer.args
    if "save_strategy" in cfg.extra:
        return  # the reader's own choice, passed to TRL as-is
    from transformers.trainer_utils import SaveStrategy

    args.save_strategy = SaveStrategy.STEPS
    args.save_steps = cfg.extra.get("save_steps", checkpoint_steps(cfg))
    args.save_total_limit = cfg.extra.get("save_total_limit", 1)


def _eval_results(before: dict, after: dict) -> dict:
    return {
        "accuracy_before": before["accuracy"],
        "accuracy_after": after["accuracy"],
        "accuracy_gain": round(after["accuracy"] - before["accuracy"], 4),
        "format_rate_before": before["format_rate"],
        "format_rate_after": after["format_rate"],
        "eval_gen_tokens_per_s": after["gen_tokens_per_s"],
        "eval_seconds": after["seconds"],
        "examples_after": after["examples"],
    }
