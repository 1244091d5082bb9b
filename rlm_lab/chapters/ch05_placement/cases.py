"""Chapter 5's cases: which placements run, on which cluster, with which run config.

- :func:`run_config` -- the GRPO run every placement shares (the size's preset, fewer steps: a placement
  changes *when* things happen, not what is learned, so a few dozen steps time it).
- :func:`placements` -- the placements measured: ``colocated`` (one set of all cores),
  ``disaggregated`` (1 core rollout, the rest training; weights by a gloo broadcast) and
  ``disaggregated`` with the naive object-store sync (``ray.put`` of the weights), the baseline.
- :func:`ppo_placements` -- PPO colocated and ``split`` (critic on its own core), keys :data:`PPO_KEYS`;
  :func:`configs` pairs every key with its run config (GRPO's or PPO's);
- :data:`MEMORY_RUN`, :data:`LORA_LR` -- the hybrid engine's memory run and LoRA's learning rate;
- :data:`REFERENCES` -- the step-time comparisons the page's verdicts rest on, as ``rlm-lab reference --chapter 5``
  re-measures them (:class:`rlm_lab.protocol.Reference`: each repeat one placement run in a fresh process).
"""

from __future__ import annotations

from ...cost.placement_spec import Cluster, get_placement
from ...errors import RlmLabError
from ...placement import resources
from ...placement.runtime import algo_roles
from ...protocol import Reference
from ...sizes import get
from ...train.config import make_config
from ...train.presets import preset

KEYS = ("colocated", "disaggregated", "disaggregated_object_store", "disaggregated_lora")
PPO_KEYS = ("ppo_colocated", "ppo_split")  # PPO (our TRL subclass): critic beside the actor, or on its own core
ALL_KEYS = KEYS + PPO_KEYS


def run_config(size: str, algo: str = "grpo", **overrides):
    fields = dict(rl_steps=get(size).placement_steps, disable_tqdm=True, eval_every=0)
    fields.update(overrides)
    return make_config(algo, size, **fields)


def cluster(devices: int = 2, kind: str = "cpu") -> Cluster:
    return Cluster(devices, kind)


def size_cluster(cfg) -> Cluster:
    """The cluster a size's placements are laid on: the 2 cores of this machine at smoke and cpu size; at
    gpu size the GPUs torch sees (at least 2, so that a disaggregated placement exists to ask for)."""
    if cfg.size != "gpu":
        return cluster()
    return cluster(max(2, resources.local_gpus()), "gpu")


def placements(cfg, devices: int | None = None) -> dict:
    """key -> Placement for the keys of :data:`KEYS` on ``devices`` CPU cores (default: :func:`size_cluster`)."""
    algo = algo_roles(cfg)
    c = cluster(devices) if devices else size_cluster(cfg)
    return {
        "colocated": get_placement("colocated", c, algo),
        "disaggregated": get_placement("disaggregated", c, algo, rollout_devices=1, sync="collective"),
        "disaggregated_object_store": get_placement("disaggregated", c, algo, rollout_devices=1,
                                                    sync="object_store"),
        # LoRA (PEFT through TRL's peft_config): only the adapters are trained, so only they are synced
        "disaggregated_lora": get_placement("disaggregated", c, algo, rollout_devices=1, sync="collective",
                                            lora=True),
    }


def ppo_placements(cfg, devices: int | None = None) -> dict:
    """key -> Placement for :data:`PPO_KEYS`: PPO colocated on every core, and ``split`` (NeMo-Aligner style):
    actor + reference (+ TRL's generation) on ``devices - 1`` cores, the critic on one (the reward is the
    rule-based verifier, no model, so the value set holds the critic alone)."""
    algo = algo_roles(cfg)
    c = cluster(devices) if devices else size_cluster(cfg)
    return {"ppo_colocated": get_placement("colocated", c, algo),
            "ppo_split": get_placement("split", c, algo, value_devices=1)}


def configs(size: str, keys, **overrides) -> tuple[dict, dict]:
    """(key -> RunConfig, key -> Placement) for ``keys`` (GRPO's and PPO's); an unknown key is one error."""
    unknown_keys = [k for k in keys if k not in ALL_KEYS]
    if unknown_keys:
        raise RlmLabError(f"unknown placement(s) {', '.join(unknown_keys)}; choose from {', '.join(ALL_KEYS)}")
    grpo = run_config(size, **overrides)
    ppo = run_config(size, "ppo", **overrides) if any(k in PPO_KEYS for k in keys) else None
    chosen = {**placements(grpo), **(ppo_placements(ppo) if ppo is not None else {})}
    return ({k: ppo if k in PPO_KEYS else grpo for k in keys}, {k: chosen[k] for k in keys})


LORA_LR = 1e-3  # adapters train at a higher learning rate than full fine-tuning (1e-4); the usual PEFT practice


def run_config_preset_steps(size: str) -> int:
    return preset("grpo", size)["rl_steps"]


# the memory run: a zoo model large enough for its states to stand out of the runtime's resident memory,
# a few steps, no SFT warm start (memory does not depend on the weights' values), as --lora-memory does
MEMORY_RUN = {"model": "small", "rl_steps": 3, "sft_steps": 0}


# rlm-lab reference --chapter 5: the placements' step times, each pair of placements the page sets side by side,
# re-measured under the protocol (step time: lower is better). One repeat is a fresh process that starts its own Ray
# and runs one placement at the size's placement_steps; at cpu size the committed runs took 14-18 s inside one Ray
# session, and a fresh process adds Ray's start (about 10 s on 2 cores): 25-30 s a repeat.
_ARM = "rlm_lab.chapters.ch05_placement.run:reference_arm"
_PREDICT = "rlm_lab.chapters.ch05_placement.run:predict_arm"
REFERENCES = (
    Reference("disaggregated_vs_colocated", ("disaggregated", "colocated"), _ARM, "step_s", False,
              ("ch05_disaggregated", "ch05_colocated"), 28.0, _PREDICT),
    Reference("object_store_vs_collective", ("disaggregated_object_store", "disaggregated"), _ARM, "step_s", False,
              ("ch05_disaggregated_object_store",), 28.0, _PREDICT),
    Reference("lora_vs_full", ("disaggregated_lora", "disaggregated"), _ARM, "step_s", False,
              ("ch05_disaggregated_lora",), 28.0, _PREDICT),
    Reference("ppo_split_vs_colocated", ("ppo_split", "ppo_colocated"), _ARM, "step_s", False,
              ("ch05_ppo_split", "ch05_ppo_colocated"), 30.0, _PREDICT),
)
