"""Collective volumes: ring factors, gloo specifics, and hand-computed golden numbers for a 7B-class model."""

import pytest

from rlm_lab.cost import comm as C
from rlm_lab.cost.hardware import load_profile
from rlm_lab.errors import RlmLabError

GB = 1e9


def test_ring_factors():
    assert C.ring_factor("all_reduce", 4) == 1.5
    assert C.ring_factor("all_gather", 4) == C.ring_factor("reduce_scatter", 4) == 0.75
    assert C.ring_factor("all_to_all", 2) == 0.5
    assert C.ring_factor("send_recv", 8) == 1.0
    assert C.ring_factor("all_reduce", 1) == 0.0
    # gloo: FSDP2's reduce-scatter runs as an all-reduce (the torch profiler shows gloo:all_reduce for c10d reduce_scatter)
    assert C.ring_factor("reduce_scatter", 4, backend="gloo") == C.ring_factor("all_reduce", 4)
    with pytest.raises(RlmLabError, match="all_reduce"):
        C.ring_factor("allreduce", 2)


def test_paper_notes_3_7_golden():
    psi = 15.2 * GB  # bf16 gradients of a 7.6B model
    assert C.dp_allreduce_bytes(psi, 8) / GB == pytest.approx(26.6, abs=0.05)
    assert C.zero3_bytes(psi, 8) / GB == pytest.approx(39.9, abs=0.05)
    msg = C.tp_message_bytes(1, 4096, 3584)
    assert msg / 1e6 == pytest.approx(29.4, abs=0.05)
    assert C.bytes_per_rank("all_reduce", msg, 4) / 1e6 == pytest.approx(44.0, abs=0.1)
    assert C.tp_message_bytes(64, 1, 3584) / 1e3 == pytest.approx(459, abs=0.5)
    assert C.pp_bubble(4, 16) == pytest.approx(0.158, abs=0.001)
    assert C.cp_ring_bytes(32768, 4, 128, 4) / 1e6 == pytest.approx(50.3, abs=0.1)
    assert 28 * C.cp_ring_bytes(32768, 4, 128, 4) / GB == pytest.approx(1.41, abs=0.01)
    assert C.ep_all_to_all_bytes(8192, 8, 2048, 8) / GB == pytest.approx(0.235, abs=0.001)
    assert C.weight_sync_time(psi, 25 * GB) == pytest.approx(0.61, abs=0.005)
    assert C.tp_layer_allreduces() == 4 and C.tp_layer_allreduces(training=False) == 2


def test_collective_time_alpha_beta():
    prof = load_profile("h200")
    t_small = C.collective_time("all_reduce", 1e3, 8, prof)
    t_big = C.collective_time("all_reduce", 1e9, 8, prof)
    fit = prof.collective("all_reduce")
    # hand-derived: ring all-reduce over 8 ranks moves 2 * 7/8 = 1.75 x the bytes per rank
    assert t_small == pytest.approx(fit["alpha_s"] + fit["beta_s_per_byte"] * 1e3 * 1.75)
    assert t_big - t_small == pytest.approx(fit["beta_s_per_byte"] * (1e9 - 1e3) * 1.75)
    assert C.collective_time("all_reduce", 1e9, 1, prof) == 0.0
    # 16 ranks: 15 latency steps for the alpha fitted at world d0 (d0 - 1 steps), ring factor 2 * 15/16
    d0 = fit["world"]
    assert C.collective_time("all_reduce", 1e6, 16, prof) == pytest.approx(
        fit["alpha_s"] * 15 / (d0 - 1) + fit["beta_s_per_byte"] * 1e6 * 2 * 15 / 16)


def test_the_mechanisms_byte_breakdowns_add_up_to_the_formulas():
    """parallel/ breaks a step's collectives down by kind (what the counters see); their per-rank wire bytes add up
    to the one formula of cost.comm: ZeRO-3 = 3(d-1)/d Psi (two all-gathers and a reduce-scatter), DDP =
    2(d-1)/d Psi, and the ring-CP prediction is cost.comm.cp_ring_bytes per layer (an integer)."""
    from rlm_lab.parallel import context_parallel, data_parallel, fsdp

    groups = [4096, 1000, 72]
    for d in (2, 3, 8):
        z3 = fsdp.predicted_bytes(groups, d, zero=3)
        assert sum(v["wire_bytes"] for v in z3.values()) == pytest.approx(C.zero3_bytes(sum(groups), d), rel=1e-12)
        assert data_parallel.predicted_bytes(sum(groups), d)["all_reduce"]["wire_bytes"] == C.dp_allreduce_bytes(sum(groups), d)
    kv = context_parallel.predicted_kv_bytes(batch=2, seq=96, kv_heads=4, head_dim=16, cp=3, layers=5)
    # (c-1) blocks received x (K and V) x b x s/c x n_kv x d_h x 4 bytes x layers
    assert kv["fwd"] == (3 - 1) * 2 * 2 * (96 // 3) * 4 * 16 * 4 * 5 and isinstance(kv["fwd"], int)
    assert kv["fwd"] == pytest.approx(5 * C.cp_ring_bytes(96, 4, 16, 3, batch=2, dtype_bytes=4))
