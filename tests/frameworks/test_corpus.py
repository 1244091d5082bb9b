"""The corpus of real framework configs (data/configs/corpus): every file named in SOURCES at a pinned commit, every
entry imported, priced or refused with the one-line reason kept (checked by hand once) as its expected outcome; at
least 40 entries from at least 6 frameworks, at least 90 % priced."""

from __future__ import annotations

from collections import Counter

import pytest

from rlm_lab.frameworks.importers.corpus import CORPUS, corpus_predictions, entries, sources, spec
from rlm_lab.frameworks.importers import import_from


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


def test_corpus_size_frameworks_and_share_priced(rows):
    fws = Counter(r["framework"] for r in rows)
    priced = sum(r["outcome"] == "priced" for r in rows)
    assert len(rows) >= 40 and len(fws) >= 6
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
