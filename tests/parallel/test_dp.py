"""DDP and ZeRO-1 reproduce one process on the same batch; their counted bytes equal the formulas."""

import pytest

from rlm_lab.parallel.bench.measure import TOLERANCE, within_tolerance
from rlm_lab.parallel.predict import comm_mismatches, layout_of, predicted_comm


pytestmark = [pytest.mark.dist, pytest.mark.slow]


@pytest.fixture(scope="module")
def results(two_rank_results):
    return [two_rank_results[k] for k in ['dp2', 'dp2-zero1']]


def test_ddp_matches_single_process(results, nano_trainable):
    assert within_tolerance(results[0]["check"]) and results[0]["check"]["n_grads"] == nano_trainable, (results[0]["check"], TOLERANCE)


def test_ddp_all_reduces_exactly_the_gradient_bytes(results):
    r = results[0]
    assert comm_mismatches(predicted_comm(layout_of(r), "nano", 8, 16), r["comm"]) == []
    psi = r["memory"]["params"]
    assert r["comm"]["all_reduce"]["wire_bytes"] == 2 * (2 - 1) / 2 * psi  # ring 2(d-1)/d·Ψ


def test_zero1_matches_and_shards_optimizer_state(results, nano_trainable):
    dp, z1 = results
    assert within_tolerance(z1["check"]) and z1["check"]["n_grads"] == nano_trainable, (z1["check"], TOLERANCE)
    assert comm_mismatches(predicted_comm(layout_of(z1), "nano", 8, 16), z1["comm"]) == []
    opt = [r["memory"]["optimizer"] for r in z1["per_rank"]]
    # each rank keeps Adam state for its share of the parameters only (whole tensors, so not exactly half)
    assert sum(opt) == dp["memory"]["optimizer"] and max(opt) < dp["memory"]["optimizer"]


def _fake_trainer(dist_type, fsdp=False, ds_stage=None, procs=2, wrapped="DistributedDataParallel"):
    from types import SimpleNamespace as NS

    plugin = NS(zero_stage=ds_stage) if ds_stage else None
    acc = NS(distributed_type=NS(value=dist_type), num_processes=procs, state=NS(deepspeed_plugin=plugin))
    return NS(accelerator=acc, model_wrapped=NS() if wrapped is None else type(wrapped, (), {})(),
              is_fsdp_enabled=fsdp, is_deepspeed_enabled=ds_stage is not None)


def test_trainer_fsdp_that_became_ddp_is_refused():
    from rlm_lab.errors import RlmLabError
    from rlm_lab.parallel.bench.e2e import require

    ddp = _fake_trainer("MULTI_CPU")
    assert require(ddp, "ddp")["wrapped"] == "DistributedDataParallel"
    with pytest.raises(RlmLabError, match="asked for fsdp but the Trainer runs .*MULTI_CPU.*plain DDP"):
        require(ddp, "fsdp")
    assert require(_fake_trainer("DEEPSPEED", ds_stage=3, wrapped="DeepSpeedEngine"), "zero3")["zero_stage"] == 3
    with pytest.raises(RlmLabError, match="asked for zero2"):
        require(_fake_trainer("DEEPSPEED", ds_stage=3), "zero2")
