"""One frozen ``RunConfig`` per training run: SFT warm start, then RL (GRPO, RLOO or PPO).

A config is built in layers, later ones win: the preset for ``(algo, size, task)`` (see
``presets.py``), then a YAML file, then ``key=value`` overrides from the CLI or a notebook.
Every layer goes through the same validation (``validation.py``: each field's type and range, NaN and
infinity refused, ``extra`` against the TRL config class's own fields and types), so a typo in a YAML key,
an unknown model, an impossible batch shape or ``beta=nan`` is one clear :class:`RlmLabError` before any
work; an error from a config file's value names the file.

Standard library (+ PyYAML for files) only: building a config never loads torch, except that a non-empty
``extra`` imports TRL to read its config class.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, field, fields
from pathlib import Path

import yaml

from ..errors import RlmLabError, unknown
from ..record import runs_root
from ..sizes import check_size
from .presets import ALGOS, preset  # noqa: F401 - ALGOS: part of this module's API
from .validation import LOSS_TYPES, LR_SCHEDULERS, closest  # noqa: F401 - part of this module's API
from .validation import validate as _validate


@dataclass(frozen=True)
class RunConfig:
    """Everything that decides what one run computes (and where it writes)."""

    algo: str = "grpo"                 # sft | grpo | rloo | ppo
    task: str = "arithmetic:digits=2"  # task spec, see rlm_lab.tasks.parse_task
    model: str = "micro"               # zoo name, saved folder, or hub id
    size: str = "cpu"                  # smoke | cpu | gpu: which preset and which runs root
    seed: int = 0
    name: str = ""                     # run folder name; default derived from algo/task/model/seed
    out: str = ""                      # run folder; default runs_root(size)/name

    # SFT warm start (TRL SFTTrainer; loss on the completion only)
    sft_steps: int = 400
    sft_lr: float = 1e-3
    sft_batch_size: int = 64
    sft_checkpoint: str = ""           # reuse this saved SFT model instead of training one

    # RL (TRL GRPOTrainer / RLOOTrainer / rlm_lab PPOTrainer)
    rl_steps: int = 300
    rl_lr: float = 1e-4
    lr_scheduler: str = "constant"
    warmup_ratio: float = 0.0
    beta: float = 0.0                  # KL weight to the reference model (0: no reference pass)
    num_generations: int = 8           # group size G (completions per prompt)
    batch_size: int = 64               # completions per optimizer step (multiple of G)
    num_iterations: int = 1            # optimizer steps per generation batch (PPO-style reuse)
    max_completion_length: int = 8
    temperature: float = 1.0
    loss_type: str = "dapo"
    scale_rewards: str = "group"       # group | batch | none (GRPO only)
    epsilon: float = 0.2               # ratio clip
    format_weight: float = 0.1         # weight of the format reward next to correctness (1.0)
    max_grad_norm: float = 1.0
    extra: dict = field(default_factory=dict)  # more TRL/PPO config fields (checked against TRL's config class)

    # Evaluation (greedy, held-out test split)
    eval_problems: int = 500
    eval_every: int = 50               # held-out accuracy every N steps during SFT and RL (0: off)
    eval_batch_size: int = 500
    eval_max_new_tokens: int = 8

    # Infrastructure
    bf16: bool = False                 # only on CUDA; bf16 on CPU is ~6x slower here
    cpu_bf16: bool = False             # RL on CPU with TRL's default bf16=True kept (accelerate's bf16 autocast)
    activation_checkpointing: bool = False  # RL with TRL's default gradient checkpointing kept (+15-25 % on CPU)
    threads: int = 0                   # torch intra-op threads (0: leave as is)
    trace: bool = True                 # attach the stage tracer (rlm_lab.train.tracer): per-stage times
    disable_tqdm: bool = False

    def __post_init__(self):
        validate(self)

    # ---- derived ------------------------------------------------------------------------------
    @property
    def run_name(self) -> str:
        if self.name:
            return self.name
        slug = self.task.replace(":", "_").replace("=", "").replace(",", "_").replace("+", "")
        model = Path(self.model).name if "/" in self.model else self.model
        return f"{self.algo}_{slug}_{model}_s{self.seed}"

    @property
    def run_dir(self) -> Path:
        if self.out:
            return Path(self.out)

        return runs_root(self.size) / self.run_name

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def replace(self, **changes) -> "RunConfig":
        return from_dict({**self.to_dict(), **changes})

    def sft_key(self) -> str:
        """Hash of everything that decides the SFT model: runs that share it share one SFT checkpoint."""
        keys = ("task", "model", "seed", "sft_steps", "sft_lr", "sft_batch_size", "bf16")
        blob = json.dumps({k: getattr(self, k) for k in keys}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


FIELD_TYPES = {f.name: f.type for f in fields(RunConfig)}


def validate(cfg: RunConfig) -> None:
    """Raise one clear RlmLabError for the first bad value (every field's type and range, ``extra``
    against the TRL config class): see ``validation.py``."""
    _validate(cfg, FIELD_TYPES)


# ---- building configs -------------------------------------------------------------------------

def _coerce(key: str, value):
    """Turn a CLI/YAML value into the field's type, or raise a clear error."""
    if key not in FIELD_TYPES:
        raise RlmLabError(f"unknown config field {key!r}{closest(str(key), FIELD_TYPES)} "
                          "(see `rlm-lab train --help` for the fields)")
    kind = FIELD_TYPES[key]
    if kind == "dict":
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                raise RlmLabError(f"{key} must be a JSON/YAML mapping, got {value!r}") from None
        if not isinstance(value, dict):
            raise RlmLabError(f"{key} must be a mapping, got {value!r}")
        return value
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if str(value).lower() in ("1", "true", "yes", "on"):
            return True
        if str(value).lower() in ("0", "false", "no", "off"):
            return False
        raise RlmLabError(f"{key} must be true or false, got {value!r}")
    if kind in ("int", "float"):
        if isinstance(value, bool):
            raise RlmLabError(f"{key} must be a number, got {value!r}")
        try:
            num = float(value)
        except (TypeError, ValueError):
            raise RlmLabError(f"{key} must be a number, got {value!r}") from None
        if kind == "int":
            if not math.isfinite(num) or num != int(num):
                raise RlmLabError(f"{key} must be an integer, got {value!r}")
            return int(num)
        return num
    if value is None:
        return ""
    if not isinstance(value, (str, int, float)):
        raise RlmLabError(f"{key} must be a string, got {value!r}")
    return str(value)


def from_dict(d: dict) -> RunConfig:
    if not isinstance(d, dict):
        raise RlmLabError(f"a run config must be a mapping of field: value, got {type(d).__name__}")
    return RunConfig(**{k: _coerce(k, v) for k, v in d.items()})


def parse_overrides(pairs) -> dict:
    """``["rl_steps=100", "beta=0.04"]`` -> ``{"rl_steps": 100, "beta": 0.04}`` (types from the fields)."""
    out = {}
    for pair in pairs or ():
        key, eq, value = pair.partition("=")
        if not eq:
            raise RlmLabError(f"--set {pair!r} is not key=value, e.g. --set rl_steps=100")
        out[key.strip()] = _coerce(key.strip(), value.strip())
    return out


def read_yaml(path: str | Path) -> dict:
    """Read a YAML file of RunConfig fields; every problem is one error naming the file."""
    path = Path(path)
    if path.is_dir():
        raise RlmLabError(f"config {path} is a folder; pass a YAML file of RunConfig fields")
    if not path.exists():
        raise RlmLabError(f"config file {path} does not exist")
    try:
        data = yaml.safe_load(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as e:
        raise RlmLabError(f"{path} is not a text file (byte {e.start} is not UTF-8); pass a YAML file") from None
    except yaml.YAMLError as e:
        raise RlmLabError(f"{path} is not valid YAML: {str(e).splitlines()[0]}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise RlmLabError(f"{path} must hold a mapping of config fields, got {type(data).__name__}")
    try:
        return {k: _coerce(k, v) for k, v in data.items()}
    except RlmLabError as e:
        raise RlmLabError(f"{path}: {e}") from None


def make_config(algo: str | None = None, size: str | None = None, task: str | None = None,
                config_file: str | Path | None = None, overrides=(), **fields_) -> RunConfig:
    """Preset for (algo, size, task) <- YAML file <- ``key=value`` overrides <- keyword fields."""
    layered: dict = {}
    from_file = read_yaml(config_file) if config_file else {}
    layered.update(from_file)
    layered.update(parse_overrides(overrides))
    layered.update({k: _coerce(k, v) for k, v in fields_.items() if v is not None})
    for key, val in (("algo", algo), ("size", size), ("task", task)):
        if val is not None:
            layered[key] = val
    algo_ = layered.get("algo", RunConfig.algo)
    size_ = layered.get("size", RunConfig.size)
    task_ = layered.get("task", RunConfig.task)
    if algo_ not in ALGOS:
        raise unknown("algorithm", algo_, ALGOS)
    check_size(size_)
    try:
        return from_dict({**preset(algo_, size_, task_), **layered})
    except RlmLabError as e:
        if from_file and _fails_alone(from_file, str(e), algo_, size_, task_):
            raise RlmLabError(f"{config_file}: {e}") from None  # the file's value is the bad one: name the file
        raise


def _fails_alone(from_file: dict, message: str, algo: str, size: str, task: str) -> bool:
    """Whether the config file's layer alone (on its preset) fails with ``message``."""
    try:
        from_dict({**preset(from_file.get("algo", algo), from_file.get("size", size), from_file.get("task", task)),
                   **from_file})
    except RlmLabError as e:
        return str(e) == message
    return False

