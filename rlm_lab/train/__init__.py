"""Training: SFT warm start (TRL SFTTrainer), then RL with verifiable rewards — GRPO and RLOO through
TRL, PPO through ``rlm_lab.train.ppo`` — one ``RunConfig`` per run, one ``RunRecord`` per run; DPO through TRL's
``DPOTrainer`` on preference pairs built from the verifiable tasks (``rlm_lab.train.dpo``; not yet a ``RunConfig``
algorithm).

Nothing here imports torch at package import time; ``run`` and the trainers load it when called.
"""

import warnings

from .run import run as _run

# TRL 1.16 reads transformers' deprecated `is_gradient_checkpointing` (and sets `gradient_checkpointing`, calls
# `gradient_checkpointing_disable`) on every step; the warnings are about TRL's code, not the reader's, and would
# repeat in every notebook output. Only those messages are muted.
warnings.filterwarnings("ignore", message=r".*`\w*gradient_checkpointing\w*` is deprecated", category=FutureWarning)

from .config import ALGOS, RunConfig, from_dict, make_config, parse_overrides, read_yaml
from .presets import preset


def run(cfg, callbacks=(), reward_funcs=None, command=None):
    """See :func:`rlm_lab.train.run.run`."""
    return _run(cfg, callbacks=callbacks, reward_funcs=reward_funcs, command=command)


__all__ = ["ALGOS", "RunConfig", "from_dict", "make_config", "parse_overrides", "preset", "read_yaml", "run"]
