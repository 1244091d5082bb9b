"""One workload under each framework's default placement and mode: the same model, batch, lengths, micro-batch and
GPU count written as each framework's own config (everything else left at that framework's defaults), imported by
its importer and predicted. All predictions, nothing measured.

What each config states beyond the workload (the rest is the framework's default):

- verl: ``main_ppo`` defaults, i.e. the hybrid engine (FSDP resharded into rollout tp 2), synchronous;
- OpenRLHF: its hybrid engine as its README recommends and its example ``train_ppo_ray_hybrid_engine.sh`` sets it
  (``--train.colocate_all``, vLLM engines of tp 2 on every GPU, ``--ds.zero_stage 3``); with no flags OpenRLHF puts
  every model on 8 GPUs of its own and generates without vLLM, which does not describe a 64-GPU run;
- TRL: ``GRPOConfig`` defaults (generation by ``transformers``, DDP), one process per GPU, the generation batch
  set to the workload;
- NeMo-RL: ``grpo_math_1B.yaml`` (vLLM colocated with DTensor/FSDP2 training), synchronous;
- AReaL: its GSM8K example's split (SGLang on half the GPUs, FSDP on the other half) and
  ``max_head_offpolicyness`` 2 (asynchronous, the design AReaL is built around).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import yaml

from ...errors import RlmLabError
from .common import CONFIGS
from . import import_from, predict_imported


def framework_configs(model: str, gpus: int, prompts: int, group: int, prompt_len: int, response_len: int,
                      micro_batch: int, folder: Path, beta: float = 0.0) -> dict:
    """{framework: --from value} of the workload written in each framework's format under ``folder``."""
    if gpus % 8 or gpus < 8:
        raise RlmLabError(f"gpus must be a multiple of 8 (nodes of 8 GPUs), got {gpus}")
    n, nodes = prompts * group, gpus // 8

    def dump(name, data):
        p = folder / name
        p.write_text(yaml.safe_dump(data, sort_keys=False))
        return str(p)

    verl = {"algorithm": {"adv_estimator": "grpo"},
            "data": {"train_batch_size": prompts, "max_prompt_length": prompt_len, "max_response_length": response_len},
            "actor_rollout_ref": {"model": {"path": model}, "rollout": {"n": group},
                                  "actor": {"ppo_mini_batch_size": prompts, "ppo_micro_batch_size_per_gpu": micro_batch,
                                            "use_kl_loss": beta > 0, "kl_loss_coef": beta}},
            "trainer": {"nnodes": nodes, "n_gpus_per_node": 8}}
    openrlhf = (f"--actor.model_name_or_path {model} --algo.advantage.estimator group_norm "
                f"--actor.num_nodes {nodes} --actor.num_gpus_per_node 8 --ref.num_nodes {nodes} "
                f"--ref.num_gpus_per_node 8 --train.colocate_all --vllm.num_engines {gpus // 2} "
                f"--vllm.tensor_parallel_size 2 --ds.zero_stage 3 --rollout.batch_size {prompts} "
                f"--rollout.n_samples_per_prompt {group} --train.batch_size {n} --train.micro_batch_size {micro_batch} "
                f"--data.max_len {prompt_len + response_len} --rollout.max_new_tokens {response_len} "
                f"--algo.kl.init_coef {beta}")
    trl = {"model_name_or_path": model, "beta": beta, "num_generations": group, "max_completion_length": response_len,
           "per_device_train_batch_size": micro_batch, "generation_batch_size": n,
           "gradient_accumulation_steps": max(1, n // (micro_batch * gpus)),
           "env": {"CUDA_VISIBLE_DEVICES": ",".join(map(str, range(gpus)))}}
    nemo = {"defaults": str(CONFIGS / "nemo-rl" / "grpo_math_1B.yaml"),
            "grpo": {"num_prompts_per_step": prompts, "num_generations_per_prompt": group},
            "loss_fn": {"reference_policy_kl_penalty": beta},
            "policy": {"model_name": model, "train_global_batch_size": n, "train_micro_batch_size": micro_batch,
                       "max_total_sequence_length": prompt_len + response_len,
                       "generation": {"max_new_tokens": response_len}},
            "cluster": {"num_nodes": nodes, "gpus_per_node": 8}}
    areal = {"cluster": {"n_nodes": nodes, "n_gpus_per_node": 8},
             "rollout": {"backend": f"sglang:d{gpus // 2}", "max_head_offpolicyness": 2},
             "gconfig": {"n_samples": group, "max_new_tokens": response_len},
             "ref": {"scheduling_strategy": {"type": "colocation", "target": "actor"}},
             "actor": {"backend": f"fsdp:d{gpus // 2}", "path": model, "ppo_n_minibatches": 1, "kl_ctl": beta,
                       "mb_spec": {"max_tokens_per_mb": micro_batch * (prompt_len + response_len)}},
             "train_dataset": {"batch_size": prompts, "max_length": prompt_len}}
    return {"verl": "verl:" + dump("verl.yaml", verl), "openrlhf": "openrlhf:" + openrlhf,
            "trl": "trl:" + dump("trl.yaml", trl), "nemo-rl": "nemo-rl:" + dump("nemo-rl.yaml", nemo),
            "areal": "areal:" + dump("areal.yaml", areal)}


def same_workload_predictions(model: str = "Qwen/Qwen2.5-7B-Instruct", gpus: int = 64, prompts: int = 512,
                              group: int = 8, prompt_len: int = 512, response_len: int = 1024, micro_batch: int = 4,
                              beta: float = 0.0, hardware: str | None = None) -> list[dict]:
    """One row per framework (the :func:`example_predictions` row, ``config`` = what the framework was told):
    the same GRPO workload (KL coefficient ``beta`` in each framework's own key; 0 drops the reference) under each
    framework's default placement and mode (module docstring)."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="rlm-same-workload-") as tmp:
        for fw, spec in framework_configs(model, gpus, prompts, group, prompt_len, response_len, micro_batch,
                                          Path(tmp), beta).items():
            imp = import_from(spec, hardware=hardware)
            row = predict_imported(imp).row()
            row["config"] = f"{fw} defaults (rlm_lab.frameworks.importers.same_workload)"
            row["hardware"] = imp.config["hardware"]
            rows.append(row)
    return rows
