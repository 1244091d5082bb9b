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
from pathlib import Path

from ...errors import RlmLabError
from .common import (Keys, capped_response, finish, flatten, load_yaml, mean_response, need_bool, need_int, need_num, need_str,
                     one_set, resolve_model, resolve_refs, roles_of, two_sets)
from .bounded import read_text
from .hydra_compose import VERL_TREE, compose
from .shell import commands

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


# the trainer mains a run script may launch -> the Hydra config they compose (their @hydra.main config_name)
MAINS = {"verl.trainer.main_ppo": "ppo_trainer", "verl.trainer.main_ppo_sync": "ppo_trainer",
         "verl.experimental.fully_async_policy.fully_async_main": "fully_async_ppo_trainer",
         "verl.experimental.one_step_off_policy.main_ppo": "one_step_off_ppo_trainer"}
# what other verl entry points run: refused in one line naming it
NOT_TRAINING = {"verl.trainer.main_generation": "a generation (inference) run", "verl.trainer.main_generation_server":
                "a generation (inference) run", "verl.trainer.sft_trainer": "an SFT run (not RL)",
                "verl.trainer.fsdp_sft_trainer": "an SFT run (not RL)", "verl.trainer.sft_trainer_ray": "an SFT run (not RL)",
                "verl.trainer.main_eval": "an evaluation run", "verl.model_merger": "a checkpoint merge",
                "verl.trainer.main_distill": "a distillation run"}


def _from_script(text: str, path: str) -> tuple[dict, list, set, list]:
    """A run script's training command: the Hydra overrides after ``-m MAIN`` (shell variables expanded, nothing
    run), composed onto MAIN's config; returns (flat config, keys the script wrote, null keys, notes)."""
    for words, _env in commands(text, f"verl script {path}"):
        mods = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "-m"]
        mods += [w[:-3].replace("/", ".").lstrip(".") for w in words if w.endswith(".py")]
        main = next((m for m in mods if m in MAINS or m in NOT_TRAINING or m.startswith("verl.")), None)
        if main is None:
            continue
        if main in NOT_TRAINING or main not in MAINS:
            what = NOT_TRAINING.get(main, "not one of verl's RL trainer mains (" + ", ".join(MAINS) + ")")
            raise RlmLabError(f"verl script {path} launches {main}: {what}; nothing to price as an RL step")
        args = words[words.index(main) + 1:] if main in words else words[[w.endswith(".py") for w in words].index(True) + 1:]
        name, overrides = MAINS[main], []
        it = iter(args)
        for a in it:
            if a in ("--config-name", "--config-path", "-cn", "-cp"):
                val = next(it, "")
                name = val if a in ("--config-name", "-cn") else name
            elif a.startswith(("--config-name=", "-cn=")):
                name = a.split("=", 1)[1]
            elif a.startswith(("--config-path=", "-cp=")):
                continue
            elif "=" in a or a.startswith("~"):
                overrides.append(a)
            else:
                raise RlmLabError(f"verl script {path}: {a!r} after {main} is not a Hydra override (key=value)")
        name = name.removesuffix(".yaml")
        if not (VERL_TREE / f"{name}.yaml").is_file():
            raise RlmLabError(f"verl script {path}: config {name!r} is a recipe's own config, not verl's trainer "
                              f"configs shipped in configs/frameworks/verl/hydra/")
        data, nulls = compose(name, overrides, f"script {path}")
        written = [o.lstrip("+~").split("=", 1)[0] for o in overrides]
        notes = [f"composed by Hydra: {name} with the script's {len(overrides)} overrides ({main})"]
        return flatten(data), written, nulls, notes
    raise RlmLabError(f"verl script {path} runs no verl trainer (python3 -m verl.trainer.main_ppo key=value ...)")


def _load(path: str) -> tuple[dict, list | None, set, list]:
    """(flat config, keys the user wrote or None, null keys, notes) of a run script, a YAML with Hydra
    ``defaults:`` (composed) or a partial YAML of verl keys (read as it is, verl's defaults below)."""
    text = read_text(path, "verl config")
    p = Path(path)
    code = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    if p.suffix in (".sh", ".bash") or text.startswith("#!") or any("-m verl." in ln for ln in code):
        return _from_script(text, path)
    raw = load_yaml(path, NAME)
    if "defaults" in raw:
        data, nulls = compose(p.stem, [], f"config {path}", user_dir=p.parent)
        written = [k.lstrip("+") for k in flatten({k: v for k, v in raw.items() if k not in ("defaults", "hydra")})]
        return flatten(data), written, nulls, [f"composed by Hydra with its defaults list (verl's tree at the "
                                               f"pinned commit)"]
    return resolve_refs(flatten(raw), path), None, set(), []


def import_config(path: str, **_) -> "Imported":  # noqa: F821 - common.Imported
    flat, written, nulls, notes = _load(path)
    if need_bool(flat.get("distillation.enabled", False), "verl distillation.enabled"):
        raise RlmLabError(f"verl {path}: distillation.enabled=true is on-policy distillation (a teacher model scores "
                          f"every token), not an RL step the predictor prices")
    for key in (A + "rollout.name", A + "model.path"):
        if flat.get(key) == "???":
            raise RlmLabError(f"verl {key} is mandatory in verl (??? in its config): {path} must set it")
    flat = {key.lstrip("+"): v for key, v in flat.items() if key not in nulls}
    k = Keys(NAME, flat, NOTES, written)
    assumed = list(notes)

    est = need_str(k.get("algorithm.adv_estimator", "gae"), "verl algorithm.adv_estimator")
    if est not in ESTIMATORS:
        raise RlmLabError(f"verl algorithm.adv_estimator={est!r} has no predictor algorithm; known: "
                          f"{', '.join(ESTIMATORS)}")
    algo = ESTIMATORS[est]
    k.use("algorithm.adv_estimator", f"algorithm {algo}")
    if est in SAME_PASSES:
        assumed.append(f"adv_estimator={est} priced as {algo}: {SAME_PASSES[est]}")
    pkey, rkey = A + "actor.megatron.pipeline_model_parallel_size", A + "ref.megatron.pipeline_model_parallel_size"
    pp = need_int(k.get(pkey, 1, "training pp (Megatron's 1F1B stages, resharded into the rollout's tp)"), pkey)
    if k.has(rkey) and need_int(k.get(rkey, pp, "the reference's pp (as the actor's)"), rkey) != pp:
        raise RlmLabError(f"verl {rkey}={k.flat[rkey]} differs from {pkey}={pp}: the predictor lays the reference out "
                          f"as the actor")
    vkey = A + "actor.megatron.virtual_pipeline_model_parallel_size"
    if pp > 1 and k.flat.get(vkey) is not None:
        k.use(vkey, "not priced: the 1F1B bubble without interleaving (an overestimate of the bubble)")
        assumed_vpp = [f"{vkey}={k.flat[vkey]}: priced as plain 1F1B, (m + pp - 1) / m (interleaved stages shrink "
                       f"the bubble; an overestimate)"]
    else:
        assumed_vpp = []
    ukey = A + "actor.ulysses_sequence_parallel_size"
    sp = need_int(k.get(ukey, 1, "the set's sp (Ulysses sequence parallelism)"), ukey)
    rukey = A + "ref.ulysses_sequence_parallel_size"
    if k.has(rukey) and need_int(k.get(rukey, sp, "the reference's sp (as the actor's)"), rukey) != sp:
        raise RlmLabError(f"verl {rukey}={k.flat[rukey]} differs from {ukey}={sp}: the predictor lays the reference "
                          f"out as the actor")
    if need_bool(k.get("reward_model.enable", False), "reward_model.enable") and algo != "ppo":
        raise RlmLabError(f"verl reward_model.enable=true with adv_estimator={est}: the predictor's {algo} scores "
                          f"with a rule; only PPO (gae) places a reward model")

    assumed += assumed_vpp
    model = resolve_model(k.get(A + "model.path", to="model"), A + "model.path")
    n_resp = need_int(k.get(A + "rollout.n", 1, "workload.group_size"), A + "rollout.n")
    prompt_len = need_int(k.get("data.max_prompt_length", 512, "workload.prompt_len"), "data.max_prompt_length")
    resp_len = need_int(k.get("data.max_response_length", 512, "workload.response (the cap)"),
                        "data.max_response_length")
    response = capped_response(resp_len, "data.max_response_length", assumed)
    mini = need_int(k.get(A + "actor.ppo_mini_batch_size", 256), A + "actor.ppo_mini_batch_size")
    mode, eta = "sync", 0
    hybrid = need_bool(k.get(A + "hybrid_engine", True, "placement (true: one set, resharded)"), A + "hybrid_engine")
    recipe = any(key.startswith("async_training.") for key in k.flat)
    v1_mode = None
    if not recipe and need_bool(k.get("trainer.use_v1", False, "verl's V1 trainer (trainer.v1.*)"), "trainer.use_v1"):
        v1_mode = need_str(k.get("trainer.v1.trainer_mode", "sync", "mode"), "verl trainer.v1.trainer_mode",
                           ("sync", "colocate_async", "separate_async"))
        if v1_mode != "sync":
            th = "trainer.v1.sampler.max_off_policy_threshold"
            if th in nulls:
                eta = None
                k.use(th, "eta unbounded (null: no version control)")
                assumed.append(f"{th} null: no version control, staleness unbounded (verl V1)")
            else:
                eta = need_int(k.get(th, 8, "eta (model versions a sample may lag)"), th, minimum=0)
            mode = "async" if eta != 0 else "sync"
        if v1_mode == "separate_async":
            k.use("trainer.v1.separate_async.parameter_sync_step", "a step = one parameter sync = the global batch's "
                                                                   "mini-batches (verl V1's invariant)")
        if need_bool(k.get("trainer.v1.separate_async.hybrid_rollout.enable_switch", False),
                     "trainer.v1.separate_async.hybrid_rollout.enable_switch"):
            k.use("trainer.v1.separate_async.hybrid_rollout.enable_switch", "not priced: lending trainer GPUs to "
                                                                            "generation")
    if recipe:
        if hybrid:
            raise RlmLabError("verl async_training (the fully-async recipe) needs actor_rollout_ref.hybrid_engine="
                              "false and a rollout pool (rollout.nnodes, rollout.n_gpus_per_node)")
        stale = need_num(k.get("async_training.staleness_threshold", 0.1, "eta = ceil(threshold)"),
                         "async_training.staleness_threshold")
        trig = need_int(k.get("async_training.trigger_parameter_sync_step", 4, "a step = one parameter sync = this many trainer steps"),
                        "async_training.trigger_parameter_sync_step")
        req = need_int(k.get("async_training.require_batches", 1, "mini-batches per trainer step (prompts = ppo_mini_batch_size x trigger x require_batches)"),
                       "async_training.require_batches")
        k.use(A + "actor.ppo_mini_batch_size", "prompts per mini-batch")
        prompts, minibatches = mini * trig * req, trig * req
        k.use("data.train_batch_size", "unused by the fully-async recipe (a step is one parameter sync)")
        mode, eta = ("async", math.ceil(stale)) if stale > 0 else ("sync", 0)
        if eta == 0:
            assumed.append("staleness_threshold 0: on-policy, the synchronous step")
    else:
        prompts = need_int(k.get("data.train_batch_size", 1024, "workload.prompts"), "data.train_batch_size")
        if prompts % mini:
            raise RlmLabError(f"verl ppo_mini_batch_size={mini} must divide data.train_batch_size={prompts}")
        minibatches = prompts // mini
        k.use(A + "actor.ppo_mini_batch_size", f"workload.minibatches = {minibatches}")
        if not hybrid and v1_mode is None:
            mode, eta = "one_step_off", 1
            assumed.append("hybrid_engine=false without async_training: the one-step-off recipe (eta 1)")

    epochs = need_int(k.get(A + "actor.ppo_epochs", 1, "workload.epochs"), A + "actor.ppo_epochs")
    rollout_lp = [key for key in (A + "actor.use_rollout_log_probs", "async_training.use_rollout_log_probs")
                  if need_bool(k.get(key, False, "workload.recompute_old = false (the engine's log-probs as "
                                                 "the old policy's)"), key)]
    wl = {"prompts": prompts, "group_size": n_resp, "prompt_len": prompt_len, "response": response,
          "epochs": epochs, "minibatches": minibatches, "precision": "bf16-mixed", "logprob_chunk": LOGPROB_CHUNK}
    offload = [kind for key, kind in ((A + "actor.fsdp_config.param_offload", "params"),
                                      (A + "actor.fsdp_config.optimizer_offload", "optimizer"),
                                      (A + "ref.fsdp_config.param_offload", "frozen"),
                                      (A + "actor.megatron.param_offload", "params"),
                                      (A + "actor.megatron.optimizer_offload", "optimizer"),
                                      (A + "ref.megatron.param_offload", "frozen"))
               if _switch(k, key, f"workload.offload {kind}")]
    offload = sorted(set(offload), key=offload.index)
    if rollout_lp:
        wl["recompute_old"] = False
    if offload:
        wl["offload"] = offload
    for key in ("critic.fsdp_config.param_offload", "critic.fsdp_config.optimizer_offload",
                "critic.fsdp.param_offload", "critic.fsdp.optimizer_offload"):
        if k.has(key) and algo != "ppo":
            k.use(key, "unused: no critic (group estimator)")
    assumed.append("mixed precision: bf16 compute, fp32 master weights and Adam state (verl's default for FSDP and "
                   "Megatron)")
    if need_bool(k.get(A + "actor.use_dynamic_bsz", False), A + "actor.use_dynamic_bsz"):
        tokens = need_int(k.get(A + "actor.ppo_max_token_len_per_gpu", 16384), A + "actor.ppo_max_token_len_per_gpu")
        wl["micro_batch"] = max(1, int(tokens // (prompt_len + mean_response(response))))
        k.use(A + "actor.use_dynamic_bsz", f"workload.micro_batch = {wl['micro_batch']} (tokens / mean sequence length)")
        k.use(A + "actor.ppo_max_token_len_per_gpu", "micro-batch tokens")
    elif k.has(A + "actor.ppo_micro_batch_size_per_gpu"):
        wl["micro_batch"] = need_int(k.get(A + "actor.ppo_micro_batch_size_per_gpu", to="workload.micro_batch"),
                                     A + "actor.ppo_micro_batch_size_per_gpu")
    name = need_str(k.get(A + "rollout.name", "vllm", "workload.engine"), f"verl {A}rollout.name")
    if name not in ("vllm", "sglang", "hf", "trtllm"):
        raise RlmLabError(f"verl {A}rollout.name={name!r}: one of vllm, sglang, trtllm, hf")
    wl["engine"] = "static" if name == "hf" else "continuous"
    engine = None
    if name != "hf":
        engine = {"what": f"{name} engine", "max_num_seqs": need_int(
                      k.get(A + "rollout.max_num_seqs", 256, "sequences per replica at once (at most)"),
                      A + "rollout.max_num_seqs"),
                  "memory_fraction": need_num(k.get(A + "rollout.gpu_memory_utilization", 0.5,
                                                    "the engine's memory share (KV cache)"),
                                              A + "rollout.gpu_memory_utilization")}
    if need_bool(k.get(A + "model.use_remove_padding", True, "workload.padding"), A + "model.use_remove_padding"):
        wl["padding"] = "none"
    wl["gradient_checkpointing"] = need_bool(
        k.get(A + "model.enable_gradient_checkpointing", True, "workload.gradient_checkpointing"),
        A + "model.enable_gradient_checkpointing")

    if need_bool(k.get(A + "actor.use_kl_loss", False), A + "actor.use_kl_loss"):
        beta = need_num(k.get(A + "actor.kl_loss_coef", 0.001, "beta"), A + "actor.kl_loss_coef")
        k.use(A + "actor.use_kl_loss", "reference model kept")
    elif need_bool(k.get("algorithm.use_kl_in_reward", False), "algorithm.use_kl_in_reward"):
        beta = need_num(k.get("algorithm.kl_ctrl.kl_coef", 0.001, "beta"), "algorithm.kl_ctrl.kl_coef")
        k.use("algorithm.use_kl_in_reward", "reference model kept")
    else:
        beta = 0.0
        k.use(A + "actor.use_kl_loss", "false: beta 0, no reference model")
        k.use("algorithm.use_kl_in_reward", "false")
    if beta == 0:
        # a coefficient without its switch prices nothing (verl builds no reference)
        for key in (A + "actor.kl_loss_coef", "algorithm.kl_ctrl.kl_coef"):
            k.use(key, "unused: no KL term")

    strategy = need_str(k.get(A + "actor.strategy", "fsdp", "training layout: fsdp ZeRO-3, megatron its tp/pp/ep"),
                        f"verl {A}actor.strategy")
    if strategy not in ("fsdp", "fsdp2", "megatron"):
        raise RlmLabError(f"verl {A}actor.strategy={strategy!r}: one of fsdp, fsdp2, megatron")
    k.use("critic.strategy", "as the actor's")
    tp_train, ep = 1, 1
    if k.has("model_engine"):
        k.use("model_engine", f"the trainer's engine config group ({k.flat['model_engine']}): actor.strategy "
                              f"{strategy}")
    if strategy == "megatron":
        tp_train = need_int(k.get(A + "actor.megatron.tensor_model_parallel_size", 1, "training tp"),
                            A + "actor.megatron.tensor_model_parallel_size")
        ep = need_int(k.get(A + "actor.megatron.expert_model_parallel_size", 1, "training ep (MoE experts split)"),
                      A + "actor.megatron.expert_model_parallel_size")
        if need_int(k.get(A + "actor.megatron.context_parallel_size", 1, "checked: 1"),
                    A + "actor.megatron.context_parallel_size") > 1:
            raise RlmLabError(f"verl {A}actor.megatron.context_parallel_size > 1: context parallelism is not "
                              f"modelled by the predictor")
    if need_int(k.get(A + "rollout.expert_parallel_size", 1), A + "rollout.expert_parallel_size") > 1:
        k.use(A + "rollout.expert_parallel_size", "not priced: generation priced with tensor parallelism only")
        assumed.append(f"rollout expert_parallel_size {k.flat[A + 'rollout.expert_parallel_size']}: generation "
                       f"priced as tensor parallelism of size {k.flat.get(A + 'rollout.tensor_model_parallel_size', 2)}"
                       f" (expert parallelism in the engine is not modelled)")
    gen_tp = need_int(k.get(A + "rollout.tensor_model_parallel_size", 2, "generation tp"),
                      A + "rollout.tensor_model_parallel_size")
    devices = (need_int(k.get("trainer.nnodes", 1, "trainer GPUs = nnodes x n_gpus_per_node"), "trainer.nnodes")
               * need_int(k.get("trainer.n_gpus_per_node", 8, "trainer GPUs = nnodes x n_gpus_per_node"), "trainer.n_gpus_per_node"))
    scoring = "model"
    if algo == "ppo":
        if need_bool(k.flat.get("reward_model.enable", False), "reward_model.enable"):
            k.use("reward_model.enable", "a reward model placed")
            assumed.append("the critic and the reward model have the actor's backbone (their model paths are not "
                           "read)")
        else:
            k.use("reward_model.enable", "false: a rule reward (a verifier, no reward model: reward rule)")
            scoring = "rule"
            assumed.append("the critic has the actor's backbone (critic.model.path is not read)")
    if sp > 1 and (devices // (tp_train * pp)) % sp:
        raise RlmLabError(f"verl {ukey}={sp} does not divide the trainer's {devices // (tp_train * pp)} data-parallel "
                          f"ranks ({devices} GPUs)")
    roles = roles_of(algo, beta, scoring)
    zero = 3
    if strategy != "megatron":
        pp = 1
    if strategy == "megatron":
        key = A + "actor.megatron.use_distributed_optimizer"
        zero = 1 if need_bool(k.get(key, False, "ZeRO-1 when true (Megatron's distributed optimizer)"), key) else 0
    if v1_mode == "separate_async":
        rkey = A + "rollout."
        rdev = (need_int(k.get(rkey + "nnodes", 0, "standalone rollout GPUs = nnodes x n_gpus_per_node"),
                         rkey + "nnodes", minimum=0)
                * need_int(k.get(rkey + "n_gpus_per_node", 8, "standalone rollout GPUs = nnodes x n_gpus_per_node"),
                           rkey + "n_gpus_per_node"))
        if rdev == 0:
            raise RlmLabError(f"verl trainer.v1.trainer_mode=separate_async needs a standalone rollout pool "
                              f"({rkey}nnodes > 0), as verl's V1 docs require")
        placement = two_sets(roles, rdev, devices, gen_tp, zero, tp_train, ep, pp, sp)
        total = rdev + devices
        assumed.append("separate_async: generation on the standalone rollout pool only (trainer GPUs lent to "
                       "generation, hybrid_rollout.enable_switch, not priced); weights broadcast after each step")
    elif hybrid:
        if v1_mode and need_int(k.get(A + "rollout.nnodes", 0), A + "rollout.nnodes", minimum=0) > 0:
            raise RlmLabError(f"verl {A}rollout.nnodes={k.flat[A + 'rollout.nnodes']} with trainer.v1.trainer_mode="
                              f"{v1_mode}: a standalone rollout pool is used by separate_async only; set the mode "
                              f"or drop the pool")
        placement = one_set(roles, devices, zero, gen_tp=gen_tp, tp=tp_train, ep=ep, assumed=assumed, pp=pp, sp=sp)
        total = devices
    else:
        rdev = (need_int(k.get("rollout.nnodes", 1, "rollout GPUs = rollout.nnodes x rollout.n_gpus_per_node"), "rollout.nnodes")
                * need_int(k.get("rollout.n_gpus_per_node", 8, "rollout GPUs = rollout.nnodes x rollout.n_gpus_per_node"), "rollout.n_gpus_per_node"))
        placement = two_sets(roles, rdev, devices, gen_tp, zero, tp_train, ep, pp, sp)
        total = rdev + devices
        assumed.append("weights broadcast to the rollout pool over the profile's link after each parameter sync")
    cfg = {"model": model, "algorithm": algo, "beta": beta, "workload": wl, "placement": placement,
           "cluster": {"devices": total, "kind": "gpu"}} | ({"reward": "rule"} if scoring == "rule" else {})
    rank = need_int(k.get(A + "model.lora_rank", 0, "lora.rank"), A + "model.lora_rank", minimum=0)
    if rank:
        targets = k.get(A + "model.target_modules", "all-linear", "lora.targets")
        cfg["lora"] = {"rank": rank, "targets": targets}
    return finish(NAME, str(path), k, cfg, mode, eta, assumed, engine=engine, prompt_cap="data.max_prompt_length")
