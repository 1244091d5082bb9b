"""Chapter 10's cases: what each size runs, as RunConfigs and decoding limits, from the one registry
(``rlm_lab.sizes``, field ``open_directions``).

Two parts:

* ``parallel``: the ``psum`` task (:mod:`rlm_lab.tasks.psum`) solved by two arms, ``seq`` (one chain) and ``par``
  (fork-join: outline, concurrent branches, join), each SFT then GRPO through TRL with Parallelism-Aware GRPO's
  reward (:func:`rlm_lab.tasks.parallelism_aware_reward`), the same steps, batch and learning rate;
* ``multidomain``: GRPO with a LoRA adapter on the mixture of the book's four tasks (:class:`rlm_lab.tasks.Mix`)
  against four separate runs, one per task, of a quarter of the steps each (the same total budget), merged
  with PEFT (:mod:`rlm_lab.multidomain.merge`), all from the same SFT model.

Parason's and ThreadWeaver's GRPO settings kept where they apply at this scale (their released configs,
``run_rl.slurm`` and ``README.md``): no KL term (beta 0), advantages mean-centred without the std
(``algorithm.norm_adv_by_std_in_grpo=False``: TRL's ``scale_rewards="none"``), the asymmetric clip 0.2 / 0.28
(``clip_ratio_low``/``clip_ratio_high``: TRL's ``epsilon``/``epsilon_high``), token-level loss (TRL's ``dapo``),
temperature 1. Not kept: their learning rate (1e-6 for an 8B model; the zoo's micro model learns at 1e-4,
chapter 1's sweep), 8 samples per prompt (kept: ``num_generations``).
"""

from __future__ import annotations

from pathlib import Path

from ...errors import RlmLabError
from ...forkjoin import Limits
from ...sizes import get
from ...tasks.mix import COMPONENTS
from ...train.config import make_config

PARTS = ("parallel", "multidomain")
ARMS = ("seq", "par")
PARASON_GRPO = {"beta": 0.0, "scale_rewards": "none", "epsilon": 0.2, "loss_type": "dapo", "temperature": 1.0}
PARASON_EXTRA = {"epsilon_high": 0.28}


def params(size: str) -> dict:
    """Both parts' knobs at ``size``; a size without them is one clear error."""
    p = get(size).open_directions
    if not p:
        raise RlmLabError(f"chapter 10 defines no runs at size {size!r}")
    return {k: dict(v) for k, v in p.items()}


def parallel(size: str) -> dict:
    return params(size)["parallel"]


def multidomain(size: str) -> dict:
    return params(size)["multidomain"]


def check_arm(arm: str) -> str:
    if arm not in ARMS:
        raise RlmLabError(f"unknown arm {arm!r}; choose from: {', '.join(ARMS)}")
    return arm


def task_spec(size: str, arm: str) -> str:
    return f"{parallel(size)['task']},trace={check_arm(arm)}"


def limits(size: str):
    return Limits(*parallel(size)["limits"])


def name(part: str, *bits) -> str:
    return "_".join(["ch10", part, *map(str, bits)])


def grpo_name(arm: str, seed: int) -> str:
    return name("par", "grpo", check_arm(arm), f"seed{seed}")


def md_name(domain: str | None, seed: int) -> str:
    return name("md", domain or "mixed", f"seed{seed}")


def sft_config(size: str, arm: str):
    """The SFT warm start of an arm (TRL's SFTTrainer: same steps, batch and learning rate for both)."""
    p = parallel(size)
    return make_config("sft", size=size, task=task_spec(size, arm), model=p["model"], sft_steps=p["sft_steps"],
                       sft_lr=p["sft_lr"], sft_batch_size=p["sft_batch_size"], seed=0, disable_tqdm=True,
                       eval_problems=p["eval_problems"], eval_max_new_tokens=p["max_new_tokens"], eval_every=0)


def grpo_config(size: str, arm: str, seed: int, root: Path, sft_path: Path):
    """An arm's GRPO run (seed ``seed``) from its SFT model at ``sft_path``."""
    p = parallel(size)
    n = grpo_name(arm, seed)
    return make_config("grpo", size=size, task=task_spec(size, arm), model=p["model"], rl_steps=p["rl_steps"],
                       rl_lr=p["rl_lr"], batch_size=p["batch_size"], num_generations=p["num_generations"],
                       max_completion_length=p["max_new_tokens"], eval_max_new_tokens=p["max_new_tokens"],
                       eval_problems=p["eval_problems"], eval_every=0, trace=False, seed=seed, name=n,
                       out=str(Path(root) / n), sft_checkpoint=str(sft_path), disable_tqdm=True,
                       lr_scheduler="constant", **PARASON_GRPO, extra=dict(PARASON_EXTRA))


def md_config(size: str, domain: str | None, seed: int, root: Path, sft_path: Path | None = None):
    """A multi-domain GRPO run: the mixture (``domain`` None) or one task of it; a quarter of the mixture's
    steps for one task. ``sft_path`` None: the run trains (and caches) the mixture's SFT model itself."""
    p = multidomain(size)
    if domain is not None and domain not in COMPONENTS:
        raise RlmLabError(f"unknown task {domain!r}; choose from: {', '.join(COMPONENTS)}")
    steps = p["rl_steps"] if domain is None else p["rl_steps"] // len(COMPONENTS)
    n = md_name(domain, seed)
    return make_config("grpo", size=size, task="mix" if domain is None else f"mix:tasks={domain}", model=p["model"],
                       sft_steps=p["sft_steps"], sft_lr=p["sft_lr"], sft_batch_size=p["sft_batch_size"],
                       rl_steps=steps, rl_lr=p["rl_lr"], batch_size=p["batch_size"],
                       num_generations=p["num_generations"], max_completion_length=p["max_new_tokens"],
                       eval_max_new_tokens=p["max_new_tokens"], eval_problems=p["eval_problems"], eval_every=0,
                       trace=False, seed=seed, name=n, out=str(Path(root) / n), disable_tqdm=True,
                       lr_scheduler="constant", sft_checkpoint=str(sft_path or ""))
