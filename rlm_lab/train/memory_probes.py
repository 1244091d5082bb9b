"""Memory probes of chapter 2: bytes of the tensors a TRL trainer holds, counted from the live tensors.

Parameters of each held model, the actor's gradients just before the first ``optimizer.step()`` and its
AdamW state just after it (a ``TrainerCallback``, :func:`Probe`, which also times every optimizer step),
the critic's by wrapping its optimizer's ``step``, and the KV cache of one ``generate`` call. They read
tensors and change nothing. The cost model's prediction of the same bytes is
``rlm_lab.cost.memory``; ``rlm_lab.chapters.ch02_anatomy.compare.memory_table`` sets the two side by side.

Not probed: activations and the allocator's peak (the tracer records the peak resident set per stage;
the cost model does not predict it).
"""

from __future__ import annotations

import time


def _tensor_bytes(tensors) -> int:
    seen, total = set(), 0
    for t in tensors:
        if t is not None and id(t) not in seen:
            seen.add(id(t))
            total += t.numel() * t.element_size()
    return total


def held_bytes(model) -> int:
    """Parameter bytes of a model (buffers such as rotary tables are not model state and are left out)."""
    return _tensor_bytes(model.parameters())


def optimizer_state_bytes(optimizer) -> int:
    opt = getattr(optimizer, "optimizer", optimizer)  # accelerate wraps the torch optimizer
    return _tensor_bytes(v for state in opt.state.values() for v in state.values() if hasattr(v, "numel"))


def _watch_optimizer(optimizer, params_of, out: dict, key: str) -> None:
    """Count gradient bytes right before the first ``step()`` and optimizer state right after it, by
    wrapping this optimizer instance's ``step`` (the counts read tensors; nothing is changed)."""
    inner = getattr(optimizer, "optimizer", optimizer)
    orig = inner.step

    def step(*args, **kwargs):
        if f"{key}_gradients" not in out:
            out[f"{key}_gradients"] = _tensor_bytes(p.grad for p in params_of())
        result = orig(*args, **kwargs)
        if f"{key}_optimizer" not in out:
            out[f"{key}_optimizer"] = optimizer_state_bytes(inner)
        return result

    inner.step = step


def measured_memory(trainer) -> dict:
    """Byte counts of the models the trainer holds; gradient/optimizer entries fill in during the first step."""
    unwrap = trainer.accelerator.unwrap_model
    out = {"actor_weights": held_bytes(unwrap(trainer.model))}
    if getattr(trainer, "ref_model", None) is not None:
        out["reference_weights"] = held_bytes(trainer.ref_model)
    critic = getattr(trainer, "critic", None)
    if critic is not None:
        out["critic_weights"] = held_bytes(unwrap(critic))
        _watch_optimizer(trainer.critic_optimizer, lambda: unwrap(critic).parameters(), out, "critic")
    return out


def measure_kv_cache(model, batch: int, prompt_len: int, length: int) -> int:
    """Bytes of the KV cache after one ``generate`` of ``length`` tokens for ``batch`` prompts of ``prompt_len``."""
    import torch

    ids = torch.full((batch, prompt_len), 5, dtype=torch.long)
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=length,
                             min_new_tokens=length, do_sample=False, return_dict_in_generate=True, use_cache=True)
    cache = out.past_key_values
    layers = getattr(cache, "layers", None)
    if layers is not None:  # transformers >= 4.56 DynamicCache: one object per layer with keys/values
        return _tensor_bytes(t for layer in layers for t in (layer.keys, layer.values))
    return _tensor_bytes(t for kv in cache for t in kv)


def _probe_class():
    """The ``Probe`` callback class; built here because its base, transformers' TrainerCallback, is not imported at this
    module's top."""
    from transformers import TrainerCallback

    class Probe(TrainerCallback):
        """Wall time of every optimizer step (on_step_begin -> on_step_end: two clock reads) and, on the
        first step, the actor's gradient bytes (just before ``optimizer.step()``) and optimizer-state bytes
        (just after it)."""

        def __init__(self):
            self.walls, self._t, self.memory = [], None, {}

        def on_step_begin(self, args, state, control, **kwargs):
            self._t = time.perf_counter()

        def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
            if "actor_gradients" not in self.memory and model is not None:
                self.memory["actor_gradients"] = _tensor_bytes(p.grad for p in model.parameters())

        def on_optimizer_step(self, args, state, control, optimizer=None, **kwargs):
            if "actor_optimizer" not in self.memory and optimizer is not None:
                self.memory["actor_optimizer"] = optimizer_state_bytes(optimizer)

        def on_step_end(self, args, state, control, **kwargs):
            self.walls.append(time.perf_counter() - self._t)

    return Probe


def Probe():  # noqa: N802 - a factory that reads like the class it returns (transformers imported lazily)
    return _probe_class()()
