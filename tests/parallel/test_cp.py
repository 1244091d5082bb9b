"""Context parallelism (zig-zag causal ring attention over P2P): same attention output, loss and gradients
as one process; K,V ring bytes equal to the formula; bad sequence lengths refused up front."""

import pytest

from rlm_lab.errors import RlmLabError
from rlm_lab.parallel import context_parallel as cp
from rlm_lab.parallel.bench import cp as bench_cp
from rlm_lab.parallel.bench.measure import TOLERANCE, within_tolerance
from rlm_lab.parallel.predict import comm_mismatches, layout_of, predicted_comm

TOL = 1e-5


@pytest.mark.parametrize("c", [1, 2, 4])
def test_zigzag_chunks_partition_the_sequence_with_equal_causal_work(c):
    seq = 8 * c
    parts = [cp.zigzag_positions(seq, c, r).tolist() for r in range(c)]
    assert sorted(p for part in parts for p in part) == list(range(seq))
    # causal work of a rank = sum over its queries of the keys they see (position + 1): equal on every rank
    assert len({sum(p + 1 for p in part) for part in parts}) == 1


def test_predicted_bytes_formula():
    # (c-1)/c · 2·b·s·n_kv·d_h·bytes per layer forward, same backward
    pred = cp.predicted_kv_bytes(batch=2, seq=64, kv_heads=4, head_dim=16, cp=4, layers=3)
    assert pred["fwd"] == pred["bwd"] == 3 * 3 / 4 * 2 * 2 * 64 * 4 * 16 * 4


def test_sequence_not_divisible_by_two_cp_fails_up_front():
    with pytest.raises(RlmLabError, match="multiple of 2 x cp = 4"):
        cp.check_cp(30, 2)
    with pytest.raises(RlmLabError, match="multiple of 2 x cp"):
        bench_cp.measure_cp("nano", world=2, seq=30)


@pytest.mark.dist
@pytest.mark.slow
def test_ring_attention_matches_single_process():
    # mini: Qwen2 with grouped-query attention (8 heads, 4 KV heads), 4 layers — K,V travel as 4 heads
    r = bench_cp.verify_cp("mini", world=2, batch=1, seq=32)
    assert r["attn_rel"] < TOL and r["grad_rel"] < TOL and r["loss_abs"] < 1e-5, r
    per_layer = 1 * 32 * 4 * 32 * 4  # (c-1)/c · 2·b·s·n_kv·d_h·4 bytes with c=2, d_h=256/8
    assert r["sent_bytes"] == [(r["predicted"]["fwd"], r["predicted"]["bwd"])] * 2 == [(4 * per_layer,) * 2] * 2


@pytest.mark.dist
@pytest.mark.slow
def test_measure_cp_counts_exact_ring_bytes():
    r = bench_cp.measure_cp("nano", world=2, steps=1, batch=1, seq=32)
    assert r["bytes_match"] and r["sent_bytes"] == r["predicted_bytes"]
    assert all(x["sends"] == 2 * 2 for x in r["per_rank"])  # 2 layers x (1 forward + 1 backward) ring step
    assert r["step_s"] > 0 and r["baseline_share_s"] > 0


@pytest.mark.dist
@pytest.mark.slow
def test_ring_attention_with_three_hops_matches_single_process(four_rank_results):
    """cp=4: each layer's K,V pass 3 hops around the ring (the 4-rank runs of chapter 4); the loss, every
    gradient and the parameters after 3 AdamW steps match one process, and the counted sends and the
    gradient all-reduce equal the formula (2·L·(c-1) ring messages of K,V / dK,dV per rank)."""
    r = four_rank_results["cp4"]
    assert r["layout"]["cp"] == 4 and len(r["per_rank"]) == 4
    for rank in r["per_rank"]:  # every rank's gradients and parameters, not only rank 0's
        c = rank["check"]
        assert within_tolerance(c) and c["n_grads"] == c["n_params"] == c["n_ref"], (c, TOLERANCE)
    assert comm_mismatches(predicted_comm(layout_of(r), "nano", 8, 32), r["comm"]) == []
    assert r["comm"]["send"]["calls"] == 2 * 2 * 3  # 2 layers x (forward K,V + backward dK,dV) x 3 hops
