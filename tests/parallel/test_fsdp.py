"""FSDP2 as ZeRO-2 (reshard after forward off) and ZeRO-3 (on): same result as one process, sharded
state, and counted all-gather/reduce-scatter bytes equal to the formulas (ZeRO-3 = 1.5x DDP)."""

import pytest

from rlm_lab.parallel.bench.measure import TOLERANCE, within_tolerance
from rlm_lab.parallel.predict import comm_mismatches, layout_of, predicted_comm


pytestmark = [pytest.mark.dist, pytest.mark.slow]


@pytest.fixture(scope="module")
def results(two_rank_results):
    return [two_rank_results[k] for k in ['dp2-zero2', 'dp2-zero3']]


@pytest.mark.parametrize("i", [0, 1])
def test_fsdp_matches_single_process(results, i, nano_trainable):
    assert within_tolerance(results[i]["check"]) and results[i]["check"]["n_grads"] == nano_trainable, (results[i]["check"], TOLERANCE)


@pytest.mark.parametrize("i", [0, 1])
def test_fsdp_bytes_equal_prediction(results, i):
    assert comm_mismatches(predicted_comm(layout_of(results[i]), "nano", 8, 16), results[i]["comm"]) == []


def test_zero3_moves_one_and_a_half_times_zero2(results):
    z2, z3 = (sum(k["wire_bytes"] for k in r["comm"].values()) for r in results)
    assert z3 == pytest.approx(1.5 * z2)


def test_fsdp_shards_params_grads_and_optimizer_state(results):
    for r in results:
        mems = [p["memory"] for p in r["per_rank"]]
        full = 355584  # nano: 88,896 fp32 parameters
        assert sum(m["params"] for m in mems) == full  # dims divide by 2: no padding
        assert all(m["optimizer"] == 2 * m["params"] for m in mems)
