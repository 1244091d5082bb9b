"""NeMo-RL (https://github.com/NVIDIA-NeMo/RL): a GRPO config YAML (``examples/run_grpo.py --config FILE``); a
recipe's ``defaults: BASE.yaml`` (a path relative to the recipe) is merged under it first, as NeMo-RL does (the
recipe's values win, a ``null`` clears the inherited block).

Mapping (key names and defaults from ``examples/configs/grpo_math_1B.yaml``, the base of NeMo-RL's GRPO recipes):

- batch: ``grpo.num_prompts_per_step`` x ``grpo.num_generations_per_prompt``; ``policy.train_global_batch_size``
  samples per optimizer step -> mini-batches; ``policy.train_micro_batch_size``; the prompt and the response
  share ``policy.max_total_sequence_length`` (the response capped by ``policy.generation.max_new_tokens``);
  ``policy.sequence_packing.enabled`` or ``policy.dynamic_batching.enabled`` -> no padding;
- ``loss_fn.reference_policy_kl_penalty`` -> beta; ``policy.precision`` bfloat16 -> bf16 mixed precision;
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
from .common import (Keys, capped_response, finish, flatten, load_yaml, need_bool, need_int, need_num, need_str, one_set, resolve_model,
                     resolve_refs, roles_of, two_sets)

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


def import_config(path: str, **_):
    raw = load_with_defaults(path)
    for other in ("sft", "dpo", "rm", "distillation", "eval"):
        if isinstance(raw.get(other), dict) and not isinstance(raw.get("grpo"), dict):
            raise RlmLabError(f"nemo-rl config {path} is {'an' if other in ('sft', 'rm') else 'a'} {other.upper()} config "
                              f"(its {other}: block, no grpo: block): not a GRPO step")
    flat = resolve_refs(flatten(raw), path)
    top = load_yaml(path, NAME)
    if "defaults" in top:
        flat["defaults"] = top["defaults"]
    # only what this file writes is sorted into ignored / unknown (its bases' keys are NeMo-RL's own)
    k = Keys(NAME, flat, NOTES, written=list(flatten(top)))
    k.use("defaults", "the base config merged under this one")
    assumed = []
    model = resolve_model(k.get("policy.model_name", to="model"), "policy.model_name")
    prompts = need_int(k.get("grpo.num_prompts_per_step", 32, "workload.prompts"), "grpo.num_prompts_per_step")
    group = need_int(k.get("grpo.num_generations_per_prompt", 16, "workload.group_size"),
                     "grpo.num_generations_per_prompt")
    n = prompts * group
    gbs = need_int(k.get("policy.train_global_batch_size", 512, "samples per optimizer step -> minibatches"),
                   "policy.train_global_batch_size")
    if n % gbs and gbs % n:
        raise RlmLabError(f"nemo-rl policy.train_global_batch_size={gbs} must divide the {n} samples of a step "
                          f"(num_prompts_per_step x num_generations_per_prompt)")
    minibatches = max(1, n // gbs)
    total = need_int(k.get("policy.max_total_sequence_length", 512, "prompt + response length"),
                     "policy.max_total_sequence_length")
    new = k.get("policy.generation.max_new_tokens", total, "response cap")
    new = need_int(new, "policy.generation.max_new_tokens") if not isinstance(new, str) else total
    if new < total:                       # the response cap leaves the rest of the sequence to the prompt
        prompt_len, resp = total - new, new
    else:                                 # the cap is the whole sequence: split it evenly
        prompt_len = max(1, total // 2)
        resp = max(1, total - prompt_len)
    assumed.append(f"prompt and response share max_total_sequence_length {total}: {prompt_len} + {resp}")
    response = capped_response(resp, "policy.generation.max_new_tokens", assumed)
    precision = need_str(k.get("policy.precision", "bfloat16", "workload.precision"), "nemo-rl policy.precision")
    if precision not in ("bfloat16", "float16", "float32"):
        raise RlmLabError(f"nemo-rl policy.precision={precision!r}: bfloat16, float16 or float32")
    wl = {"prompts": prompts, "group_size": group, "prompt_len": prompt_len, "response": response,
          "minibatches": minibatches, "precision": "fp32" if precision == "float32" else "bf16-mixed",
          "micro_batch": need_int(k.get("policy.train_micro_batch_size", 4, "workload.micro_batch"),
                                  "policy.train_micro_batch_size")}
    packing = need_bool(k.get("policy.sequence_packing.enabled", True, "workload.padding"),
                        "policy.sequence_packing.enabled")
    dyn = need_bool(k.get("policy.dynamic_batching.enabled", False, "workload.padding"),
                    "policy.dynamic_batching.enabled")
    wl["padding"] = "none" if packing or dyn else "batch"
    beta = need_num(k.get("loss_fn.reference_policy_kl_penalty", 0.01, "beta"), "loss_fn.reference_policy_kl_penalty")

    megatron = need_bool(k.get("policy.megatron_cfg.enabled", False, "training backend"), "policy.megatron_cfg.enabled")
    if megatron:
        m = "policy.megatron_cfg."
        if need_int(k.get(m + "context_parallel_size", 1, "checked: 1"), m + "context_parallel_size") > 1:
            raise RlmLabError(f"nemo-rl {m}context_parallel_size={k.flat[m + 'context_parallel_size']}: context "
                              f"parallelism is not modelled by the predictor")
        pp = need_int(k.get(m + "pipeline_model_parallel_size", 1, "training pp (Megatron's 1F1B stages, resharded "
                                                                  "into the engine's tp)"),
                      m + "pipeline_model_parallel_size")
        tp = need_int(k.get(m + "tensor_model_parallel_size", 1, "training tp"), m + "tensor_model_parallel_size")
        ep = need_int(k.get(m + "expert_model_parallel_size", 1, "training ep (MoE experts split)"),
                      m + "expert_model_parallel_size")
        zero = 1 if need_bool(k.get(m + "optimizer.use_distributed_optimizer", True, "ZeRO-1"),
                              m + "optimizer.use_distributed_optimizer") else 0
        wl["gradient_checkpointing"] = need_bool(k.get(m + "activation_checkpointing", False,
                                                       "workload.gradient_checkpointing"), m + "activation_checkpointing")
    else:
        d = "policy.dtensor_cfg."
        if need_int(k.get(d + "context_parallel_size", 1, "checked: 1"), d + "context_parallel_size") > 1:
            raise RlmLabError(f"nemo-rl {d}context_parallel_size={k.flat[d + 'context_parallel_size']}: context "
                              f"parallelism is not modelled by the predictor")
        tp = need_int(k.get(d + "tensor_parallel_size", 1, "training tp"), d + "tensor_parallel_size")
        ep, pp = 1, 1
        zero = 3
        wl["gradient_checkpointing"] = need_bool(k.get(d + "activation_checkpointing", False,
                                                       "workload.gradient_checkpointing"), d + "activation_checkpointing")
    off = "policy.dtensor_cfg.*" if megatron else "policy.megatron_cfg.*"
    k.notes = {off: f"unused: policy.megatron_cfg.enabled is {str(megatron).lower()}"} | k.notes
    g = "policy.generation."
    backend = need_str(k.get(g + "backend", "vllm", "workload.engine"), f"nemo-rl {g}backend")
    if backend not in ("vllm", "sglang", "megatron"):
        raise RlmLabError(f"nemo-rl {g}backend={backend!r}: vllm, sglang or megatron")
    wl["engine"] = "continuous"
    if need_int(k.get(g + "vllm_cfg.pipeline_parallel_size", 1, "checked: 1"), g + "vllm_cfg.pipeline_parallel_size") > 1:
        raise RlmLabError(f"nemo-rl {g}vllm_cfg.pipeline_parallel_size > 1: pipeline-parallel generation is not priced")
    gen_tp = need_int(k.get(g + "vllm_cfg.tensor_parallel_size", 1, "generation tp"), g + "vllm_cfg.tensor_parallel_size")
    engine = {"what": f"{backend} engine", "max_num_seqs": 256, "memory_fraction": need_num(
        k.get(g + "vllm_cfg.gpu_memory_utilization", 0.6, "the engine's memory share (KV cache)"),
        g + "vllm_cfg.gpu_memory_utilization")}
    assumed.append("vLLM's max_num_seqs default (256): NeMo-RL's base config does not set it")
    per_node = need_int(k.get("cluster.gpus_per_node", 1, "GPUs per node"), "cluster.gpus_per_node")
    nodes = need_int(k.get("cluster.num_nodes", 1, "nodes"), "cluster.num_nodes")
    roles = roles_of("grpo", beta)
    colocated = need_bool(k.get(g + "colocated.enabled", True, "placement"), g + "colocated.enabled")
    r = g + "colocated.resources."
    if colocated:
        placement = one_set(roles, per_node * nodes, zero, gen_tp=gen_tp, tp=tp, ep=ep, assumed=assumed, pp=pp)
        for key in ("gpus_per_node", "num_nodes"):
            k.use(r + key, "unused: generation colocated")
    else:
        rg, rn = k.get(r + "gpus_per_node", None, "rollout GPUs"), k.get(r + "num_nodes", None, "rollout nodes")
        if nodes == 1:
            if rg is None or need_int(rg, r + "gpus_per_node") >= per_node:
                raise RlmLabError(f"nemo-rl {r}gpus_per_node must be set and below cluster.gpus_per_node={per_node} "
                                  f"on one node with non-colocated generation (NeMo-RL asserts it), got {rg!r}")
            rollout, train = rg, per_node - rg
        else:
            if rn is None or rg != per_node:
                raise RlmLabError(f"nemo-rl on {nodes} nodes with non-colocated generation needs {r}num_nodes set and "
                                  f"{r}gpus_per_node = cluster.gpus_per_node = {per_node} (NeMo-RL asserts it), got "
                                  f"num_nodes={rn!r}, gpus_per_node={rg!r}")
            rn = need_int(rn, r + "num_nodes")
            if rn >= nodes:
                raise RlmLabError(f"nemo-rl {r}num_nodes={rn} leaves no node of {nodes} for training")
            rollout, train = rn * per_node, (nodes - rn) * per_node
        placement = two_sets(roles, rollout, train, gen_tp, zero, tp, ep, pp)
        assumed.append("weights sent to the generation GPUs (NCCL) after each step")
    mode, eta = "sync", 0
    if need_bool(k.get("grpo.async_grpo.enabled", False, "mode async"), "grpo.async_grpo.enabled"):
        mode, eta = "async", need_int(k.get("grpo.async_grpo.max_trajectory_age_steps", 1, "eta"),
                                      "grpo.async_grpo.max_trajectory_age_steps")
    if any(key.startswith("async_rl.") for key in k.flat):
        # the single-controller path (async_rl.*): a windowed sampler admits samples at most max_staleness_versions
        # policy versions old
        sk = "async_rl.sampler.max_staleness_versions"
        eta = need_int(k.get(sk, 1, "eta (policy versions a sample may lag)"), sk, minimum=0)
        mode = "async" if eta > 0 else "sync"
        assumed.append(f"NeMo-RL single-controller async_rl: async with eta {eta} ({sk})")
    cfg = {"model": model, "algorithm": "grpo", "beta": beta, "workload": wl, "placement": placement,
           "cluster": {"devices": per_node * nodes, "kind": "gpu"}}
    lc = "policy.dtensor_cfg.lora_cfg."
    if not megatron and need_bool(k.get(lc + "enabled", False, "LoRA"), lc + "enabled"):
        targets = "all-linear" if need_bool(k.get(lc + "match_all_linear", True, "lora.targets"),
                                            lc + "match_all_linear") else k.get(lc + "target_modules", to="lora.targets")
        cfg["lora"] = {"rank": need_int(k.get(lc + "dim", 8, "lora.rank"), lc + "dim"), "targets": targets}
    return finish(NAME, str(path), k, cfg, mode, eta, assumed, engine=engine,
                  prompt_cap="policy.max_total_sequence_length less the response cap")
