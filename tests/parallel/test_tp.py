"""Tensor parallelism with and without sequence parallelism on the HF Llama modules: same result as one
process, and the counted collectives equal those derived from the plan."""

import pytest

from rlm_lab.parallel.bench.measure import TOLERANCE, within_tolerance
from rlm_lab.parallel.predict import comm_mismatches, layout_of, predicted_comm


pytestmark = [pytest.mark.dist, pytest.mark.slow]


@pytest.fixture(scope="module")
def results(two_rank_results):
    return [two_rank_results[k] for k in ['tp2', 'tp2-sp']]


@pytest.mark.parametrize("i", [0, 1])
def test_tp_matches_single_process(results, i, nano_trainable):
    assert within_tolerance(results[i]["check"]) and results[i]["check"]["n_grads"] == nano_trainable, (results[i]["check"], TOLERANCE)


@pytest.mark.parametrize("i", [0, 1])
def test_tp_collectives_equal_the_plan(results, i):
    assert comm_mismatches(predicted_comm(layout_of(results[i]), "nano", 8, 16), results[i]["comm"]) == []


def test_plain_tp_is_two_forward_and_five_backward_all_reduces_per_layer(results):
    phases = results[0]["comm_by_phase"]
    act = 8 * 16 * 64 * 4  # b·s·h fp32
    assert phases["forward"]["all_reduce"] == {"calls": 4, "bytes": 4 * act, "wire_bytes": 4 * act, "groups": [2]}
    assert phases["backward"]["all_reduce"]["calls"] == 10


def test_sp_turns_layer_all_reduces_into_gather_scatter_pairs(results):
    fwd = results[1]["comm_by_phase"]["forward"]
    assert "all_reduce" not in fwd and fwd["reduce_scatter"]["calls"] == 5


@pytest.mark.parametrize("name", ["dp2-tp2-zero2", "dp2-tp2-zero3-sp"])
def test_dp_x_tp_mesh_matches_and_counts_exactly(four_rank_results, name, nano_trainable):
    r = four_rank_results[name]
    assert within_tolerance(r["check"]) and r["check"]["n_grads"] == nano_trainable, (r["check"], TOLERANCE)
    # FSDP2 over dp shards each rank's TP shard; TP collectives run on the local batch of 4
    assert comm_mismatches(predicted_comm(layout_of(r), "nano", 8, 16), r["comm"]) == []
