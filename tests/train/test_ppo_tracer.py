"""The stage tracer on PPO's critic: the critic's backward goes through ``accelerator.backward`` (so that fp16
scales it) and the tracer, which times that call as the actor's backward, attributes it to ``critic_update`` when
it runs inside the critic-update span, without the training code doing anything for the tracer."""

import time

import pytest
import torch

from rlm_lab.stages import Stage
from rlm_lab.train.tracer import tracer_class


class _Accelerator:
    process_index, device = 0, torch.device("cpu")

    def backward(self, seconds):
        time.sleep(seconds)


class _Trainer:
    accelerator = _Accelerator()


class _State:
    global_step = 1


def test_critic_backward_is_part_of_critic_update_not_actor_backward():
    trainer = _Trainer()
    tr = tracer_class()(trainer, out_dir=None)
    tr.on_train_begin(None, _State, None)  # installs the accelerator.backward hook
    try:
        tr.on_step_begin(None, _State, None)
        tr._open_profiled("PPOTrainer.compute_loss")
        tr._open_profiled("PPOTrainer.critic_update")
        trainer.accelerator.backward(0.03)  # the critic's backward, inside its update span
        tr._close("PPOTrainer.critic_update")
        tr._close("PPOTrainer.compute_loss")
        trainer.accelerator.backward(0.01)  # the actor's, as the Trainer calls it after compute_loss
        tr.on_step_end(None, _State, None)
    finally:
        tr.on_train_end(None, _State, None)  # unhooks
    (row,) = tr.steps
    backwards = [sp for sp in row["spans"] if sp["name"] == "accelerator.backward"]
    assert [(sp["stage"], sp["counted"]) for sp in backwards] == [(Stage.CRITIC_UPDATE.value, False),
                                                                   (Stage.ACTOR_BACKWARD.value, True)]
    assert row["stages"]["critic_update"] >= 0.03
    assert 0.01 <= row["stages"]["actor_backward"] < 0.03  # the critic's 30 ms are not in it
    compute_loss = next(sp for sp in row["spans"] if sp["name"] == "PPOTrainer.compute_loss")
    assert compute_loss["self_s"] == pytest.approx(compute_loss["dur_s"] - row["stages"]["critic_update"])
