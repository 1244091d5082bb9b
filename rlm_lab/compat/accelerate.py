"""accelerate's privates (read from accelerate 1.15.0; the version policy is :mod:`rlm_lab.compat`'s)."""

from __future__ import annotations

from . import fail


def prepared_models(accelerator) -> list:
    """``accelerator._models``: the list of models ``prepare`` registered (what it saves, hooks and unwraps); the
    split PPO trainer drops its local critic from it once the critic lives on its own set
    (``rlm_lab.placement.critic_role``)."""
    models = getattr(accelerator, "_models", None)
    if not isinstance(models, list):
        raise fail("accelerate", f"{type(accelerator).__name__}._models (the prepared models) is missing")
    return models
