"""What the RL frameworks move off the device into host memory, when it is back, and what the host link costs.

    resident(state, "actor", Stage.DECODE, ("sleep",))    # the actor's bytes on the device while the engine decodes
    transfer_seconds("actor", state, grads, calls, ("optimizer",), host_bw)   # {stage: seconds} of one step

A role's persistent state per device (weights, optimizer state: placement.py, predict.py) is on the device in every
stage unless a kind of offload (``Workload.offload``) takes part of it away:

* ``params``: a trained model's parameter shard lives in host memory outside its own stages and is loaded before
  each of them (verl ``actor_rollout_ref.actor.fsdp_config.param_offload``: ``load_fsdp_model_to_gpu`` before
  computing log-probs and before the update, ``offload_fsdp_model_to_cpu`` after, verl/workers/fsdp_workers.py).
  Host link: 2 x shard per phase it runs (old log-probs, the update; the critic's values, its update).
* ``optimizer``: a trained model's optimizer state lives in host memory outside its update (verl
  ``fsdp_config.optimizer_offload``: ``load_fsdp_optimizer`` / ``offload_fsdp_optimizer`` around ``update_actor``).
  Host link: 2 x optimizer shard per step.
* ``host_optimizer``: ZeRO-Offload (Ren et al., arXiv 2101.06840, Sec. 4): the optimizer state stays in host memory
  and the step runs on the CPU; each optimizer step sends the gradient shard down and the updated bf16 parameter
  shard back, 2 x gradient shard per optimizer step (DeepSpeed ``offload_optimizer: {device: cpu}``, OpenRLHF ``--ds.adam_offload``). The CPU's own Adam
  time is ASSUMED equal to the device's optimizer time (ZeRO-Offload's CPU-Adam is not modelled).
* ``frozen``: a frozen model's (reference, reward) weights live in host memory and stream to the device layer by
  layer in every forward (FSDP ``CPUOffload(offload_params=True)``, which verl gives the reference when
  ``ref.fsdp_config.param_offload``; DeepSpeed ``offload_param``, OpenRLHF ``--ref.offload`` / ``--reward.offload``).
  Host link: the weight shard per forward call; memory: one layer's share (weights / layers).
* ``swap``: the reference's weights live in host memory and are swapped with the trained model's for the reference
  log-probs: the policy's parameters are copied to the host, the reference's loaded into the same tensors, and the
  policy's loaded back after (NeMo-RL's policy workers keep ``reference_state_dict`` on the CPU and enter
  ``use_reference_model`` around ``get_reference_policy_logprobs``, nemo_rl/models/policy/ megatron_policy_worker.py
  and dtensor_policy_worker.py, https://github.com/NVIDIA-NeMo/RL/tree/v0.3.0/nemo_rl/models/policy). Memory: the
  reference's shard is on the device only in its own stage, and the actor's is not then. Host link: 3 x the shard
  (the policy out, the reference in, the policy back in) per step, charged to the reference's log-probs.
* ``sleep``: while the engine generates, the trainer's whole state (weights and optimizer) is in host memory (OpenRLHF
  ``--ds.enable_sleep``: ``offload_deepspeed_states``; slime's colocated ``--offload``, torch_memory_saver; verl's
  hybrid engine with both offloads). Host link: 2 x (weights + optimizer) per step, charged to generation; only on
  a set that both trains and generates.

Bytes cross the host link at ``profile.host_bandwidth()`` (PCIe, with the assumed efficiency eta_H of a datasheet
profile), one direction at a time and not overlapped with compute (an assumption: verl and OpenRLHF offload
synchronously between phases; FSDP's CPUOffload prefetches, so ``frozen`` is an upper bound).
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import RlmLabError
from ..stages import Stage
from .memory import MemoryBreakdown

S = Stage
OFFLOADS = {
    "params": "trained models' parameters in host memory outside their own stages (verl param_offload)",
    "optimizer": "trained models' optimizer state in host memory outside their update (verl optimizer_offload)",
    "host_optimizer": "optimizer state and step in host memory (ZeRO-Offload, arXiv 2101.06840; OpenRLHF adam_offload)",
    "frozen": "frozen models' weights in host memory, streamed per forward (FSDP CPUOffload, DeepSpeed offload_param)",
    "sleep": "the trainer's state in host memory while the engine generates (OpenRLHF ds.enable_sleep, slime offload)",
    "swap": "the reference's weights in host memory, swapped with the policy's for its log-probs (NeMo-RL)",
}
TRAINED = ("actor", "critic")
FROZEN = ("reference", "reward")
GENERATION = (S.PREFILL, S.DECODE)
OWN = {"actor": (S.OLD_LOGPROB, S.ACTOR_FORWARD, S.ACTOR_BACKWARD, S.OPTIMIZER, S.ADVANTAGE),
       "critic": (S.VALUES, S.CRITIC_UPDATE), "reference": (S.REF_LOGPROB,), "reward": (S.REWARD,)}
UPDATE = {"actor": S.OPTIMIZER, "critic": S.CRITIC_UPDATE}
PHASE_ENTRY = {"actor": (S.OLD_LOGPROB, S.ACTOR_FORWARD), "critic": (S.VALUES, S.CRITIC_UPDATE)}


def check_offload(kinds) -> tuple:
    """The offload kinds as a sorted tuple; one error line naming an unknown one."""
    if isinstance(kinds, str):
        kinds = (kinds,)
    if not isinstance(kinds, (list, tuple)) or not all(isinstance(k, str) for k in kinds):
        raise RlmLabError(f"workload.offload must be a list of {', '.join(OFFLOADS)}, got {kinds!r}")
    bad = sorted(set(kinds) - set(OFFLOADS))
    if bad:
        raise RlmLabError(f"unknown workload.offload kind(s) {', '.join(bad)}; known: {', '.join(OFFLOADS)}")
    if "swap" in kinds and "frozen" in kinds:
        raise RlmLabError("workload.offload: swap and frozen contradict each other (the reference's weights are either "
                          "swapped in whole for its pass or streamed layer by layer)")
    if "host_optimizer" in kinds and "optimizer" in kinds:
        raise RlmLabError("workload.offload: optimizer and host_optimizer contradict each other (the optimizer state "
                          "either stays in host memory or moves back to the device for the update)")
    return tuple(sorted(set(kinds)))


def resident(state: MemoryBreakdown, role: str, stage, offload: tuple, layers: int = 1) -> MemoryBreakdown:
    """The part of ``role``'s persistent ``state`` (one device) that is on the device during ``stage``."""
    if not offload:
        return state
    w, o = state.weights, state.optimizer
    if role in TRAINED:
        if "host_optimizer" in offload or ("optimizer" in offload and stage != UPDATE[role]):
            o = 0
        if "params" in offload and stage not in OWN[role]:
            w = 0
        if "sleep" in offload and stage in GENERATION:
            w = o = 0
        if "swap" in offload and role == "actor" and stage == S.REF_LOGPROB:
            w = 0       # the policy's parameters wait in host memory while the reference's fill them
    elif role == "reference" and "swap" in offload:
        w = w if stage == S.REF_LOGPROB else 0
    elif role in FROZEN and "frozen" in offload:
        w = w // max(1, layers) if stage in OWN[role] else 0
    return replace(state, weights=int(w), optimizer=int(o))


def transfer_seconds(role: str, state: MemoryBreakdown, grads: float, calls: dict, offload: tuple, host_bw: float,
                     steps: int = 1, generates: bool = False) -> dict:
    """{stage: seconds} the host link costs ``role`` in one step (module docstring): ``state`` its persistent bytes
    per device, ``grads`` its gradient bytes per device, ``calls`` {stage: calls} of the stages it runs, ``steps`` its
    optimizer steps, ``generates``: its set also runs the engine (``sleep``). Hand check: params offload of a 2 GB
    shard at 25 GB/s for an actor that computes old log-probs and updates: 2 x 2 / 25 = 0.16 s at each of the two."""
    if not offload or host_bw <= 0:
        return {}
    out: dict = {}

    def add(stage, nbytes):
        out[stage] = out.get(stage, 0.0) + nbytes / host_bw

    if role in TRAINED:
        if "params" in offload:
            for st in PHASE_ENTRY[role]:
                if calls.get(st):
                    add(st, 2 * state.weights)
        if "optimizer" in offload:
            add(UPDATE[role], 2 * state.optimizer)
        if "host_optimizer" in offload:
            add(UPDATE[role], steps * 2 * grads)   # the gradient shard down, the bf16 parameter shard (as large) up
        if "sleep" in offload and generates:
            kept = 0 if "params" in offload else state.weights
            kept += 0 if ("optimizer" in offload or "host_optimizer" in offload) else state.optimizer
            add(S.PREFILL, 2 * kept)
    elif role == "reference" and "swap" in offload:
        if calls.get(S.REF_LOGPROB):
            add(S.REF_LOGPROB, 3 * state.weights)   # the policy out, the reference in, the policy back in
    elif role in FROZEN and "frozen" in offload:
        st = OWN[role][0]
        if calls.get(st):
            add(st, calls[st] * state.weights)
    return out


def note(offload: tuple) -> str:
    """One ``assumed:`` line naming the offload kinds priced."""
    return ("offload priced: " + "; ".join(f"{k}: {OFFLOADS[k]}" for k in offload)
            + "; over the host link, not overlapped with compute" + (
                "; the CPU's Adam step priced at the device's optimizer time" if "host_optimizer" in offload else ""))
