"""Memory an execution mode adds to a priced placement (the survey arXiv 2608.27046 Sec. 4.5, App. B.4): the
shadow copy of an asynchronous consumer and the reshard's transient buffer.

    extra = mode_memory(pp, "one_step_off")     # {set name: ModeMemory}

* **Shadow copy** M_sh (App. B.4, M_async = max{M_G/A + M_sh(pi), M_T^max}): in a mode where generation runs while
  the trainer produces the next weights (one_step_off, stale, async), the rollout side keeps the version it is
  generating with while the new one lands: one more copy of the actor's weights in the compute dtype, its
  generation tensor-parallel shard per device (with LoRA, only the adapters). The synchronous mode needs none. The
  placement predictor already counts the rollout set's one copy; this is the second.
* **Reshard buffer** (M_hyb = ... + M_reshard): a hybrid set gathers its generation layout tensor by tensor (verl's
  sharding manager); beyond the gathered weights placement.py counts, one tensor's full gather buffer is live:
  assumed the largest parameter tensor (the embedding or LM head, V x h in the compute dtype).

Fusion's live state (the KV cache of still-running sequences beside the assessment's activations) needs the
per-stage peaks set by set, which placement.set_cost does not keep: not priced here.
"""

from __future__ import annotations

from dataclasses import dataclass

from .lora import lora_params
from .spec import model_spec

OVERLAPPING = ("one_step_off", "stale", "async")


@dataclass(frozen=True)
class ModeMemory:
    set_name: str
    peak: float          # the placement predictor's peak per device (bytes)
    shadow: float        # the shadow copy per device (bytes)
    reshard: float       # the reshard's tensor buffer per device (bytes)
    capacity: float

    @property
    def total(self) -> float:
        return self.peak + self.shadow + self.reshard

    @property
    def fits(self) -> bool:
        return self.total <= self.capacity


def mode_memory(pp, mode: str, model) -> dict:
    """Per set of the placement prediction ``pp``: its peak and what ``mode`` adds (module docstring). ``model``: the
    actor ``pp`` was priced for (a spec, zoo name or config path)."""
    spec = model_spec(model)
    db = pp.workload.dtype_bytes
    weights = (lora_params(spec, pp.lora) if pp.lora else spec.params) * db
    rollout_set = pp.placement.roles.get("rollout")
    out = {}
    for s in pp.sets:
        rset = pp.placement.set(s.name)
        shadow = weights / rset.generation_tp if (mode in OVERLAPPING and s.name == rollout_set) else 0.0
        reshard = 0.0
        if pp.placement.reshard and "actor" in s.roles:
            reshard = spec.vocab * spec.hidden * db / rset.generation_tp
        out[s.name] = ModeMemory(s.name, float(s.memory.total), shadow, reshard, float(s.capacity))
    return out


def mode_memory_line(extra: dict, mode: str) -> str:
    """One line for a report: what the mode adds per set and whether it still fits."""
    gib = 2 ** 30
    parts = [f"{m.set_name}: +{(m.shadow + m.reshard) / gib:.2f} GiB (shadow {m.shadow / gib:.2f}, reshard buffer "
             f"{m.reshard / gib:.2f}) -> {m.total / gib:.2f} of {m.capacity / gib:.2f} GiB"
             f"{'' if m.fits else ' DOES NOT FIT'}" for m in extra.values()]
    return f"memory mode {mode} adds (mode_memory.py): " + "; ".join(parts)

