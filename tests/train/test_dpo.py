"""DPO through TRL's DPOTrainer on the verifiable tasks' preference pairs: every pair is verified (chosen correct,
rejected wrong, same prompt); two steps on the nano model start at the loss log 2 (policy = reference, so the
log-ratio difference is 0 and -log sigma(0) = log 2), keep the reference frozen and move the policy."""

import math
import random

import pytest
import torch

from rlm_lab.errors import RlmLabError
from rlm_lab.models.zoo import build_model
from rlm_lab.tasks import get_task
from rlm_lab.train.dpo import preference_pairs, wrong_answer, dpo_trainer


@pytest.fixture(scope="module")
def task_rows():
    t = get_task("arithmetic")
    rng = random.Random(0)
    return t, [t.sample(rng) for _ in range(8)]


def test_pairs_are_verified(task_rows):
    t, rows = task_rows
    pairs = preference_pairs(t, rows)
    assert len(pairs) == len(rows)
    for p, row in zip(pairs, rows):
        assert p["prompt"] == row["prompt"] and t.is_correct(p["chosen"], row) and not t.is_correct(p["rejected"], row)
        assert len(p["rejected"]) == len(p["chosen"])           # one character changed: same form
    assert preference_pairs(t, rows) == pairs                    # deterministic


def test_no_pair_is_one_error(task_rows):
    t, rows = task_rows
    bad = [dict(r, answer="") for r in rows]
    assert wrong_answer(t, bad[0], random.Random(0)) is None
    with pytest.raises(RlmLabError, match="no preference pair"):
        preference_pairs(t, bad)


@pytest.mark.parametrize("precompute", [False, True])
def test_two_steps(task_rows, tmp_path, precompute):
    t, rows = task_rows
    model, tok = build_model("nano")
    before = [p.detach().clone() for p in model.parameters()]
    tr = dpo_trainer(model, tok, preference_pairs(t, rows), tmp_path, steps=2, precompute_ref_log_probs=precompute)
    ref = [p.detach().clone() for p in tr.ref_model.parameters()]
    tr.train()
    losses = [h["loss"] for h in tr.state.log_history if "loss" in h]
    assert losses[0] == pytest.approx(math.log(2), abs=1e-6)
    assert all(torch.equal(a, b) for a, b in zip(ref, tr.ref_model.parameters()))
    assert any(not torch.equal(a, b.detach()) for a, b in zip(before, tr.model.parameters()))
