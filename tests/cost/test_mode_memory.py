"""Memory per execution mode (the survey arXiv 2608.27046 Sec. 4.5, App. B.4): the shadow copy of an overlapping mode
on the rollout set and the hybrid reshard's tensor buffer, counted by hand on the micro model."""

from rlm_lab.cost.mode_memory import mode_memory, mode_memory_line
from rlm_lab.cost.placement import predict_placement
from rlm_lab.cost.placement_spec import Cluster, colocated, disaggregated, hybrid

CL = Cluster(4, "cpu")
WL = dict(prompts=4, group_size=2, prompt_len=8, response=8)
N, V, H = 341_632, 52, 128          # micro: parameters, vocabulary, hidden size; fp32 (4 bytes)


def _pp(placement):
    return predict_placement(placement, "micro", "grpo", WL, "cpu-2core-epyc", CL)


def test_shadow_copy_only_for_overlapping_modes_on_the_rollout_set():
    pp = _pp(disaggregated(CL, "grpo"))
    sync, off = mode_memory(pp, "sync", "micro"), mode_memory(pp, "one_step_off", "micro")
    assert all(m.shadow == 0 for m in sync.values())
    assert off["rollout"].shadow == N * 4 and off["train"].shadow == 0
    assert off["rollout"].total == off["rollout"].peak + N * 4
    assert "rollout: +" in mode_memory_line(off, "one_step_off")


def test_reshard_buffer_on_a_hybrid_set():
    pp = _pp(hybrid(CL, "grpo", gen_tp=2))
    (m,) = mode_memory(pp, "sync", "micro").values()
    assert m.reshard == V * H * 4 / 2 and m.shadow == 0
    (c,) = mode_memory(_pp(colocated(CL, "grpo")), "async", "micro").values()
    assert c.reshard == 0 and c.shadow == N * 4               # colocated: the rollout shares the one set


def test_fits_turns_false_when_the_extra_does_not():
    pp = _pp(disaggregated(CL, "grpo"))
    m = mode_memory(pp, "async", "micro")["rollout"]
    assert m.fits
    from dataclasses import replace
    tight = replace(m, capacity=m.peak + m.shadow / 2)
    assert not tight.fits
