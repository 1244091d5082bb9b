"""The hybrid placement (``rlm_lab.placement.hybrid``: GRPO through TRL under DeepSpeed ZeRO-3, gathered for
generation) is the same algorithm as plain data parallelism, and its reshard moves what HybridFlow's formula says.

Independent check: the same 2 ranks (``rlm_lab.parallel.launch.spawn``, no Ray: the Ray wiring is what
``rlm-lab place --hybrid`` measures) first train the same GRPO config with the Trainer's plain DDP (no
DeepSpeed: every rank holds the whole model, gradients all-reduced), then with the hybrid rank's code; same
seed, same SFT start. Rewards of every step must be equal (step 2's come from the updated weights, so the
ZeRO-3 update must equal DDP's), losses within fp32 noise. The gather's bytes are checked against the
parameter shapes (each partitioned parameter padded to a multiple of the world size), counted independently.
DeepSpeed is optional (README); without it the CLI refuses with one line (tests/faults) and this is skipped.
"""

import pytest

pytest.importorskip("deepspeed")
pytestmark = pytest.mark.slow  # two 2-rank trainings in one spawn: ~25 s on 2 cores

STEPS = 2


def _both(rank, world, cfg_dict, model_path):
    import os

    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world))
    import tempfile

    from accelerate.state import AcceleratorState

    from rlm_lab.placement.hybrid import rank_config, train_rank
    from rlm_lab.train.rl import make_trainer
    from rlm_lab.tasks import ensure_data, parse_task
    from rlm_lab.train.config import from_dict

    cfg = from_dict(cfg_dict)
    task = parse_task(cfg.task)
    ddp_cfg = cfg.replace(batch_size=cfg.batch_size // world, extra={"ddp_timeout": 60})
    with tempfile.TemporaryDirectory() as scratch:
        trainer = make_trainer(ddp_cfg, model_path, ensure_data(task)["train"], task, scratch)
        trainer.train()
        ddp = {"type": str(trainer.accelerator.distributed_type),
               "logs": [r for r in trainer.state.log_history if "reward" in r]}
    AcceleratorState._reset_state(True)  # the next trainer builds its own (DeepSpeed) state on the same group
    model = trainer.accelerator.unwrap_model(trainer.model)
    shapes = {"numels": [p.numel() for p in model.parameters()], "hidden": model.config.hidden_size}
    hyb = train_rank({"cfg": rank_config(cfg, world, 60).to_dict(), "model_path": model_path})
    return {"ddp": ddp, "hybrid": hyb, **shapes}


@pytest.fixture(scope="module")
def runs(place_cfg):
    from rlm_lab.parallel.launch import spawn
    from rlm_lab.placement.runtime import _sft_checkpoint

    cfg = place_cfg.replace(rl_steps=STEPS)
    return spawn(_both, 2, args=(cfg.to_dict(), str(_sft_checkpoint(cfg))), timeout_s=120)


def test_hybrid_learns_what_plain_data_parallelism_learns(runs):
    for r in runs:
        ddp, hyb = r["ddp"], r["hybrid"]
        assert "MULTI_CPU" in ddp["type"] and hyb["parallelism"]["zero_stage"] == 3
        assert [x["reward"] for x in ddp["logs"]] == hyb["rewards"]
        assert len(hyb["rewards"]) == STEPS
        assert hyb["losses"] == pytest.approx([x["loss"] for x in ddp["logs"]], abs=1e-5)


def test_gather_moves_the_padded_partitions_and_release_moves_nothing(runs):
    """From the parameter shapes alone: DeepSpeed partitions each parameter into ceil(n / s) elements per rank
    (padded), except those of at most ``stage3_param_persistence_threshold`` elements (the Trainer's "auto":
    10 x hidden size), which stay replicated after their first gather. So the first gather's all-gather
    messages hold every parameter, the later ones only the partitioned ones; the release sends nothing."""
    world = len(runs)
    for r in runs:
        padded = [-(-n // world) * world * 4 for n in r["numels"]]  # fp32
        big = sum(b for n, b in zip(r["numels"], padded) if n > 10 * r["hidden"])
        rs = r["hybrid"]["reshard"]
        assert rs["gathers"] == STEPS
        assert rs["allgather_bytes_each_gather"] == [sum(padded)] + [big] * (STEPS - 1)
        assert rs["release"] == {}
        assert r["hybrid"]["shard_bytes"] * world == big  # each rank holds 1/s of the partitioned parameters
