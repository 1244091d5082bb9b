"""TRL (https://github.com/huggingface/trl): a ``trl grpo --config FILE.yaml`` config, i.e. ``GRPOConfig`` fields
(with ``TrainingArguments``' they inherit), ``ModelConfig``'s ``model_name_or_path`` and the CLI config's ``env``
mapping (TRL's ``examples/cli_configs/example_config.yaml``). A vLLM server started apart
(``trl vllm-serve --tensor-parallel-size 4``) is described by a ``vllm_serve`` mapping of that script's options
(``tensor_parallel_size``, ``data_parallel_size``, ``gpu_memory_utilization``).

Mapping (field names of trl 1.16's ``trl/trainer/grpo_config.py``). A field the config leaves out takes the
installed TRL's own default, read from its dataclasses (:func:`rlm_lab.compat.trl.config_defaults`: ``GRPOConfig``,
``ModelConfig``, ``trl vllm-serve``'s ``ScriptArguments``; ``AsyncGRPOConfig``'s over ``GRPOConfig``'s for an
asynchronous config), never typed here; the values in parentheses are trl 1.16's:

- batch: one generation serves ``steps_per_generation`` (default ``gradient_accumulation_steps``) micro-steps of
  ``per_device_train_batch_size`` (8) on each of the trainer's processes, so a step generates
  ``generation_batch_size = per_device_train_batch_size x processes x steps_per_generation`` completions
  (``num_generations`` per prompt, 8) and takes ``steps_per_generation / gradient_accumulation_steps``
  optimizer steps, ``num_iterations`` times (epochs); ``max_completion_length`` (512; 2048 in ``AsyncGRPOConfig``) is the response cap (lengths
  from the cost model's stated default distribution under it, printed as assumed; log-probs one completion row at a
  time, as ``selective_log_softmax`` loops);
- the trainer's processes: the devices in ``env.CUDA_VISIBLE_DEVICES`` (``accelerate launch`` starts one per
  visible GPU), else one;
- ``beta`` (0: no reference model), ``bf16`` (None, i.e. true unless ``fp16``: bf16 autocast over fp32 weights: GRPOTrainer loads a model
  given by name in float32 unless ``model_init_kwargs`` sets a dtype, trl/trainer/grpo_trainer.py, so a 7B trainer
  under DDP holds 16 B/param, about 113 GiB, and does not fit an 80 GB GPU without ZeRO or FSDP),
  ``gradient_checkpointing`` (true);
- placement: ``use_vllm`` false (TRL's default): the trainer generates with ``transformers`` (static batching,
  padded rows), one set; ``vllm_mode`` colocate (TRL's default): vLLM in the trainer's processes, one set, KV budget
  ``vllm_gpu_memory_utilization`` (0.3); server: the vLLM server's ``tensor_parallel_size x
  data_parallel_size`` GPUs on their own set, weights sent after each optimizer step (synchronous).

- the launch: ``trl:GRPO.yaml+ACCELERATE.yaml`` reads the accelerate config too (processes, ZeRO stage or FSDP,
  offload; :func:`accelerate_layout`); without it, DDP over ``env.CUDA_VISIBLE_DEVICES``;
- ``AsyncGRPOConfig``'s own fields (``max_staleness``, ``weight_sync_steps``, ...): the asynchronous trainer, its
  generation on a vLLM server, mode async with eta = ``max_staleness`` (4).

Refused: ``fp16`` with ``bf16`` (contradictory), a batch that does not hold whole prompt groups (as TRL refuses),
an SFT config (SFTConfig's fields and no GRPO field), a model without a shipped config.
"""

from __future__ import annotations

from pathlib import Path

from ...compat.trl import config_defaults
from ...errors import RlmLabError
from .common import Keys, finish, flatten, load_yaml, need_bool, need_int, need_num, need_str, one_set, resolve_model, roles_of
from .common import capped_response, two_sets

NAME = "trl"
NOTES = {"learning_rate": "optimizer hyper-parameters do not change the step's cost",
         "output_dir": "output location", "report_to": "logging", "logging_steps": "logging",
         "dataset_name": "data location", "loss_type": "the loss's form does not change the step's cost",
         "vllm_serve.model": "the served model (the trainer's model_name_or_path is priced)"}


# SFTConfig's fields that GRPOConfig lacks (trl 1.16; tests/frameworks/test_verl_scripts.py checks them against
# dataclasses.fields): a config holding one and no GRPO-only field is an SFT config, refused in one line
SFT_ONLY = ("packing", "packing_strategy", "padding_free", "dataset_text_field", "completion_only_loss",
            "assistant_only_loss", "eval_packing", "max_length")
GRPO_ONLY = ("num_generations", "max_completion_length", "beta", "use_vllm", "vllm_mode", "reward_funcs",
             "num_iterations", "steps_per_generation", "generation_batch_size", "loss_type", "max_staleness")
# AsyncGRPOConfig's fields that GRPOConfig lacks (trl.experimental.async_grpo in the pinned trl 1.16)
ASYNC_ONLY = ("max_staleness", "max_inflight_tasks", "weight_sync_steps", "queue_maxsize", "vllm_server_base_url",
              "token_budget", "fork_threshold_tokens")


def accelerate_layout(path: str) -> tuple[dict, list]:
    """An ``accelerate launch --config_file`` YAML (TRL ships them in examples/accelerate_configs/): the trainer's
    processes (``num_processes``, x ``num_machines`` is not needed: accelerate counts all), ZeRO stage
    (``deepspeed_config.zero_stage``; FSDP FULL_SHARD = 3, SHARD_GRAD_OP = 2; MULTI_GPU = DDP, 0) and offload
    (``offload_optimizer_device`` / ``offload_param_device`` cpu; ``fsdp_offload_params``)."""
    raw = load_yaml(path, "accelerate")
    a = Keys(NAME, flatten(raw))
    dist = need_str(a.get("distributed_type", "NO"), f"accelerate config {path}: distributed_type",
                    ("NO", "MULTI_GPU", "DEEPSPEED", "FSDP"))
    procs = need_int(a.get("num_processes", 1), f"accelerate config {path}: num_processes")
    zero, offload = 0, []
    if dist == "DEEPSPEED":
        zero = need_int(a.get("deepspeed_config.zero_stage", 0), f"accelerate config {path}: "
                        f"deepspeed_config.zero_stage", minimum=0)
        if zero > 3:
            raise RlmLabError(f"accelerate config {path}: deepspeed_config.zero_stage must be 0..3, got {zero}")
        if a.get("deepspeed_config.offload_optimizer_device", "none") == "cpu":
            offload.append("host_optimizer")
        if a.get("deepspeed_config.offload_param_device", "none") == "cpu":
            offload.append("params")
    elif dist == "FSDP":
        strat = str(a.get("fsdp_config.fsdp_sharding_strategy", "FULL_SHARD"))
        reshard = a.get("fsdp_config.fsdp_reshard_after_forward", True)
        zero = 2 if strat in ("SHARD_GRAD_OP", "2") or reshard is False else 3
        if need_bool(a.get("fsdp_config.fsdp_offload_params", False), f"accelerate config {path}: "
                     f"fsdp_config.fsdp_offload_params"):
            offload += ["params", "optimizer"]
    what = {"NO": "one process", "MULTI_GPU": "DDP", "DEEPSPEED": f"DeepSpeed ZeRO-{zero}", "FSDP": f"FSDP (ZeRO-{zero})"}
    return {"processes": procs, "zero": zero, "offload": offload}, [
        f"accelerate config {Path(path).name}: {procs} processes, {what[dist]}"
        + (f", offload {', '.join(offload)}" if offload else "")]


def trl_get(k: Keys, key: str, to: str | None = None, asynchronous: bool = False):
    """``k.get(key)`` with TRL's own default where the config leaves ``key`` out (read from TRL's config dataclasses,
    :func:`rlm_lab.compat.trl.config_defaults`, only then: a config that sets the key needs no TRL)."""
    if k.has(key):
        return k.get(key, None, to)
    return k.get(key, config_defaults(asynchronous)[key], to)


def import_config(path: str, **_):
    accel = None
    if "+" in path and not Path(path).is_file():   # trl:GRPO.yaml+ACCELERATE.yaml: the launch's accelerate config
        path, accel = path.split("+", 1)
    raw = load_yaml(path, NAME)
    k = Keys(NAME, flatten(raw), NOTES)
    assumed = []
    sft = [f for f in SFT_ONLY if f in k.flat]
    if sft and not any(f in k.flat for f in GRPO_ONLY):
        raise RlmLabError(f"trl config {path} is an SFT config (SFTConfig's {', '.join(sft)}; no GRPO field): "
                          f"supervised fine-tuning, not an RL step")
    if not any(f in k.flat for f in GRPO_ONLY):
        assumed.append("no GRPO field in the config (a TRL CLI config serves any trainer): priced as `trl grpo "
                       "--config` reads it, with GRPOConfig's defaults")
    async_keys = [f for f in ASYNC_ONLY if f in k.flat]

    def get(key: str, to: str | None = None):  # the key or TRL's default: AsyncGRPOConfig's for an async config
        return trl_get(k, key, to, asynchronous=bool(async_keys))
    layout = None
    if accel:
        layout, lines = accelerate_layout(accel)
        assumed += lines
    model = resolve_model(k.get("model_name_or_path", to="model"), "model_name_or_path")
    devices_env = k.get("env.CUDA_VISIBLE_DEVICES", None, "the trainer's processes (one per visible GPU)")
    if layout is not None:
        procs = layout["processes"]
    elif devices_env is None:
        procs = 1
        assumed.append("one training process (no env.CUDA_VISIBLE_DEVICES)")
    else:
        ids = [d for d in str(devices_env).split(",") if d.strip()]
        if not ids:
            raise RlmLabError(f"trl env.CUDA_VISIBLE_DEVICES={devices_env!r} names no device")
        procs = len(ids)
    per_dev = need_int(get("per_device_train_batch_size", "sequences per micro-step per process"),
                       "per_device_train_batch_size")
    accum = need_int(get("gradient_accumulation_steps", "micro-steps per optimizer step"),
                     "gradient_accumulation_steps")
    gbs, spg = k.get("generation_batch_size", None), k.get("steps_per_generation", None)
    if gbs is not None and spg is not None:
        raise RlmLabError("trl generation_batch_size and steps_per_generation cannot both be set (GRPOConfig refuses it)")
    if gbs is not None:
        gbs = need_int(gbs, "generation_batch_size")
        if gbs % (per_dev * procs):
            raise RlmLabError(f"trl generation_batch_size={gbs} must be a multiple of per_device_train_batch_size x "
                              f"processes = {per_dev * procs}")
        spg = gbs // (per_dev * procs)
        k.use("generation_batch_size", "completions per generation")
    else:
        spg = need_int(spg if spg is not None else accum, "steps_per_generation")
        gbs = per_dev * procs * spg
        k.use("steps_per_generation", "micro-steps per generation")
    if spg % accum:
        raise RlmLabError(f"trl steps_per_generation={spg} is not a multiple of gradient_accumulation_steps={accum}: "
                          f"the predictor needs whole optimizer steps per generation")
    group = need_int(get("num_generations", "workload.group_size"), "num_generations")
    if gbs % group:
        raise RlmLabError(f"trl generation batch {gbs} (per_device_train_batch_size x processes x steps) must be a "
                          f"multiple of num_generations={group}")
    resp = need_int(get("max_completion_length", "workload.response (the cap)"), "max_completion_length")
    response = capped_response(resp, "max_completion_length", assumed)
    assumed.append("prompts of 512 tokens (GRPOConfig has no prompt length; pass --prompt-len)")
    fp16 = need_bool(get("fp16"), "fp16")
    bf16 = get("bf16", "workload.autocast")
    bf16 = need_bool(not fp16 if bf16 is None else bf16, "bf16")  # None: "True if fp16 is not set" (GRPOConfig)
    if fp16 and bf16:
        raise RlmLabError("trl fp16 and bf16 are both true; choose one")
    if fp16:
        k.use("fp16", "workload.autocast (fp16 priced as bf16: same bytes)")
    wl = {"prompts": gbs // group, "group_size": group, "prompt_len": 512, "response": response,
          "logprob_chunk": resp + 1,   # selective_log_softmax loops over rows: one completion's logits at a time
          "epochs": need_int(get("num_iterations", "workload.epochs"), "num_iterations"),
          "minibatches": spg // accum, "micro_batch": per_dev, "precision": "fp32", "autocast": bf16 or fp16,
          "gradient_checkpointing": need_bool(get("gradient_checkpointing", "workload.gradient_checkpointing"),
                                              "gradient_checkpointing")}
    beta = need_num(get("beta", "beta (0: no reference model)"), "beta")
    roles = roles_of("grpo", beta)
    zero = layout["zero"] if layout else 0
    if layout is None:
        assumed.append("DDP over the trainer's processes (accelerate's default; pass the accelerate config as "
                       "trl:GRPO.yaml+ACCELERATE.yaml for ZeRO or FSDP)")
    if layout and layout["offload"]:
        wl["offload"] = layout["offload"]
    # AsyncGRPOConfig has no use_vllm: the asynchronous trainer always generates on a vLLM server
    use_vllm = (bool(async_keys) and not k.has("use_vllm")) or need_bool(get("use_vllm", "generation engine"), "use_vllm")
    if async_keys:
        k.use("vllm_mode", "server (AsyncGRPOTrainer generates on a vLLM server)")
        k.flat["vllm_mode"] = "server"
    engine = None
    cluster = procs
    if not use_vllm:
        placement = one_set(roles, procs, zero)
        assumed.append("generation by transformers' generate on the trainer's devices (use_vllm false)")
    else:
        wl["engine"] = "continuous"
        mode = need_str(get("vllm_mode", "placement"), "trl vllm_mode")
        if mode == "colocate":
            vtp = need_int(get("vllm_tensor_parallel_size", "generation tp"), "vllm_tensor_parallel_size")
            placement = one_set(roles, procs, zero, gen_tp=vtp, assumed=assumed)
            if vtp > 1 and zero != 3:
                assumed.append(f"vLLM tp {vtp} colocated: generation priced at the trainer's layout (tp 1)")
            engine = {"what": "vLLM (colocated)", "max_num_seqs": 256, "memory_fraction": need_num(
                get("vllm_gpu_memory_utilization", "the engine's memory share (KV cache)"),
                "vllm_gpu_memory_utilization")}
        elif mode == "server":
            vtp = need_int(get("vllm_serve.tensor_parallel_size", "rollout set tp"),
                           "vllm_serve.tensor_parallel_size")
            vdp = need_int(get("vllm_serve.data_parallel_size", "rollout replicas"), "vllm_serve.data_parallel_size")
            if not any(key.startswith("vllm_serve.") for key in k.flat):
                assumed.append("a vLLM server on 1 GPU (trl vllm-serve's defaults; describe it with vllm_serve)")
            placement = two_sets(roles, vtp * vdp, procs, vtp, zero)
            cluster = vtp * vdp + procs
            engine = {"what": "vLLM server", "max_num_seqs": 256, "memory_fraction": need_num(
                get("vllm_serve.gpu_memory_utilization", "the engine's memory share (KV cache)"),
                "vllm_serve.gpu_memory_utilization")}
            assumed.append("weights sent to the vLLM server (NCCL) after each optimizer step, synchronously")
        else:
            raise RlmLabError(f"trl vllm_mode={mode!r}: colocate or server")
        assumed.append("vLLM's max_num_seqs default (256)")
    cfg = {"model": model, "algorithm": "grpo", "beta": beta, "workload": wl, "placement": placement,
           "cluster": {"devices": cluster, "kind": "gpu"}}
    if need_bool(get("use_peft", "LoRA (peft)"), "use_peft"):
        cfg["lora"] = {"rank": need_int(get("lora_r", "lora.rank"), "lora_r"),
                       "targets": get("lora_target_modules", "lora.targets") or ["q_proj", "v_proj"]}
    mode, eta = "sync", 0
    if async_keys:
        eta = need_int(get("max_staleness", "eta (weight updates a sample may lag)"), "max_staleness", minimum=0)
        mode = "async" if eta else "sync"
        k.use("weight_sync_steps", "read: weights sent every this many optimizer steps (priced every step)")
        assumed.append(f"AsyncGRPOTrainer (AsyncGRPOConfig's {', '.join(async_keys)}; trl.experimental.async_grpo in "
                       f"the pinned trl 1.16): generation on the vLLM server, eta = max_staleness {eta}")
    return finish(NAME, str(path), k, cfg, mode, eta, assumed, engine=engine)
