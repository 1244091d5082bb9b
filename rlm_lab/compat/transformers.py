"""transformers' privates (read from transformers 5.24.0; the version policy is :mod:`rlm_lab.compat`'s): a config's
attention kernel, the Trainer's sampler and batch size, a compile config allowed on every device."""

from __future__ import annotations

import functools

from . import fail


@functools.cache
def _attn_setter(config_cls) -> None:
    prop = getattr(config_cls, "_attn_implementation", None)
    if not (isinstance(prop, property) and prop.fset is not None):
        raise fail("transformers", f"{config_cls.__name__}._attn_implementation is no settable property")


def set_attn_implementation(config, impl: str) -> None:
    """``config._attn_implementation = impl`` (transformers' own setter: it also sets the sub-configs), the
    ring-attention kernel registered by ``rlm_lab.parallel.context_parallel`` (``model.set_attn_implementation``
    would validate the name against the built-in kernels and reload)."""
    _attn_setter(type(config))
    config._attn_implementation = impl


@functools.cache
def _trainer_method(cls, name: str) -> None:
    if not callable(getattr(cls, name, None)):
        raise fail("transformers", f"{cls.__name__}.{name}() is missing")


def train_sampler(trainer):
    """``trainer._get_train_sampler()``: the sampler TRL's training dataloader iterates (same seed, same order):
    the prompts it would draw next (``rlm_lab.asynchrony.trl_rollout``)."""
    _trainer_method(type(trainer), "_get_train_sampler")
    return trainer._get_train_sampler()


def train_batch_size(trainer) -> int:
    """``trainer._train_batch_size``: the per-device batch the Trainer's dataloader was built with."""
    if not hasattr(trainer, "_train_batch_size"):
        raise fail("transformers", f"{type(trainer).__name__}._train_batch_size is missing")
    return trainer._train_batch_size


def compile_on_every_device():
    """A ``CompileConfig`` with ``_compile_all_devices`` set: transformers then compiles the decode step on any
    device, the CPU included (else only on CUDA) (``rlm_lab.placement.rollout``)."""
    from transformers import CompileConfig  # noqa: PLC0415 - transformers stays lazy

    cfg = CompileConfig()
    if not hasattr(cfg, "_compile_all_devices"):
        raise fail("transformers", "CompileConfig._compile_all_devices is missing")
    cfg._compile_all_devices = True
    return cfg
