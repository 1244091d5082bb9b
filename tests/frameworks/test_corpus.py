"""The corpus of real framework configs (data/configs/corpus): every file named in SOURCES at a pinned commit, every
entry imported, priced or refused with the one-line reason kept (checked by hand once) as its expected outcome; at
least 40 entries from at least 6 frameworks, at least 90 % priced."""

from __future__ import annotations

from collections import Counter

import pytest

from rlm_lab.frameworks.importers import import_from, predict_imported
from rlm_lab.frameworks.importers.advice import candidates
from rlm_lab.frameworks.importers.corpus import CORPUS, corpus_predictions, entries, sources, spec


@pytest.fixture(scope="module")
def rows():
    return corpus_predictions()


def test_every_file_has_its_source_and_every_source_its_file():
    src = sources()
    files = {str(p.relative_to(CORPUS)) for p in CORPUS.rglob("*") if p.is_file()} - {"SOURCES", "corpus.yaml"}
    assert files == set(src)
    for f, s in src.items():
        assert len(s["commit"]) == 40 and s["path"] == f.split("/", 1)[1]
    # every file is imported by some entry (an accelerate config through its TRL config)
    used = {part for e in entries() for part in e["file"].split("+")}
    assert used == files


def test_each_entry_is_priced_or_refused_as_expected(rows):
    for r, e in zip(rows, entries()):
        assert r["outcome"] == e["outcome"], (e["file"], r["why"])
        if e["outcome"] == "refused":
            assert e["reason"] in r["why"] and "\n" not in r["why"] and e.get("checked"), (e["file"], r["why"])
        else:
            assert r["fits"] is True and r["step_s"] > 0, e["file"]


def test_corpus_size_and_frameworks(rows):
    fws = Counter(r["framework"] for r in rows)
    assert len(rows) >= 40 and len(fws) >= 6


def test_corpus_share_priced_meets_the_90_percent_goal(rows):
    # every entry counts, the SFT script and the script verl's own Hydra refuses included (corpus.yaml)
    priced = sum(r["outcome"] == "priced" and r["fits"] is True for r in rows)
    assert priced / len(rows) >= 0.9, f"{priced} of {len(rows)} priced"


def test_corpus_mappings_by_hand():
    # verl's Qwen3-4B GRPO script: data.train_batch_size=512 prompts x rollout.n=5, max_prompt_length 1024 (the
    # cap), ppo_mini_batch_size 128 -> 4 mini-batches; trainer 1 x 8 GPUs, FSDP resharded into rollout tp 2
    imp = import_from(spec({"file": "verl/examples/grpo_trainer/run_qwen3_4b_fsdp.sh"}))
    wl, (s,) = imp.config["workload"], imp.config["placement"]["sets"]
    assert (wl["prompts"], wl["group_size"], wl["prompt_len"]) == (512, 5, 1024)
    assert (s["devices"], s["zero"], s["gen_tp"]) == (8, 3, 2) and imp.config["model"].endswith("qwen3-4b.config.json")
    # NeMo-RL's single-controller async recipe: async_rl.sampler.max_staleness_versions 1, 2 nodes x 8 GPUs split
    imp = import_from(spec({"file": "nemo-rl/examples/configs/recipes/llm/grpo-llama3.1-8b-instruct-2n8g-async-1off"
                                    "-single-controller-streaming2.yaml"}))
    assert (imp.mode, imp.eta) == ("async", 1) and imp.config["cluster"]["devices"] == 16
    # OpenRLHF before its rename: --pretrain, --colocate_all_models, --vllm_num_engines 4 x tp 2 on 8 GPUs, ZeRO-3
    imp = import_from(spec({"file": "openrlhf-2025/examples/scripts/train_ppo_llama_ray_hybrid_engine.sh"}))
    (s,) = imp.config["placement"]["sets"]
    assert (imp.config["placement"]["name"], s["devices"], s["zero"], s["gen_tp"]) == ("hybrid", 8, 3, 2)
    assert imp.config["workload"]["prompt_len"] == 1024 and imp.config["workload"]["prompts"] == 1024
    assert any("--colocate_all_models read as --train.colocate_all" in a for a in imp.assumed)
    # TRL's CLI config with DeepSpeed ZeRO-3 on 8 processes
    imp = import_from(spec({"file": "trl/examples/cli_configs/example_config.yaml+trl/examples/accelerate_configs/"
                                    "deepspeed_zero3.yaml"}))
    (s,) = imp.config["placement"]["sets"]
    assert (s["devices"], s["zero"]) == (8, 3)


def test_more_corpus_mappings_by_hand():
    # OpenRLHF's 2026 PPO script: --rollout.batch_size 1024 x --rollout.n_samples_per_prompt 1, --train.batch_size
    # 128 -> 8 mini-batches, --data.max_len 2048 without --rollout.max_new_tokens: split evenly (said),
    # --train.colocate_all with 4 engines x tp 2 on the actor's 8 GPUs at ZeRO-3: the hybrid engine, KL 0.01
    imp = import_from(spec({"file": "openrlhf/examples/scripts/train_ppo_ray_hybrid_engine.sh"}))
    wl, (s,) = imp.config["workload"], imp.config["placement"]["sets"]
    assert (wl["prompts"], wl["group_size"], wl["minibatches"], wl["prompt_len"]) == (1024, 1, 8, 1024)
    assert (s["devices"], s["zero"], s["gen_tp"], imp.config["beta"]) == (8, 3, 2, 0.01)
    assert imp.config["algorithm"] == "ppo" and imp.config["reward_model"].endswith("llama3-8b.config.json")
    assert any("split --data.max_len 2048 evenly" in a for a in imp.assumed)
    # verl's LoRA script: lora_rank 64 on NGPUS_PER_NODE 2 (its default), 64 prompts x 5, mini-batch 32 -> 2
    imp = import_from(spec({"file": "verl/examples/tuning/lora/run_qwen3_8b_fsdp.sh"}))
    wl, (s,) = imp.config["workload"], imp.config["placement"]["sets"]
    assert imp.config["lora"]["rank"] == 64 and s["devices"] == 2
    assert (wl["prompts"], wl["group_size"], wl["minibatches"]) == (64, 5, 2)
    # NeMo-RL's non-colocated 2 x 8 recipe: generation on 1 node of 8 GPUs, training on the other 8; 64 prompts x 32;
    # max_new_tokens 4096 = max_total_sequence_length 4096: the sequence split evenly, 2048 + 2048 (said)
    imp = import_from(spec({"file": "nemo-rl/examples/configs/recipes/llm/grpo-llama3.1-8b-instruct-2n8g-fsdp2tp1-"
                                    "noncolocated.yaml"}))
    sets = {s["name"]: s["devices"] for s in imp.config["placement"]["sets"]}
    assert sets == {"rollout": 8, "train": 8} and imp.config["workload"]["prompts"] == 64
    assert imp.config["workload"]["group_size"] == 32 and imp.config["workload"]["prompt_len"] == 2048
    # AReaL's GSM8K GRPO: rollout sglang:d4p1t1 and actor fsdp:d4p1t1 apart (separation) on one 8-GPU node
    imp = import_from(spec({"file": "areal/examples/math/gsm8k_grpo.yaml"}))
    sets = {s["name"]: (s["devices"], s["tp"]) for s in imp.config["placement"]["sets"]}
    assert sets["rollout"] == (4, 1) and sets["train"] == (4, 1)


# Every key the importer uses from a file, checked against the framework's own documentation of that key at the
# pinned commit (for OpenRLHF, the help text of its command-line parser; for TRL, GRPOConfig's field docs and the
# accelerate config reference). Together with the eight files above: ten files mapped by hand.
OPENRLHF_CLI = ("https://github.com/OpenRLHF/OpenRLHF/blob/3c3be6234e0cb353e76bb8019947db9dfe99fca7/"
                "openrlhf/cli/train_ppo_ray.py")


def test_openrlhf_dapo_every_used_key_against_its_cli_help():
    # OPENRLHF_CLI, argparse help at the pinned commit (line numbers there):
    #   --rollout.batch_size "Batch size for make experience" (prompts per step, l. 373); --rollout.n_samples_per_prompt
    #   "number of responses for each prompt"; --train.batch_size "Global training batch size" (samples per optimizer
    #   step, l. 394); --train.micro_batch_size "batch size per GPU" (l. 393); --data.max_len "Max total sequence
    #   length (prompt + response)" (l. 379); --train.max_epochs (default 1); --algo.advantage.estimator choices gae,
    #   reinforce, rloo, reinforce_baseline, group_norm, dr_grpo (group_norm: GRPO's group-normalised advantage,
    #   l. 478); --algo.kl.init_coef "KL penalty in PPO"; --vllm.num_engines "number of vLLM Engines" (l. 232);
    #   --vllm.tensor_parallel_size "tensor parallel size of vLLM Engine"; --vllm.gpu_memory_utilization;
    #   --ds.zero_stage "DeepSpeed ZeRO stage" (l. 308); --ds.param_dtype choices bf16, fp16; --ds.packing_samples;
    #   --ds.enable_sleep / --vllm.enable_sleep "Enable sleep mode ... when using --colocate_all_models";
    #   --train.colocate_all "colocate all models (including vLLM engines) ... share same gpus" (l. 224);
    #   --actor.num_nodes "number of nodes for actor", --actor.num_gpus_per_node "number of gpus per node for actor";
    #   --ref.num_nodes / --ref.num_gpus_per_node (the reference's GPUs); --reward.remote_url "remote RM API (HTTP)"
    #   (here a reward_func.py: a rule, no reward model); --actor.gradient_checkpointing_enable;
    #   --actor.model_name_or_path (the model).
    imp = import_from(spec({"file": "openrlhf/examples/scripts/train_dapo_ray_hybrid_engine.sh"}))
    assert set(imp.used) == {
        "algo.advantage.estimator", "actor.model_name_or_path", "reward.remote_url", "rollout.batch_size",
        "rollout.n_samples_per_prompt", "train.batch_size", "data.max_len", "train.max_epochs", "ds.enable_sleep",
        "vllm.enable_sleep", "train.micro_batch_size", "ds.param_dtype", "ds.packing_samples",
        "actor.gradient_checkpointing_enable", "algo.kl.init_coef", "vllm.num_engines", "vllm.tensor_parallel_size",
        "ds.zero_stage", "train.colocate_all", "vllm.gpu_memory_utilization", "actor.num_nodes",
        "actor.num_gpus_per_node", "ref.num_gpus_per_node", "ref.num_nodes"}
    cfg, wl = imp.config, imp.config["workload"]
    (s,) = cfg["placement"]["sets"]
    assert cfg["algorithm"] == "grpo" and cfg["beta"] == 1e-3 and cfg["model"].endswith("llama3-8b.config.json")
    assert "reward_model" not in cfg and "critic" not in cfg["placement"]["roles"]
    # 128 prompts x 8 samples = 1024 samples, 128 per optimizer step -> 8 mini-batches, one epoch, 8 per GPU
    assert (wl["prompts"], wl["group_size"], wl["minibatches"], wl["epochs"], wl["micro_batch"]) == (128, 8, 8, 1, 8)
    # max_len 2048 is prompt + response: split evenly, said; the response is the cap's log-normal, said
    assert wl["prompt_len"] == 1024 and wl["response"]["max"] == 1024
    assert any("split --data.max_len 2048 evenly" in a for a in imp.assumed)
    assert (wl["precision"], wl["padding"], wl["gradient_checkpointing"], wl["offload"]) == (
        "bf16-mixed", "none", True, ["sleep"])
    # 4 engines x tp 2 = the actor's 1 x 8 GPUs, all models colocated at ZeRO-3: the hybrid engine, reference there
    assert cfg["placement"]["name"] == "hybrid" and cfg["placement"]["roles"]["reference"] == "all"
    assert (s["devices"], s["zero"], s["gen_tp"]) == (8, 3, 2) and imp.engine["memory_fraction"] == 0.6


def test_trl_cli_config_with_accelerate_ddp_every_used_key_against_the_docs():
    # TRL's CLI config (https://huggingface.co/docs/trl/main/en/clis): model_name_or_path is the only key the predictor
    # uses; every other GRPO quantity is GRPOConfig's default (https://huggingface.co/docs/trl/main/en/grpo_trainer
    # #trl.GRPOConfig), read here from the installed TRL's dataclass fields, not typed. Accelerate's config
    # (https://huggingface.co/docs/accelerate/main/en/package_reference/utilities#accelerate.DistributedType):
    # distributed_type MULTI_GPU is DDP (no ZeRO), num_processes 8 one per GPU on num_machines 1.
    import dataclasses

    from trl import GRPOConfig

    fields = {f.name: f for f in dataclasses.fields(GRPOConfig)}
    d = {k: f.default for k, f in fields.items()}
    imp = import_from(spec({"file": "trl/examples/cli_configs/example_config.yaml+trl/examples/accelerate_configs/"
                                    "multi_gpu.yaml"}))
    assert set(imp.used) == {"model_name_or_path"} and imp.config["model"].endswith("qwen2.5-0.5b.config.json")
    wl, (s,) = imp.config["workload"], imp.config["placement"]["sets"]
    assert (s["devices"], s["dp"], s["zero"]) == (8, 8, 0)
    assert any("8 processes, DDP" in a for a in imp.assumed)
    # a generation batch is per_device_train_batch_size x processes samples, num_generations per prompt
    assert wl["prompts"] == d["per_device_train_batch_size"] * 8 // d["num_generations"]
    assert (wl["group_size"], wl["micro_batch"]) == (d["num_generations"], d["per_device_train_batch_size"])
    assert wl["response"]["max"] == d["max_completion_length"] and imp.config["beta"] == d["beta"]
    assert wl["gradient_checkpointing"] is d["gradient_checkpointing"]
    # bf16 None means "True if fp16 is not set" (its help text): fp32 weights under bf16 autocast
    assert "defaults to `True` if `fp16` is not set" in fields["bf16"].metadata["help"]
    assert d["bf16"] is None and not d["fp16"] and wl["autocast"] is True and wl["precision"] == "fp32"


SLIME_ARGS = ("https://github.com/THUDM/slime/blob/624b824a898ab0ec1fcb4d373004c7f3852bf515/"
              "slime/utils/arguments.py")


def test_slime_script_every_used_key_against_its_parser_help():
    # SLIME_ARGS at the pinned commit: --actor-num-nodes "Number of nodes for training actor", --actor-num-gpus-per-node
    # "Number of gpus per node for training actor"; --colocate "colocate the inference engines and the actor"
    # (sets --offload); --rollout-num-gpus-per-engine "Number of GPUs per inference engine, just like the tp_size in
    # sglang"; --rollout-batch-size "The number of prompts in each rollout step"; --n-samples-per-prompt "Number of
    # responses for each prompt"; --global-batch-size "the gbs is of sample, not of prompts"; --use-kl-loss /
    # --kl-loss-coef (validate_args loads the reference when use_kl_loss or kl_coef != 0); --advantage-estimator
    # choices grpo, gspo, cispo, reinforce_plus_plus(_baseline), ppo; --use-dynamic-batch-size with
    # --max-tokens-per-gpu; Megatron-LM's --tensor-model-parallel-size, --pipeline-/--context-parallel-size,
    # --expert-model-parallel-size, --recompute-granularity full (activation recomputation); SGLang's
    # --mem-fraction-static as --sglang-mem-fraction-static; --hf-checkpoint the Hugging Face checkpoint.
    imp = import_from(spec({"file": "slime/scripts/run-qwen3-4B.sh"}))
    assert set(imp.used) == {
        "pipeline-model-parallel-size", "context-parallel-size", "advantage-estimator", "hf-checkpoint", "use-kl-loss",
        "kl-loss-coef", "rollout-batch-size", "n-samples-per-prompt", "global-batch-size", "rollout-max-response-len",
        "use-dynamic-batch-size", "max-tokens-per-gpu", "recompute-granularity", "tensor-model-parallel-size",
        "expert-model-parallel-size", "sequence-parallel", "expert-tensor-parallel-size", "actor-num-nodes",
        "actor-num-gpus-per-node", "rollout-num-gpus-per-engine", "sglang-mem-fraction-static", "colocate"}
    assert imp.unknown == [] and imp.config["model"].endswith("qwen3-4b.config.json")
    cfg, wl = imp.config, imp.config["workload"]
    (s,) = cfg["placement"]["sets"]
    # 32 prompts x 8 = 256 samples, --global-batch-size 256: one optimizer step; NUM_GPUS falls back to 8 (the
    # script's `-le 0` branch: nvidia-smi is never run here); TP 2 on 8 GPUs, engines of 2 GPUs on the same GPUs
    assert (wl["prompts"], wl["group_size"], wl["minibatches"]) == (32, 8, 1)
    assert (cfg["placement"]["name"], s["devices"], s["tp"]) == ("colocated", 8, 2)
    assert wl["response"]["max"] == 8192 and wl["gradient_checkpointing"] is True and wl["offload"] == ["sleep"]
    # dynamic batch: 9216 tokens per GPU over the mean sequence (512-token prompt, said, + the mean response)
    assert wl["micro_batch"] >= 1 and wl["padding"] == "none"
    # --use-kl-loss at --kl-loss-coef 0.00: the reference is still loaded and scored, so priced and said
    assert "reference" in cfg["placement"]["roles"] and "beta" not in cfg
    assert any("--use-kl-loss with a zero coefficient" in a for a in imp.assumed)
    assert imp.engine["memory_fraction"] == 0.7 and imp.mode == "sync"


def test_corpus_mappings_of_the_third_pass():
    # verl's Qwen3-8B Megatron script: actor_tp 2, actor_pp 2 (ref the same) on 8 GPUs -> dp 2; the rollout's tp 2 is
    # the generation layout the pipeline-parallel trainer is resharded into (a colocated set with reshard)
    imp = import_from(spec({"file": "verl/examples/grpo_trainer/run_qwen3_8b_megatron.sh"}))
    p = imp.config["placement"]
    (s,) = p["sets"]
    assert (p["name"], p["reshard"]) == ("colocated", True)
    assert (s["devices"], s["dp"], s["tp"], s["pp"], s["gen_tp"], s["zero"]) == (8, 2, 2, 2, 2, 1)
    # NeMo-RL's performance recipe: megatron pipeline_model_parallel_size 2 on 2 x 8 GPUs, tp 1 -> dp 8
    imp = import_from(spec({"file": "nemo-rl/examples/configs/recipes/llm/performance/grpo-llama3.1-8b-instruct-"
                                    "2n8g.yaml"}))
    (s,) = imp.config["placement"]["sets"]
    assert (s["devices"], s["dp"], s["pp"]) == (16, 8, 2) and imp.config["placement"]["reshard"] is True
    # AReaL's terminal-bench: trainer fsdp d2 x c2, c being AReaL's Ulysses (its FSDP engine's sp_size): 4 GPUs, sp 2
    imp = import_from(spec({"file": "areal/examples/terminal_bench/config_tb_sglang.yaml"}))
    sets = {s["name"]: s for s in imp.config["placement"]["sets"]}
    assert (sets["train"]["devices"], sets["train"]["dp"], sets["train"].get("sp")) == (4, 4, 2)
    assert (sets["rollout"]["devices"], sets["rollout"]["tp"]) == (4, 2)
    # PPO scored by a rule: a critic, no reward model anywhere (AReaL's critic block; OpenRLHF's --reward.remote_url,
    # the critic from the actor's model as train_ppo_ray.py sets it)
    for f in ("areal/examples/math/gsm8k_ppo.yaml", "openrlhf/examples/scripts/train_ppo_with_reward_fn.sh"):
        imp = import_from(spec({"file": f}))
        roles = imp.config["placement"]["roles"]
        assert imp.config["algorithm"] == "ppo" and imp.config["reward"] == "rule", f
        assert "critic" in roles and "reward" not in roles and "reward_model" not in imp.config, f
        pr = predict_imported(imp)
        assert pr.fits and not pr.placement.algo.reward_model and pr.placement.algo.critic, f
        stages = {str(st) for sc in pr.placement.sets for st, t in sc.stages.items() if t > 0}
        assert any("critic" in st for st in stages), (f, stages)
    # verl's GPG: GRPO's passes (group-mean-centred advantage, no critic), said in one line
    imp = import_from(spec({"file": "verl/examples/gpg_trainer/run_qwen3_8b_fsdp.sh"}))
    assert imp.config["algorithm"] == "grpo" and any("adv_estimator=gpg priced as grpo" in a for a in imp.assumed)
    # Qwen2.5-32B's shape shipped: 64 layers of hidden 5120
    imp = import_from(spec({"file": "verl/examples/grpo_trainer/run_qwen2_5_32b_fsdp.sh"}))
    assert imp.config["model"].endswith("qwen2.5-32b.config.json")


def test_advice_keeps_a_pipeline_parallel_trainers_layout():
    # the split candidates of a pp 2 x tp 2 trainer keep both (a split that dropped pp would price another run), and
    # no candidate turns a pipeline-parallel trainer into ZeRO-3
    imp = import_from(spec({"file": "verl/examples/grpo_trainer/run_qwen3_8b_megatron.sh"}))
    cands = candidates(imp)
    splits = [c for _, kind, c in cands if kind == "split" and len(c.config["placement"]["sets"]) == 2]
    assert splits
    for c in splits:
        train = next(s for s in c.config["placement"]["sets"] if s["name"] == "train")
        assert (train["tp"], train.get("pp"), train["zero"]) == (2, 2, 1)
        assert train["dp"] * 4 == train["devices"]
    assert not [d for d, kind, _ in cands if kind == "zero"]
