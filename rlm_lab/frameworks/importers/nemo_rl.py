"""NeMo-RL (https://github.com/NVIDIA-NeMo/RL): a GRPO config YAML (``examples/run_grpo.py --config FILE``); a
recipe's ``defaults: BASE.yaml`` (a path relative to the recipe) is merged under it first, as NeMo-RL does (the
recipe's values win, a ``null`` clears the inherited block).

Mapping (key names and defaults from ``examples/configs/grpo_math_1B.yaml``, the base of NeMo-RL's GRPO recipes):

- batch: ``grpo.num_prompts_per_step`` x ``grpo.num_generations_per_prompt``; ``policy.train_global_batch_size``
  samples per optimizer step -> mini-batches; ``policy.train_micro_batch_size``; the prompt and the response
  share ``policy.max_total_sequence_length`` (the response capped by ``policy.generation.max_new_tokens``);
  ``policy.sequence_packing.enabled`` or ``policy.dynamic_batching.enabled`` -> no padding;
- ``loss_fn.reference_policy_kl_penalty`` -> beta, and with beta > 0 (no LoRA) the ``swap`` offload: NeMo-RL's policy
  workers keep the reference's weights on the CPU and swap them in for its log-probs (``use_reference_model``);
  ``policy.precision`` bfloat16 -> bf16 mixed precision;
- training layout: ``policy.dtensor_cfg`` (FSDP2, ZeRO-3; ``tensor_parallel_size``, ``activation_checkpointing``)
  or ``policy.megatron_cfg`` when enabled (``tensor_model_parallel_size``; distributed optimizer = ZeRO-1);
- placement: ``policy.generation.colocated.enabled`` true (default): one set of ``cluster.num_nodes x
  gpus_per_node`` GPUs, the policy resharded into vLLM's ``tensor_parallel_size``; false: generation on
  ``colocated.resources`` (on one node: ``gpus_per_node`` of it; on several: whole nodes, and NeMo-RL requires
  ``resources.gpus_per_node`` = ``cluster.gpus_per_node``), training on the rest, weights sent after each step;
- mode: ``grpo.async_grpo.enabled`` -> async with eta = ``max_trajectory_age_steps``
  (https://docs.nvidia.com/nemo/rl/latest/guides/async-grpo.html);
- engine: ``policy.generation.backend`` vllm, sglang or megatron -> continuous batching with KV budget
  ``vllm_cfg.gpu_memory_utilization``; LoRA: ``dtensor_cfg.lora_cfg`` (``dim``, ``match_all_linear``).

Megatron pipeline parallelism (``megatron_cfg.pipeline_model_parallel_size``) -> the set's ``pp`` (1F1B stages,
resharded into the engine's TP).

Refused: context parallelism (``context_parallel_size`` > 1), pipeline-parallel generation
(``vllm_cfg.pipeline_parallel_size`` > 1), a split NeMo-RL itself rejects, a model without a shipped config.
"""

from __future__ import annotations

from pathlib import Path

from ...errors import RlmLabError
from .common import (Key, Keys, capped_response, finish, flatten, load_yaml, need_int, one_set, read_key, read_table,
                     resolve_model, resolve_refs, roles_of, two_sets)

NAME = "nemo-rl"
NOTES = {"checkpointing.*": "checkpoints", "logger.*": "logging",
         "grpo.async_grpo.in_flight_weight_updates": "in-flight weight updates (generation continues across a "
                                                    "weight update) not priced: the step is priced as if it waits",
         "async_rl.max_inflight_prompts": "in-flight limit: the engine's batch is priced from max_num_seqs",
         "async_rl.min_groups_for_streaming_train": "streaming granularity not priced (one step = one batch)",
         "policy.optimizer.*": "optimizer hyper-parameters do not change the step's cost",
         "policy.megatron_cfg.optimizer.*": "optimizer hyper-parameters do not change the step's cost",
         "policy.scheduler*": "learning-rate schedule", "policy.megatron_cfg.scheduler.*": "learning-rate schedule",
         "data.*": "data set", "env.*": "reward environment", "grpo.use_dynamic_sampling":
         "dynamic sampling: its inflation depends on the pass rate, which no config holds (predicted without)",
         "policy.dtensor_cfg.cpu_offload": "offload to CPU not modelled",
         "grpo.max_num_epochs": "passes over the data set, not PPO epochs"}


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, v in over.items():
        out[key] = _merge(out[key], v) if isinstance(v, dict) and isinstance(out.get(key), dict) else v
    return out


def load_with_defaults(path, depth: int = 0) -> dict:
    if depth > 8:
        raise RlmLabError(f"nemo-rl config {path}: defaults nest deeper than 8 files (a loop?)")
    data = dict(load_yaml(path, NAME))
    parents = data.pop("defaults", None)
    if parents is None:
        return data
    merged: dict = {}
    for parent in [parents] if isinstance(parents, str) else parents if isinstance(parents, list) else [None]:
        if not isinstance(parent, str):
            raise RlmLabError(f"nemo-rl config {path}: defaults must be a file name or a list of them, got {parents!r}")
        merged = _merge(merged, load_with_defaults(Path(path).parent / parent, depth + 1))
    return _merge(merged, data)


# ---- the key tables: (key, field, kind, default, what it sets); read in order by common.read_table ---------
G = "policy.generation."
BATCH = (Key("grpo.num_prompts_per_step", "prompts", "int", 32, "workload.prompts"),
         Key("grpo.num_generations_per_prompt", "group", "int", 16, "workload.group_size"),
         Key("policy.train_global_batch_size", "gbs", "int", 512, "samples per optimizer step -> minibatches"))
TOTAL = Key("policy.max_total_sequence_length", "total", "int", 512, "prompt + response length")
PRECISION = Key("policy.precision", "precision", "str", "bfloat16", "workload.precision", "nemo-rl policy.precision")
MICRO = Key("policy.train_micro_batch_size", "micro_batch", "int", 4, "workload.micro_batch")
PADDING = (Key("policy.sequence_packing.enabled", "packing", "bool", True, "workload.padding"),
           Key("policy.dynamic_batching.enabled", "dynamic", "bool", False, "workload.padding"))
BETA = Key("loss_fn.reference_policy_kl_penalty", "beta", "num", 0.01, "beta")
MEGATRON_ON = Key("policy.megatron_cfg.enabled", "megatron", "bool", False, "training backend")
CP = Key("context_parallel_size", "cp", "int", 1, "checked: 1")
# the two training backends' layouts, under policy.megatron_cfg. and policy.dtensor_cfg.
MEGATRON = (Key("pipeline_model_parallel_size", "pp", "int", 1,
                "training pp (Megatron's 1F1B stages, resharded into the engine's tp)"),
            Key("tensor_model_parallel_size", "tp", "int", 1, "training tp"),
            Key("expert_model_parallel_size", "ep", "int", 1, "training ep (MoE experts split)"),
            Key("optimizer.use_distributed_optimizer", "zero1", "bool", True, "ZeRO-1"),
            Key("activation_checkpointing", "gradient_checkpointing", "bool", False, "workload.gradient_checkpointing"))
DTENSOR = (Key("tensor_parallel_size", "tp", "int", 1, "training tp"),
           Key("activation_checkpointing", "gradient_checkpointing", "bool", False, "workload.gradient_checkpointing"))
BACKEND = Key("backend", "backend", "str", "vllm", "workload.engine", f"nemo-rl {G}backend")
GEN_PP = Key("vllm_cfg.pipeline_parallel_size", "gen_pp", "int", 1, "checked: 1")
ENGINE = (Key("vllm_cfg.tensor_parallel_size", "gen_tp", "int", 1, "generation tp"),
          Key("vllm_cfg.gpu_memory_utilization", "memory_fraction", "num", 0.6, "the engine's memory share (KV cache)"))
CLUSTER = (Key("cluster.gpus_per_node", "per_node", "int", 1, "GPUs per node"),
           Key("cluster.num_nodes", "nodes", "int", 1, "nodes"))
COLOCATED = Key(G + "colocated.enabled", "colocated", "bool", True, "placement")
ASYNC = (Key("grpo.async_grpo.enabled", "on", "bool", False, "mode async"),
         Key("grpo.async_grpo.max_trajectory_age_steps", "eta", "int", 1, "eta"))
STALENESS = Key("async_rl.sampler.max_staleness_versions", "eta", "int0", 1, "eta (policy versions a sample may lag)")
LC = "policy.dtensor_cfg.lora_cfg."
LORA = (Key(LC + "enabled", "on", "bool", False, "LoRA"), Key(LC + "match_all_linear", "all", "bool", True, "lora.targets"),
        Key(LC + "target_modules", "targets", "raw", None, "lora.targets"), Key(LC + "dim", "rank", "int", 8, "lora.rank"))


# ---- derived values ---------------------------------------------------------------------------------------
def _keys(path: str) -> Keys:
    """The config's keys, its defaults merged under it; only what this file writes is sorted into ignored / unknown
    (its bases' keys are NeMo-RL's own); refused: an SFT, DPO, RM, distillation or eval config."""
    raw = load_with_defaults(path)
    for other in ("sft", "dpo", "rm", "distillation", "eval"):
        if isinstance(raw.get(other), dict) and not isinstance(raw.get("grpo"), dict):
            raise RlmLabError(f"nemo-rl config {path} is {'an' if other in ('sft', 'rm') else 'a'} {other.upper()} config "
                              f"(its {other}: block, no grpo: block): not a GRPO step")
    flat = resolve_refs(flatten(raw), path)
    top = load_yaml(path, NAME)
    if "defaults" in top:
        flat["defaults"] = top["defaults"]
    k = Keys(NAME, flat, NOTES, written=list(flatten(top)))
    k.use("defaults", "the base config merged under this one")
    return k


def _workload(k: Keys, assumed: list) -> dict:
    """The workload: batch, the prompt and the response sharing max_total_sequence_length, precision, padding."""
    b = read_table(k, BATCH)
    n = b["prompts"] * b["group"]
    if n % b["gbs"] and b["gbs"] % n:
        raise RlmLabError(f"nemo-rl policy.train_global_batch_size={b['gbs']} must divide the {n} samples of a step "
                          f"(num_prompts_per_step x num_generations_per_prompt)")
    total = read_key(k, TOTAL)
    new = k.get(G + "max_new_tokens", total, "response cap")
    new = need_int(new, G + "max_new_tokens") if not isinstance(new, str) else total
    if new < total:                       # the response cap leaves the rest of the sequence to the prompt
        prompt_len, resp = total - new, new
    else:                                 # the cap is the whole sequence: split it evenly
        prompt_len = max(1, total // 2)
        resp = max(1, total - prompt_len)
    assumed.append(f"prompt and response share max_total_sequence_length {total}: {prompt_len} + {resp}")
    response = capped_response(resp, G + "max_new_tokens", assumed)
    precision = read_key(k, PRECISION)
    if precision not in ("bfloat16", "float16", "float32"):
        raise RlmLabError(f"nemo-rl policy.precision={precision!r}: bfloat16, float16 or float32")
    wl = {"prompts": b["prompts"], "group_size": b["group"], "prompt_len": prompt_len, "response": response,
          "minibatches": max(1, n // b["gbs"]), "precision": "fp32" if precision == "float32" else "bf16-mixed",
          "micro_batch": read_key(k, MICRO)}
    pad = read_table(k, PADDING)
    wl["padding"] = "none" if pad["packing"] or pad["dynamic"] else "batch"
    return wl


def _training(k: Keys, wl: dict) -> tuple[bool, dict]:
    """(Megatron or not, {tp, ep, pp, zero}) of the training backend; refused: context parallelism."""
    megatron = read_key(k, MEGATRON_ON)
    prefix = "policy.megatron_cfg." if megatron else "policy.dtensor_cfg."
    if read_key(k, CP, prefix=prefix) > 1:
        raise RlmLabError(f"nemo-rl {prefix}context_parallel_size={k.flat[prefix + 'context_parallel_size']}: context "
                          f"parallelism is not modelled by the predictor")
    if megatron:
        lay = read_table(k, MEGATRON, prefix=prefix)
        lay["zero"] = 1 if lay.pop("zero1") else 0
    else:
        lay = read_table(k, DTENSOR, prefix=prefix) | {"ep": 1, "pp": 1, "zero": 3}
    wl["gradient_checkpointing"] = lay.pop("gradient_checkpointing")
    off = "policy.dtensor_cfg.*" if megatron else "policy.megatron_cfg.*"
    k.notes = {off: f"unused: policy.megatron_cfg.enabled is {str(megatron).lower()}"} | k.notes
    return megatron, lay


def _engine(k: Keys, wl: dict, assumed: list) -> tuple[dict, int]:
    """(the engine's batch limit and memory share, generation tp); refused: pipeline-parallel generation."""
    backend = read_key(k, BACKEND, prefix=G)
    if backend not in ("vllm", "sglang", "megatron"):
        raise RlmLabError(f"nemo-rl {G}backend={backend!r}: vllm, sglang or megatron")
    wl["engine"] = "continuous"
    if read_key(k, GEN_PP, prefix=G) > 1:
        raise RlmLabError(f"nemo-rl {G}vllm_cfg.pipeline_parallel_size > 1: pipeline-parallel generation is not priced")
    e = read_table(k, ENGINE, prefix=G)
    assumed.append("vLLM's max_num_seqs default (256): NeMo-RL's base config does not set it")
    return {"what": f"{backend} engine", "max_num_seqs": 256, "memory_fraction": e["memory_fraction"]}, e["gen_tp"]


def _split(k: Keys, per_node: int, nodes: int) -> tuple[int, int]:
    """(generation GPUs, training GPUs) of non-colocated generation, as NeMo-RL asserts them."""
    r = G + "colocated.resources."
    rg, rn = k.get(r + "gpus_per_node", None, "rollout GPUs"), k.get(r + "num_nodes", None, "rollout nodes")
    if nodes == 1:
        if rg is None or need_int(rg, r + "gpus_per_node") >= per_node:
            raise RlmLabError(f"nemo-rl {r}gpus_per_node must be set and below cluster.gpus_per_node={per_node} "
                              f"on one node with non-colocated generation (NeMo-RL asserts it), got {rg!r}")
        return rg, per_node - rg
    if rn is None or rg != per_node:
        raise RlmLabError(f"nemo-rl on {nodes} nodes with non-colocated generation needs {r}num_nodes set and "
                          f"{r}gpus_per_node = cluster.gpus_per_node = {per_node} (NeMo-RL asserts it), got "
                          f"num_nodes={rn!r}, gpus_per_node={rg!r}")
    rn = need_int(rn, r + "num_nodes")
    if rn >= nodes:
        raise RlmLabError(f"nemo-rl {r}num_nodes={rn} leaves no node of {nodes} for training")
    return rn * per_node, (nodes - rn) * per_node


def _placement(k: Keys, roles, lay: dict, gen_tp: int, c: dict, assumed: list) -> dict:
    """One set resharded into the engine's tp (colocated), or generation and training GPUs split."""
    if read_key(k, COLOCATED):
        placement = one_set(roles, c["per_node"] * c["nodes"], lay["zero"], gen_tp=gen_tp, tp=lay["tp"], ep=lay["ep"],
                            assumed=assumed, pp=lay["pp"])
        for key in ("gpus_per_node", "num_nodes"):
            k.use(G + "colocated.resources." + key, "unused: generation colocated")
        return placement
    rollout, train = _split(k, c["per_node"], c["nodes"])
    assumed.append("weights sent to the generation GPUs (NCCL) after each step")
    return two_sets(roles, rollout, train, gen_tp, lay["zero"], lay["tp"], lay["ep"], lay["pp"])


def _mode(k: Keys, assumed: list) -> tuple[str, int]:
    """(mode, eta): async GRPO's max_trajectory_age_steps, or the single-controller path's windowed sampler (async_rl.*:
    samples at most max_staleness_versions policy versions old)."""
    mode, eta = "sync", 0
    if read_key(k, ASYNC[0]):
        mode, eta = "async", read_key(k, ASYNC[1])
    if any(key.startswith("async_rl.") for key in k.flat):
        eta = read_key(k, STALENESS)
        mode = "async" if eta > 0 else "sync"
        assumed.append(f"NeMo-RL single-controller async_rl: async with eta {eta} ({STALENESS.key})")
    return mode, eta


def _lora(k: Keys, megatron: bool) -> dict | None:
    """DTensor's LoRA (``lora_cfg``): rank ``dim``, every linear layer or ``target_modules``."""
    if megatron or not read_key(k, LORA[0]):
        return None
    targets = "all-linear" if read_key(k, LORA[1]) else read_key(k, LORA[2])
    return {"rank": read_key(k, LORA[3]), "targets": targets}


def import_config(path: str, **_):
    k = _keys(path)
    assumed = []
    model = resolve_model(k.get("policy.model_name", to="model"), "policy.model_name")
    wl = _workload(k, assumed)
    beta = read_key(k, BETA)
    megatron, lay = _training(k, wl)
    engine, gen_tp = _engine(k, wl, assumed)
    c = read_table(k, CLUSTER)
    placement = _placement(k, roles_of("grpo", beta), lay, gen_tp, c, assumed)
    mode, eta = _mode(k, assumed)
    cfg = {"model": model, "algorithm": "grpo", "beta": beta, "workload": wl, "placement": placement,
           "cluster": {"devices": c["per_node"] * c["nodes"], "kind": "gpu"}}
    lora = _lora(k, megatron)
    if lora:
        cfg["lora"] = lora
    elif beta:   # the reference's weights wait in host memory, swapped in for its log-probs (offload.py: swap)
        wl["offload"] = sorted(set(wl.get("offload", ())) | {"swap"})
        assumed.append("reference weights in host memory, swapped with the policy's for its log-probs "
                       "(NeMo-RL's use_reference_model): offload swap")
    return finish(NAME, str(path), k, cfg, mode, eta, assumed, engine=engine,
                  prompt_cap="policy.max_total_sequence_length less the response cap")
