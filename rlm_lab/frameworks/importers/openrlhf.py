"""OpenRLHF (https://github.com/OpenRLHF/OpenRLHF): the command-line arguments of ``openrlhf.cli.train_ppo_ray``,
given as one string (``--from openrlhf:"--actor.num_gpus_per_node 8 ..."``; a pasted command line works: what comes
before the first option, or before ``openrlhf.cli.train_ppo_ray``, is skipped) or as a file of them
(``--from openrlhf:FILE.args``; ``#`` starts a comment, shell line continuations are fine).

Each option's kind (a flag, one value, N values) comes from OpenRLHF's argument parser
(``configs/frameworks/openrlhf/options.txt``), so the arguments split as OpenRLHF would split them.

Mapping (names and defaults from ``openrlhf/cli/train_ppo_ray.py``):

- algorithm: ``--algo.advantage.estimator`` (default gae -> ppo with a critic and a reward model; group_norm,
  dr_grpo -> grpo; rloo; reinforce, reinforce_baseline -> reinforce_pp); the reference exists when
  ``--algo.kl.init_coef`` > 0 (default 0.01 = beta);
- batch: ``--rollout.batch_size`` prompts x ``--rollout.n_samples_per_prompt``; ``--train.batch_size`` samples per
  optimizer step -> mini-batches; ``--train.max_epochs``; ``--train.micro_batch_size`` (or
  ``--train.dynamic_batch_enable`` with ``--train.max_tokens_per_gpu``); ``--data.max_len`` (prompt + response)
  and ``--rollout.max_new_tokens``; ``--ds.packing_samples`` -> no padding;
- placement: GPUs per model ``--{actor,ref,critic,reward}.num_nodes x .num_gpus_per_node`` and the vLLM engines
  ``--vllm.num_engines x --vllm.tensor_parallel_size``; ``--train.colocate_all``: one set (the hybrid engine;
  with ``--train.async_enable`` OpenRLHF colocates only the DeepSpeed models, the engines get their own GPUs);
  ``--train.colocate_actor_ref`` / ``--train.colocate_critic_reward``: those pairs share a set; ZeRO stage
  ``--ds.zero_stage`` (default 2), training tensor parallelism ``--ds.tensor_parallel_size``;
- mode: ``--train.async_enable`` -> async with eta = ``--train.async_queue_size`` (default 1; OpenRLHF: "larger =
  more off-policy");
- ``--ds.lora.rank`` -> LoRA; ``--vllm.gpu_memory_utilization`` (default 0.95) -> the engine's KV budget;
- memory (rlm_lab.cost.offload): ``--ds.adam_offload`` -> offload ``host_optimizer`` (ZeRO-Offload),
  ``--ref.offload`` / ``--reward.offload`` -> ``frozen``, ``--ds.enable_sleep`` -> ``sleep`` (the DeepSpeed models'
  state in host memory while vLLM generates); ``--vllm.enable_sleep``: the engine's pool exists only while it
  generates, which is how the predictor prices a colocated engine anyway; log-probs from logits in chunks of
  :data:`LOGPROB_CHUNK` positions (``_logsumexp_by_chunk`` in openrlhf/models/utils.py);
- response lengths: ``--rollout.max_new_tokens`` is the cap; lengths from the cost model's stated default
  distribution under it (rlm_lab.cost.workload.assumed_lengths), printed as assumed.

PPO (gae) with ``--reward.remote_url`` and no reward model: a rule reward (``reward: rule``, a verifier in place
of the reward model), the critic from ``--critic.model_name_or_path`` or else the actor's model (as
``train_ppo_ray.py`` sets it).

Refused: ring attention (``--ds.ring_attn_size`` > 1, context parallelism), PPO with no reward at all, a reward
model with a group estimator, a model without a shipped config.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from ...errors import RlmLabError
from .common import (Key, Keys, capped_response, finish, load_options, mean_response, read_key, read_table, resolve_model,
                     roles_of, set_dict, text_int, text_num)
from .shell import commands

NAME = "openrlhf"
ESTIMATORS = {"gae": "ppo", "group_norm": "grpo", "dr_grpo": "grpo", "rloo": "rloo", "reinforce": "reinforce_pp",
              "reinforce_baseline": "reinforce_pp"}
NOTES = {"*.adam.*": "optimizer hyper-parameters do not change the step's cost",
         "train.partial_rollout_enable": "partial rollout (interrupted generations resumed) not priced",
         "vllm.sync_backend": "NCCL assumed (the default)", "logger.*": "logging", "ckpt.*": "checkpoints",
         "data.prompt_dataset": "data location", "data.input_key": "data format",
         "algo.dynamic_filtering_*": "dynamic filtering: its inflation depends on the pass rate, which no config holds "
                                     "(predicted without)"}
LOGPROB_CHUNK = 1024   # openrlhf/models/utils.py _logsumexp_by_chunk(chunk_size=1024)
# vLLM's EngineArgs.max_num_seqs default for offline engines (OpenRLHF does not set it)
VLLM_MAX_NUM_SEQS = 256


# OpenRLHF's flag names before its 2026 dotted options (e.g. its examples/scripts at ac3689e, 2025-09-22) -> today's;
# each use is said in one line of the import's assumptions
RENAMES = {"pretrain": "actor.model_name_or_path", "reward_pretrain": "reward.model_name_or_path",
           "critic_pretrain": "critic.model_name_or_path", "vllm_num_engines": "vllm.num_engines",
           "vllm_tensor_parallel_size": "vllm.tensor_parallel_size",
           "vllm_gpu_memory_utilization": "vllm.gpu_memory_utilization", "colocate_all_models": "train.colocate_all",
           "colocate_actor_ref": "train.colocate_actor_ref", "colocate_critic_reward": "train.colocate_critic_reward",
           "micro_train_batch_size": "train.micro_batch_size", "train_batch_size": "train.batch_size",
           "rollout_batch_size": "rollout.batch_size", "n_samples_per_prompt": "rollout.n_samples_per_prompt",
           "max_epochs": "train.max_epochs", "generate_max_len": "rollout.max_new_tokens", "max_len": "data.max_len",
           "zero_stage": "ds.zero_stage", "init_kl_coef": "algo.kl.init_coef",
           "advantage_estimator": "algo.advantage.estimator", "gradient_checkpointing":
           "actor.gradient_checkpointing_enable", "packing_samples": "ds.packing_samples", "adam_offload":
           "ds.adam_offload", "vllm_enable_sleep": "vllm.enable_sleep", "deepspeed_enable_sleep": "ds.enable_sleep",
           "async_train": "train.async_enable", "use_dynamic_batch": "train.dynamic_batch_enable",
           "ring_attn_size": "ds.ring_attn_size", "lora_rank": "ds.lora.rank", "remote_rm_url": "reward.remote_url",
           "vllm_sync_backend": "vllm.sync_backend", "ref_reward_offload": "ref.offload",
           "max_tokens_per_gpu": "train.max_tokens_per_gpu"}
for _r in ("actor", "ref", "critic", "reward"):
    RENAMES |= {f"{_r}_num_nodes": f"{_r}.num_nodes", f"{_r}_num_gpus_per_node": f"{_r}.num_gpus_per_node"}
OTHER_MAINS = {"train_sft": "an SFT run", "train_rm": "a reward-model training run", "train_dpo": "a DPO run",
               "train_kto": "a KTO run", "train_prm": "a process-reward-model training run", "batch_inference":
               "a batch inference run", "serve_rm": "a reward-model server", "train_kd": "a distillation run"}


def args_from_script(text: str, path) -> str | None:
    """The arguments of the script's ``openrlhf.cli.train_ppo_ray`` command (shell variables and arrays expanded,
    nothing run); None when the file is a bare arguments file; another OpenRLHF entry point is one line."""
    if not any("openrlhf.cli." in line for line in text.splitlines() if not line.lstrip().startswith("#")):
        return None
    for words, _ in commands(text, f"openrlhf script {path}"):
        mods = [w for w in words if w.startswith("openrlhf.cli.")]
        if not mods:
            continue
        main = mods[0].split(".")[-1]
        if main == "train_ppo_ray":
            return shlex.join(words[words.index(mods[0]) + 1:])
        raise RlmLabError(f"openrlhf script {path} launches openrlhf.cli.{main}: "
                          f"{OTHER_MAINS.get(main, 'not the PPO/GRPO trainer (train_ppo_ray)')}; nothing to price "
                          f"as an RL step")
    raise RlmLabError(f"openrlhf script {path} runs no openrlhf.cli.train_ppo_ray command")


def args_from_file(path) -> str:
    p = Path(path)
    if not p.is_file():
        raise RlmLabError(f"openrlhf arguments file {path} not found")
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise RlmLabError(f"openrlhf arguments file {path} is not a text file (byte {e.start} is not UTF-8)") from None
    script = args_from_script(text, path)
    if script is not None:
        return script
    return " ".join(line.split("#")[0].rstrip().rstrip("\\") for line in text.splitlines())


RENAMED: list = []


def parse_args(text: str) -> dict:
    """``--a.b 1 --flag --pair 1 2`` -> {"a.b": "1", "flag": True, "pair": ["1", "2"]}, by OpenRLHF's parser's kinds."""
    try:
        tokens = shlex.split(text, comments=True)
    except ValueError as e:
        raise RlmLabError(f"openrlhf arguments do not split as a shell line ({e})") from None
    if "openrlhf.cli.train_ppo_ray" in tokens:
        tokens = tokens[tokens.index("openrlhf.cli.train_ppo_ray") + 1:]
    first = next((i for i, t in enumerate(tokens) if t.startswith("--")), None)
    if first is None:
        raise RlmLabError("openrlhf arguments hold no --option (give train_ppo_ray's arguments, e.g. "
                          "\"--actor.model_name_or_path Qwen/Qwen2.5-7B-Instruct --actor.num_gpus_per_node 8\")")
    kinds = load_options(NAME, kinds=True)
    out: dict = {}
    i = first
    while i < len(tokens):
        tok = tokens[i]
        if not tok.startswith("--") or tok == "--":
            raise RlmLabError(f"openrlhf arguments: {tok!r} follows no option that takes a value")
        name, eq, val = tok[2:].partition("=")
        if name not in kinds and name in RENAMES and RENAMES[name] in kinds:
            RENAMED.append(f"--{name} read as --{RENAMES[name]} (OpenRLHF's pre-2026 name)")
            name = RENAMES[name]
        elif name == "prompt_max_len":      # the pre-2026 prompt cap: data.max_len is prompt + response today
            name = "prompt_max_len"
        kind = kinds.get(name, "value" if name == "prompt_max_len" else None)
        i += 1
        if eq:
            out[name] = val
            continue
        values = []
        if kind == "flag":
            out[name] = True
            continue
        n = int(kind.split("=")[1]) if kind and kind.startswith("nargs=") and kind[6:].isdigit() else None
        while i < len(tokens) and not tokens[i].startswith("--") and (n is None or len(values) < n):
            values.append(tokens[i])
            i += 1
            if kind == "value":
                break
        if kind is not None and kind != "nargs=*" and not values:
            raise RlmLabError(f"openrlhf --{name} needs a value")
        out[name] = True if not values else (values[0] if kind in ("value", None) and len(values) == 1 else values)
    return out


INT, INT0, NUM, FLAG = text_int(1, "openrlhf "), text_int(0, "openrlhf "), text_num("openrlhf "), "bool"


# ---- the key tables: (option, field, kind, default, what it sets); read in order, refusals name "--option" ----
RING = Key("ds.ring_attn_size", "ring", INT, 1, "checked: 1 (no ring attention)")
BATCH = (Key("rollout.batch_size", "prompts", INT, 1024, "workload.prompts"),
         Key("rollout.n_samples_per_prompt", "group", INT, 1, "workload.group_size"),
         Key("train.batch_size", "train_bs", INT, 128, "samples per optimizer step -> workload.minibatches"))
MAX_LEN = Key("data.max_len", "max_len", INT, 2048, "prompt + response length")
MAX_NEW = Key("rollout.max_new_tokens", "resp", INT, 0, "workload.response (fixed, the cap)")
EPOCHS = Key("train.max_epochs", "epochs", INT, 1, "workload.epochs")
OFFLOAD = tuple(Key(key, kind, FLAG, False, f"workload.offload {kind}") for key, kind in (
    ("ds.adam_offload", "host_optimizer"), ("ref.offload", "frozen"), ("reward.offload", "frozen"),
    ("ds.enable_sleep", "sleep")))
ENGINE_SLEEP = Key("vllm.enable_sleep", "sleep", FLAG, False,
                   "the engine's pool only while it generates (as the predictor prices it)")
DYNAMIC = (Key("train.dynamic_batch_enable", "dynamic", FLAG, False, "micro-batches by tokens"),
           Key("train.max_tokens_per_gpu", "tokens", INT, 16192, "workload.micro_batch = tokens / mean sequence length"))
MICRO = Key("train.micro_batch_size", "micro_batch", INT, 1, "workload.micro_batch")
DTYPE = Key("ds.param_dtype", "dtype", "str", "bf16", "workload.precision bf16-mixed", "openrlhf --ds.param_dtype")
PACKING = Key("ds.packing_samples", "packing", FLAG, False, "workload.padding none")
CHECKPOINTING = Key("actor.gradient_checkpointing_enable", "gc", FLAG, False, "workload.gradient_checkpointing")
BETA = Key("algo.kl.init_coef", "beta", NUM, 0.01, "beta (0: no reference model)")
LAYOUT = (Key("vllm.num_engines", "engines", INT0, 0, "vLLM engines"),
          Key("vllm.tensor_parallel_size", "vtp", INT, 1, "generation tp"),
          Key("ds.zero_stage", "zero", INT0, 2, "ZeRO stage of every trained model"),
          Key("ds.tensor_parallel_size", "tp", INT, 1, "training tp"),
          Key("train.colocate_all", "colocate_all", FLAG, False, "one set for every model"),
          Key("train.async_enable", "async_on", FLAG, False, "mode async"))
MEMORY_FRACTION = Key("vllm.gpu_memory_utilization", "memory_fraction", NUM, 0.95, "the engine's memory share (KV cache)")
COLOCATE_REF = Key("train.colocate_actor_ref", "on", FLAG, False, "reference on the actor's set")
COLOCATE_REWARD = Key("train.colocate_critic_reward", "on", FLAG, False, "reward on the critic's set")
QUEUE = Key("train.async_queue_size", "eta", INT, 1, "eta (queued rollouts ahead of training)")
LORA = (Key("ds.lora.rank", "rank", INT0, 0, "lora.rank"),
        Key("ds.lora.target_modules", "targets", "raw", "all-linear", "lora.targets"))


def _read(k: Keys, row: Key):
    return read_key(k, row, label="--{}")


def _gpus(k: Keys, role: str) -> int:
    what = f"{role} GPUs = num_nodes x num_gpus_per_node"
    return _read(k, Key(f"{role}.num_nodes", "n", INT, 1, what)) * _read(k, Key(f"{role}.num_gpus_per_node", "g", INT,
                                                                                 8, what))


# ---- derived values ---------------------------------------------------------------------------------------
def _arguments(arg: str) -> tuple[str, dict, list]:
    """(source, parsed options, assumed lines): a file or a command line; pre-2026 names read as today's."""
    source = arg
    if not arg.lstrip().startswith("-") and Path(arg.strip()).is_file():
        source, arg = arg.strip(), args_from_file(arg.strip())
    elif not arg.lstrip().startswith("-") and arg.strip().endswith((".args", ".sh", ".txt")):
        raise RlmLabError(f"openrlhf arguments file {arg.strip()} not found")
    RENAMED.clear()
    parsed = parse_args(arg)
    assumed = list(RENAMED)
    if "prompt_max_len" in parsed:
        cap = parsed.pop("prompt_max_len")
        if "data.max_len" not in parsed and "rollout.max_new_tokens" in parsed:
            try:
                parsed["data.max_len"] = str(int(cap) + int(parsed["rollout.max_new_tokens"]))
            except (TypeError, ValueError):
                raise RlmLabError(f"openrlhf --prompt_max_len must be an integer, got {cap!r}") from None
            assumed.append(f"--prompt_max_len {cap} (pre-2026) read as --data.max_len {parsed['data.max_len']} = "
                           f"prompt cap + --rollout.max_new_tokens")
    return source, parsed, assumed


def _algorithm(k: Keys) -> tuple[str, str]:
    """(estimator, the predictor's algorithm); refused: ring attention."""
    est = read_key(k, Key("algo.advantage.estimator", "est", "str", "gae", label="openrlhf --algo.advantage.estimator"))
    if est not in ESTIMATORS:
        raise RlmLabError(f"openrlhf --algo.advantage.estimator {est!r}: one of {', '.join(ESTIMATORS)}")
    algo = ESTIMATORS[est]
    k.use("algo.advantage.estimator", f"algorithm {algo}")
    if _read(k, RING) > 1:
        raise RlmLabError(f"openrlhf --ds.ring_attn_size {k.flat['ds.ring_attn_size']}: ring attention (context "
                          f"parallelism, each sequence split over a ring of GPUs) is not modelled by the predictor "
                          f"(its sp is Ulysses only); predict with 1")
    return est, algo


def _models(k: Keys, est: str, algo: str, assumed: list) -> tuple[str, str | None, str | None, str]:
    """(policy, critic, reward model, scoring): PPO's critic and reward as train_ppo_ray.py picks them."""
    if k.get("actor.model_name_or_path") is None:
        raise RlmLabError("openrlhf arguments need --actor.model_name_or_path (the policy model)")
    model = resolve_model(k.get("actor.model_name_or_path", to="model"), "--actor.model_name_or_path")
    critic = reward = None
    scoring = "model"
    rm_path = k.get("reward.model_name_or_path")
    if algo == "ppo" and rm_path is None:
        if k.get("reward.remote_url") is None:
            raise RlmLabError("openrlhf gae (PPO) with neither --reward.model_name_or_path nor --reward.remote_url: "
                              "the run has no reward")
        # train_ppo_ray.py: with a remote reward and gae, no reward model is placed and the critic starts from
        # --critic.model_name_or_path, else from the actor's model
        k.use("reward.remote_url", "a rule or remote reward: no reward model placed (reward rule)")
        scoring = "rule"
        c = k.get("critic.model_name_or_path", to="critic")
        critic = resolve_model(c, "--critic.model_name_or_path") if c else model
        if not c:
            assumed.append("critic initialised from the actor's model (OpenRLHF's default with --reward.remote_url "
                           "and gae)")
    elif algo == "ppo":
        reward = resolve_model(str(rm_path).split(",")[0], "--reward.model_name_or_path")
        k.use("reward.model_name_or_path", "reward_model")
        c = k.get("critic.model_name_or_path", to="critic")
        critic = resolve_model(c, "--critic.model_name_or_path") if c else reward
        if not c:
            assumed.append("critic initialised from the reward model (OpenRLHF's default)")
    else:
        k.use("reward.remote_url", "a rule or remote reward: no reward model placed")
    if algo != "ppo" and rm_path is not None:
        raise RlmLabError(f"openrlhf --reward.model_name_or_path with --algo.advantage.estimator {est}: the "
                          f"predictor's {algo} scores with a rule; only PPO (gae) places a reward model")
    return model, critic, reward, scoring


def _lengths(k: Keys, assumed: list) -> tuple[int, object]:
    """(prompt length, response): --data.max_len less --rollout.max_new_tokens, or split evenly."""
    max_len = _read(k, MAX_LEN)
    if k.has(MAX_NEW.key):
        resp = _read(k, MAX_NEW)
        if resp >= max_len:
            raise RlmLabError(f"openrlhf --rollout.max_new_tokens {resp} leaves no room for a prompt in --data.max_len "
                              f"{max_len} (prompt + response)")
        prompt_len = max_len - resp
    else:
        prompt_len = resp = max(1, max_len // 2)
        assumed.append(f"prompt and response split --data.max_len {max_len} evenly ({prompt_len} + {resp})")
    response = capped_response(resp, "--rollout.max_new_tokens" if k.has(MAX_NEW.key) else
                               "--data.max_len (half of it)", assumed)
    return prompt_len, response


def _workload(k: Keys, assumed: list) -> dict:
    """The workload: batch, lengths, epochs, offload, micro-batch, padding, gradient checkpointing."""
    b = read_table(k, BATCH, label="--{}")
    n = b["prompts"] * b["group"]
    if n % b["train_bs"]:
        raise RlmLabError(f"openrlhf --train.batch_size {b['train_bs']} must divide the {n} samples of a rollout "
                          f"(--rollout.batch_size x --rollout.n_samples_per_prompt)")
    prompt_len, response = _lengths(k, assumed)
    wl = {"prompts": b["prompts"], "group_size": b["group"], "prompt_len": prompt_len, "response": response,
          "minibatches": n // b["train_bs"], "epochs": _read(k, EPOCHS), "precision": "bf16-mixed",
          "logprob_chunk": LOGPROB_CHUNK}
    offload = [row.field for row in OFFLOAD if _read(k, row) or k.use(row.key, "false")]
    if offload:
        wl["offload"] = sorted(set(offload))
        if "frozen" in offload and not (k.flat.get("ref.offload") and k.flat.get("reward.offload")):
            assumed.append("--ref.offload or --reward.offload: both frozen models priced as offloaded")
    _read(k, ENGINE_SLEEP)
    if _read(k, DYNAMIC[0]):
        wl["micro_batch"] = max(1, int(_read(k, DYNAMIC[1]) // (prompt_len + mean_response(response))))
    else:
        wl["micro_batch"] = _read(k, MICRO)
    if read_key(k, DTYPE) not in ("bf16", "fp16"):
        raise RlmLabError(f"openrlhf --ds.param_dtype {k.flat['ds.param_dtype']!r}: bf16 or fp16")
    if _read(k, PACKING) or k.flat.get("train.dynamic_batch_enable") is True:
        wl["padding"] = "none"
    wl["gradient_checkpointing"] = _read(k, CHECKPOINTING)
    return wl


def _engine(k: Keys, wl: dict, engines: int, assumed: list) -> dict | None:
    """The vLLM engines' batch limit and memory share, or none (the actor generates)."""
    if not engines:
        assumed.append("no vLLM engines (--vllm.num_engines 0): the actor generates (static batching)")
        return None
    wl["engine"] = "continuous"
    engine = {"what": "vLLM engine", "max_num_seqs": VLLM_MAX_NUM_SEQS, "memory_fraction": _read(k, MEMORY_FRACTION)}
    assumed.append(f"vLLM's max_num_seqs default ({VLLM_MAX_NUM_SEQS}): OpenRLHF does not set it")
    return engine


def _colocated_all(k: Keys, roles, lay: dict, actor_devices: int, add, sets, where, assumed: list) -> dict:
    """--train.colocate_all without async: every model on the actor's GPUs (the hybrid engine under ZeRO-3)."""
    engines, vtp, zero, tp = lay["engines"], lay["vtp"], lay["zero"], lay["tp"]
    if engines and engines * vtp != actor_devices:
        raise RlmLabError(f"openrlhf --train.colocate_all needs --vllm.num_engines x --vllm.tensor_parallel_size "
                          f"({engines} x {vtp}) = the actor's {actor_devices} GPUs (as OpenRLHF asserts)")
    if zero == 3 and tp == 1:
        add("all", actor_devices, roles, zero=3, gen_tp=vtp if vtp > 1 else 0)
        placement = {"name": "hybrid", "sets": sets, "roles": where, "sync": "none", "reshard": True}
        assumed.append("hybrid engine: the vLLM copy is priced as the ZeRO-3 actor gathered into generation "
                       "tp (HybridFlow's reshard, arXiv 2409.19256 Sec. 5.4)")
    else:
        add("all", actor_devices, roles, tp=tp, zero=zero)
        placement = {"name": "colocated", "sets": sets, "roles": where, "sync": "none", "reshard": False}
        if vtp > 1:
            assumed.append(f"colocated with ZeRO-{zero}: generation priced at the training layout, not vLLM tp {vtp}")
    for r in ("ref", "critic", "reward"):
        k.use(f"{r}.num_gpus_per_node", "on the actor's GPUs (colocate_all)")
        k.use(f"{r}.num_nodes", "on the actor's GPUs (colocate_all)")
    return placement


def _placement(k: Keys, roles, algo: str, scoring: str, lay: dict, assumed: list) -> dict:
    """The sets: one (colocate_all), or the vLLM engines, the actor (with what is colocated on it), the reference,
    the critic and the reward model on GPUs of their own."""
    sets, where = [], {}

    def add(name, devices, roles_here, **kw):
        sets.append(set_dict(name, devices, key=f"openrlhf {name} GPUs", **kw))
        where.update({r: name for r in roles_here})

    engines, vtp, zero, tp, colocate_all = lay["engines"], lay["vtp"], lay["zero"], lay["tp"], lay["colocate_all"]
    actor_devices = _gpus(k, "actor")
    if colocate_all and not lay["async_on"]:
        return _colocated_all(k, roles, lay, actor_devices, add, sets, where, assumed)
    if engines:
        add("rollout", engines * vtp, ("rollout",), tp=vtp)
    trainer_roles = ["actor"] + ([] if engines else ["rollout"])
    if "reference" in roles and (colocate_all or _read(k, COLOCATE_REF)):
        trainer_roles.append("reference")
    if colocate_all and algo == "ppo":
        trainer_roles += [r for r in ("critic", "reward") if r in roles]
    add("actor", actor_devices, trainer_roles, tp=tp, zero=zero)
    if "reference" in roles and "reference" not in trainer_roles:
        add("ref", _gpus(k, "ref"), ("reference",), tp=tp)
    if algo == "ppo" and "critic" not in trainer_roles and scoring == "rule":
        add("critic", _gpus(k, "critic"), ("critic",), tp=tp, zero=zero)
    elif algo == "ppo" and "critic" not in trainer_roles:
        if _read(k, COLOCATE_REWARD):
            add("critic", _gpus(k, "critic"), ("critic", "reward"), tp=tp, zero=zero)
        else:
            add("critic", _gpus(k, "critic"), ("critic",), tp=tp, zero=zero)
            add("reward", _gpus(k, "reward"), ("reward",), tp=tp)
    if engines:
        assumed.append("weights broadcast (NCCL) from the actor to the vLLM engines after each update")
    return {"name": "openrlhf", "sets": sets, "roles": where, "sync": "collective" if engines else "none",
            "reshard": False}


def _lora(k: Keys, where: dict) -> dict | None:
    """LoRA's rank and targets; refused: the reference on GPUs of its own (LoRA's reference is the actor)."""
    rank = _read(k, LORA[0])
    if rank and "reference" in where and where["reference"] != where["actor"]:
        raise RlmLabError("openrlhf --ds.lora.rank with the reference on GPUs of its own: the predictor prices LoRA's "
                          "reference as the actor with its adapter disabled; add --train.colocate_actor_ref")
    if not rank:
        return None
    targets = _read(k, LORA[1])
    return {"rank": rank, "targets": targets if targets != ["all-linear"] else "all-linear"}


def import_config(arg: str, **_):
    source, parsed, assumed = _arguments(arg)
    k = Keys(NAME, parsed, NOTES)
    est, algo = _algorithm(k)
    model, critic, reward, scoring = _models(k, est, algo, assumed)
    wl = _workload(k, assumed)
    beta = _read(k, BETA)
    lay = read_table(k, LAYOUT, label="--{}")
    roles = roles_of(algo, beta, scoring)
    engine = _engine(k, wl, lay["engines"], assumed)
    placement = _placement(k, roles, algo, scoring, lay, assumed)
    mode, eta = ("async", _read(k, QUEUE)) if lay["async_on"] else ("sync", 0)
    cfg = {"model": model, "algorithm": algo, "beta": beta, "workload": wl, "placement": placement,
           "cluster": {"devices": sum(s["devices"] for s in placement["sets"]), "kind": "gpu"}}
    if critic:
        cfg["critic"] = critic
    if reward:
        cfg["reward_model"] = reward
    if scoring == "rule":
        cfg["reward"] = "rule"
    lora = _lora(k, placement["roles"])
    if lora:
        cfg["lora"] = lora
    cap = "--data.max_len - --rollout.max_new_tokens" if k.has(MAX_NEW.key) else None
    return finish(NAME, source, k, cfg, mode, eta, assumed, engine=engine, prompt_cap=cap)
