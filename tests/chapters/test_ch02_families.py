"""Chapter 2's table of the survey's three families (predicted): DPO has no generation and no generation chain,
holds what GRPO holds, and its paper column counts Algorithm 4's two sequences per pair."""

from rlm_lab.chapters.ch02_anatomy import families as FAM
from rlm_lab.cost.paper import dpo_work, paper_dims
from rlm_lab.cost.spec import model_spec


def test_families_table():
    rows = {r["family"]: r for r in FAM.families_table()}
    assert list(rows) == ["ppo", "grpo", "dpo"]
    dpo, grpo, ppo = rows["dpo"], rows["grpo"], rows["ppo"]
    assert dpo["gen_PFLOP"] == 0 and grpo["gen_PFLOP"] == ppo["gen_PFLOP"] > 0
    assert "decode" not in dpo["critical_path"] and "decode" in grpo["critical_path"]
    assert dpo["depth_s"] < grpo["depth_s"] / 5
    assert dpo["state_GiB_per_device"] == grpo["state_GiB_per_device"] < ppo["state_GiB_per_device"]
    p = paper_dims(model_spec(str(FAM.MODEL)))
    two = float(sum(dpo_work(p, FAM.B * FAM.K // 2, FAM.S, FAM.T).values())) / 1e15
    assert dpo["paper_PFLOP"] == two
    assert FAM.workload("dpo")["prompts"] * 2 == FAM.B * FAM.K    # the same scored sequences as GRPO
