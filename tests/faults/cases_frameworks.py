"""`rlm-lab predict --from` / `advise --from`: framework configs that are missing, malformed, or that the predictor
cannot express, each refused in one line; the shipped configs predicted."""

from pathlib import Path

from fault_matrix import REPO, Case

CASES = []
# paths relative to the repository (rows run there), so that the book page names no machine's folders
VERL = "configs/frameworks/verl/grpo-qwen2-7b-gsm8k.yaml"
AREAL = "configs/frameworks/areal/gsm8k_grpo.yaml"
TRL = "configs/frameworks/trl/grpo-qwen2.5-0.5b-quickstart.yaml"
NEMO_BASE = "{base}"   # the shipped grpo_math_1B.yaml, its absolute path written in by setup (defaults are file-relative)


def add(id, what, argv, message, cls="clear-error", **kw):
    CASES.append(Case(id, what, cls=cls, argv=argv, message=message, **kw))


def write(name, data: bytes):
    base = str(REPO / "configs" / "frameworks" / "nemo-rl" / "grpo_math_1B.yaml").encode()

    def setup(tmp: Path):
        (tmp / name).write_bytes(data.replace(b"{base}", base).replace(b"{tmpdir}", str(tmp).encode()))
        for folder, text in (("m", "[1, 2]"), ("n", '{"hidden_size": NaN, "model_type": "llama"}')):
            (tmp / folder).mkdir(exist_ok=True)
            (tmp / folder / "config.json").write_text(text)
    return setup


# ---- the --from value itself
for id, value, msg in [
    ("no-colon", "verl", r"--from needs FRAMEWORK:CONFIG"),
    ("unknown-framework", "roll:run.yaml", r"--from 'roll': no importer; choose one of verl, openrlhf, trl, nemo-rl, areal, slime"),
    ("empty-config", "verl:", r"--from verl: give the config after the colon"),
    ("verl-missing", "verl:{tmp}/none.yaml", r"verl config .*none.yaml not found"),
    ("verl-folder", "verl:{tmp}", r"verl config .* not found \(it is a folder\)"),
    ("openrlhf-file-missing", "openrlhf:{tmp}/run.args", r"openrlhf arguments file .*run.args not found"),
]:
    add(id, f"predict --from {value}", ["predict", "--from", value], msg)

# ---- framework files that are not configs, or say what the predictor cannot price
VERL_MODEL = b"actor_rollout_ref:\n  model: {path: Qwen/Qwen2.5-7B-Instruct}\n"
for id, fw, data, msg in [
    ("verl-binary", "verl", bytes(range(256)), r"verl config .*c.yaml is not a text file"),
    ("verl-malformed", "verl", b"data: {train_batch_size: 8\n", r"verl config .*c.yaml is not valid YAML"),
    ("verl-list", "verl", b"- data\n- trainer\n", r"must be a non-empty YAML mapping of verl options"),
    ("verl-ulysses", "verl", VERL_MODEL + b"  actor: {ulysses_sequence_parallel_size: 3}\n",
     r"ulysses_sequence_parallel_size=3 does not divide the trainer's 8 data-parallel ranks"),
    ("verl-pipeline", "verl", VERL_MODEL + b"  actor: {strategy: megatron, megatron: {pipeline_model_parallel_size: 2}}\n"
     b"  ref: {megatron: {pipeline_model_parallel_size: 4}}\n",
     r"ref.megatron.pipeline_model_parallel_size=4 differs from .*pipeline_model_parallel_size=2"),
    ("verl-gpus-word", "verl", VERL_MODEL + b"trainer: {n_gpus_per_node: eight}\n",
     r"trainer.n_gpus_per_node must be an integer >= 1, got 'eight'"),
    ("verl-model-unknown", "verl", b"actor_rollout_ref: {model: {path: org/unknown-70b}}\n",
     r"actor_rollout_ref.model.path='org/unknown-70b': no model config ships for it"),
    ("verl-mini-batch", "verl", VERL_MODEL + b"data: {train_batch_size: 100}\n",
     r"verl ppo_mini_batch_size=256 must divide data.train_batch_size=100"),
    ("verl-gen-tp", "verl", VERL_MODEL + b"  rollout: {tensor_model_parallel_size: 3}\n",
     r"generation tensor-parallel size 3 does not divide 8 GPUs"),
    ("verl-estimator", "verl", VERL_MODEL + b"algorithm: {adv_estimator: remax}\n",
     r"adv_estimator='remax' has no predictor algorithm"),
    ("verl-async-hybrid", "verl", VERL_MODEL + b"async_training: {staleness_threshold: 0.5}\n",
     r"async_training .* needs actor_rollout_ref.hybrid_engine=false"),
    ("verl-too-many-gpus", "verl", VERL_MODEL + b"trainer: {nnodes: 100000}\n",
     r"set 'all' has 800000 data-parallel ranks for the step's 1024 sequences"),
    ("verl-response-huge", "verl", VERL_MODEL + b"data: {max_response_length: 100000000}\n",
     r"prompt \+ response = 100000512 tokens exceeds the model's max_position_embeddings"),
    ("verl-memory-fraction", "verl", VERL_MODEL + b"  rollout: {gpu_memory_utilization: 2}\n",
     r"verl vllm engine: its memory fraction .* must be in \(0, 1\], got 2"),
    # bounded, typed input: every value checked, nothing substituted, caps named in the message
    ("verl-alias-bomb", "verl", b"a: &a [x, x, x, x, x, x, x, x, x, x]\n" + b"".join(
        b"%s: &%s [*%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s]\n" % ((bytes([98 + i]),) * 2 + (bytes([97 + i]),) * 10)
        for i in range(9)), r"expands to more than 200000 values \(YAML aliases"),
    ("verl-deep", "verl", b"a: " + b"[" * 3000 + b"]" * 3000 + b"\n", r"nests deeper than 64 levels"),
    ("verl-estimator-list", "verl", VERL_MODEL + b"algorithm: {adv_estimator: [grpo]}\n",
     r"verl algorithm.adv_estimator must be a string, got \['grpo'\]"),
    ("verl-estimator-mapping", "verl", VERL_MODEL + b"algorithm: {adv_estimator: {name: grpo}}\n",
     r"verl algorithm.adv_estimator must be a value, got a mapping \(algorithm.adv_estimator.name = 'grpo'\); "
     r"nothing is substituted"),
    ("verl-engine-number", "verl", VERL_MODEL + b"  rollout: {name: 7}\n", r"rollout.name must be a string, got 7"),
    ("verl-model-json-list", "verl", b"actor_rollout_ref: {model: {path: {tmpdir}/m/config.json}}\n",
     r"model config .*config.json must be a JSON object \(a Hugging Face config.json\), got list"),
    ("verl-model-json-nan", "verl", b"actor_rollout_ref: {model: {path: {tmpdir}/n/config.json}}\n",
     r"model config .*config.json: field 'hidden_size' must be a finite number, got nan"),
    ("trl-fp16-bf16", "trl", b"model_name_or_path: Qwen/Qwen2.5-0.5B\nfp16: true\nbf16: true\n",
     r"trl fp16 and bf16 are both true"),
    ("trl-batch", "trl", b"model_name_or_path: Qwen/Qwen2.5-0.5B\nper_device_train_batch_size: 3\n",
     r"generation batch 3 .* must be a multiple of num_generations=8"),
    ("trl-vllm-mode", "trl", b"model_name_or_path: Qwen/Qwen2.5-0.5B\nuse_vllm: true\nvllm_mode: remote\n",
     r"trl vllm_mode='remote': colocate or server"),
    ("trl-no-model", "trl", b"learning_rate: 1.0e-6\n", r"model_name_or_path must name a model"),
    ("nemo-defaults-missing", "nemo-rl", b"defaults: base.yaml\n", r"nemo-rl config .*base.yaml not found"),
    ("nemo-defaults-loop", "nemo-rl", b"defaults: c.yaml\n", r"defaults nest deeper than 8 files"),
    ("nemo-context-parallel", "nemo-rl", f"defaults: {NEMO_BASE}\npolicy: {{dtensor_cfg: {{context_parallel_size: 2}}}}\n"
     .encode(), r"context parallelism is not modelled"),
    ("nemo-async-doc-split", "nemo-rl", f"defaults: {NEMO_BASE}\ncluster: {{num_nodes: 2, gpus_per_node: 4}}\n"
     "policy: {generation: {colocated: {enabled: false, resources: {num_nodes: 1, gpus_per_node: 2}}}}\n".encode(),
     r"nemo-rl on 2 nodes with non-colocated generation needs"),
    ("areal-backend", "areal", b"rollout: {backend: 'sglang-d4'}\nactor: {backend: 'fsdp:d4', path: Qwen/Qwen2.5-1.5B}\n",
     r"areal rollout.backend='sglang-d4' is not an AReaL backend string"),
    ("areal-hybrid-moe", "areal",
     b"actor: {backend: 'megatron:(attn:d4p1t2|ffn:d2p1e4)', path: Qwen/Qwen3-30B-A3B}\nrollout: {backend: 'sglang:d8'}\n",
     r"a hybrid MoE layout \(one parallel layout for attention, another for the experts' FFN\) is not modelled"),
    ("areal-pipeline", "areal", b"rollout: {backend: 'sglang:d2p2'}\nactor: {backend: 'megatron:d2p2', path: "
     b"Qwen/Qwen2.5-1.5B}\ntrain_dataset: {batch_size: 8}\n", r"sglang:d2p2'?: pipeline \(p\) and context \(c\) parallelism are not modelled"),
    ("areal-no-batch", "areal", b"rollout: {backend: 'sglang:d4'}\nactor: {backend: 'fsdp:d4', path: Qwen/Qwen2.5-1.5B}\n",
     r"areal config needs train_dataset.batch_size"),
    ("areal-critic", "areal", b"rollout: {backend: 'sglang:d4'}\nactor: {backend: 'fsdp:d4', path: Qwen/Qwen2.5-1.5B}\n"
     b"critic: {backend: 'fsdp:d4', scheduling_strategy: {type: separation}}\n",
     r"only a critic colocated with the actor is priced"),
    ("areal-too-many-gpus", "areal", b"cluster: {n_nodes: 1, n_gpus_per_node: 8}\nrollout: {backend: 'sglang:d8'}\n"
     b"actor: {backend: 'fsdp:d8', path: Qwen/Qwen2.5-1.5B}\ntrain_dataset: {batch_size: 8}\n", r"rollout \(8\) \+ actor \(8\) GPUs exceed"),
]:
    add(id, f"predict --from {fw}: {data[:60]!r}", ["predict", "--from", f"{fw}:{{tmp}}/c.yaml"], msg,
        setup=write("c.yaml", data))

# ---- run scripts and Hydra composition (nothing run; shell variables expanded as bash would)
M = b"actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct actor_rollout_ref.rollout.name=vllm"
for id, fw, name, data, msg in [
    ("verl-script-sft", "verl", "run.sh", b"torchrun --nproc_per_node=8 -m verl.trainer.sft_trainer data.x=1\n",
     r"launches verl.trainer.sft_trainer: an SFT run \(not RL\); nothing to price as an RL step"),
    ("verl-script-no-trainer", "verl", "run.sh", b"#!/bin/bash\necho hello\n", r"runs no verl trainer"),
    ("verl-script-unknown-key", "verl", "run.sh", b"python3 -m verl.trainer.main_ppo " + M + b" no.such=1\n",
     r"Hydra cannot compose it as verl would: Could not override 'no.such'"),
    ("verl-script-quote", "verl", "run.sh", b"python3 -m verl.trainer.main_ppo 'unclosed\n",
     r"does not split as a shell line"),
    ("verl-script-subst-int", "verl", "run.sh", b"N=$(nproc)\npython3 -m verl.trainer.main_ppo " + M +
     b" trainer.n_gpus_per_node=$N\n", r"n_gpus_per_node must be an integer >= 1, got '__not_run_command__'"),
    ("verl-v1-separate-no-pool", "verl", "run.sh", b"python3 -m verl.trainer.main_ppo " + M +
     b" trainer.v1.trainer_mode=separate_async\n", r"separate_async needs a standalone rollout pool"),
    ("verl-v1-mode-word", "verl", "run.sh", b"python3 -m verl.trainer.main_ppo " + M +
     b" trainer.v1.trainer_mode=fast\n", r"trainer.v1.trainer_mode='fast': one of sync, colocate_async, separate_async"),
    ("verl-rollout-name-missing", "verl", "run.sh",
     b"python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct\n",
     r"actor_rollout_ref.rollout.name is mandatory in verl \(\?\?\? in its config\)"),
    ("verl-defaults-missing-group", "verl", "c.yaml", b"defaults:\n  - nosuch_base\n  - _self_\n",
     r"Hydra cannot compose it as verl would"),
    ("openrlhf-script-sft", "openrlhf", "run.sh", b"deepspeed --module openrlhf.cli.train_sft --max_len 2048\n",
     r"launches openrlhf.cli.train_sft: an SFT run"),
    ("nemo-sft", "nemo-rl", "c.yaml", b"sft: {max_num_epochs: 1}\npolicy: {model_name: Qwen/Qwen2.5-1.5B}\n",
     r"is an SFT config \(its sft: block, no grpo: block\)"),
    ("trl-sft", "trl", "c.yaml", b"model_name_or_path: Qwen/Qwen2.5-0.5B\npacking: true\nmax_length: 1024\n",
     r"is an SFT config \(SFTConfig's packing, max_length; no GRPO field\)"),
    ("areal-sft", "areal", "c.yaml", b"actor: {backend: 'fsdp:d8', path: Qwen/Qwen2.5-1.5B}\ntrain_dataset: {batch_size: 8}\n",
     r"has no rollout or gconfig block: an SFT \(or other non-RL\) experiment"),
    ("slime-no-train", "slime", "run.sh", b"ray start --head\npython3 tools/convert_hf_to_torch_dist.py --hf-checkpoint x\n",
     r"runs no slime train.py or train_async.py command"),
    ("slime-no-model", "slime", "run.sh", b"python3 train.py --rollout-batch-size 8 --colocate\n",
     r"slime arguments need --hf-checkpoint"),
    ("slime-cp", "slime", "run.sh", b"python3 train.py --hf-checkpoint /root/Qwen3-4B --rollout-batch-size 8 --n-samples-per-prompt 4 --rollout-max-response-len 1024 --colocate --context-parallel-size 2\n",
     r"slime --context-parallel-size 2: context parallelism is not modelled by the predictor"),
    ("slime-estimator", "slime", "run.sh", b"python3 train.py --hf-checkpoint /root/Qwen3-4B --rollout-batch-size 8 --n-samples-per-prompt 4 --rollout-max-response-len 1024 --colocate --advantage-estimator remax\n",
     r"slime --advantage-estimator 'remax' has no predictor algorithm; known: grpo"),
    ("slime-batch-word", "slime", "run.sh", b"python3 train.py --hf-checkpoint /root/Qwen3-4B --rollout-batch-size many --n-samples-per-prompt 4 --rollout-max-response-len 1024 --colocate\n",
     r"slime --rollout-batch-size must be an integer, got 'many'"),
    ("slime-gbs-not-dividing", "slime", "run.sh", b"python3 train.py --hf-checkpoint /root/Qwen3-4B --rollout-batch-size 8 --n-samples-per-prompt 4 --rollout-max-response-len 1024 --colocate --global-batch-size 5\n",
     r"slime --global-batch-size 5 must divide the 32 samples"),
    ("slime-async-colocate", "slime", "run.sh", b"python3 train_async.py --hf-checkpoint /root/Qwen3-4B --rollout-batch-size 8 --n-samples-per-prompt 4 --rollout-max-response-len 1024 --colocate\n",
     r"train_async.py with --colocate: the asynchronous loop needs the engines on GPUs of their own"),
    ("slime-split-no-rollout-gpus", "slime", "run.sh", b"python3 train.py --hf-checkpoint /root/Qwen3-4B --rollout-batch-size 8 --n-samples-per-prompt 4 --rollout-max-response-len 1024\n",
     r"slime without --colocate needs --rollout-num-gpus"),
]:
    add(id, f"predict --from {fw}: {data[:60]!r}", ["predict", "--from", f"{fw}:{{tmp}}/{name}"], msg,
        setup=write(name, data))
add("trl-accelerate-zero-word", "predict --from trl:GRPO.yaml+ACCEL.yaml with zero_stage: three",
    ["predict", "--from", f"trl:{TRL}+{{tmp}}/a.yaml"], r"deepspeed_config.zero_stage must be an integer >= 0, got 'three'",
    setup=write("a.yaml", b"distributed_type: DEEPSPEED\nnum_processes: 8\ndeepspeed_config: {zero_stage: three}\n"))
add("model-override-before-check", "predict --from verl with an unknown model and --model naming a shipped one: the "
    "override applies before the config's model is looked up", ["predict", "--from", "verl:{tmp}/c.yaml", "--model",
                                                               "Qwen/Qwen3-0.6B"], r"mode sync \(eta 0\): step",
    cls="correct-result", setup=write("c.yaml", b"actor_rollout_ref: {model: {path: org/unknown-70b}}\n"))

# ---- OpenRLHF argument strings
for id, args, msg in [
    ("openrlhf-no-model", "--actor.num_gpus_per_node 8", r"openrlhf arguments need --actor.model_name_or_path"),
    ("openrlhf-no-option", "python3 train.py", r"openrlhf arguments hold no --option"),
    ("openrlhf-quote", "--actor.model_name_or_path \"Qwen/Qwen2.5-7B", r"do not split as a shell line"),
    ("openrlhf-value-missing", "--actor.model_name_or_path Qwen/Qwen2.5-7B --actor.num_gpus_per_node",
     r"openrlhf --actor.num_gpus_per_node needs a value"),
    ("openrlhf-int-word", "--actor.model_name_or_path Qwen/Qwen2.5-7B --reward.model_name_or_path Qwen/Qwen2.5-7B "
     "--actor.num_gpus_per_node eight", r"--actor.num_gpus_per_node must be an integer, got 'eight'"),
    ("openrlhf-ring-attention", "--actor.model_name_or_path Qwen/Qwen2.5-7B --ds.ring_attn_size 2",
     r"ring attention \(context parallelism, each sequence split over a ring of GPUs\) is not modelled"),
    ("openrlhf-colocate-mismatch", "--actor.model_name_or_path Qwen/Qwen2.5-7B --algo.advantage.estimator group_norm "
     "--train.colocate_all --vllm.num_engines 3 --vllm.tensor_parallel_size 2",
     r"--train.colocate_all needs --vllm.num_engines x --vllm.tensor_parallel_size \(3 x 2\) = the actor's 8 GPUs"),
    ("openrlhf-no-reward-ppo", "--actor.model_name_or_path Qwen/Qwen2.5-7B",
     r"openrlhf gae \(PPO\) with neither --reward.model_name_or_path nor --reward.remote_url: the run has no reward"),
    ("openrlhf-new-tokens", "--actor.model_name_or_path Qwen/Qwen2.5-7B --reward.model_name_or_path Qwen/Qwen2.5-7B "
     "--data.max_len 100 --rollout.max_new_tokens 200", r"--rollout.max_new_tokens 200 leaves no room for a prompt"),
    ("openrlhf-lora-ref", "--actor.model_name_or_path Qwen/Qwen2.5-7B --algo.advantage.estimator group_norm "
     "--vllm.num_engines 2 --ds.lora.rank 8", r"add --train.colocate_actor_ref"),
    ("openrlhf-rm-group", "--actor.model_name_or_path Qwen/Qwen2.5-7B --reward.model_name_or_path Qwen/Qwen2.5-7B "
     "--algo.advantage.estimator rloo", r"the predictor's rloo scores with a rule"),
]:
    add(id, f"predict --from openrlhf:\"{args}\"", ["predict", "--from", f"openrlhf:{args}"], msg)

# ---- flags that the imported config already sets
add("with-config", "predict CONFIG --from trl:...", ["predict", "configs/predict/grpo-micro-cpu.yaml",
                                                     "--from", f"trl:{TRL}"],
    r"predict: give either a predict config or --from, not both")
add("with-algorithm", "predict --from trl:... --algorithm ppo", ["predict", "--from", f"trl:{TRL}", "--algorithm", "ppo"],
    r"predict --from sets algorithm from the framework's config; drop --algorithm")
add("advise-with-devices", "advise --from areal:... --devices 4", ["advise", "--from", f"areal:{AREAL}", "--devices", "4"],
    r"advise --from sets devices from the framework's config; drop --devices")
add("advise-top-zero", "advise --from areal:... --top 0", ["advise", "--from", f"areal:{AREAL}", "--top", "0"],
    r"--top must be >= 1, got 0")
add("hardware-unknown", "predict --from trl:... --hardware nope", ["predict", "--from", f"trl:{TRL}", "--hardware", "nope"],
    r"unknown hardware profile 'nope'")

# ---- the shipped configs: a prediction, or "does not fit" with its numbers (exit 1)
add("trl-quickstart", "predict --from the TRL quick start", ["predict", "--from", f"trl:{TRL}"],
    r"mode sync \(eta 0\): step", cls="correct-result")
add("verl-fits", "predict --from verl's GRPO example: it runs as published, so it fits (chunked log-probs, lengths "
    "under the cap, the reference offloaded, the engine at its memory fraction)",
    ["predict", "--from", f"verl:{VERL}"], r"memory [0-9.]+ GiB of [0-9.]+ GiB per device\n", cls="correct-result")
add("trl-ddp-does-not-fit", "predict --from TRL's 7B vLLM-server example: float32 weights under DDP do not fit a GPU, "
    "and the line says by how much", ["predict", "--from", "trl:configs/frameworks/trl/grpo-qwen2.5-7b-vllm-server.yaml"],
    r"DOES NOT FIT: .*set 'train' needs 11[0-9].[0-9]+ GiB per device \(weights 28.37, gradients 28.37, optimizer 56.74",
    cls="correct-result", exit=1)
add("areal-advise", "advise --from AReaL's GSM8K GRPO", ["advise", "--from", f"areal:{AREAL}"], r"advice \(split\)",
    cls="correct-result")
