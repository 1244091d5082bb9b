"""AReaL (https://github.com/inclusionAI/AReaL): an experiment YAML as in its ``examples/math/*.yaml``.

Mapping (key names from AReaL's example configs, ``configs/frameworks/areal/options.txt``):

- devices: ``rollout.backend`` and ``actor.backend`` strings ``ENGINE:dims`` (``sglang:d4p1t1``, ``fsdp:d4``;
  d data, t tensor, p pipeline parallel sizes; AReaL's ``areal/api/alloc_mode.py``), or the older
  ``allocation_mode: sglang:d4p1t1+d4p1t1``; the two run on separate GPUs (AReaL's default ``separation``) on
  ``cluster.n_nodes x n_gpus_per_node``, or share the actor's GPUs (``rollout.scheduling_strategy.type:
  colocation``, or ``GEN|TRAIN`` in ``allocation_mode``: one set, the FSDP actor resharded into the engine's tp);
- batch: ``train_dataset.batch_size`` prompts x ``gconfig.n_samples``; ``gconfig.max_new_tokens`` (response cap),
  ``train_dataset.max_length`` (prompt cap); ``actor.ppo_n_minibatches``; ``actor.mb_spec.max_tokens_per_mb``
  (packed micro-batches: that many tokens, no padding); ``actor.gradient_checkpointing``; ``actor.dtype``;
  ``actor.recompute_logprob``;
- ``actor.kl_ctl`` -> beta (0: no reference model; the ``ref`` block is then unused), the reference on the actor's
  GPUs unless ``ref.scheduling_strategy.type`` is ``separation`` (then ``ref.backend`` gives its own GPUs);
- mode: ``rollout.max_head_offpolicyness`` -> eta (0 = synchronous; AReaL arXiv 2505.24298 Sec. 4,
  https://inclusionai.github.io/AReaL/algorithms/async.html);
- engine: at most ``rollout.max_concurrent_rollouts`` sequences in flight over the rollout replicas, KV budget
  ``sglang.mem_fraction_static`` (or ``vllm.gpu_memory_utilization``); LoRA: ``actor.use_lora``, ``lora_rank``,
  ``target_modules``.

A ``critic:`` block (AReaL's PPO): PPO with a rule reward (``reward: rule``, a verifier in place of the reward
model), the critic (``critic.path``) colocated with the actor as the examples schedule it.

The fsdp engine's ``c`` dimension is AReaL's Ulysses sequence parallelism: the train set's ``sp``; a megatron
trainer's ``p`` its pipeline stages: the set's ``pp``.

Refused: pipeline parallelism outside a megatron trainer, context parallelism outside the fsdp engine, a critic on
GPUs of its own, GPU counts beyond the cluster, a model without a shipped config.
"""

from __future__ import annotations

import math
import re

from ...errors import RlmLabError
from .common import (Keys, capped_response, finish, flatten, load_yaml, need_bool, need_int, need_num, need_str, one_set, resolve_model, resolve_refs,
                     mean_response, roles_of, set_dict)

NAME = "areal"
NOTES = {"actor.optimizer.*": "optimizer hyper-parameters do not change the step's cost", "saver.*": "checkpoints",
         "recover.*": "checkpoints", "evaluator.*": "evaluation", "stats_logger.*": "logging",
         "*experiment_name": "naming", "*trial_name": "naming", "*fileroot": "file location",
         "valid_dataset.*": "evaluation data", "train_dataset.path": "data location",
         "actor.use_decoupled_loss": "the loss's form does not change the step's cost",
         "*scheduling_spec*": "per-worker resources of AReaL's scheduler"}
_DIMS = re.compile(r"^([a-z_]+)(?:\[\w+\])?:((?:[dptce]\d+)+)$")


def parse_backend(value, key: str) -> tuple[str, dict]:
    """``"sglang:d4p1t2"`` -> ("sglang", {"d": 4, "p": 1, "t": 2}); pipeline / context parallelism refused, and
    AReaL's hybrid MoE syntax ``megatron:(attn:...|ffn:...)`` (hybrid_moe_syntax in areal/api/alloc_mode.py)."""
    m = _DIMS.match(str(value).strip()) if isinstance(value, str) else None
    if not m and isinstance(value, str) and re.match(r"^[a-z_]+:\(?attn:.*\|ffn:.*\)?$", value.strip()):
        raise RlmLabError(f"areal {key}={value!r}: a hybrid MoE layout (one parallel layout for attention, another "
                          f"for the experts' FFN) is not modelled by the predictor")
    if not m:
        raise RlmLabError(f"areal {key}={value!r} is not an AReaL backend string ENGINE:dims such as sglang:d4t1 or "
                          f"fsdp:d4 (areal/api/alloc_mode.py)")
    dims = {"d": 1, "p": 1, "t": 1, "c": 1, "e": 1} | {a: int(b) for a, b in re.findall(r"([dptce])(\d+)", m.group(2))}
    # AReaL's FSDP engine runs its c dimension as Ulysses sequence parallelism (areal/engine/fsdp_utils/parallel.py:
    # sp_size is cp_size, set_ulysses_sequence_parallel_group): priced as the set's sp; elsewhere c is context
    # parallelism proper (ring attention), which the predictor does not model
    # a megatron trainer's p is Megatron's pipeline parallelism: the set's pp (1F1B stages)
    if (dims["p"] > 1 and m.group(1) != "megatron") or (dims["c"] > 1 and m.group(1) != "fsdp"):
        raise RlmLabError(f"areal {key}={value!r}: pipeline (p) and context (c) parallelism are not modelled by the "
                          f"predictor here (p is priced for a megatron trainer, c for the fsdp engine, where AReaL "
                          f"runs it as Ulysses)")
    if min(dims.values()) < 1:
        raise RlmLabError(f"areal {key}={value!r}: every parallel size must be >= 1")
    return m.group(1), dims


def import_config(path: str, **_):
    raw = load_yaml(path, NAME)
    k = Keys(NAME, resolve_refs(flatten(raw), path), NOTES)
    assumed = []
    if not any(key.startswith(("rollout.", "gconfig.")) for key in k.flat) and not k.has("allocation_mode"):
        raise RlmLabError(f"areal config {path} has no rollout or gconfig block: an SFT (or other non-RL) "
                          f"experiment, nothing to price as an RL step")
    critic = None
    if any(key.startswith("critic.") for key in k.flat):
        # AReaL's PPO (a critic block): the critic trained beside the actor, the reward a rule (a verifier, no reward
        # model: reward "rule")
        strat = k.get("critic.scheduling_strategy.type", "colocation", "critic placement")
        if strat != "colocation" or k.get("critic.scheduling_strategy.target", "actor", "the actor's GPUs") != "actor":
            raise RlmLabError(f"areal critic.scheduling_strategy={strat!r} (target "
                              f"{k.flat.get('critic.scheduling_strategy.target')!r}): only a critic colocated with "
                              f"the actor is priced")
        critic = resolve_model(k.get("critic.path", k.flat.get("actor.path"), "critic"), "critic.path")
    model = resolve_model(k.get("actor.path", to="model"), "actor.path")
    if k.has("allocation_mode"):
        alloc = need_str(k.get("allocation_mode", to="rollout + actor GPUs"), "areal allocation_mode")
        colocated_alloc = "+" not in alloc and alloc.count("|") == 1   # GEN|TRAIN: shared GPUs (alloc_mode.py)
        parts = alloc.replace("|", "+").split("+")
        if len(parts) != 2:
            raise RlmLabError(f"areal allocation_mode={k.flat['allocation_mode']!r}: expected GEN+TRAIN")
        gen = parts[0] if ":" in parts[0] else parts[0].replace(".", ":", 1)
        train = parts[1] if ":" in parts[1] else "fsdp:" + parts[1]
        (ge, gd), (te, td) = parse_backend(gen, "allocation_mode"), parse_backend(train, "allocation_mode")
    else:
        colocated_alloc = False
        if not k.has("rollout.backend") or not k.has("actor.backend"):
            raise RlmLabError("areal config needs rollout.backend and actor.backend (e.g. sglang:d4, fsdp:d4) or "
                              "allocation_mode")
        ge, gd = parse_backend(k.get("rollout.backend", to="rollout GPUs = d x t, tp t"), "rollout.backend")
        te, td = parse_backend(k.get("actor.backend", to="actor GPUs = d x t, FSDP"), "actor.backend")
    if ge not in ("sglang", "vllm"):
        raise RlmLabError(f"areal rollout engine {ge!r}: sglang or vllm")
    if te not in ("fsdp", "megatron", "archon"):
        raise RlmLabError(f"areal training engine {te!r}: fsdp, megatron or archon")
    other = "vllm" if ge == "sglang" else "sglang"
    k.notes = {f"{other}.*": f"unused: the rollout engine is {ge}"} | k.notes
    if gd["c"] > 1:
        raise RlmLabError(f"areal rollout layout with c{gd['c']}: context parallelism in generation is not modelled")
    rdev, tdev = gd["d"] * gd["t"], td["d"] * td["t"] * td["c"] * td["p"]
    if td["c"] > 1:
        assumed.append(f"fsdp c{td['c']}: AReaL's Ulysses sequence parallelism (its FSDP engine's sp_size), "
                       f"{td['d']} x {td['c']} ranks, ZeRO-3 over all of them")
    nodes = need_int(k.get("cluster.n_nodes", 1, "cluster GPUs = n_nodes x n_gpus_per_node"), "cluster.n_nodes")
    per_node = need_int(k.get("cluster.n_gpus_per_node", 8, "cluster GPUs = n_nodes x n_gpus_per_node"), "cluster.n_gpus_per_node")
    shared = colocated_alloc or k.flat.get("rollout.scheduling_strategy.type") == "colocation"
    if (max(rdev, tdev) if shared else rdev + tdev) > nodes * per_node:
        raise RlmLabError(f"areal rollout ({rdev}) + actor ({tdev}) GPUs exceed the cluster's {nodes} x {per_node}")

    if not k.has("train_dataset.batch_size"):
        raise RlmLabError("areal config needs train_dataset.batch_size (the prompts of a step)")
    prompts = need_int(k.get("train_dataset.batch_size", 1, "workload.prompts"), "train_dataset.batch_size")
    group = need_int(k.get("gconfig.n_samples", 1, "workload.group_size"), "gconfig.n_samples")
    resp = need_int(k.get("gconfig.max_new_tokens", 16384, "workload.response (the cap)"),
                    "gconfig.max_new_tokens")
    prompt_len = need_int(k.get("train_dataset.max_length", 1024, "workload.prompt_len (the cap)"),
                          "train_dataset.max_length")
    response = capped_response(resp, "gconfig.max_new_tokens", assumed)
    mb = need_int(k.get("actor.ppo_n_minibatches", 4, "workload.minibatches"), "actor.ppo_n_minibatches")
    if (prompts * group) % mb:
        raise RlmLabError(f"areal actor.ppo_n_minibatches={mb} must divide the {prompts * group} samples of a step")
    dtype = need_str(k.get("actor.dtype", "bfloat16", "workload.precision"), "areal actor.dtype")
    if dtype not in ("bfloat16", "float16", "float32"):
        raise RlmLabError(f"areal actor.dtype={dtype!r}: bfloat16, float16 or float32")
    wl = {"prompts": prompts, "group_size": group, "prompt_len": prompt_len, "response": response, "minibatches": mb,
          "precision": "fp32" if dtype == "float32" else "bf16-mixed", "engine": "continuous", "padding": "none",
          "gradient_checkpointing": need_bool(k.get("actor.gradient_checkpointing", False,
                                                    "workload.gradient_checkpointing"), "actor.gradient_checkpointing")}
    tokens = k.get("actor.mb_spec.max_tokens_per_mb", None, "workload.micro_batch = tokens / mean sequence length")
    if tokens is not None:
        wl["micro_batch"] = max(1, int(need_int(tokens, "actor.mb_spec.max_tokens_per_mb")
                                       // (prompt_len + mean_response(response))))
    if k.has("actor.recompute_logprob"):
        wl["recompute_old"] = need_bool(k.get("actor.recompute_logprob", to="workload.recompute_old"),
                                        "actor.recompute_logprob")
    beta = need_num(k.get("actor.kl_ctl", 0.0, "beta (0: no reference model)"), "actor.kl_ctl")
    algorithm = "ppo" if critic else "grpo"
    roles = roles_of(algorithm, beta, "rule")
    train_roles = ["actor"] + (["critic"] if critic else [])
    sets = [set_dict("rollout", rdev, tp=gd["t"], key="areal rollout.backend")]
    if "reference" in roles:
        # every AReaL example colocates the reference with the actor (scheduling_strategy colocation, target actor)
        strat = k.get("ref.scheduling_strategy.type", "colocation", "reference placement")
        if strat == "colocation":
            train_roles.append("reference")
            k.use("ref.scheduling_strategy.target", "the actor's GPUs")
        else:
            if not k.has("ref.backend"):
                raise RlmLabError(f"areal ref.scheduling_strategy.type={strat!r} needs ref.backend (its GPUs)")
            _, rd = parse_backend(k.get("ref.backend", to="reference GPUs"), "ref.backend")
            sets.append(set_dict("ref", rd["d"] * rd["t"] * rd["p"], tp=rd["t"], key="areal ref.backend", pp=rd["p"]))
    else:
        for key in [key for key in k.flat if key.startswith("ref.")]:
            k.use(key, "unused: actor.kl_ctl is 0, no reference model")
    zero = 3 if te in ("fsdp", "archon") else 1
    rstrat = k.get("rollout.scheduling_strategy.type", "separation", "rollout placement (colocation: the actor's GPUs)")
    if colocated_alloc or rstrat == "colocation":
        # the rollout engine on the actor's GPUs (AReaL's colocation: GEN|TRAIN, or scheduling_strategy colocation)
        if rdev != tdev:
            raise RlmLabError(f"areal colocated rollout ({rdev} GPUs) and actor ({tdev} GPUs) must have the same GPUs")
        k.use("rollout.scheduling_strategy.target", "the actor's GPUs")
        if td["c"] > 1:
            raise RlmLabError("areal colocated rollout with a sequence-parallel (c) trainer: not priced")
        placement = one_set(roles, tdev, zero, gen_tp=gd["t"], tp=td["t"], assumed=assumed, pp=td["p"])
    else:
        sets.insert(1, set_dict("train", tdev, tp=td["t"], zero=zero, key="areal actor.backend", sp=td["c"],
                                pp=td["p"]))
        where = {"rollout": "rollout"} | {r: "train" for r in train_roles}
        if "reference" in roles and "reference" not in train_roles:
            where["reference"] = "ref"
        placement = {"name": "areal", "sets": sets, "roles": where, "sync": "collective", "reshard": False}
        assumed.append("weights sent to the rollout servers (NCCL, AReaL's xccl) after each update")
    off = need_int(k.get("rollout.max_head_offpolicyness", 0, "eta"), "rollout.max_head_offpolicyness", minimum=0)
    mode, eta = ("async", off) if off > 0 else ("sync", 0)
    conc = need_int(k.get("rollout.max_concurrent_rollouts", 256, "sequences in flight (all replicas)"),
                    "rollout.max_concurrent_rollouts")
    frac_key = "sglang.mem_fraction_static" if ge == "sglang" else "vllm.gpu_memory_utilization"
    engine = {"what": f"{ge} server", "max_num_seqs": max(1, math.ceil(conc / gd["d"])), "in_flight": conc,
              "memory_fraction": need_num(k.get(frac_key, 0.8, "the engine's memory share (KV cache)"), frac_key)}
    cfg = {"model": model, "algorithm": algorithm, "beta": beta, "workload": wl, "placement": placement,
           "cluster": {"devices": nodes * per_node, "kind": "gpu"}}
    if critic:
        cfg |= {"critic": critic, "reward": "rule"}
    if need_bool(k.get("actor.use_lora", False, "LoRA"), "actor.use_lora"):
        cfg["lora"] = {"rank": need_int(k.get("actor.lora_rank", 32, "lora.rank"), "actor.lora_rank"),
                       "targets": k.get("actor.target_modules", None, "lora.targets") or "all-linear"}
    return finish(NAME, str(path), k, cfg, mode, eta, assumed, engine=engine, prompt_cap="train_dataset.max_length")
