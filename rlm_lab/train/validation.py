"""Validation of a ``RunConfig``: every field's type and range, ``extra`` against TRL's own config class,
and the output location, all before any work starts. Each failure is one :class:`RlmLabError` line.

Standard library only, except for a non-empty ``extra``: checking it needs the TRL config class's fields
(``dataclasses.fields`` and type hints of ``trl.GRPOConfig`` / ``trl.RLOOConfig`` / rlm_lab's
``PPOConfig``; https://huggingface.co/docs/trl/main/en/grpo_trainer#trl.GRPOConfig), so only then is TRL
imported (~6 s once per process).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import types
import typing
from pathlib import Path

from ..errors import RlmLabError, unknown
from ..errors import check_output_location as _check_location
from ..models.zoo import ZOO
from ..sizes import check_size
from ..tasks import parse_task
from .presets import ALGOS

LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo")
LR_SCHEDULERS = ("constant", "constant_with_warmup", "linear", "cosine", "polynomial")
SCALE_REWARDS = ("group", "batch", "none")
_INF = math.inf

# Range of every numeric RunConfig field: (low, high, low inclusive, high inclusive, why).
RANGES: dict[str, tuple] = {
    "seed": (0, 2**32 - 1, True, True, "numpy and torch seeds are 32-bit"),
    "sft_steps": (0, 10**7, True, True, "0 skips SFT"),
    "sft_lr": (0, 1, False, False, "a learning rate; tiny models train at ~1e-4..1e-3"),
    "sft_batch_size": (1, 2**20, True, True, ""),
    "rl_steps": (0, 10**7, True, True, ""),
    "rl_lr": (0, 1, False, False, "a learning rate; tiny models train at ~1e-4..1e-3"),
    "warmup_ratio": (0, 1, True, True, "a fraction of the RL steps"),
    "beta": (0, 1e3, True, True, "the KL weight; 0 drops the reference model"),
    "num_generations": (1, 2**16, True, True, ""),
    "batch_size": (1, 2**20, True, True, ""),
    "num_iterations": (1, 1000, True, True, ""),
    "max_completion_length": (1, 2**20, True, True, ""),
    "temperature": (0, 100, False, True, "sampling temperature; 1 samples the model's distribution"),
    "epsilon": (0, 1, False, False, "the ratio clip [1 - epsilon, 1 + epsilon]"),
    "format_weight": (0, 100, True, True, "weight of the format reward next to correctness (1.0)"),
    "max_grad_norm": (0, 1e6, True, True, "0 turns clipping off"),
    "eval_problems": (1, 10**7, True, True, ""),
    "eval_every": (0, 10**7, True, True, "0 turns periodic evaluation off"),
    "eval_batch_size": (1, 2**20, True, True, ""),
    "eval_max_new_tokens": (1, 2**20, True, True, ""),
    "threads": (0, 4096, True, True, "0 leaves torch's default"),
}
_PY = {"int": int, "float": float, "bool": bool, "str": str, "dict": dict}

# TRL config fields that a RunConfig field (or rlm_lab itself) sets: ``extra`` may not override them,
# or e.g. extra={"max_steps": -5} silently replaces rl_steps (issue 8).
SET_BY_RUNCONFIG = {
    "output_dir": "out", "max_steps": "rl_steps", "learning_rate": "rl_lr", "lr_scheduler_type": "lr_scheduler",
    "warmup_ratio": "warmup_ratio", "per_device_train_batch_size": "batch_size",
    "num_generations": "num_generations", "num_iterations": "num_iterations",
    "max_completion_length": "max_completion_length", "temperature": "temperature", "beta": "beta",
    "epsilon": "epsilon", "loss_type": "loss_type", "scale_rewards": "scale_rewards",
    "max_grad_norm": "max_grad_norm", "seed": "seed", "data_seed": "seed", "bf16": "bf16",
    "disable_tqdm": "disable_tqdm", "use_cpu": "(set from the device)", "logging_steps": "(1: every step is recorded)",
    "report_to": "(records replace trackers)",
    "activation_checkpointing": "(off: +15-25 % step time on CPU)", "gradient_checkpointing": "(off, see above)",
    "dataloader_num_workers": "(0)", "generation_batch_size": "batch_size", "steps_per_generation": "batch_size",
}

# Fields rl_args sets that a reader may still override through extra: the RL phase's step checkpoints
# (rlm_lab.train.run turns them on for --resume and leaves an explicit save_strategy alone).
READER_MAY_SET = ("save_strategy",)


def closest(name: str, known) -> str:
    match = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f"; did you mean {match[0]!r}?" if match else ""


def check_types(cfg, field_types: dict) -> None:
    for name, kind in field_types.items():
        v = getattr(cfg, name)
        want = _PY.get(kind)
        if want is None:
            continue
        ok = isinstance(v, want) and not (want is not bool and isinstance(v, bool))
        if want is float:
            ok = isinstance(v, (int, float)) and not isinstance(v, bool)
        if not ok:
            raise RlmLabError(f"{name} must be {'a' if kind != 'int' else 'an'} {kind}, got {v!r}")


def check_range(name: str, v) -> None:
    lo, hi, lo_in, hi_in, why = RANGES[name]
    bad = not math.isfinite(v) or (v < lo if lo_in else v <= lo) or (v > hi if hi_in else v >= hi)
    if bad:
        fmt = (lambda x: str(x)) if isinstance(lo, int) and isinstance(hi, int) else (lambda x: f"{x:g}")
        span = f"{'[' if lo_in else '('}{fmt(lo)}, {fmt(hi)}{']' if hi_in else ')'}"
        raise RlmLabError(f"{name} must be in {span}, got {v!r}" + (f" ({why})" if why else ""))


def validate(cfg, field_types: dict) -> None:
    """Raise one clear RlmLabError for the first bad value of ``cfg`` (a RunConfig)."""
    check_types(cfg, field_types)
    if cfg.algo not in ALGOS:
        raise unknown("algorithm", cfg.algo, ALGOS)
    check_size(cfg.size)
    _check_model(cfg.model)
    task = _check_task(cfg.task)
    for name in RANGES:
        check_range(name, getattr(cfg, name))
    if cfg.name and (Path(cfg.name).name != cfg.name or cfg.name in (".", "..")):
        raise RlmLabError(f"name {cfg.name!r} must be a plain folder name (no '/'); use out=DIR for a path")
    if cfg.algo != "sft":
        if cfg.rl_steps < 1:
            raise RlmLabError(f"rl_steps must be >= 1 for {cfg.algo}, got {cfg.rl_steps} "
                              "(TRL treats max_steps=0 as 'use epochs'); use algo=sft for an SFT-only run")
        if cfg.num_generations < 2:
            raise RlmLabError(f"num_generations must be >= 2 for {cfg.algo} (a group needs 2+ completions), "
                              f"got {cfg.num_generations}")
        if cfg.batch_size % cfg.num_generations:
            raise RlmLabError(f"batch_size ({cfg.batch_size}) must be a multiple of num_generations "
                              f"({cfg.num_generations}): every optimizer step holds whole groups")
    if cfg.algo == "sft" and cfg.sft_steps == 0 and not cfg.sft_checkpoint:
        raise RlmLabError("algo sft with sft_steps=0 trains nothing; set sft_steps > 0")
    if cfg.loss_type not in LOSS_TYPES:
        raise unknown("loss_type", cfg.loss_type, LOSS_TYPES)
    if cfg.lr_scheduler not in LR_SCHEDULERS:
        raise unknown("lr_scheduler", cfg.lr_scheduler, LR_SCHEDULERS)
    if cfg.scale_rewards not in SCALE_REWARDS:
        raise unknown("scale_rewards", cfg.scale_rewards, SCALE_REWARDS)
    if cfg.sft_checkpoint and not (Path(cfg.sft_checkpoint) / "config.json").is_file():
        raise RlmLabError(f"sft_checkpoint {cfg.sft_checkpoint!r} has no config.json; "
                          "pass a folder written by a previous run (its sft/ subfolder)")
    _check_positions(cfg, task)
    check_extra(cfg.algo, cfg.extra)


def _check_model(name: str) -> None:
    if not name:
        raise unknown("model", name, ZOO)
    if name in ZOO:
        return
    p = Path(name)
    if p.exists():
        if not (p / "config.json").is_file():
            raise RlmLabError(f"model folder {name} has no config.json; pass a zoo name ({', '.join(ZOO)}) "
                              "or a folder written by rlm_lab.models.save")
        return
    if "/" in name and not name.startswith((".", "/")):
        return  # a hub id: only checked when loaded (needs the network)
    raise unknown("model", name, ZOO)


def _check_task(spec: str):
    return parse_task(spec)


def model_positions(model: str) -> int | None:
    """Positions the model can attend over (zoo spec or a saved folder's config.json); None if unknown."""
    if model in ZOO:
        return ZOO[model].max_positions
    p = Path(model) / "config.json"
    if p.is_file():
        try:
            n = json.loads(p.read_text()).get("max_position_embeddings")
        except (OSError, ValueError, AttributeError):
            raise RlmLabError(f"{p} is not a valid model config (JSON with max_position_embeddings)") from None
        return n if isinstance(n, int) else None
    return None


def _check_positions(cfg, task) -> None:
    n = model_positions(cfg.sft_checkpoint or cfg.model)
    if n is None:
        return
    try:
        prompt = task.max_prompt_len()
    except NotImplementedError:  # a task that cannot bound its prompts: checked when the trainer tokenizes
        return
    for name in ("max_completion_length", "eval_max_new_tokens"):
        need = prompt + getattr(cfg, name) + 1  # + the end-of-sequence token
        if need > n:
            raise RlmLabError(f"{name}={getattr(cfg, name)} does not fit model {cfg.model!r}: prompts of up to "
                              f"{prompt} tokens + {getattr(cfg, name)} + EOS = {need} > its {n} positions")


# ---- extra: fields of the TRL config class --------------------------------------------------------

def rl_config_class(algo: str):
    if algo == "grpo":
        from trl import GRPOConfig

        return GRPOConfig
    if algo == "rloo":
        from trl import RLOOConfig

        return RLOOConfig
    from .ppo import PPOConfig  # noqa: PLC0415  heavy: rlm_lab.train.ppo imports torch at its top

    return PPOConfig


def check_extra(algo: str, extra) -> None:
    """``extra`` holds fields of the RL trainer's TRL config class: known names, right types, finite numbers,
    and none that a RunConfig field already sets."""
    if not isinstance(extra, dict):
        raise RlmLabError(f"extra must be a mapping of TRL config fields, got {type(extra).__name__}")
    if not extra:
        return
    if algo == "sft":
        raise RlmLabError(f"extra ({', '.join(map(str, extra))}) is passed to the RL trainer's config and "
                          "algo sft has no RL phase; drop it")
    try:
        cls = rl_config_class(algo)
    except ImportError as e:
        raise RlmLabError(f"cannot check extra: TRL's config for {algo} does not import ({e})") from None
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - a hint TRL cannot resolve here: fall back to the raw annotation
        hints = {}
    for key, value in extra.items():
        if not isinstance(key, str) or key not in fields:
            raise RlmLabError(f"extra field {key!r} is not an option of {cls.__name__}{closest(str(key), fields)}")
        if key in SET_BY_RUNCONFIG:
            owner = SET_BY_RUNCONFIG[key]
            how = f"set it with the RunConfig field {owner} (--set {owner}=...)" if not owner.startswith("(") \
                else f"rlm_lab sets it {owner}"
            raise RlmLabError(f"extra field {key!r} is set by rlm_lab; {how}")
        hint = hints.get(key, fields[key].type)
        if not _matches(value, hint):
            raise RlmLabError(f"extra field {key!r} of {cls.__name__} must be {_describe(hint)}, got {value!r}")


def _matches(value, hint) -> bool:
    if hint is typing.Any or isinstance(hint, str):
        return True if not isinstance(value, float) else math.isfinite(value)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, h) for h in typing.get_args(hint))
    if origin is typing.Literal:
        return value in typing.get_args(hint)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if hint is str:
        return isinstance(value, str)
    if origin in (list, tuple, set):
        return isinstance(value, (list, tuple))
    if origin is dict or hint is dict:
        return isinstance(value, dict)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True


def _describe(hint) -> str:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(h) for h in typing.get_args(hint))
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(hint))
    if hint is type(None):
        return "null"
    if hint is float:
        return "a finite number"
    return {int: "an integer", bool: "true or false", str: "a string"}.get(hint, getattr(hint, "__name__", str(hint)))


# ---- the output location -------------------------------------------------------------------------

def check_output_location(path: str | Path) -> None:
    """A run folder must be a folder (or not exist yet) under a writable one (see errors.check_output_location)."""
    _check_location(path, "output location")
