"""The ``--from`` importers (rlm_lab/frameworks/importers): each shipped framework config mapped key by key to the
values worked out by hand from the framework's documented semantics, unknown keys reported, what the predictor cannot
express refused in one line, and ``predict --from`` end to end on every shipped config."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from rlm_lab.cli import main
from rlm_lab.errors import RlmLabError
from rlm_lab.frameworks.importers import example_predictions, import_from, predict_imported, shipped_configs
from rlm_lab.cost.workload import assumed_lengths
from rlm_lab.frameworks.importers.common import engine_batch, mean_response
from rlm_lab.frameworks.importers.openrlhf import parse_args

ROOT = Path(__file__).resolve().parents[2]
FW = ROOT / "configs" / "frameworks"


def _imp(spec: str):
    fw, rest = spec.split(":", 1)
    return import_from(f"{fw}:{FW / rest}")


def _set(imp, name):
    return next(s for s in imp.config["placement"]["sets"] if s["name"] == name)


# ---- the mapping, by hand, one config (or two) per framework -----------------------------------------------------
def test_verl_hybrid_grpo_example_maps_every_key_by_hand():
    imp = _imp("verl:verl/grpo-qwen2-7b-gsm8k.yaml")
    c, wl = imp.config, imp.config["workload"]
    # data.train_batch_size 1024 prompts x rollout.n 5; ppo_mini_batch_size 256 prompts -> 1024 / 256 mini-batches
    assert (wl["prompts"], wl["group_size"], wl["minibatches"], wl["epochs"]) == (1024, 5, 4, 1)
    # max_response_length 1024 is only the cap: the stated default distribution under it, said so
    assert (wl["prompt_len"], wl["response"], wl["micro_batch"]) == (512, assumed_lengths(1024), 40)
    assert any("only the cap 1024" in a and "not the cap" in a for a in imp.assumed)
    # ref.fsdp_config.param_offload true: the reference streams from host memory; the actor's offloads are false
    assert (wl["offload"], wl["logprob_chunk"]) == (["frozen"], 2048)
    assert (wl["padding"], wl["engine"], wl["gradient_checkpointing"]) == ("none", "continuous", True)
    # use_kl_loss true with kl_loss_coef 0.001: the reference is kept, beta 0.001
    assert (c["algorithm"], c["beta"]) == ("grpo", 0.001)
    assert c["model"].endswith("qwen2.5-7b.config.json")      # Qwen2-7B has Qwen2.5-7B's shape
    # hybrid engine on trainer.nnodes 1 x n_gpus_per_node 8, FSDP (ZeRO-3) resharded into rollout tp 2
    (s,) = c["placement"]["sets"]
    assert (s["devices"], s["zero"], s["gen_tp"], c["placement"]["reshard"]) == (8, 3, 2, True)
    assert set(c["placement"]["roles"]) == {"actor", "rollout", "reference"}
    assert (imp.mode, imp.eta) == ("sync", 0)
    assert imp.engine == {"what": "vllm engine", "max_num_seqs": 256, "memory_fraction": 0.6}
    assert set(imp.used) == {
        "algorithm.adv_estimator", "actor_rollout_ref.model.path", "actor_rollout_ref.rollout.n",
        "data.max_prompt_length", "data.max_response_length", "actor_rollout_ref.actor.ppo_mini_batch_size",
        "data.train_batch_size", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
        "actor_rollout_ref.rollout.name", "actor_rollout_ref.rollout.gpu_memory_utilization",
        "actor_rollout_ref.model.use_remove_padding", "actor_rollout_ref.model.enable_gradient_checkpointing",
        "actor_rollout_ref.actor.use_kl_loss", "actor_rollout_ref.actor.kl_loss_coef",
        "actor_rollout_ref.rollout.tensor_model_parallel_size", "trainer.nnodes", "trainer.n_gpus_per_node",
        "actor_rollout_ref.actor.fsdp_config.param_offload", "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
        "actor_rollout_ref.ref.fsdp_config.param_offload"}
    assert "actor_rollout_ref.actor.optim.lr" in imp.ignored and "trainer.logger" in imp.ignored
    assert imp.used["actor_rollout_ref.ref.fsdp_config.param_offload"] == "workload.offload frozen"
    assert imp.used["actor_rollout_ref.actor.fsdp_config.param_offload"] == "false"
    assert imp.unknown == []


def test_verl_fully_async_example_maps_to_a_split_and_eta_by_hand():
    imp = _imp("verl:verl/fully-async-dapo-qwen2.5-math-7b-4-4.yaml")
    wl = imp.config["workload"]
    # one step = one parameter sync: trigger 4 x require_batches 4 mini-batches of 32 prompts, 16 responses each
    assert (wl["prompts"], wl["group_size"], wl["minibatches"]) == (32 * 4 * 4, 16, 16)
    # use_dynamic_bsz: ppo_max_token_len_per_gpu 20480 tokens / (2048 + the mean response) per sequence; the mean of
    # the default distribution under the cap 8192 is about 1024 x exp(0.8^2 / 2) = 1410 (a little less, clipped): 5
    assert 1300 < mean_response(wl["response"]) < 1412
    assert wl["micro_batch"] == 5
    assert (imp.mode, imp.eta) == ("async", 1)                  # ceil(staleness_threshold 0.1)
    assert _set(imp, "rollout")["devices"] == 4 and _set(imp, "train")["devices"] == 4
    assert imp.config["beta"] == 0 and "reference" not in imp.config["placement"]["roles"]
    # the DAPO reward manager's kwargs are added with Hydra's '+': not in verl's schema, so reported as unknown
    assert sorted(imp.unknown) == sorted(f"reward_model.reward_kwargs.{k}" for k in (
        "overlong_buffer_cfg.enable", "overlong_buffer_cfg.len", "overlong_buffer_cfg.penalty_factor",
        "overlong_buffer_cfg.log", "max_resp_len"))


def test_openrlhf_ppo_hybrid_engine_example_by_hand():
    imp = _imp("openrlhf:openrlhf/ppo-llama3-8b-hybrid-engine.args")
    c, wl = imp.config, imp.config["workload"]
    assert c["algorithm"] == "ppo" and c["beta"] == 0.01                    # estimator gae (default), kl init 0.01
    assert c["model"].endswith("llama3-8b.config.json") and c["reward_model"].endswith("llama3-8b.config.json")
    assert c["critic"] == c["reward_model"]                                   # critic from the reward model
    # rollout.batch_size 1024 x 1 sample; train.batch_size 128 -> 8 optimizer steps; max_len 2048 split evenly;
    # dynamic batch: max_tokens_per_gpu 16384 / (1024 + a mean response of about 128 x exp(0.32) = 176) = 13
    assert (wl["prompts"], wl["group_size"], wl["minibatches"], wl["micro_batch"]) == (1024, 1, 8, 13)
    assert (wl["prompt_len"], wl["response"], wl["padding"], wl["gradient_checkpointing"]) == (
        1024, assumed_lengths(1024), "none", True)
    assert wl["offload"] == ["sleep"] and wl["logprob_chunk"] == 1024                 # --ds.enable_sleep
    (s,) = c["placement"]["sets"]                                           # colocate_all, ZeRO-3, vLLM tp 2
    assert (s["devices"], s["zero"], s["gen_tp"]) == (8, 3, 2)
    assert set(c["placement"]["roles"]) == {"actor", "rollout", "reference", "critic", "reward"}
    assert imp.engine["memory_fraction"] == 0.5 and imp.unknown == []
    assert "ckpt.save_hf" in imp.ignored and "vllm.enable_sleep" in imp.used


def test_openrlhf_dapo_example_uses_exactly_the_keys_that_price_it():
    imp = _imp("openrlhf:openrlhf/dapo-llama3-8b-hybrid-engine.args")
    wl = imp.config["workload"]
    # group_norm with a remote rule reward: GRPO, no reward model; 128 prompts x 8 = 1024 over train.batch_size 128
    assert imp.config["algorithm"] == "grpo" and "reward_model" not in imp.config
    assert (wl["prompts"], wl["group_size"], wl["minibatches"], wl["micro_batch"]) == (128, 8, 8, 8)
    assert imp.config["beta"] == 1e-3
    assert set(imp.used) == {
        "actor.gradient_checkpointing_enable", "actor.model_name_or_path", "actor.num_gpus_per_node", "actor.num_nodes",
        "algo.advantage.estimator", "algo.kl.init_coef", "data.max_len", "ds.packing_samples", "ds.param_dtype",
        "ds.zero_stage", "ref.num_gpus_per_node", "ref.num_nodes", "reward.remote_url", "rollout.batch_size",
        "rollout.n_samples_per_prompt", "train.batch_size", "train.colocate_all", "train.max_epochs",
        "train.micro_batch_size", "vllm.gpu_memory_utilization", "vllm.num_engines", "vllm.tensor_parallel_size",
        "ds.enable_sleep", "vllm.enable_sleep"}
    assert "pass rate" in imp.ignored["algo.dynamic_filtering_enable"] and imp.unknown == []


def test_openrlhf_arguments_split_by_the_parsers_kinds():
    got = parse_args("ray job submit -- python3 -m openrlhf.cli.train_ppo_ray --train.colocate_all "
                     "--actor.eps_clip_low_high 0.2 0.27 --ds.lora.target_modules q_proj v_proj --ds.zero_stage=3 "
                     "--colocate_all_models --vllm.num_engines 4")
    assert got == {"train.colocate_all": True, "actor.eps_clip_low_high": ["0.2", "0.27"],
                   "ds.lora.target_modules": ["q_proj", "v_proj"], "ds.zero_stage": "3",
                   "vllm.num_engines": "4"}          # --colocate_all_models: the pre-2026 name of --train.colocate_all


def test_openrlhf_separate_sets_and_async_queue_become_sets_and_eta():
    imp = import_from("openrlhf:--actor.model_name_or_path Qwen/Qwen2.5-7B-Instruct --algo.advantage.estimator "
                      "group_norm --actor.num_gpus_per_node 4 --ref.num_gpus_per_node 2 --vllm.num_engines 2 "
                      "--vllm.tensor_parallel_size 1 --rollout.batch_size 64 --rollout.n_samples_per_prompt 4 "
                      "--train.batch_size 64 --train.async_enable --train.async_queue_size 3 --no_such_flag")
    p = imp.config["placement"]
    assert {s["name"]: s["devices"] for s in p["sets"]} == {"rollout": 2, "actor": 4, "ref": 2}
    assert p["roles"] == {"rollout": "rollout", "actor": "actor", "reference": "ref"}
    assert (imp.mode, imp.eta) == ("async", 3)
    assert imp.config["workload"]["minibatches"] == 4                       # 256 samples / 64
    assert imp.unknown == ["no_such_flag"]


def test_trl_vllm_server_example_by_hand():
    imp = _imp("trl:trl/grpo-qwen2.5-7b-vllm-server.yaml")
    wl = imp.config["workload"]
    # 4 trainer processes (CUDA_VISIBLE_DEVICES=4,5,6,7) x per_device_train_batch_size 8 x steps_per_generation 1
    # = 32 completions, num_generations 8 per prompt
    assert (wl["prompts"], wl["group_size"], wl["minibatches"], wl["micro_batch"]) == (4, 8, 1, 8)
    assert (wl["response"], wl["autocast"], wl["gradient_checkpointing"]) == (assumed_lengths(512), True, True)
    assert wl["logprob_chunk"] == 513           # selective_log_softmax: one row of completion logits (512 + 1)
    assert imp.config["beta"] == 0 and "reference" not in imp.config["placement"]["roles"]
    assert _set(imp, "rollout")["devices"] == 4 and _set(imp, "rollout")["tp"] == 4   # vllm-serve tp 4
    assert _set(imp, "train")["devices"] == 4
    assert imp.engine["memory_fraction"] == 0.9 and imp.unknown == []
    assert set(imp.used) == {"env.CUDA_VISIBLE_DEVICES", "model_name_or_path", "use_vllm", "vllm_mode",
                             "vllm_serve.tensor_parallel_size"}
    assert set(imp.ignored) == {"dataset_name", "vllm_serve.model"}


def test_trl_batch_arithmetic_follows_grpoconfig(tmp_path):
    cfg = tmp_path / "grpo.yaml"
    cfg.write_text("model_name_or_path: Qwen/Qwen2.5-1.5B-Instruct\nper_device_train_batch_size: 4\n"
                   "gradient_accumulation_steps: 2\nsteps_per_generation: 8\nnum_generations: 16\nbeta: 0.04\n"
                   "num_iterations: 2\nenv: {CUDA_VISIBLE_DEVICES: '0,1'}\nnum_generation: 4\n")
    imp = import_from(f"trl:{cfg}")
    wl = imp.config["workload"]
    # 4 x 2 processes x 8 micro-steps = 64 completions = 4 prompts x 16; 8 / 2 = 4 optimizer steps per generation
    assert (wl["prompts"], wl["group_size"], wl["minibatches"], wl["epochs"]) == (4, 16, 4, 2)
    assert "reference" in imp.config["placement"]["roles"]
    assert imp.unknown == ["num_generation"]                                 # a typo of num_generations


def test_nemo_rl_recipe_merges_its_defaults_by_hand():
    imp = _imp("nemo-rl:nemo-rl/grpo-llama3.1-8b-instruct-2n8g-fsdp2tp1-noncolocated.yaml")
    wl = imp.config["workload"]
    # the recipe's 64 prompts x 32 over the base's train_global_batch_size 512 -> 4 optimizer steps
    assert (wl["prompts"], wl["group_size"], wl["minibatches"], wl["micro_batch"]) == (64, 32, 4, 1)
    # 4096 shared, the response's cap 2048 under the stated default distribution; dynamic batching
    assert (wl["prompt_len"], wl["response"], wl["padding"]) == (2048, assumed_lengths(2048), "none")
    assert imp.config["beta"] == 0.01 and imp.config["model"].endswith("llama3-8b.config.json")
    # 2 nodes x 8 GPUs, generation on one whole node (resources.num_nodes 1, gpus_per_node 8), training on the other
    assert _set(imp, "rollout")["devices"] == 8 and _set(imp, "train")["devices"] == 8
    assert _set(imp, "train")["zero"] == 3 and imp.mode == "sync"
    assert "defaults" in imp.used and imp.unknown == []
    assert "policy.optimizer.kwargs.lr" in imp.ignored


def test_areal_gsm8k_example_by_hand():
    imp = _imp("areal:areal/gsm8k_grpo.yaml")
    wl = imp.config["workload"]
    assert (wl["prompts"], wl["group_size"], wl["minibatches"]) == (256, 4, 1)
    # mb_spec.max_tokens_per_mb 10240 / (1024 prompt + a mean response of about 176 under the cap 1024) = 8 sequences
    assert (wl["prompt_len"], wl["response"], wl["micro_batch"], wl["recompute_old"]) == (
        1024, assumed_lengths(1024), 8, True)
    assert imp.config["beta"] == 0 and "reference" not in imp.config["placement"]["roles"]   # kl_ctl 0
    assert all(v.startswith("unused") for k, v in imp.used.items() if k.startswith("ref."))
    assert _set(imp, "rollout")["devices"] == 4 and _set(imp, "train")["devices"] == 4      # sglang:d4, fsdp:d4
    assert (imp.mode, imp.eta) == ("async", 2)                                               # max_head_offpolicyness
    assert imp.engine["max_num_seqs"] == 64 and imp.engine["memory_fraction"] == 0.8        # 256 in flight / 4
    assert imp.unknown == []
    assert {k for k in imp.used if not k.startswith("ref.")} == {
        "actor.backend", "actor.dtype", "actor.gradient_checkpointing", "actor.kl_ctl", "actor.mb_spec.max_tokens_per_mb",
        "actor.path", "actor.ppo_n_minibatches", "actor.recompute_logprob", "cluster.n_gpus_per_node",
        "cluster.n_nodes", "gconfig.max_new_tokens", "gconfig.n_samples", "rollout.backend",
        "rollout.max_concurrent_rollouts", "rollout.max_head_offpolicyness", "sglang.mem_fraction_static",
        "train_dataset.batch_size", "train_dataset.max_length"}
    assert imp.ignored["vllm.gpu_memory_utilization"] == "unused: the rollout engine is sglang"


# ---- mechanisms against an independent computation -----------------------------------------------------------
def test_engine_batch_is_the_kv_budget_worked_out_by_hand():
    imp = _imp("areal:areal/gsm8k_grpo.yaml")
    from rlm_lab.cost.spec import model_spec

    spec = model_spec(imp.config["model"])
    # Qwen2.5-1.5B: 2 (K, V) x 28 layers x 2 KV heads x 128 x 2 bytes = 28672 bytes per token; 2048 tokens a sequence;
    # 0.8 of 80e9 bytes less 2 bytes x 1,543,714,304 parameters
    fit = int((0.8 * 80e9 - 2 * 1_543_714_304) // (28672 * 2048))
    assert engine_batch(imp, spec, 80e9)[0] == min(256 // 4, fit) == 64     # 256 in flight over 4 replicas
    two = imp.with_changes(placement={**imp.config["placement"], "sets": [
        {**s, "devices": 2, "dp": 2} if s["name"] == "rollout" else s for s in imp.config["placement"]["sets"]]})
    assert engine_batch(two, spec, 80e9)[0] == 256 // 2                         # the same 256 over 2 replicas
    imp.engine["in_flight"] = 4 * 10_000
    assert engine_batch(imp, spec, 80e9)[0] == fit == 1037


def test_async_step_is_the_slower_side_and_sync_the_sum():
    ip = predict_imported(_imp("areal:areal/gsm8k_grpo.yaml"))
    g, t, s = ip.stages()
    assert ip.sync_step_s == pytest.approx(g + t + s, rel=1e-9)
    # eta 2 with constant stage times: the steady state of the asynchronous recurrence is max(g, t + s)
    # (AReaL arXiv 2505.24298 Sec. 4); 64 simulated steps add at most one generation's start-up per 64
    assert max(g, t + s) <= ip.step_s <= max(g, t + s) + g / 60
    assert ip.bound() == ("generation" if g > t + s else "training")


def test_async_on_one_set_predicts_the_synchronous_step():
    imp = import_from("openrlhf:--actor.model_name_or_path Qwen/Qwen2.5-1.5B-Instruct --algo.advantage.estimator "
                      "group_norm --actor.num_gpus_per_node 2 --ref.num_gpus_per_node 2 --train.colocate_all "
                      "--ds.zero_stage 3 --rollout.batch_size 8 --rollout.n_samples_per_prompt 2 --train.batch_size 16")
    sync = predict_imported(imp)
    async_ = predict_imported(imp.with_changes(mode="async", eta=4))
    assert async_.step_s == sync.step_s and "nothing overlaps" in async_.mode_note


# ---- refusals, one line ---------------------------------------------------------------------------------------------
def _verl(tmp_path, text):
    p = tmp_path / "verl.yaml"
    p.write_text(text)
    return f"verl:{p}"


@pytest.mark.parametrize("make,msg", [
    # Ulysses sp is priced (the set's sp) when it divides the trainer's data-parallel ranks, refused when not
    (lambda d: _verl(d, "actor_rollout_ref:\n  model: {path: Qwen/Qwen2.5-7B}\n  hybrid_engine: false\n"
                        "  actor: {ulysses_sequence_parallel_size: 3}\n"),
     "verl actor_rollout_ref.actor.ulysses_sequence_parallel_size=3 does not divide the trainer's 8 data-parallel"),
    (lambda d: _verl(d, "actor_rollout_ref:\n  model: {path: deepseek-ai/DeepSeek-V3}\n"),
     "actor_rollout_ref.model.path='deepseek-ai/DeepSeek-V3': no model config ships for it"),
    (lambda d: _verl(d, "algorithm: {adv_estimator: remax}\nactor_rollout_ref: {model: {path: Qwen/Qwen2.5-7B}}\n"),
     "verl algorithm.adv_estimator='remax' has no predictor algorithm"),
    # OpenRLHF's train_reinforce_baseline_hybrid_engine.sh uses ring attention
    (lambda d: "openrlhf:--actor.model_name_or_path Qwen/Qwen3-4B-Thinking-2507 --ds.ring_attn_size 2 "
               "--algo.advantage.estimator reinforce_baseline",
     "openrlhf --ds.ring_attn_size 2: ring attention (context parallelism, each sequence split over a ring of GPUs) is not modelled"),
    (lambda d: "openrlhf:--actor.model_name_or_path Qwen/Qwen2.5-7B",
     "openrlhf gae (PPO) with neither --reward.model_name_or_path nor --reward.remote_url"),
    (lambda d: "openrlhf:--actor.num_gpus_per_node 8", "openrlhf arguments need --actor.model_name_or_path"),
    (lambda d: "areal:" + str(_areal(d, "fsdp:d2p2")), "pipeline (p) and context (c) parallelism are not modelled"),
    (lambda d: "nemo-rl:" + str(_nemo_async_doc(d)), "nemo-rl on 2 nodes with non-colocated generation needs"),
    (lambda d: "foo:bar.yaml", "--from 'foo': no importer; choose one of verl, openrlhf, trl, nemo-rl, areal"),
    (lambda d: f"trl:{d / 'missing.yaml'}", "trl config"),
    (lambda d: "verl", "--from needs FRAMEWORK:CONFIG"),
])
def test_unexpressible_configs_are_refused_in_one_line(tmp_path, capsys, make, msg):
    assert main(["predict", "--from", make(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("rlm-lab: error: ") and msg in err


def _areal(d: Path, actor_backend: str) -> Path:
    p = d / "areal.yaml"
    p.write_text(f"cluster: {{n_nodes: 1, n_gpus_per_node: 8}}\nrollout: {{backend: 'sglang:d4'}}\n"
                 f"actor: {{backend: '{actor_backend}', path: Qwen/Qwen2.5-1.5B-Instruct}}\n")
    return p


def _nemo_async_doc(d: Path) -> Path:
    """The complete example of NeMo-RL's async GRPO guide (docs/guides/async-grpo.md) over the shipped base config:
    2 nodes x 4 GPUs with 2 generation GPUs, which NeMo-RL's setup asserts against on more than one node."""
    p = d / "async.yaml"
    p.write_text(f"defaults: {FW / 'nemo-rl' / 'grpo_math_1B.yaml'}\npolicy:\n  generation:\n    backend: vllm\n"
                 "    colocated: {enabled: false, resources: {num_nodes: 1, gpus_per_node: 2}}\n"
                 "    vllm_cfg: {async_engine: true}\nloss_fn: {use_importance_sampling_correction: true}\n"
                 "grpo: {num_prompts_per_step: 32, num_generations_per_prompt: 4, async_grpo: {enabled: true, "
                 "max_trajectory_age_steps: 1}}\ncluster: {num_nodes: 2, gpus_per_node: 4}\n")
    return p


@pytest.mark.parametrize("extra,flag", [(["--algorithm", "ppo"], "--algorithm"), (["--placement", "colocated"],
                                                                                   "--placement")])
def test_flags_the_config_sets_are_refused_with_from(capsys, extra, flag):
    assert main(["predict", "--from", f"trl:{FW / 'trl' / 'grpo-qwen2.5-0.5b-quickstart.yaml'}"] + extra) == 2
    assert f"drop {flag}" in capsys.readouterr().err


# ---- end to end -----------------------------------------------------------------------------------------------------
def test_every_framework_ships_configs_with_their_source():
    by = {}
    for fw, path in shipped_configs():
        by.setdefault(fw, []).append(path)
        head = Path(path).read_text().splitlines()[:8]
        assert any("source: https://github.com/" in line and "commit of 20" in line for line in head), path
    assert {fw: len(v) >= 2 for fw, v in by.items()} == dict.fromkeys(("verl", "openrlhf", "trl", "nemo-rl",
                                                                        "areal"), True)


@pytest.mark.parametrize("fw,path", shipped_configs(), ids=lambda x: Path(x).name if "/" in str(x) else x)
def test_predict_from_every_shipped_config(capsys, fw, path):
    arg = path
    if fw == "openrlhf":
        from rlm_lab.frameworks.importers.openrlhf import args_from_file

        arg = args_from_file(path)                                      # as a reader pastes it
    rc = main(["predict", "--from", f"{fw}:{arg}"])
    out = capsys.readouterr().out
    assert rc in (0, 1) and ("DOES NOT FIT" in out) == (rc == 1)        # exit 1: predicted not to fit
    assert out.splitlines()[0].startswith(f"{fw} ") and "keys used" in out.splitlines()[0]
    assert "\nmode " in out and ("step time:" in out) == (rc == 0)


def test_example_predictions_rows_for_chapter_8():
    rows = example_predictions()
    assert [(r["framework"], r["config"]) for r in rows] == [
        (fw, str(Path(p).relative_to(ROOT))) for fw, p in shipped_configs()]
    for r in rows:
        assert (r["step_s"] is None) == (not r["fits"]) == (r["critical"] is None)
        assert r["memory_per_device_bytes"] > 0 and r["capacity_bytes"] == 80e9
        assert (r["memory_per_device_bytes"] <= r["capacity_bytes"]) == r["fits"]
        if r["fits"]:
            assert 0 < r["step_s"] <= r["sync_step_s"] * (1 + 1e-9)   # overlapping never predicts slower


def test_advise_from_picks_the_fastest_single_change(capsys):
    import json

    assert main(["advise", "--from", f"areal:{FW / 'areal' / 'gsm8k_grpo.yaml'}", "--top", "100", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    fit = [c for c in out["candidates"] if c["fits"]]
    best, base = out["advice"], out["baseline"]
    assert best["step_s"] == min(c["step_s"] for c in fit) < base["step_s"]
    assert {c["kind"] for c in out["candidates"]} >= {"split", "mode", "eta", "tp"}
    # the baseline is what predict --from says; the advice's change, imported on its own, re-predicts the same step
    assert base["step_s"] == pytest.approx(predict_imported(_imp("areal:areal/gsm8k_grpo.yaml")).step_s)
    assert best["change"] in {c["change"] for c in fit}


def test_advise_from_makes_a_config_that_does_not_fit_fit():
    from rlm_lab.frameworks.importers.advice import advise_imported

    adv = advise_imported(_imp("trl:trl/grpo-qwen2.5-7b-vllm-server.yaml"))
    assert not adv.baseline.fits and adv.best is not None and adv.best.fits
    assert adv.best.prediction.memory_per_device() <= adv.best.prediction.capacity()
    assert math.isfinite(adv.best.prediction.step_s)


def test_model_and_hardware_flags_replace_the_import(capsys):
    imp = import_from(f"areal:{FW / 'areal' / 'gsm8k_grpo.yaml'}", hardware="a100-80gb",
                      model=str(ROOT / "configs" / "models" / "qwen2.5-7b.config.json"))
    assert imp.config["hardware"] == "a100-80gb" and imp.config["model"].endswith("qwen2.5-7b.config.json")
    assert not any(a.startswith("hardware") for a in imp.assumed)
    with pytest.raises(RlmLabError, match="no model config ships"):
        import_from("openrlhf:--actor.model_name_or_path my-org/secret-model")


def test_verl_dotted_overrides_import_as_the_nested_config(tmp_path):
    import yaml

    from rlm_lab.frameworks.importers.common import flatten

    nested = yaml.safe_load((FW / "verl" / "grpo-qwen2-7b-gsm8k.yaml").read_text())
    flat = tmp_path / "overrides.yaml"                     # the example script's key=value overrides, as written
    flat.write_text(yaml.safe_dump(flatten(nested)))
    a, b = _imp("verl:verl/grpo-qwen2-7b-gsm8k.yaml"), import_from(f"verl:{flat}")
    assert a.config == b.config and a.used == b.used and a.ignored == b.ignored and (a.mode, a.eta) == (b.mode, b.eta)
    assert "actor_rollout_ref.rollout.n" in yaml.safe_load(flat.read_text())


def test_one_workload_under_each_frameworks_defaults():
    from rlm_lab.frameworks.importers.same_workload import same_workload_predictions

    rows = same_workload_predictions(model="Qwen/Qwen2.5-1.5B-Instruct", gpus=16, prompts=64, group=4,
                                     prompt_len=128, response_len=256, micro_batch=2, beta=0.01)
    by = {r["framework"]: r for r in rows}
    assert list(by) == ["verl", "openrlhf", "trl", "nemo-rl", "areal"] and all(r["devices"] == 16 for r in rows)
    # the defaults differ where the frameworks differ: verl, OpenRLHF and NeMo-RL one set; AReaL split and async
    assert by["verl"]["placement"].startswith("actor+rollout+reference[16 gpu zero3 gen_tp2]")
    assert by["areal"]["placement"].startswith("rollout[8 gpu] | actor+reference[8 gpu zero3]")
    assert (by["areal"]["mode"], by["areal"]["eta"]) == ("async", 2)
    assert {r["mode"] for f, r in by.items() if f != "areal"} == {"sync"}
    # the same workload everywhere: every framework's import holds the same batch
    from rlm_lab.frameworks.importers.same_workload import framework_configs

    import tempfile

    with tempfile.TemporaryDirectory() as d:
        specs = framework_configs("Qwen/Qwen2.5-1.5B-Instruct", 16, 64, 4, 128, 256, 2, Path(d), 0.01)
        shapes = {fw: {k: import_from(s).config["workload"][k] for k in ("prompts", "group_size", "response")}
                  for fw, s in specs.items()}
        betas = {fw: import_from(s).config["beta"] for fw, s in specs.items()}
    assert all(v == {"prompts": 64, "group_size": 4, "response": assumed_lengths(256)} for v in shapes.values()), shapes
    assert set(betas.values()) == {0.01}


def test_predict_from_does_not_load_torch():
    import subprocess
    import sys

    code = ("import sys, io, contextlib\nfrom rlm_lab.cli import main\nwith contextlib.redirect_stdout(io.StringIO()):\n"
            f"    main(['predict', '--from', 'areal:{FW / 'areal' / 'gsm8k_grpo.yaml'}'])\n"
            "print(sorted(m for m in ('torch', 'transformers', 'trl', 'ray') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
