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
from .common import (FROM_LIBRARY, Key, Keys, capped_response, finish, flatten, load_yaml, need_bool, need_int, need_str,
                     one_set, read_key, resolve_model, roles_of, two_sets)

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


# ---- the key tables: (field name, target, kind, default, what it sets); an absent field takes the installed TRL's
# default (FROM_LIBRARY: rlm_lab.compat.trl.config_defaults, AsyncGRPOConfig's for an asynchronous config) ----------
L = FROM_LIBRARY
BATCH = (Key("per_device_train_batch_size", "per_dev", "int", L, "sequences per micro-step per process"),
         Key("gradient_accumulation_steps", "accum", "int", L, "micro-steps per optimizer step"))
GROUP = Key("num_generations", "group", "int", L, "workload.group_size")
RESPONSE = Key("max_completion_length", "resp", "int", L, "workload.response (the cap)")
FP16 = Key("fp16", "fp16", "bool", L)
BF16 = Key("bf16", "bf16", "raw", L, "workload.autocast")    # None: "True if fp16 is not set" (GRPOConfig)
TRAINING = (Key("num_iterations", "epochs", "int", L, "workload.epochs"),
            Key("gradient_checkpointing", "gradient_checkpointing", "bool", L, "workload.gradient_checkpointing"))
BETA = Key("beta", "beta", "num", L, "beta (0: no reference model)")
USE_VLLM = Key("use_vllm", "use_vllm", "bool", L, "generation engine")
VLLM_MODE = Key("vllm_mode", "mode", "str", L, "placement", "trl vllm_mode")
COLOCATE_TP = Key("vllm_tensor_parallel_size", "vtp", "int", L, "generation tp")
COLOCATE_MEMORY = Key("vllm_gpu_memory_utilization", "memory_fraction", "num", L, "the engine's memory share (KV cache)")
SERVER = (Key("vllm_serve.tensor_parallel_size", "vtp", "int", L, "rollout set tp"),
          Key("vllm_serve.data_parallel_size", "vdp", "int", L, "rollout replicas"))
SERVER_MEMORY = Key("vllm_serve.gpu_memory_utilization", "memory_fraction", "num", L,
                    "the engine's memory share (KV cache)")
PEFT = (Key("use_peft", "on", "bool", L, "LoRA (peft)"), Key("lora_r", "rank", "int", L, "lora.rank"),
        Key("lora_target_modules", "targets", "raw", L, "lora.targets"))
STALENESS = Key("max_staleness", "eta", "int0", L, "eta (weight updates a sample may lag)")


def _reader(k: Keys, asynchronous: bool):
    """read(row): a table row's value, TRL's own default where the config leaves the field out."""
    def library(key: str):
        return config_defaults(asynchronous)[key]
    return lambda row: read_key(k, row, library=library)


# ---- derived values ---------------------------------------------------------------------------------------
def _keys(path: str) -> tuple[Keys, str | None, str, list]:
    """(keys, the accelerate config or None, the GRPO config's path, assumed); refused: an SFT config."""
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
    return k, accel, path, assumed


def _processes(k: Keys, layout: dict | None, assumed: list) -> int:
    """The trainer's processes: the accelerate config's, else one per GPU in env.CUDA_VISIBLE_DEVICES, else one."""
    devices_env = k.get("env.CUDA_VISIBLE_DEVICES", None, "the trainer's processes (one per visible GPU)")
    if layout is not None:
        return layout["processes"]
    if devices_env is None:
        assumed.append("one training process (no env.CUDA_VISIBLE_DEVICES)")
        return 1
    ids = [d for d in str(devices_env).split(",") if d.strip()]
    if not ids:
        raise RlmLabError(f"trl env.CUDA_VISIBLE_DEVICES={devices_env!r} names no device")
    return len(ids)


def _generation_batch(k: Keys, read, procs: int) -> dict:
    """{per_dev, accum, gbs, spg, group}: completions per generation = per_device_train_batch_size x processes x
    steps_per_generation (or generation_batch_size), checked as GRPOConfig checks it."""
    b = {row.field: read(row) for row in BATCH}
    per_dev, accum = b["per_dev"], b["accum"]
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
    group = read(GROUP)
    if gbs % group:
        raise RlmLabError(f"trl generation batch {gbs} (per_device_train_batch_size x processes x steps) must be a "
                          f"multiple of num_generations={group}")
    return b | {"gbs": gbs, "spg": spg, "group": group}


def _workload(k: Keys, read, b: dict, assumed: list) -> dict:
    """The workload: the generation batch, the response cap, precision (bf16 or fp16 autocast over fp32 weights)."""
    resp = read(RESPONSE)
    response = capped_response(resp, "max_completion_length", assumed)
    assumed.append("prompts of 512 tokens (GRPOConfig has no prompt length; pass --prompt-len)")
    fp16 = read(FP16)
    bf16 = read(BF16)
    bf16 = need_bool(not fp16 if bf16 is None else bf16, "bf16")
    if fp16 and bf16:
        raise RlmLabError("trl fp16 and bf16 are both true; choose one")
    if fp16:
        k.use("fp16", "workload.autocast (fp16 priced as bf16: same bytes)")
    t = {row.field: read(row) for row in TRAINING}
    return {"prompts": b["gbs"] // b["group"], "group_size": b["group"], "prompt_len": 512, "response": response,
            "logprob_chunk": resp + 1,   # selective_log_softmax loops over rows: one completion's logits at a time
            "epochs": t["epochs"], "minibatches": b["spg"] // b["accum"], "micro_batch": b["per_dev"],
            "precision": "fp32", "autocast": bf16 or fp16, "gradient_checkpointing": t["gradient_checkpointing"]}


def _generation(k: Keys, read, roles, procs: int, zero: int, async_keys: list, wl: dict,
                assumed: list) -> tuple[dict, int, dict | None]:
    """(placement, GPUs, engine): transformers' generate on the trainer's devices, vLLM colocated in the trainer's
    processes, or a vLLM server on GPUs of its own."""
    # AsyncGRPOConfig has no use_vllm: the asynchronous trainer always generates on a vLLM server
    use_vllm = (bool(async_keys) and not k.has("use_vllm")) or read(USE_VLLM)
    if async_keys:
        k.use("vllm_mode", "server (AsyncGRPOTrainer generates on a vLLM server)")
        k.flat["vllm_mode"] = "server"
    if not use_vllm:
        assumed.append("generation by transformers' generate on the trainer's devices (use_vllm false)")
        return one_set(roles, procs, zero), procs, None
    wl["engine"] = "continuous"
    mode = read(VLLM_MODE)
    if mode == "colocate":
        vtp = read(COLOCATE_TP)
        placement = one_set(roles, procs, zero, gen_tp=vtp, assumed=assumed)
        if vtp > 1 and zero != 3:
            assumed.append(f"vLLM tp {vtp} colocated: generation priced at the trainer's layout (tp 1)")
        engine, cluster = {"what": "vLLM (colocated)", "max_num_seqs": 256, "memory_fraction": read(COLOCATE_MEMORY)}, procs
    elif mode == "server":
        vtp, vdp = (read(row) for row in SERVER)
        if not any(key.startswith("vllm_serve.") for key in k.flat):
            assumed.append("a vLLM server on 1 GPU (trl vllm-serve's defaults; describe it with vllm_serve)")
        placement = two_sets(roles, vtp * vdp, procs, vtp, zero)
        cluster = vtp * vdp + procs
        engine = {"what": "vLLM server", "max_num_seqs": 256, "memory_fraction": read(SERVER_MEMORY)}
        assumed.append("weights sent to the vLLM server (NCCL) after each optimizer step, synchronously")
    else:
        raise RlmLabError(f"trl vllm_mode={mode!r}: colocate or server")
    assumed.append("vLLM's max_num_seqs default (256)")
    return placement, cluster, engine


def _lora(read) -> dict | None:
    if not read(PEFT[0]):
        return None
    return {"rank": read(PEFT[1]), "targets": read(PEFT[2]) or ["q_proj", "v_proj"]}


def _mode(k: Keys, read, async_keys: list, assumed: list) -> tuple[str, int]:
    """(mode, eta): AsyncGRPOTrainer's max_staleness, or synchronous."""
    if not async_keys:
        return "sync", 0
    eta = read(STALENESS)
    k.use("weight_sync_steps", "read: weights sent every this many optimizer steps (priced every step)")
    assumed.append(f"AsyncGRPOTrainer (AsyncGRPOConfig's {', '.join(async_keys)}; trl.experimental.async_grpo in "
                   f"the pinned trl 1.16): generation on the vLLM server, eta = max_staleness {eta}")
    return ("async" if eta else "sync"), eta


def import_config(path: str, **_):
    k, accel, path, assumed = _keys(path)
    async_keys = [f for f in ASYNC_ONLY if f in k.flat]
    read = _reader(k, bool(async_keys))
    layout = None
    if accel:
        layout, lines = accelerate_layout(accel)
        assumed += lines
    model = resolve_model(k.get("model_name_or_path", to="model"), "model_name_or_path")
    procs = _processes(k, layout, assumed)
    wl = _workload(k, read, _generation_batch(k, read, procs), assumed)
    beta = read(BETA)
    zero = layout["zero"] if layout else 0
    if layout is None:
        assumed.append("DDP over the trainer's processes (accelerate's default; pass the accelerate config as "
                       "trl:GRPO.yaml+ACCELERATE.yaml for ZeRO or FSDP)")
    if layout and layout["offload"]:
        wl["offload"] = layout["offload"]
    placement, cluster, engine = _generation(k, read, roles_of("grpo", beta), procs, zero, async_keys, wl, assumed)
    cfg = {"model": model, "algorithm": "grpo", "beta": beta, "workload": wl, "placement": placement,
           "cluster": {"devices": cluster, "kind": "gpu"}}
    lora = _lora(read)
    if lora:
        cfg["lora"] = lora
    mode, eta = _mode(k, read, async_keys, assumed)
    return finish(NAME, str(path), k, cfg, mode, eta, assumed, engine=engine)
