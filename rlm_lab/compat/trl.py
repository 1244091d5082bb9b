"""TRL's privates (read from trl 1.16.0; the version policy is :mod:`rlm_lab.compat`'s): ``ProfilingContext``, the
private methods PPO overrides, the ``use_vllm`` gates and ``_last_loaded_step`` of the off-policy correction; and,
public but kept with them, the defaults of TRL's config dataclasses that the TRL importer prices a config with."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import warnings

from . import fail, source_has


@functools.cache
def profiling_context():
    """TRL's ``trl.extras.profiling.ProfilingContext`` class, checked: it defines ``__enter__``/``__exit__`` and sets
    ``self.name`` (the stage tracer wraps them and reads the name, ``rlm_lab.train.tracer``)."""
    try:
        from trl.extras.profiling import ProfilingContext  # noqa: PLC0415 - trl stays lazy
    except ImportError:
        raise fail("trl", "trl.extras.profiling.ProfilingContext is missing") from None
    if not ("__enter__" in vars(ProfilingContext) and "__exit__" in vars(ProfilingContext)
            and source_has(ProfilingContext.__init__, ["self.name = name"])):
        raise fail("trl", "trl's ProfilingContext no longer has __enter__/__exit__ and a name")
    return ProfilingContext


@functools.cache
def check_overrides(base, names: tuple) -> None:
    """Every one of ``names`` is a method of ``base`` (TRL's GRPOTrainer or what it inherits), so that a
    subclass overriding it and calling ``super()`` still reaches TRL's code (``rlm_lab.train.ppo``)."""
    missing = [n for n in names if not callable(getattr(base, n, None))]
    if missing:
        raise fail("trl", f"{base.__name__} has no {', '.join(missing)} (overridden by rlm-lab's PPO)")


def use_vllm_gates(trainer_cls=None) -> tuple:
    """The source lines of ``trainer_cls`` (default TRL's GRPOTrainer) that read ``use_vllm``, whitespace-stripped."""
    if trainer_cls is None:
        from trl import GRPOTrainer as trainer_cls  # noqa: PLC0415 - trl stays lazy
    src = inspect.getsource(trainer_cls)
    return tuple(ln.strip() for ln in src.splitlines() if "self.use_vllm" in ln)


def _grpo_base(trainer):
    """The class named GRPOTrainer among ``type(trainer)``'s bases (TRL's, whatever subclasses it)."""
    mro = type(trainer).__mro__
    names = [c.__name__ for c in mro]
    if "GRPOTrainer" not in names:
        raise fail("trl", f"{type(trainer).__name__} is no GRPOTrainer")
    return mro[names.index("GRPOTrainer")]


def check_use_vllm_gates(trainer, verified: tuple) -> None:
    """The GRPOTrainer in ``type(trainer)``'s bases reads ``use_vllm`` at exactly the ``verified`` lines (the
    off-policy correction switches ``use_vllm`` on without vLLM, ``rlm_lab.asynchrony.correction``): a TRL that adds
    or moves a gate fails here, in one line, whatever its version number."""
    if use_vllm_gates(_grpo_base(trainer)) != tuple(verified):
        raise fail("trl", "TRL's GRPOTrainer reads use_vllm in other places than the verified ones; the off-policy "
                          "correction adapter would reach vLLM code, refusing")


def mark_weights_loaded(trainer) -> None:
    """``trainer._last_loaded_step = trainer.state.global_step``: TRL then pushes no weights to a vLLM generator
    before the next ``rollout_func`` call (the asynchronous glue pushes them itself)."""
    if not source_has(getattr(_grpo_base(trainer), "_generate", None), ["self.state.global_step != self._last_loaded_step"]):
        raise fail("trl", "GRPOTrainer._generate no longer compares global_step with _last_loaded_step")
    trainer._last_loaded_step = trainer.state.global_step


def _defaults(cls, prefix: str = "") -> dict:
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[prefix + f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[prefix + f.name] = f.default_factory()
    return out


@functools.cache
def config_defaults(asynchronous: bool = False) -> dict:
    """``{field: default}`` of the configs a ``trl grpo --config`` file and its companions hold, read from TRL's
    dataclasses (``dataclasses.fields``) so that a TRL upgrade moves them here too: ``GRPOConfig`` (with the
    ``TrainingArguments`` fields it inherits), ``ModelConfig`` (``model_name_or_path``, LoRA) and ``trl vllm-serve``'s
    ``ScriptArguments`` under ``vllm_serve.``; with ``asynchronous``, ``AsyncGRPOConfig``'s over ``GRPOConfig``'s
    (it is no GRPOConfig subclass and differs, e.g. ``max_completion_length`` 2048 against 512 in trl 1.16). A field
    without a default is absent. Cached: :func:`functools.cache`'s ``cache_clear`` after patching a field."""
    try:
        import trl  # noqa: PLC0415 - trl stays lazy
        import trl.scripts.vllm_serve as serve  # noqa: PLC0415 - trl stays lazy
        with warnings.catch_warnings():  # "you are importing from trl.experimental": the pinned module, read only
            warnings.simplefilter("ignore")
            from trl.experimental.async_grpo import AsyncGRPOConfig  # noqa: PLC0415 - trl stays lazy
    except ImportError as e:
        raise fail("trl", f"TRL's config dataclasses are missing ({e})") from None
    out = {**_defaults(serve.ScriptArguments, "vllm_serve."), **_defaults(trl.ModelConfig), **_defaults(trl.GRPOConfig)}
    return out | _defaults(AsyncGRPOConfig) if asynchronous else out


def trainer_tokenizer(trainer):
    """``trainer._tokenizer``: the tokenizer of a GRPOTrainer's ``processing_class`` (the processor's tokenizer for a
    vision-language model), whose pad token the rollout workers pad with (``rlm_lab.placement.trl_rollout``)."""
    tok = getattr(trainer, "_tokenizer", None)
    if tok is None:
        raise fail("trl", f"{type(trainer).__name__}._tokenizer (the processing class's tokenizer) is missing")
    return tok
