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
