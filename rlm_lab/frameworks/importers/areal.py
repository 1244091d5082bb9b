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
from .common import (Key, Keys, capped_response, finish, flatten, load_yaml, mean_response, need_int, need_str, one_set,
                     read_key, read_table, resolve_model, resolve_refs, roles_of, set_dict)

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


# ---- the key tables: (key, field, kind, default, what it sets); read in order by common.read_table ---------
CLUSTER = (Key("cluster.n_nodes", "nodes", "int", 1, "cluster GPUs = n_nodes x n_gpus_per_node"),
           Key("cluster.n_gpus_per_node", "per_node", "int", 8, "cluster GPUs = n_nodes x n_gpus_per_node"))
BATCH = (Key("train_dataset.batch_size", "prompts", "int", 1, "workload.prompts"),
         Key("gconfig.n_samples", "group", "int", 1, "workload.group_size"),
         Key("gconfig.max_new_tokens", "resp", "int", 16384, "workload.response (the cap)"),
         Key("train_dataset.max_length", "prompt_len", "int", 1024, "workload.prompt_len (the cap)"))
MINIBATCHES = Key("actor.ppo_n_minibatches", "mb", "int", 4, "workload.minibatches")
DTYPE = Key("actor.dtype", "dtype", "str", "bfloat16", "workload.precision", "areal actor.dtype")
CHECKPOINTING = Key("actor.gradient_checkpointing", "gc", "bool", False, "workload.gradient_checkpointing")
TOKENS = Key("actor.mb_spec.max_tokens_per_mb", "tokens", "raw", None,
             "workload.micro_batch = tokens / mean sequence length")
RECOMPUTE = Key("actor.recompute_logprob", "recompute_old", "bool", None, "workload.recompute_old")
BETA = Key("actor.kl_ctl", "beta", "num", 0.0, "beta (0: no reference model)")
ROLLOUT_PLACEMENT = Key("rollout.scheduling_strategy.type", "strategy", "raw", "separation",
                        "rollout placement (colocation: the actor's GPUs)")
OFFPOLICY = Key("rollout.max_head_offpolicyness", "eta", "int0", 0, "eta")
CONCURRENT = Key("rollout.max_concurrent_rollouts", "conc", "int", 256, "sequences in flight (all replicas)")
MEMORY_FRACTION = {ge: Key(key, "memory_fraction", "num", 0.8, "the engine's memory share (KV cache)")
                   for ge, key in (("sglang", "sglang.mem_fraction_static"), ("vllm", "vllm.gpu_memory_utilization"))}
LORA = (Key("actor.use_lora", "on", "bool", False, "LoRA"), Key("actor.lora_rank", "rank", "int", 32, "lora.rank"),
        Key("actor.target_modules", "targets", "raw", None, "lora.targets"))


# ---- derived values ---------------------------------------------------------------------------------------
def _keys(path: str) -> Keys:
    """The config's keys; refused: an experiment with no rollout (SFT or another non-RL run)."""
    raw = load_yaml(path, NAME)
    k = Keys(NAME, resolve_refs(flatten(raw), path), NOTES)
    if not any(key.startswith(("rollout.", "gconfig.")) for key in k.flat) and not k.has("allocation_mode"):
        raise RlmLabError(f"areal config {path} has no rollout or gconfig block: an SFT (or other non-RL) "
                          f"experiment, nothing to price as an RL step")
    return k


def _critic(k: Keys) -> str | None:
    """AReaL's PPO (a critic block): the critic trained beside the actor, the reward a rule (a verifier, no reward
    model: reward "rule"); refused: a critic on GPUs of its own."""
    if not any(key.startswith("critic.") for key in k.flat):
        return None
    strat = k.get("critic.scheduling_strategy.type", "colocation", "critic placement")
    if strat != "colocation" or k.get("critic.scheduling_strategy.target", "actor", "the actor's GPUs") != "actor":
        raise RlmLabError(f"areal critic.scheduling_strategy={strat!r} (target "
                          f"{k.flat.get('critic.scheduling_strategy.target')!r}): only a critic colocated with "
                          f"the actor is priced")
    return resolve_model(k.get("critic.path", k.flat.get("actor.path"), "critic"), "critic.path")


def _backends(k: Keys) -> tuple[bool, tuple, tuple]:
    """(GEN|TRAIN colocation, (rollout engine, dims), (training engine, dims)): ``allocation_mode`` or the two
    ``backend`` strings."""
    if k.has("allocation_mode"):
        alloc = need_str(k.get("allocation_mode", to="rollout + actor GPUs"), "areal allocation_mode")
        colocated_alloc = "+" not in alloc and alloc.count("|") == 1   # GEN|TRAIN: shared GPUs (alloc_mode.py)
        parts = alloc.replace("|", "+").split("+")
        if len(parts) != 2:
            raise RlmLabError(f"areal allocation_mode={k.flat['allocation_mode']!r}: expected GEN+TRAIN")
        gen = parts[0] if ":" in parts[0] else parts[0].replace(".", ":", 1)
        train = parts[1] if ":" in parts[1] else "fsdp:" + parts[1]
        rollout, trainer = parse_backend(gen, "allocation_mode"), parse_backend(train, "allocation_mode")
    else:
        colocated_alloc = False
        if not k.has("rollout.backend") or not k.has("actor.backend"):
            raise RlmLabError("areal config needs rollout.backend and actor.backend (e.g. sglang:d4, fsdp:d4) or "
                              "allocation_mode")
        rollout = parse_backend(k.get("rollout.backend", to="rollout GPUs = d x t, tp t"), "rollout.backend")
        trainer = parse_backend(k.get("actor.backend", to="actor GPUs = d x t, FSDP"), "actor.backend")
    if rollout[0] not in ("sglang", "vllm"):
        raise RlmLabError(f"areal rollout engine {rollout[0]!r}: sglang or vllm")
    if trainer[0] not in ("fsdp", "megatron", "archon"):
        raise RlmLabError(f"areal training engine {trainer[0]!r}: fsdp, megatron or archon")
    other = "vllm" if rollout[0] == "sglang" else "sglang"
    k.notes = {f"{other}.*": f"unused: the rollout engine is {rollout[0]}"} | k.notes
    return colocated_alloc, rollout, trainer


def _devices(k: Keys, gd: dict, td: dict, colocated_alloc: bool, assumed: list) -> tuple[int, int, dict]:
    """(rollout GPUs, actor GPUs, cluster {nodes, per_node}); refused: context parallelism in generation, more GPUs
    than the cluster has."""
    if gd["c"] > 1:
        raise RlmLabError(f"areal rollout layout with c{gd['c']}: context parallelism in generation is not modelled")
    rdev, tdev = gd["d"] * gd["t"], td["d"] * td["t"] * td["c"] * td["p"]
    if td["c"] > 1:
        assumed.append(f"fsdp c{td['c']}: AReaL's Ulysses sequence parallelism (its FSDP engine's sp_size), "
                       f"{td['d']} x {td['c']} ranks, ZeRO-3 over all of them")
    c = read_table(k, CLUSTER)
    shared = colocated_alloc or k.flat.get("rollout.scheduling_strategy.type") == "colocation"
    if (max(rdev, tdev) if shared else rdev + tdev) > c["nodes"] * c["per_node"]:
        raise RlmLabError(f"areal rollout ({rdev}) + actor ({tdev}) GPUs exceed the cluster's {c['nodes']} x "
                          f"{c['per_node']}")
    return rdev, tdev, c


def _workload(k: Keys, assumed: list) -> dict:
    """The workload: batch, caps, mini-batches, precision, packed micro-batches, old log-probs."""
    if not k.has("train_dataset.batch_size"):
        raise RlmLabError("areal config needs train_dataset.batch_size (the prompts of a step)")
    b = read_table(k, BATCH)
    response = capped_response(b["resp"], "gconfig.max_new_tokens", assumed)
    mb = read_key(k, MINIBATCHES)
    if (b["prompts"] * b["group"]) % mb:
        raise RlmLabError(f"areal actor.ppo_n_minibatches={mb} must divide the {b['prompts'] * b['group']} samples of "
                          f"a step")
    dtype = read_key(k, DTYPE)
    if dtype not in ("bfloat16", "float16", "float32"):
        raise RlmLabError(f"areal actor.dtype={dtype!r}: bfloat16, float16 or float32")
    wl = {"prompts": b["prompts"], "group_size": b["group"], "prompt_len": b["prompt_len"], "response": response,
          "minibatches": mb, "precision": "fp32" if dtype == "float32" else "bf16-mixed", "engine": "continuous",
          "padding": "none", "gradient_checkpointing": read_key(k, CHECKPOINTING)}
    tokens = read_key(k, TOKENS)
    if tokens is not None:
        wl["micro_batch"] = max(1, int(need_int(tokens, TOKENS.key) // (b["prompt_len"] + mean_response(response))))
    if k.has(RECOMPUTE.key):
        wl["recompute_old"] = read_key(k, RECOMPUTE)
    return wl


def _reference(k: Keys, roles, train_roles: list, sets: list) -> None:
    """The reference on the actor's GPUs (every AReaL example colocates it) or, with ``separation``, on
    ``ref.backend``'s; with no reference (kl_ctl 0) the ref block is unused."""
    if "reference" not in roles:
        for key in [key for key in k.flat if key.startswith("ref.")]:
            k.use(key, "unused: actor.kl_ctl is 0, no reference model")
        return
    strat = k.get("ref.scheduling_strategy.type", "colocation", "reference placement")
    if strat == "colocation":
        train_roles.append("reference")
        k.use("ref.scheduling_strategy.target", "the actor's GPUs")
        return
    if not k.has("ref.backend"):
        raise RlmLabError(f"areal ref.scheduling_strategy.type={strat!r} needs ref.backend (its GPUs)")
    _, rd = parse_backend(k.get("ref.backend", to="reference GPUs"), "ref.backend")
    sets.append(set_dict("ref", rd["d"] * rd["t"] * rd["p"], tp=rd["t"], key="areal ref.backend", pp=rd["p"]))


def _placement(k: Keys, roles, critic, backends: tuple, rdev: int, tdev: int, assumed: list) -> dict:
    """The rollout on the actor's GPUs (colocation: one set) or on its own (AReaL's separation), the reference
    beside the actor or on its own GPUs."""
    colocated_alloc, (_, gd), (te, td) = backends
    train_roles = ["actor"] + (["critic"] if critic else [])
    sets = [set_dict("rollout", rdev, tp=gd["t"], key="areal rollout.backend")]
    _reference(k, roles, train_roles, sets)
    zero = 3 if te in ("fsdp", "archon") else 1
    rstrat = read_key(k, ROLLOUT_PLACEMENT)
    if colocated_alloc or rstrat == "colocation":
        # the rollout engine on the actor's GPUs (AReaL's colocation: GEN|TRAIN, or scheduling_strategy colocation)
        if rdev != tdev:
            raise RlmLabError(f"areal colocated rollout ({rdev} GPUs) and actor ({tdev} GPUs) must have the same GPUs")
        k.use("rollout.scheduling_strategy.target", "the actor's GPUs")
        if td["c"] > 1:
            raise RlmLabError("areal colocated rollout with a sequence-parallel (c) trainer: not priced")
        return one_set(roles, tdev, zero, gen_tp=gd["t"], tp=td["t"], assumed=assumed, pp=td["p"])
    sets.insert(1, set_dict("train", tdev, tp=td["t"], zero=zero, key="areal actor.backend", sp=td["c"], pp=td["p"]))
    where = {"rollout": "rollout"} | {r: "train" for r in train_roles}
    if "reference" in roles and "reference" not in train_roles:
        where["reference"] = "ref"
    assumed.append("weights sent to the rollout servers (NCCL, AReaL's xccl) after each update")
    return {"name": "areal", "sets": sets, "roles": where, "sync": "collective", "reshard": False}


def _engine(k: Keys, ge: str, gd: dict) -> dict:
    """At most max_concurrent_rollouts sequences in flight over the rollout replicas, the engine's memory share."""
    conc = read_key(k, CONCURRENT)
    return {"what": f"{ge} server", "max_num_seqs": max(1, math.ceil(conc / gd["d"])), "in_flight": conc,
            "memory_fraction": read_key(k, MEMORY_FRACTION[ge])}


def import_config(path: str, **_):
    k = _keys(path)
    assumed = []
    critic = _critic(k)
    model = resolve_model(k.get("actor.path", to="model"), "actor.path")
    backends = _backends(k)
    colocated_alloc, (ge, gd), (_, td) = backends
    rdev, tdev, c = _devices(k, gd, td, colocated_alloc, assumed)
    wl = _workload(k, assumed)
    beta = read_key(k, BETA)
    algorithm = "ppo" if critic else "grpo"
    placement = _placement(k, roles_of(algorithm, beta, "rule"), critic, backends, rdev, tdev, assumed)
    off = read_key(k, OFFPOLICY)
    mode, eta = ("async", off) if off > 0 else ("sync", 0)
    engine = _engine(k, ge, gd)
    cfg = {"model": model, "algorithm": algorithm, "beta": beta, "workload": wl, "placement": placement,
           "cluster": {"devices": c["nodes"] * c["per_node"], "kind": "gpu"}}
    if critic:
        cfg |= {"critic": critic, "reward": "rule"}
    if read_key(k, LORA[0]):
        cfg["lora"] = {"rank": read_key(k, LORA[1]), "targets": read_key(k, LORA[2]) or "all-linear"}
    return finish(NAME, str(path), k, cfg, mode, eta, assumed, engine=engine, prompt_cap="train_dataset.max_length")
