"""chapter 6's learning curve callback: evaluates at step 0, every ``every`` steps and at the last step, once per
step, and keeps each evaluation's seconds out of the curve's wall clock."""

import types

from transformers import TrainerCallback

from rlm_lab.asynchrony import curves
from rlm_lab.train.config import RunConfig


class _Model:
    training = True

    def eval(self):
        self.training = False

    def train(self, mode=True):
        self.training = mode


def test_eval_curve_points_and_wall_clock(monkeypatch):
    seen = []

    def fake_evaluate(model, tok, task, rows, max_new_tokens, batch_size):
        assert not model.training and len(rows) == 3 and (max_new_tokens, batch_size) == (7, 2)
        seen.append(len(seen))
        return {"accuracy": 0.5, "format_rate": 1.0}

    monkeypatch.setattr(curves, "evaluate", fake_evaluate)
    cb = curves.make_eval_curve(RunConfig.task, every=2, problems=3, max_new_tokens=7, batch_size=2)
    assert isinstance(cb, TrainerCallback) and isinstance(cb, curves.EvalCurveCore)
    assert type(cb) is type(curves.make_eval_curve(RunConfig.task, 2, 3, 7, 2))  # one class per process
    model = _Model()
    cb.trainer = types.SimpleNamespace(accelerator=types.SimpleNamespace(unwrap_model=lambda m: m), model=model,
                                       processing_class=None)
    state = types.SimpleNamespace(global_step=0, max_steps=5)
    cb.on_train_begin(None, state, None)
    for step in range(1, 6):
        state.global_step = step
        cb.on_log(None, state, None, logs={})
    cb.on_log(None, state, None, logs={})  # a second log at the last step: no second evaluation
    assert [p["step"] for p in cb.points] == [0, 2, 4, 5]
    assert model.training  # the model is put back in training mode
    assert all(p["wall_s"] >= 0 for p in cb.points)
    rec = curves.curve_record(cb, every=2, problems=3)
    assert rec["eval_seconds"] == round(sum(p["eval_s"] for p in cb.points), 3)
