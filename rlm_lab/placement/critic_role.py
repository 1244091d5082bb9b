"""PPO's critic as a role of its own (the ``split`` placement, NeMo-Aligner style, arXiv 2405.01481): the value
model lives in a Ray actor on the value set; the trainer (our ``PPOTrainer``, a subclass of TRL's
``GRPOTrainer``) sends it each batch for the values and each micro-batch for the value-loss update.

- :class:`CriticWorker` -- the Ray actor (a plain class here; ``runtime`` makes it one): a
  :class:`rlm_lab.train.critic.CriticTrainer` built exactly as the colocated trainer builds it
  (``build_critic`` from the SFT policy: backbone copied, score head zero), on its own
  ``accelerate.Accelerator`` (its cores, or its GPU on a GPU set); its forward is :meth:`CriticTrainer.values`, its update the same
  clipped value loss (``rlm_lab.train.advantages.clipped_value_loss``) and :meth:`CriticTrainer.step`.
- :class:`RemoteCritic` -- what the trainer holds in place of its ``critic_trainer``: same methods
  (``values``, ``make_scheduler``, ``save``/``load``), each a blocking call to the worker, whose time the
  trainer's ``values``/``critic_update`` spans include (the exposed cost of the split on a synchronous step).
- :func:`split_trainer_class` -- ``PPOTrainer`` with ``_critic_step`` submitting the micro-batch's update to
  the worker without waiting, and ``training_step`` waiting for it after the actor's backward: the critic's
  update runs beside the actor's (the split's one overlap here; the critic's values forward still waits,
  since it needs the completions TRL produces inside ``_generate_and_score_completions``). Written by hand
  because it is the one piece TRL has no hook for: PPO is our subclass.

The trainer still builds its local critic in ``__init__`` (and then drops it): ``build_critic`` draws from
torch's global RNG (``from_config`` initialises before the policy's weights are copied in), so building it keeps
the trainer's random stream, hence its samples, identical to the colocated run: same seed, same learning.
"""

from __future__ import annotations

import os
import time
import types

from ..compat.accelerate import prepared_models
from ..device import pick_device
from ..models import load
from .proc import peak_rss as _peak_rss
from .proc import pin as _pin
from .shipping import local_copy
from .trl_rollout import PlacementRunError


class CriticWorker:
    """The value model on its own cores (``num_cpus`` from Ray, ``torch.set_num_threads`` to match)."""

    def __init__(self, threads: int, model, learning_rate: float, adam_epsilon: float = 1e-8):
        """``model``: the warm start, a folder or the files Ray carried (:mod:`rlm_lab.placement.shipping`)."""
        _pin(threads)
        from accelerate import Accelerator
        from transformers.utils import logging as hf_logging

        from ..train.critic import CriticTrainer, build_critic  # noqa: PLC0415  heavy: rlm_lab.train.critic imports torch at its top

        hf_logging.disable_progress_bar()
        with local_copy(model) as model_path:
            policy, _ = load(str(model_path))

        accelerator = Accelerator(cpu=pick_device() == "cpu")  # the GPU Ray gave this actor, if any
        self.ct = CriticTrainer(accelerator, build_critic(policy), learning_rate, adam_epsilon)
        del policy
        self.threads, self.span_list = threads, []

    def pid(self) -> int:
        return os.getpid()

    def _span(self, name, stage, t0):
        self.span_list.append({"name": name, "stage": stage, "start": t0, "end": time.perf_counter()})

    def make_scheduler(self, scheduler_type: str, warmup_steps: int, num_training_steps: int, kwargs: dict):
        args = types.SimpleNamespace(lr_scheduler_type=scheduler_type, lr_scheduler_kwargs=kwargs or {},
                                     get_warmup_steps=lambda n: warmup_steps)
        self.ct.make_scheduler(args, num_training_steps)
        return True

    def values(self, input_ids, attention_mask, logits_to_keep: int, batch_size: int):
        t0 = time.perf_counter()
        out = self.ct.values(input_ids, attention_mask, logits_to_keep, batch_size)
        self._span("values", "values", t0)
        return out

    def update(self, input_ids, attention_mask, logits_to_keep: int, old_values, returns, vmask,
               cliprange: float, vf_coef: float, normalizer: float, step: bool, max_grad_norm):
        """One micro-batch of the clipped value loss (+ the optimizer step when the actor steps): what
        ``PPOTrainer._critic_step`` does in-process. Returns (value loss, clip fraction)."""
        from ..train.advantages import clipped_value_loss  # noqa: PLC0415  heavy: rlm_lab.train.advantages imports torch at its top

        t0 = time.perf_counter()
        values = self.ct.train_values(input_ids, attention_mask, logits_to_keep)
        vf_loss, vf_clipfrac = clipped_value_loss(values, old_values, returns, vmask, cliprange)
        self.ct.backward(vf_coef * vf_loss / normalizer)
        if step:
            self.ct.step(max_grad_norm)
        self._span("critic_update", "critic_update", t0)
        return vf_loss.detach(), vf_clipfrac.detach()

    def state_dict(self) -> dict:
        model = self.ct.accelerator.unwrap_model(self.ct.model)
        return {k: v.detach().clone() for k, v in model.state_dict().items()}

    def spans(self) -> list[dict]:
        return list(self.span_list)

    def peak_rss(self) -> int:
        return _peak_rss()

    def save(self, checkpoint_dir: str, with_optimizer: bool = True) -> None:
        self.ct.save(checkpoint_dir, with_optimizer)

    def load(self, checkpoint_dir: str) -> None:
        self.ct.load(checkpoint_dir)


class RemoteCritic:
    """The trainer's handle on a :class:`CriticWorker`: the ``CriticTrainer`` methods PPO calls, each one a
    blocking call with a timeout (a dead critic fails the step with one line, like a dead rollout worker).
    ``handle`` is a Ray actor handle (or, in tests, anything whose methods have ``.remote``), ``get`` its
    ``ray.get``."""

    def __init__(self, handle, get, timeout_s: float):
        self.handle, self._get_fn, self.timeout_s = handle, get, timeout_s
        self.scheduler = None  # the worker holds the real one

    def _call(self, method: str, *args):
        return self.wait(getattr(self.handle, method).remote(*args), method)

    def submit_update(self, *args):
        """The value-loss update of one micro-batch, not waited for: it runs on the value set while the
        trainer runs the actor's backward (the worker runs its calls in submission order, so the next
        ``values`` sees the updated critic)."""
        return self.handle.update.remote(*args)

    def wait(self, ref, method: str = "update"):
        try:
            return self._get_fn(ref, timeout=self.timeout_s)
        except Exception as e:  # noqa: BLE001 - Ray's GetTimeoutError / RayActorError: one line
            name = type(e).__name__
            if name in ("GetTimeoutError", "RayActorError", "ActorDiedError", "ActorUnavailableError"):
                raise PlacementRunError(f"critic worker failed during {method}: {name}") from None
            raise

    def make_scheduler(self, args, num_training_steps: int):
        return self._call("make_scheduler", args.lr_scheduler_type, args.get_warmup_steps(num_training_steps),
                          num_training_steps, dict(args.lr_scheduler_kwargs or {}))

    def values(self, input_ids, attention_mask, logits_to_keep: int, batch_size: int):
        return self._call("values", input_ids, attention_mask, logits_to_keep, batch_size)

    def save(self, checkpoint_dir: str, with_optimizer: bool = True) -> None:
        self._call("save", checkpoint_dir, with_optimizer)

    def load(self, checkpoint_dir: str) -> None:
        self._call("load", checkpoint_dir)


def split_trainer_class():
    """``PPOTrainer`` whose critic is a :class:`RemoteCritic` (set as ``trainer.critic_trainer`` after init).
    A class built here because its base imports torch and TRL at its top."""
    from trl.extras.profiling import profiling_context

    from ..train.ppo import PPOTrainer  # noqa: PLC0415  heavy: rlm_lab.train.ppo imports torch at its top

    class SplitPPOTrainer(PPOTrainer):
        def use_remote_critic(self, remote: RemoteCritic) -> None:
            local = self.critic_trainer.model
            models = prepared_models(self.accelerator)
            if local in models:  # drop the local copy (built only to keep the random stream; module doc)
                models.remove(local)
            self.critic_trainer = remote

        @property
        def models_held(self):
            held = super().models_held
            held.pop("critic", None)  # on the value set
            return held

        @property
        def critic(self):
            return None

        _pending: list = []

        def _critic_step(self, input_ids, attention_mask, logits_to_keep, inputs, normalizer):
            # submitted, not waited for: the critic's update on the value set overlaps the actor's backward
            with profiling_context(self, "critic_update"):
                self._pending = [*self._pending, self.critic_trainer.submit_update(
                    input_ids, attention_mask, logits_to_keep, inputs["values"], inputs["returns"],
                    inputs["value_mask"].float(), self.args.cliprange_value, self.args.vf_coef, normalizer,
                    bool(self.accelerator.sync_gradients), self.args.max_grad_norm)]

        def _drain(self):
            """Wait for the submitted critic updates; their value-loss metrics go to this step's log."""
            pending, self._pending = self._pending, []
            m, reduce = self._metrics["train"], self.accelerator.gather
            for ref in pending:
                vf_loss, vf_clipfrac = self.critic_trainer.wait(ref)
                m["value_loss"].append(reduce(vf_loss).mean().item())
                m["ppo/value_clipfrac"].append(reduce(vf_clipfrac).mean().item())

        def training_step(self, *args, **kwargs):
            loss = super().training_step(*args, **kwargs)  # the actor's backward ran beside the critic's update
            with profiling_context(self, "critic_update"):
                self._drain()
            return loss

        def log(self, *args, **kwargs):
            self._drain()
            return super().log(*args, **kwargs)

    return SplitPPOTrainer
