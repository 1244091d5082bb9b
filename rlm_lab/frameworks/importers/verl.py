"""verl (https://github.com/volcengine/verl): a Hydra config (nested YAML, or dotted keys as the example scripts'
overrides write them) of ``verl.trainer.main_ppo``, the one-step-off recipe
(``verl.experimental.one_step_off_policy.main_ppo``) or the fully asynchronous one
(``verl.experimental.fully_async_policy.fully_async_main``).

Mapping (key names and defaults from ``verl/trainer/config/_generated_ppo_trainer.yaml``; the recipes' own
keys from their config files; all listed in ``configs/frameworks/verl/options.txt``):

- algorithm: ``algorithm.adv_estimator`` (gae -> ppo, grpo, rloo, reinforce_plus_plus(_baseline) -> reinforce_pp);
- batch: ``data.train_batch_size`` prompts x ``actor_rollout_ref.rollout.n`` responses, ``data.max_prompt_length``,
  ``data.max_response_length`` (the cap: lengths from the cost model's stated default distribution under it,
  rlm_lab.cost.workload.assumed_lengths, printed as assumed);
  ``actor.ppo_mini_batch_size`` (prompts) -> mini-batches, ``actor.ppo_epochs``, ``actor.ppo_micro_batch_size_per_gpu``
  (or ``use_dynamic_bsz`` with ``ppo_max_token_len_per_gpu``: that many tokens per micro-batch);
- KL: the reference exists when ``actor.use_kl_loss`` (coefficient ``kl_loss_coef``) or
  ``algorithm.use_kl_in_reward`` (``algorithm.kl_ctrl.kl_coef``); otherwise beta = 0 and no reference;
- placement: ``actor_rollout_ref.hybrid_engine`` true (default): one set of ``trainer.nnodes x n_gpus_per_node``
  GPUs, FSDP (ZeRO-3) resharded into the rollout's ``tensor_model_parallel_size`` (HybridFlow arXiv 2409.19256);
  false: the recipes' separate rollout pool of ``rollout.nnodes x rollout.n_gpus_per_node`` GPUs, weights
  broadcast after each sync;
- mode: the fully-async recipe (``async_training`` present): ``async`` with eta = ceil(``staleness_threshold``)
  versions (verl: "staleness_threshold < 1 ... 1 is about one-step-off",
  https://verl.readthedocs.io/en/latest/advance/fully_async.html), one step = one parameter sync =
  ``trigger_parameter_sync_step x require_batches`` mini-batches of ``ppo_mini_batch_size`` prompts;
  ``hybrid_engine: false`` without it: the one-step-off recipe (eta = 1,
  https://verl.readthedocs.io/en/latest/advance/one_step_off.html);
- engine: ``rollout.name`` vllm/sglang -> continuous batching of at most ``rollout.max_num_seqs`` sequences
  per replica; hf -> static; ``model.use_remove_padding`` -> no padding; ``model.enable_gradient_checkpointing``;
  ``model.lora_rank`` / ``target_modules`` -> LoRA;
- memory: ``actor.fsdp_config.param_offload`` -> offload ``params``, ``optimizer_offload`` -> ``optimizer``,
  ``ref.fsdp_config.param_offload`` -> ``frozen`` (rlm_lab.cost.offload); log-probs from logits in chunks of
  :data:`LOGPROB_CHUNK` positions (verl's ``entropy_from_logits_with_chunking``; its ``logprobs_from_logits`` runs
  flash-attn's Triton cross-entropy and holds no fp32 softmax at all).

Megatron pipeline parallelism (``megatron.pipeline_model_parallel_size``) -> the set's ``pp`` (1F1B stages,
resharded into the rollout's TP; virtual stages priced as plain 1F1B, said).

``actor.ulysses_sequence_parallel_size`` -> the set's ``sp`` (DeepSpeed-Ulysses, arXiv 2309.14509).

Refused (one line): Megatron context parallelism, a reward model with a group
estimator, a model without a shipped config.
"""

from __future__ import annotations

import math

from ...errors import RlmLabError
from .common import (Key, Keys, capped_response, finish, mean_response, need_bool, need_int, one_set, read_key,
                     read_table, resolve_model, roles_of, two_sets)
from .verl_load import load as _load

NAME = "verl"
A = "actor_rollout_ref."
LOGPROB_CHUNK = 2048   # verl/utils/torch_functional.py entropy_from_logits_with_chunking(chunk_size=2048)
ESTIMATORS = {"gae": "ppo", "grpo": "grpo", "rloo": "rloo", "reinforce_plus_plus": "reinforce_pp",
              "reinforce_plus_plus_baseline": "reinforce_pp", "gpg": "grpo"}
# estimators priced as another algorithm because they run the same passes (said in one assumed line): GPG's advantage
# is the group-mean-centred outcome score (verl's compute_gpg_outcome_advantage; arXiv 2504.02546), a group baseline
# from a rule reward with no critic, as GRPO's, and its loss -log p x A costs GRPO's clipped loss
SAME_PASSES = {"gpg": "GPG's group-mean-centred outcome advantage (arXiv 2504.02546): GRPO's passes, no critic"}
NOTES = {
    "critic.*_offload": "the critic's own offload is not read: workload.offload follows the actor's",
    "*optim.*": "optimizer hyper-parameters do not change the step's cost",
    "async_training.partial_rollout": "partial rollout (generations interrupted at a parameter sync and resumed) "
                                      "not priced",
    "trainer.logger": "logging", "trainer.project_name": "logging", "trainer.experiment_name": "logging",
    "data.train_files": "data location", "data.val_files": "data location",
}


def _switch(k: Keys, key: str, to: str) -> bool:
    """A boolean key, recorded as used with ``to`` when true and as "false" otherwise."""
    on = need_bool(k.get(key, False, to), key)
    if not on:
        k.use(key, "false")
    return on


# ---- the key tables: (key, field, kind, default, what it sets); read in order by common.read_table ---------
RUN = (Key(A + "rollout.n", "group_size", "int", 1, "workload.group_size"),
       Key("data.max_prompt_length", "prompt_len", "int", 512, "workload.prompt_len"),
       Key("data.max_response_length", "resp_cap", "int", 512, "workload.response (the cap)"),
       Key(A + "actor.ppo_mini_batch_size", "mini", "int", 256),
       Key(A + "hybrid_engine", "hybrid", "bool", True, "placement (true: one set, resharded)"))
PP = Key(A + "actor.megatron.pipeline_model_parallel_size", "pp", "int", 1,
         "training pp (Megatron's 1F1B stages, resharded into the rollout's tp)")
SP = Key(A + "actor.ulysses_sequence_parallel_size", "sp", "int", 1, "the set's sp (Ulysses sequence parallelism)")
# the reference's layout: read only when written, and refused when it differs from the actor's
REF_PP = Key(A + "ref.megatron.pipeline_model_parallel_size", "pp", to="the reference's pp (as the actor's)")
REF_SP = Key(A + "ref.ulysses_sequence_parallel_size", "sp", to="the reference's sp (as the actor's)")
V1 = (Key("trainer.use_v1", "v1", "bool", False, "verl's V1 trainer (trainer.v1.*)"),
      Key("trainer.v1.trainer_mode", "v1_mode", "str", "sync", "mode", "verl trainer.v1.trainer_mode",
          ("sync", "colocate_async", "separate_async")))
V1_ETA = Key("trainer.v1.sampler.max_off_policy_threshold", "eta", "int0", 8, "eta (model versions a sample may lag)")
V1_SWITCH = Key("trainer.v1.separate_async.hybrid_rollout.enable_switch", "switch", "bool", False)
ASYNC = (Key("async_training.staleness_threshold", "stale", "num", 0.1, "eta = ceil(threshold)"),
         Key("async_training.trigger_parameter_sync_step", "trig", "int", 4,
             "a step = one parameter sync = this many trainer steps"),
         Key("async_training.require_batches", "req", "int", 1,
             "mini-batches per trainer step (prompts = ppo_mini_batch_size x trigger x require_batches)"))
PROMPTS = Key("data.train_batch_size", "prompts", "int", 1024, "workload.prompts")
EPOCHS = Key(A + "actor.ppo_epochs", "epochs", "int", 1, "workload.epochs")
ROLLOUT_LOGPROBS = tuple(Key(key, "lp", "bool", False, "workload.recompute_old = false (the engine's log-probs as the "
                             "old policy's)") for key in (A + "actor.use_rollout_log_probs",
                                                          "async_training.use_rollout_log_probs"))
OFFLOAD = ((A + "actor.fsdp_config.param_offload", "params"), (A + "actor.fsdp_config.optimizer_offload", "optimizer"),
           (A + "ref.fsdp_config.param_offload", "frozen"), (A + "actor.megatron.param_offload", "params"),
           (A + "actor.megatron.optimizer_offload", "optimizer"), (A + "ref.megatron.param_offload", "frozen"))
CRITIC_OFFLOAD = ("critic.fsdp_config.param_offload", "critic.fsdp_config.optimizer_offload",
                  "critic.fsdp.param_offload", "critic.fsdp.optimizer_offload")
DYNAMIC = (Key(A + "actor.use_dynamic_bsz", "dynamic", "bool", False),
           Key(A + "actor.ppo_max_token_len_per_gpu", "tokens", "int", 16384))
MICRO = Key(A + "actor.ppo_micro_batch_size_per_gpu", "micro_batch", "int", None, "workload.micro_batch")
ENGINE_NAME = Key(A + "rollout.name", "name", "str", "vllm", "workload.engine", f"verl {A}rollout.name")
ENGINE = (Key(A + "rollout.max_num_seqs", "max_num_seqs", "int", 256, "sequences per replica at once (at most)"),
          Key(A + "rollout.gpu_memory_utilization", "memory_fraction", "num", 0.5, "the engine's memory share (KV cache)"))
MODEL_FLAGS = (Key(A + "model.use_remove_padding", "no_padding", "bool", True, "workload.padding"),
               Key(A + "model.enable_gradient_checkpointing", "gradient_checkpointing", "bool", True,
                   "workload.gradient_checkpointing"))
# (switch, coefficient) of the two KL terms verl has: the actor's KL loss, the KL penalty in the reward
KL = ((Key(A + "actor.use_kl_loss", "on", "bool", False), Key(A + "actor.kl_loss_coef", "beta", "num", 0.001, "beta")),
      (Key("algorithm.use_kl_in_reward", "on", "bool", False),
       Key("algorithm.kl_ctrl.kl_coef", "beta", "num", 0.001, "beta")))
STRATEGY = Key(A + "actor.strategy", "strategy", "str", "fsdp", "training layout: fsdp ZeRO-3, megatron its tp/pp/ep",
               f"verl {A}actor.strategy")
MEGATRON = (Key(A + "actor.megatron.tensor_model_parallel_size", "tp", "int", 1, "training tp"),
            Key(A + "actor.megatron.expert_model_parallel_size", "ep", "int", 1, "training ep (MoE experts split)"),
            Key(A + "actor.megatron.context_parallel_size", "cp", "int", 1, "checked: 1"))
DISTRIBUTED_OPTIMIZER = Key(A + "actor.megatron.use_distributed_optimizer", "zero1", "bool", False,
                            "ZeRO-1 when true (Megatron's distributed optimizer)")
GENERATION = (Key(A + "rollout.expert_parallel_size", "rollout_ep", "int", 1),
              Key(A + "rollout.tensor_model_parallel_size", "gen_tp", "int", 2, "generation tp"),
              Key("trainer.nnodes", "nnodes", "int", 1, "trainer GPUs = nnodes x n_gpus_per_node"),
              Key("trainer.n_gpus_per_node", "per_node", "int", 8, "trainer GPUs = nnodes x n_gpus_per_node"))
# the rollout pool: V1's standalone pool (actor_rollout_ref.rollout.*) or the recipes' own (rollout.*)
STANDALONE_POOL = (Key(A + "rollout.nnodes", "nnodes", "int0", 0, "standalone rollout GPUs = nnodes x n_gpus_per_node"),
                   Key(A + "rollout.n_gpus_per_node", "per_node", "int", 8,
                       "standalone rollout GPUs = nnodes x n_gpus_per_node"))
RECIPE_POOL = (Key("rollout.nnodes", "nnodes", "int", 1, "rollout GPUs = rollout.nnodes x rollout.n_gpus_per_node"),
               Key("rollout.n_gpus_per_node", "per_node", "int", 8,
                   "rollout GPUs = rollout.nnodes x rollout.n_gpus_per_node"))
LORA = (Key(A + "model.lora_rank", "rank", "int0", 0, "lora.rank"),
        Key(A + "model.target_modules", "targets", "raw", "all-linear", "lora.targets"))


# ---- derived values ---------------------------------------------------------------------------------------
def _keys(path: str) -> tuple[Keys, list, set]:
    """The config's keys (null keys dropped), the notes its loading wrote, and its null keys; refused: a
    distillation run, a mandatory key left ``???``."""
    flat, written, nulls, notes = _load(path)
    if need_bool(flat.get("distillation.enabled", False), "verl distillation.enabled"):
        raise RlmLabError(f"verl {path}: distillation.enabled=true is on-policy distillation (a teacher model scores "
                          f"every token), not an RL step the predictor prices")
    for key in (A + "rollout.name", A + "model.path"):
        if flat.get(key) == "???":
            raise RlmLabError(f"verl {key} is mandatory in verl (??? in its config): {path} must set it")
    flat = {key.lstrip("+"): v for key, v in flat.items() if key not in nulls}
    return Keys(NAME, flat, NOTES, written), list(notes), nulls


def _algorithm(k: Keys, assumed: list) -> tuple[str, str]:
    """(adv_estimator, the predictor's algorithm)."""
    est = read_key(k, Key("algorithm.adv_estimator", "est", "str", "gae", label="verl algorithm.adv_estimator"))
    if est not in ESTIMATORS:
        raise RlmLabError(f"verl algorithm.adv_estimator={est!r} has no predictor algorithm; known: "
                          f"{', '.join(ESTIMATORS)}")
    algo = ESTIMATORS[est]
    k.use("algorithm.adv_estimator", f"algorithm {algo}")
    if est in SAME_PASSES:
        assumed.append(f"adv_estimator={est} priced as {algo}: {SAME_PASSES[est]}")
    return est, algo


def _as_actor(k: Keys, ref: Key, actor: Key, value: int) -> None:
    """The reference's layout key, read only when written: refused when it differs from the actor's."""
    if k.has(ref.key) and need_int(k.get(ref.key, value, ref.to), ref.key) != value:
        raise RlmLabError(f"verl {ref.key}={k.flat[ref.key]} differs from {actor.key}={value}: the predictor lays the "
                          f"reference out as the actor")


def _parallel(k: Keys, est: str, algo: str, assumed: list) -> tuple[int, int]:
    """(pp, sp) of the actor; the reference laid out as the actor (refused otherwise); a reward model only with PPO."""
    pp = read_key(k, PP)
    _as_actor(k, REF_PP, PP, pp)
    vkey, vpp = A + "actor.megatron.virtual_pipeline_model_parallel_size", []
    if pp > 1 and k.flat.get(vkey) is not None:
        k.use(vkey, "not priced: the 1F1B bubble without interleaving (an overestimate of the bubble)")
        vpp = [f"{vkey}={k.flat[vkey]}: priced as plain 1F1B, (m + pp - 1) / m (interleaved stages shrink the bubble; "
               f"an overestimate)"]
    sp = read_key(k, SP)
    _as_actor(k, REF_SP, SP, sp)
    if need_bool(k.get("reward_model.enable", False), "reward_model.enable") and algo != "ppo":
        raise RlmLabError(f"verl reward_model.enable=true with adv_estimator={est}: the predictor's {algo} scores "
                          f"with a rule; only PPO (gae) places a reward model")
    assumed += vpp
    return pp, sp


def _v1_mode(k: Keys, nulls: set, assumed: list) -> tuple[str | None, str, int | None]:
    """(V1 trainer mode or None, mode, eta) of verl's V1 trainer (``trainer.use_v1``)."""
    if not read_key(k, V1[0]):
        return None, "sync", 0
    v1_mode, mode, eta = read_key(k, V1[1]), "sync", 0
    if v1_mode != "sync":
        th = V1_ETA.key
        if th in nulls:
            eta = None
            k.use(th, "eta unbounded (null: no version control)")
            assumed.append(f"{th} null: no version control, staleness unbounded (verl V1)")
        else:
            eta = read_key(k, V1_ETA)
        mode = "async" if eta != 0 else "sync"
    if v1_mode == "separate_async":
        k.use("trainer.v1.separate_async.parameter_sync_step", "a step = one parameter sync = the global batch's "
                                                               "mini-batches (verl V1's invariant)")
    if read_key(k, V1_SWITCH):
        k.use(V1_SWITCH.key, "not priced: lending trainer GPUs to generation")
    return v1_mode, mode, eta


def _batch(k: Keys, run: dict, recipe: bool, v1_mode, mode: str, eta, assumed: list) -> tuple[int, int, str, int]:
    """(prompts, mini-batches, mode, eta) of a step: the fully-async recipe's parameter sync, or the global batch."""
    mini = run["mini"]
    if recipe:
        if run["hybrid"]:
            raise RlmLabError("verl async_training (the fully-async recipe) needs actor_rollout_ref.hybrid_engine="
                              "false and a rollout pool (rollout.nnodes, rollout.n_gpus_per_node)")
        a = read_table(k, ASYNC)
        k.use(A + "actor.ppo_mini_batch_size", "prompts per mini-batch")
        k.use("data.train_batch_size", "unused by the fully-async recipe (a step is one parameter sync)")
        mode, eta = ("async", math.ceil(a["stale"])) if a["stale"] > 0 else ("sync", 0)
        if eta == 0:
            assumed.append("staleness_threshold 0: on-policy, the synchronous step")
        return mini * a["trig"] * a["req"], a["trig"] * a["req"], mode, eta
    prompts = read_key(k, PROMPTS)
    if prompts % mini:
        raise RlmLabError(f"verl ppo_mini_batch_size={mini} must divide data.train_batch_size={prompts}")
    k.use(A + "actor.ppo_mini_batch_size", f"workload.minibatches = {prompts // mini}")
    if not run["hybrid"] and v1_mode is None:
        mode, eta = "one_step_off", 1
        assumed.append("hybrid_engine=false without async_training: the one-step-off recipe (eta 1)")
    return prompts, prompts // mini, mode, eta


def _workload(k: Keys, run: dict, response, prompts: int, minibatches: int, algo: str, assumed: list) -> dict:
    """The workload: batch, epochs, old log-probs, offload, micro-batch."""
    epochs = read_key(k, EPOCHS)
    rollout_lp = [row.key for row in ROLLOUT_LOGPROBS if read_key(k, row)]
    wl = {"prompts": prompts, "group_size": run["group_size"], "prompt_len": run["prompt_len"], "response": response,
          "epochs": epochs, "minibatches": minibatches, "precision": "bf16-mixed", "logprob_chunk": LOGPROB_CHUNK}
    offload = [kind for key, kind in OFFLOAD if _switch(k, key, f"workload.offload {kind}")]
    offload = sorted(set(offload), key=offload.index)
    if rollout_lp:
        wl["recompute_old"] = False
    if offload:
        wl["offload"] = offload
    for key in CRITIC_OFFLOAD:
        if k.has(key) and algo != "ppo":
            k.use(key, "unused: no critic (group estimator)")
    assumed.append("mixed precision: bf16 compute, fp32 master weights and Adam state (verl's default for FSDP and "
                   "Megatron)")
    if read_key(k, DYNAMIC[0]):
        tokens = read_key(k, DYNAMIC[1])
        wl["micro_batch"] = max(1, int(tokens // (run["prompt_len"] + mean_response(response))))
        k.use(DYNAMIC[0].key, f"workload.micro_batch = {wl['micro_batch']} (tokens / mean sequence length)")
        k.use(DYNAMIC[1].key, "micro-batch tokens")
    elif k.has(MICRO.key):
        wl["micro_batch"] = read_key(k, MICRO)
    return wl


def _engine(k: Keys, wl: dict) -> dict | None:
    """The rollout engine (continuous batching bounded by max_num_seqs and its memory share, or HF's static),
    padding and gradient checkpointing, set on ``wl``."""
    name = read_key(k, ENGINE_NAME)
    if name not in ("vllm", "sglang", "hf", "trtllm"):
        raise RlmLabError(f"verl {A}rollout.name={name!r}: one of vllm, sglang, trtllm, hf")
    wl["engine"] = "static" if name == "hf" else "continuous"
    engine = None if name == "hf" else {"what": f"{name} engine"} | read_table(k, ENGINE)
    flags = read_table(k, MODEL_FLAGS)
    if flags["no_padding"]:
        wl["padding"] = "none"
    wl["gradient_checkpointing"] = flags["gradient_checkpointing"]
    return engine


def _beta(k: Keys) -> float:
    """The KL coefficient: the first KL term switched on keeps the reference; none: beta 0, no reference."""
    for switch, coef in KL:
        if read_key(k, switch):
            beta = read_key(k, coef)
            k.use(switch.key, "reference model kept")
            break
    else:
        beta = 0.0
        k.use(KL[0][0].key, "false: beta 0, no reference model")
        k.use(KL[1][0].key, "false")
    if beta == 0:            # a coefficient without its switch prices nothing (verl builds no reference)
        for _, coef in KL:
            k.use(coef.key, "unused: no KL term")
    return beta


def _layout(k: Keys, pp: int, sp: int, assumed: list) -> dict:
    """The trainer's layout: strategy, tp, ep, pp, sp, ZeRO stage, generation tp and trainer GPUs; refused: context
    parallelism."""
    strategy = read_key(k, STRATEGY)
    if strategy not in ("fsdp", "fsdp2", "megatron"):
        raise RlmLabError(f"verl {A}actor.strategy={strategy!r}: one of fsdp, fsdp2, megatron")
    k.use("critic.strategy", "as the actor's")
    lay = {"strategy": strategy, "tp": 1, "ep": 1, "pp": pp, "sp": sp}
    if k.has("model_engine"):
        k.use("model_engine", f"the trainer's engine config group ({k.flat['model_engine']}): actor.strategy "
                              f"{strategy}")
    if strategy == "megatron":
        meg = read_table(k, MEGATRON)
        lay |= {"tp": meg["tp"], "ep": meg["ep"]}
        if meg["cp"] > 1:
            raise RlmLabError(f"verl {A}actor.megatron.context_parallel_size > 1: context parallelism is not "
                              f"modelled by the predictor")
    gen = read_table(k, GENERATION[:1])
    if gen["rollout_ep"] > 1:
        k.use(A + "rollout.expert_parallel_size", "not priced: generation priced with tensor parallelism only")
        assumed.append(f"rollout expert_parallel_size {k.flat[A + 'rollout.expert_parallel_size']}: generation "
                       f"priced as tensor parallelism of size {k.flat.get(A + 'rollout.tensor_model_parallel_size', 2)}"
                       f" (expert parallelism in the engine is not modelled)")
    gen = read_table(k, GENERATION[1:])
    return lay | {"gen_tp": gen["gen_tp"], "devices": gen["nnodes"] * gen["per_node"]}


def _scoring(k: Keys, algo: str, assumed: list) -> str:
    """PPO's scorer: a reward model (``reward_model.enable``) or a rule; the group estimators score with a rule."""
    if algo != "ppo":
        return "model"
    if need_bool(k.flat.get("reward_model.enable", False), "reward_model.enable"):
        k.use("reward_model.enable", "a reward model placed")
        assumed.append("the critic and the reward model have the actor's backbone (their model paths are not read)")
        return "model"
    k.use("reward_model.enable", "false: a rule reward (a verifier, no reward model: reward rule)")
    assumed.append("the critic has the actor's backbone (critic.model.path is not read)")
    return "rule"


def _pool(k: Keys, table) -> int:
    return (pool := read_table(k, table))["nnodes"] * pool["per_node"]


def _placement(k: Keys, roles, lay: dict, hybrid: bool, v1_mode, assumed: list) -> tuple[dict, int]:
    """(placement, all GPUs): V1's standalone rollout pool, the hybrid engine's one set, or the recipes' pool."""
    devices, sp = lay["devices"], lay["sp"]
    if sp > 1 and (devices // (lay["tp"] * lay["pp"])) % sp:
        raise RlmLabError(f"verl {SP.key}={sp} does not divide the trainer's {devices // (lay['tp'] * lay['pp'])} "
                          f"data-parallel ranks ({devices} GPUs)")
    megatron = lay["strategy"] == "megatron"
    pp = lay["pp"] if megatron else 1
    zero = (1 if read_key(k, DISTRIBUTED_OPTIMIZER) else 0) if megatron else 3
    layout = (zero, lay["tp"], lay["ep"], pp, sp)
    if v1_mode == "separate_async":
        rdev = _pool(k, STANDALONE_POOL)
        if rdev == 0:
            raise RlmLabError(f"verl trainer.v1.trainer_mode=separate_async needs a standalone rollout pool "
                              f"({A}rollout.nnodes > 0), as verl's V1 docs require")
        assumed.append("separate_async: generation on the standalone rollout pool only (trainer GPUs lent to "
                       "generation, hybrid_rollout.enable_switch, not priced); weights broadcast after each step")
        return two_sets(roles, rdev, devices, lay["gen_tp"], *layout), rdev + devices
    if hybrid:
        if v1_mode and need_int(k.get(A + "rollout.nnodes", 0), A + "rollout.nnodes", minimum=0) > 0:
            raise RlmLabError(f"verl {A}rollout.nnodes={k.flat[A + 'rollout.nnodes']} with trainer.v1.trainer_mode="
                              f"{v1_mode}: a standalone rollout pool is used by separate_async only; set the mode "
                              f"or drop the pool")
        return one_set(roles, devices, zero, gen_tp=lay["gen_tp"], tp=lay["tp"], ep=lay["ep"], assumed=assumed,
                       pp=pp, sp=sp), devices
    rdev = _pool(k, RECIPE_POOL)
    assumed.append("weights broadcast to the rollout pool over the profile's link after each parameter sync")
    return two_sets(roles, rdev, devices, lay["gen_tp"], *layout), rdev + devices


def import_config(path: str, **_) -> "Imported":  # noqa: F821 - common.Imported
    k, assumed, nulls = _keys(path)
    est, algo = _algorithm(k, assumed)
    pp, sp = _parallel(k, est, algo, assumed)
    model = resolve_model(k.get(A + "model.path", to="model"), A + "model.path")
    run = read_table(k, RUN)
    response = capped_response(run["resp_cap"], "data.max_response_length", assumed)
    recipe = any(key.startswith("async_training.") for key in k.flat)
    v1_mode, mode, eta = (None, "sync", 0) if recipe else _v1_mode(k, nulls, assumed)
    prompts, minibatches, mode, eta = _batch(k, run, recipe, v1_mode, mode, eta, assumed)
    wl = _workload(k, run, response, prompts, minibatches, algo, assumed)
    engine = _engine(k, wl)
    beta = _beta(k)
    lay = _layout(k, pp, sp, assumed)
    scoring = _scoring(k, algo, assumed)
    placement, total = _placement(k, roles_of(algo, beta, scoring), lay, run["hybrid"], v1_mode, assumed)
    cfg = {"model": model, "algorithm": algo, "beta": beta, "workload": wl, "placement": placement,
           "cluster": {"devices": total, "kind": "gpu"}} | ({"reward": "rule"} if scoring == "rule" else {})
    lora = read_key(k, LORA[0])
    if lora:
        cfg["lora"] = {"rank": lora, "targets": read_key(k, LORA[1])}
    return finish(NAME, str(path), k, cfg, mode, eta, assumed, engine=engine, prompt_cap="data.max_prompt_length")
