"""Configs as practitioners write them: run scripts read the way bash reads their plain parts (checked against bash
itself where it is installed), verl's Hydra composition (the script's overrides onto verl's tree, by Hydra), verl V1
modes and standalone rollout pools, OpenRLHF's pre-2026 flag names, and the option list generated from verl's schema."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from rlm_lab.errors import RlmLabError
from rlm_lab.frameworks.importers import import_from, predict_imported
from rlm_lab.frameworks.importers.common import CONFIGS
from rlm_lab.frameworks.importers.hydra_compose import compose, option_names
from rlm_lab.frameworks.importers.shell import commands

SCRIPT = r"""#!/usr/bin/env bash
set -xeuo pipefail
DEVICE=${DEVICE:-$(python3 -c 'import torch_npu' 2>/dev/null && echo npu || echo gpu)}
NNODES=${NNODES:-1}
train_batch_size=${TRAIN_BATCH_SIZE:-64}
max_prompt_length=$((256 * 2))
EXTRA=()
case "${DEVICE}" in
    gpu | cuda)
        rollout_tp=2   # tp
        ;;
    npu)
        rollout_tp=4
        train_batch_size=16
        EXTRA+=(actor_rollout_ref.actor.ulysses_sequence_parallel_size=4)
        ;;
esac
if [ "${NNODES}" -gt 1 ]; then
    train_batch_size=1024
fi
DATA=(
    algorithm.adv_estimator=grpo   # a comment inside an array
    data.train_batch_size=${train_batch_size}
    data.max_prompt_length=${max_prompt_length}
    "data.max_response_length=1024"
)
python3 -m verl.trainer.main_ppo \
    "${DATA[@]}" \
    actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct \
    actor_rollout_ref.actor.ppo_mini_batch_size=16 \
    actor_rollout_ref.rollout.n=4 actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.tensor_model_parallel_size=${rollout_tp} \
    trainer.logger='["console","wandb"]' \
    trainer.n_gpus_per_node=8 trainer.nnodes=${NNODES} \
    "${EXTRA[@]}" "$@"
"""


def _words(text):
    (words, _), = [c for c in commands(text, "t") if "-m" in c[0]]
    return words


def test_script_expands_as_bash_does():
    w = _words(SCRIPT)
    assert w[:3] == ["python3", "-m", "verl.trainer.main_ppo"]
    # the probe for torch_npu taken as failing (gpu branch), arithmetic, the array one word per element, the comment
    # inside it dropped, "${EXTRA[@]}" and "$@" no words at all, single quotes kept literal
    assert w[3:7] == ["algorithm.adv_estimator=grpo", "data.train_batch_size=64", "data.max_prompt_length=512",
                      "data.max_response_length=1024"]
    assert "actor_rollout_ref.rollout.tensor_model_parallel_size=2" in w
    assert 'trainer.logger=["console","wandb"]' in w and w[-1] == "trainer.nnodes=1" and "" not in w


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash to compare with")
def test_script_expansion_matches_bash_itself(tmp_path):
    # an independent computation: bash runs the same script with python3 replaced by a printer of its arguments
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python3").write_text("#!/bin/sh\nif [ \"$1\" = -c ]; then exit 1; fi\nprintf '%s\\n' \"$@\"\n")
    (fake / "python3").chmod(0o755)
    (tmp_path / "run.sh").write_text(SCRIPT)
    out = subprocess.run(["bash", str(tmp_path / "run.sh")], capture_output=True, text=True, timeout=30,
                         env={"PATH": f"{fake}:/usr/bin:/bin"}).stdout.splitlines()
    assert out == _words(SCRIPT)[1:]


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash to compare with")
def test_pipes_redirections_and_lists_end_the_command_as_in_bash(tmp_path):
    # verl's newer scripts end with `... "$@" 2>&1 | tee logs/X.log` (11 of verl's 109 example scripts at 1dda039
    # were refused on the '2>&1' word): the command stops at the redirection and the pipe, as bash runs it
    script = SCRIPT.replace("python3 -m verl.trainer.main_ppo", "mkdir -p logs && python3 -m verl.trainer.main_ppo")
    script = script.rstrip() + " 2>&1 | tee logs/run.log > /dev/null\n"
    cmds = [c for c, _ in commands(script, "t")]
    assert ["mkdir", "-p", "logs"] not in cmds and ["tee", "logs/run.log"] in cmds   # mkdir is a shell keyword here
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python3").write_text("#!/bin/sh\nif [ \"$1\" = -c ]; then exit 1; fi\nprintf '%s\\n' \"$@\"\n")
    (fake / "python3").chmod(0o755)
    (tmp_path / "run.sh").write_text(script)
    subprocess.run(["bash", str(tmp_path / "run.sh")], capture_output=True, text=True, timeout=30, cwd=tmp_path,
                   env={"PATH": f"{fake}:/usr/bin:/bin"})
    assert (tmp_path / "logs" / "run.log").read_text().splitlines() == _words(script)[1:]
    assert _words(script)[-1] == "trainer.nnodes=1"


def test_script_with_env_override_takes_the_npu_branch(tmp_path):
    # the npu branch adds Ulysses sp 4 (priced as the set's sp since issue 38's third pass); the gpu branch has none
    p = tmp_path / "run.sh"
    p.write_text(SCRIPT.replace("DEVICE=${DEVICE:-", "DEVICE=npu #"))
    (s,) = import_from(f"verl:{p}").config["placement"]["sets"]
    assert s.get("sp") == 4 and s["dp"] == 8
    p.write_text(SCRIPT)
    (s,) = import_from(f"verl:{p}").config["placement"]["sets"]
    assert "sp" not in s


def test_verl_script_composed_by_hydra_maps_by_hand(tmp_path):
    p = tmp_path / "run.sh"
    p.write_text(SCRIPT)
    imp = import_from(f"verl:{p}")
    wl = imp.config["workload"]
    assert (wl["prompts"], wl["group_size"], wl["prompt_len"], wl["minibatches"]) == (64, 4, 512, 4)
    (s,) = imp.config["placement"]["sets"]
    assert (s["devices"], s["zero"], s["gen_tp"]) == (8, 3, 2)
    # verl's own defaults reach the import through the composition: ppo_epochs 1, vLLM, memory fraction 0.5
    assert wl["epochs"] == 1 and imp.engine["memory_fraction"] == 0.5 and imp.engine["max_num_seqs"] == 256
    # only what the script wrote is sorted into ignored / unknown; Hydra refuses keys verl does not have
    assert "trainer.logger" in imp.ignored and imp.unknown == []
    assert any(a.startswith("composed by Hydra: ppo_trainer with the script's 12 overrides") for a in imp.assumed)
    p.write_text(SCRIPT.replace(" actor_rollout_ref.rollout.name=vllm", ""))
    with pytest.raises(RlmLabError, match=r"actor_rollout_ref.rollout.name is mandatory in verl \(\?\?\? in its config\)"):
        import_from(f"verl:{p}")
    bad = tmp_path / "bad.sh"
    bad.write_text("python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B no.such.key=1\n")
    with pytest.raises(RlmLabError, match=r"Hydra cannot compose it as verl would: Could not override 'no.such.key'"):
        import_from(f"verl:{bad}")


def test_hydra_resolves_oc_select_and_config_groups():
    d, nulls = compose("ppo_trainer", ["model_engine=megatron", "trainer.n_gpus_per_node=4"], "t")
    assert d["actor_rollout_ref"]["actor"]["strategy"] == "megatron"
    # rollout.n_gpus_per_node is ${oc.select:trainer.n_gpus_per_node,8} in verl's rollout.yaml
    assert d["actor_rollout_ref"]["rollout"]["n_gpus_per_node"] == 4
    assert "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu" in nulls


def _v1(tmp_path, extra):
    p = tmp_path / "v1.sh"
    p.write_text("python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo "
                 "actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct data.train_batch_size=64 "
                 "actor_rollout_ref.actor.ppo_mini_batch_size=16 actor_rollout_ref.rollout.n=8 trainer.nnodes=2 "
                 "actor_rollout_ref.rollout.name=vllm "
                 + extra + "\n")
    return import_from(f"verl:{p}")


def test_verl_v1_separate_async_is_two_pools_and_async(tmp_path):
    imp = _v1(tmp_path, "trainer.v1.trainer_mode=separate_async actor_rollout_ref.rollout.nnodes=2")
    sets = {s["name"]: s["devices"] for s in imp.config["placement"]["sets"]}
    assert sets == {"rollout": 16, "train": 16} and (imp.mode, imp.eta) == ("async", 8)   # V1's default threshold
    imp = _v1(tmp_path, "trainer.v1.trainer_mode=separate_async actor_rollout_ref.rollout.nnodes=2 "
                        "trainer.v1.sampler.max_off_policy_threshold=null")
    assert imp.eta is None and any("no version control" in a for a in imp.assumed)
    with pytest.raises(RlmLabError, match="separate_async needs a standalone rollout pool"):
        _v1(tmp_path, "trainer.v1.trainer_mode=separate_async")
    with pytest.raises(RlmLabError, match="a standalone rollout pool is used by separate_async only"):
        _v1(tmp_path, "actor_rollout_ref.rollout.nnodes=1")
    imp = _v1(tmp_path, "trainer.v1.trainer_mode=colocate_async")
    assert imp.mode == "async" and len(imp.config["placement"]["sets"]) == 1
    assert "nothing overlaps" in predict_imported(imp).mode_note


def test_verl_megatron_engine_group_keeps_generation_tp_and_ep(tmp_path):
    imp = _v1(tmp_path, "model_engine=megatron actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2 "
                        "actor_rollout_ref.rollout.tensor_model_parallel_size=4")
    (s,) = imp.config["placement"]["sets"]
    # Megatron tp 2 kept (dropped before), distributed optimizer; the engine's tp 4 priced at tp 2, and said
    assert (s["tp"], s["zero"], imp.config["placement"]["reshard"]) == (2, 1, False)
    assert any("not the engine's tp 4" in a for a in imp.assumed)
    assert "model_engine" in imp.used


def test_use_rollout_log_probs_drops_the_old_log_prob_recompute(tmp_path):
    imp = _v1(tmp_path, "+actor_rollout_ref.actor.use_rollout_log_probs=true")
    assert imp.config["workload"]["recompute_old"] is False
    base = _v1(tmp_path, "")
    assert "recompute_old" not in base.config["workload"]
    assert predict_imported(imp).sync_step_s < predict_imported(base).sync_step_s


def test_verl_sft_script_is_refused_naming_it(tmp_path):
    p = tmp_path / "sft.sh"
    p.write_text("torchrun --nproc_per_node=8 -m verl.trainer.sft_trainer data.train_files=x\n")
    with pytest.raises(RlmLabError, match=r"launches verl.trainer.sft_trainer: an SFT run"):
        import_from(f"verl:{p}")


def test_options_list_is_generated_from_verls_composed_configs():
    text = (CONFIGS / "verl" / "options.txt").read_text().split("\n# older\n")[0]
    listed = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    assert listed == option_names()
    for key in ("trainer.use_v1", "trainer.v1.trainer_mode", "actor_rollout_ref.rollout.nnodes",
                "critic.fsdp.param_offload", "model_engine"):
        assert key in listed


def test_openrlhf_pre_2026_names_are_mapped_and_said(tmp_path):
    p = tmp_path / "old.sh"
    p.write_text("set -x\nN=8\npython3 -m openrlhf.cli.train_ppo_ray \\\n --actor_num_gpus_per_node $N \\\n"
                 " --pretrain Qwen/Qwen2.5-7B-Instruct --advantage_estimator group_norm --vllm_num_engines 8 \\\n"
                 " --colocate_all_models --zero_stage 3 --rollout_batch_size 64 --n_samples_per_prompt 8 \\\n"
                 " --train_batch_size 128 --micro_train_batch_size 2 --prompt_max_len 512 --generate_max_len 1024\n")
    imp = import_from(f"openrlhf:{p}")
    wl = imp.config["workload"]
    assert (wl["prompts"], wl["group_size"], wl["prompt_len"], wl["micro_batch"]) == (64, 8, 512, 2)
    assert imp.config["placement"]["name"] == "hybrid"
    assert "--colocate_all_models read as --train.colocate_all (OpenRLHF's pre-2026 name)" in imp.assumed
    assert any("--prompt_max_len 512 (pre-2026) read as --data.max_len 1536" in a for a in imp.assumed)


# ---- TRL, NeMo-RL, the model map, advise --from and the prompt cap ---------------------------------------------
TRL_QS = CONFIGS / "trl" / "grpo-qwen2.5-0.5b-quickstart.yaml"


def test_trl_field_lists_match_trls_dataclasses():
    trl = pytest.importorskip("trl")
    import dataclasses

    from rlm_lab.frameworks.importers.trl import ASYNC_ONLY, SFT_ONLY
    from trl.experimental.async_grpo import AsyncGRPOConfig

    grpo = {f.name for f in dataclasses.fields(trl.GRPOConfig)}
    sft = {f.name for f in dataclasses.fields(trl.SFTConfig)}
    asy = {f.name for f in dataclasses.fields(AsyncGRPOConfig)}
    assert set(SFT_ONLY) <= sft - grpo
    assert set(ASYNC_ONLY) - {"vllm_server_base_url"} <= asy - grpo and "vllm_server_base_url" in asy
    listed = {ln.split()[0] for ln in (CONFIGS / "trl" / "options.txt").read_text().splitlines()
              if ln and not ln.startswith("#")}
    assert grpo <= listed and (asy - grpo) <= listed


def test_trl_accelerate_config_sets_processes_zero_and_offload(tmp_path):
    a = tmp_path / "a.yaml"
    a.write_text("distributed_type: FSDP\nnum_processes: 4\nfsdp_config: {fsdp_sharding_strategy: SHARD_GRAD_OP, "
                 "fsdp_offload_params: true}\n")
    imp = import_from(f"trl:{TRL_QS}+{a}")
    (s,) = imp.config["placement"]["sets"]
    assert (s["devices"], s["zero"]) == (4, 2) and imp.config["workload"]["offload"] == ["params", "optimizer"]
    assert "accelerate config a.yaml: 4 processes, FSDP (ZeRO-2), offload params, optimizer" in imp.assumed


def test_trl_async_grpo_config_is_async_on_a_vllm_server(tmp_path):
    c = tmp_path / "c.yaml"
    c.write_text("model_name_or_path: Qwen/Qwen2.5-0.5B\nmax_staleness: 3\nvllm_serve: {tensor_parallel_size: 2}\n")
    imp = import_from(f"trl:{c}")
    sets = {s["name"]: s for s in imp.config["placement"]["sets"]}
    assert (imp.mode, imp.eta) == ("async", 3) and sets["rollout"]["tp"] == 2 and set(sets) == {"rollout", "train"}


def test_nemo_megatron_moe_recipe_keeps_tp_and_ep():
    from rlm_lab.frameworks.importers.corpus import spec

    imp = import_from(spec({"file": "nemo-rl/examples/configs/grpo_math_qwen30ba3b_megatron.yaml"}))
    (s,) = imp.config["placement"]["sets"]
    # megatron_cfg: tensor_model_parallel_size 2, expert_model_parallel_size 8, distributed optimizer (ZeRO-1)
    assert (s["tp"], s.get("ep"), s["zero"]) == (2, 8, 1)
    assert predict_imported(imp).fits


def test_every_shipped_model_config_is_reachable_by_a_hub_id():
    from rlm_lab.frameworks.importers.common import MODEL_MAP, MODELS

    shipped = {p.name.removesuffix(".config.json") for p in MODELS.glob("*.config.json")}
    assert shipped <= set(MODEL_MAP.values())
    for hub in ("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", "Qwen/Qwen3-0.6B", "Qwen/Qwen3-30B-A3B"):
        imp = import_from(f"trl:{TRL_QS}", model=hub)
        assert imp.config["model"].endswith(f"{MODEL_MAP[hub.lower()]}.config.json")


def test_advise_marks_changes_inside_the_validated_band():
    from rlm_lab.frameworks.importers.advice import advise_imported, error_band, format_advice, indistinguishable

    imp = import_from(f"verl:{CONFIGS / 'verl' / 'grpo-qwen2-7b-gsm8k.yaml'}")
    adv = advise_imported(imp)
    kinds = {c.kind for c in adv.ranked}
    assert {"micro_batch", "offload", "memory_fraction", "max_num_seqs"} <= kinds
    band, _ = error_band()
    assert band is not None
    for c in adv.ranked:
        ratio = c.prediction.step_s / adv.baseline.step_s if c.fits else None
        assert indistinguishable(adv, c) == (ratio is not None and abs(ratio - 1) < band)
    text = format_advice(adv, 20)
    assert text.count("[not distinguishable]") == sum(indistinguishable(adv, c) for c in adv.ranked[:20])


def test_prompt_cap_is_said_with_the_steps_sensitivity():
    from rlm_lab.frameworks.importers.common import format_import_prediction

    imp = import_from(f"verl:{CONFIGS / 'verl' / 'grpo-qwen2-7b-gsm8k.yaml'}")
    assert imp.prompt_cap == "data.max_prompt_length"
    assert any(a.startswith("every prompt 512 tokens long: data.max_prompt_length is a cap") for a in imp.assumed)
    ip = predict_imported(imp)
    half = predict_imported(imp.with_changes(workload={"prompt_len": 256}))
    pct = f"{100 * (1 - half.step_s / ip.step_s):.0f} % less"
    assert pct in format_import_prediction(ip) and half.step_s < ip.step_s


def test_areal_colocated_rollout_is_one_set(tmp_path):
    text = (CONFIGS / "areal" / "gsm8k_grpo.yaml").read_text()
    c = tmp_path / "c.yaml"
    c.write_text(text.replace("\nrollout:\n", "\nrollout:\n  scheduling_strategy: {type: colocation, target: actor}\n", 1))
    imp = import_from(f"areal:{c}")
    (s,) = imp.config["placement"]["sets"]
    assert imp.config["placement"]["reshard"] and s["zero"] == 3 and "rollout" in imp.config["placement"]["roles"]
    assert "nothing overlaps" in predict_imported(imp).mode_note    # AReaL's async on shared GPUs overlaps nothing
