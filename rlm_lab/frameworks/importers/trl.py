"""TRL (https://github.com/huggingface/trl): a ``trl grpo --config FILE.yaml`` config, i.e. ``GRPOConfig`` fields
(with ``TrainingArguments``' they inherit), ``ModelConfig``'s ``model_name_or_path`` and the CLI config's ``env``
mapping (TRL's ``examples/cli_configs/example_config.yaml``). A vLLM server started apart
(``trl vllm-serve --tensor-parallel-size 4``) is described by a ``vllm_serve`` mapping of that script's options
(``tensor_parallel_size``, ``data_parallel_size``, ``gpu_memory_utilization``).

Mapping (field names and defaults of trl 1.16's ``trl/trainer/grpo_config.py``):

- batch: one generation serves ``steps_per_generation`` (default ``gradient_accumulation_steps``) micro-steps of
  ``per_device_train_batch_size`` (default 8) on each of the trainer's processes, so a step generates
  ``generation_batch_size = per_device_train_batch_size x processes x steps_per_generation`` completions
  (``num_generations`` per prompt, default 8) and takes ``steps_per_generation / gradient_accumulation_steps``
  optimizer steps, ``num_iterations`` times (epochs); ``max_completion_length`` (default 512) is the response cap (lengths
  from the cost model's stated default distribution under it, printed as assumed; log-probs one completion row at a
  time, as ``selective_log_softmax`` loops);
- the trainer's processes: the devices in ``env.CUDA_VISIBLE_DEVICES`` (``accelerate launch`` starts one per
  visible GPU), else one;
- ``beta`` (default 0: no reference model), ``bf16`` (default true: bf16 autocast over fp32 weights: GRPOTrainer loads a model
  given by name in float32 unless ``model_init_kwargs`` sets a dtype, trl/trainer/grpo_trainer.py, so a 7B trainer
  under DDP holds 16 B/param, about 113 GiB, and does not fit an 80 GB GPU without ZeRO or FSDP),
  ``gradient_checkpointing`` (default true);
- placement: ``use_vllm`` false (default): the trainer generates with ``transformers`` (static batching, padded
  rows), one set; ``vllm_mode`` colocate (default): vLLM in the trainer's processes, one set, KV budget
  ``vllm_gpu_memory_utilization`` (default 0.3); server: the vLLM server's ``tensor_parallel_size x
  data_parallel_size`` GPUs on their own set, weights sent after each optimizer step (synchronous).

Refused: ``fp16`` with ``bf16`` (contradictory), a batch that does not hold whole prompt groups (as TRL refuses),
a model without a shipped config. Not expressible in GRPOConfig, so not imported: the asynchronous trainer
(``trl.experimental.async_grpo.AsyncGRPOConfig``).
"""

from __future__ import annotations

from ...errors import RlmLabError
from .common import Keys, finish, flatten, load_yaml, need_bool, need_int, need_num, need_str, one_set, resolve_model, roles_of
from .common import capped_response, two_sets

NAME = "trl"
NOTES = {"learning_rate": "optimizer hyper-parameters do not change the step's cost",
         "output_dir": "output location", "report_to": "logging", "logging_steps": "logging",
         "dataset_name": "data location", "loss_type": "the loss's form does not change the step's cost",
         "vllm_serve.model": "the served model (the trainer's model_name_or_path is priced)"}


def import_config(path: str, **_):
    raw = load_yaml(path, NAME)
    k = Keys(NAME, flatten(raw), NOTES)
    assumed = []
    model = resolve_model(k.get("model_name_or_path", to="model"), "model_name_or_path")
    devices_env = k.get("env.CUDA_VISIBLE_DEVICES", None, "the trainer's processes (one per visible GPU)")
    if devices_env is None:
        procs = 1
        assumed.append("one training process (no env.CUDA_VISIBLE_DEVICES)")
    else:
        ids = [d for d in str(devices_env).split(",") if d.strip()]
        if not ids:
            raise RlmLabError(f"trl env.CUDA_VISIBLE_DEVICES={devices_env!r} names no device")
        procs = len(ids)
    per_dev = need_int(k.get("per_device_train_batch_size", 8, "sequences per micro-step per process"),
                       "per_device_train_batch_size")
    accum = need_int(k.get("gradient_accumulation_steps", 1, "micro-steps per optimizer step"),
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
    group = need_int(k.get("num_generations", 8, "workload.group_size"), "num_generations")
    if gbs % group:
        raise RlmLabError(f"trl generation batch {gbs} (per_device_train_batch_size x processes x steps) must be a "
                          f"multiple of num_generations={group}")
    resp = need_int(k.get("max_completion_length", 512, "workload.response (the cap)"), "max_completion_length")
    response = capped_response(resp, "max_completion_length", assumed)
    assumed.append("prompts of 512 tokens (GRPOConfig has no prompt length; pass --prompt-len)")
    fp16 = need_bool(k.get("fp16", False), "fp16")
    bf16 = need_bool(k.get("bf16", not fp16, "workload.autocast"), "bf16")
    if fp16 and bf16:
        raise RlmLabError("trl fp16 and bf16 are both true; choose one")
    if fp16:
        k.use("fp16", "workload.autocast (fp16 priced as bf16: same bytes)")
    wl = {"prompts": gbs // group, "group_size": group, "prompt_len": 512, "response": response,
          "logprob_chunk": resp + 1,   # selective_log_softmax loops over rows: one completion's logits at a time
          "epochs": need_int(k.get("num_iterations", 1, "workload.epochs"), "num_iterations"),
          "minibatches": spg // accum, "micro_batch": per_dev, "precision": "fp32", "autocast": bf16 or fp16,
          "gradient_checkpointing": need_bool(k.get("gradient_checkpointing", True, "workload.gradient_checkpointing"),
                                              "gradient_checkpointing")}
    beta = need_num(k.get("beta", 0.0, "beta (0: no reference model)"), "beta")
    roles = roles_of("grpo", beta)
    assumed.append("DDP over the trainer's processes (accelerate's default; a DeepSpeed or FSDP accelerate config is "
                   "not part of the GRPO config)")
    use_vllm = need_bool(k.get("use_vllm", False, "generation engine"), "use_vllm")
    engine = None
    cluster = procs
    if not use_vllm:
        placement = one_set(roles, procs, 0)
        assumed.append("generation by transformers' generate on the trainer's devices (use_vllm false)")
    else:
        wl["engine"] = "continuous"
        mode = need_str(k.get("vllm_mode", "colocate", "placement"), "trl vllm_mode")
        if mode == "colocate":
            vtp = need_int(k.get("vllm_tensor_parallel_size", 1, "generation tp"), "vllm_tensor_parallel_size")
            placement = one_set(roles, procs, 0)
            if vtp > 1:
                assumed.append(f"vLLM tp {vtp} colocated: generation priced at the trainer's layout (tp 1)")
            engine = {"what": "vLLM (colocated)", "max_num_seqs": 256, "memory_fraction": need_num(
                k.get("vllm_gpu_memory_utilization", 0.3, "the engine's memory share (KV cache)"),
                "vllm_gpu_memory_utilization")}
        elif mode == "server":
            vtp = need_int(k.get("vllm_serve.tensor_parallel_size", 1, "rollout set tp"),
                           "vllm_serve.tensor_parallel_size")
            vdp = need_int(k.get("vllm_serve.data_parallel_size", 1, "rollout replicas"), "vllm_serve.data_parallel_size")
            if not any(key.startswith("vllm_serve.") for key in k.flat):
                assumed.append("a vLLM server on 1 GPU (trl vllm-serve's defaults; describe it with vllm_serve)")
            placement = two_sets(roles, vtp * vdp, procs, vtp, 0)
            cluster = vtp * vdp + procs
            engine = {"what": "vLLM server", "max_num_seqs": 256, "memory_fraction": need_num(
                k.get("vllm_serve.gpu_memory_utilization", 0.9, "the engine's memory share (KV cache)"),
                "vllm_serve.gpu_memory_utilization")}
            assumed.append("weights sent to the vLLM server (NCCL) after each optimizer step, synchronously")
        else:
            raise RlmLabError(f"trl vllm_mode={mode!r}: colocate or server")
        assumed.append("vLLM's max_num_seqs default (256)")
    cfg = {"model": model, "algorithm": "grpo", "beta": beta, "workload": wl, "placement": placement,
           "cluster": {"devices": cluster, "kind": "gpu"}}
    if need_bool(k.get("use_peft", False, "LoRA (peft)"), "use_peft"):
        cfg["lora"] = {"rank": need_int(k.get("lora_r", 16, "lora.rank"), "lora_r"),
                       "targets": k.get("lora_target_modules", None, "lora.targets") or ["q_proj", "v_proj"]}
    return finish(NAME, str(path), k, cfg, "sync", 0, assumed, engine=engine)
