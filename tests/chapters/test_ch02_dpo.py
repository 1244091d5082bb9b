"""Chapter 2's DPO case: the profiled DPOTrainer's stages under the tracer (one reference pass per step, nested in
the training forward and counted apart), the prediction written into the record before training on the shapes
TRL tokenized (checked against the tokenizer directly), and the table refusing a prediction made afterwards."""

import json

import pytest

from rlm_lab.chapters.ch02_anatomy import dpo as D
from rlm_lab.errors import RlmLabError
from rlm_lab.stages import Stage

CASE = D.DpoCase(model="nano", pairs=4, steps=3, warmup=1)


@pytest.fixture(scope="module")
def record(tmp_path_factory):
    return D.run_dpo_case(CASE, "smoke", tmp_path_factory.mktemp("dpo") / "ch02_dpo")


def test_stages_traced(record):
    stages = record.results["trace"]["stages"]
    assert set(stages) == {s.value for s in D.STAGES} | {"other"}
    assert stages[Stage.REF_LOGPROB.value]["calls"] == CASE.steps - CASE.warmup   # one reference pass per step
    for line in (record.dir / "spans.jsonl").read_text().splitlines():
        spans = {s["stage"]: s for s in json.loads(line)["spans"]}
        ref, fwd = spans["ref_logprob"], spans["actor_forward"]
        # the reference pass lies inside the training forward's span and is taken out of its exclusive time
        assert fwd["start_s"] <= ref["start_s"] and ref["start_s"] + ref["dur_s"] <= fwd["start_s"] + fwd["dur_s"] + 1e-9
        assert fwd["self_s"] == pytest.approx(fwd["dur_s"] - ref["dur_s"])
    assert record.results["losses"][0] == pytest.approx(0.6931471805599453, abs=1e-6)   # policy = reference: log 2


def test_prediction_before_training_on_tokenized_shapes(record):
    from rlm_lab.models import build_model
    from rlm_lab.tasks import ensure_data, parse_task
    from rlm_lab.train.dpo import preference_pairs

    pred = record.results["prediction"]
    assert pred["made"] <= record.results["train_started"]
    task = parse_task(D.TASK)
    _, tok = build_model(CASE.model)
    pairs = preference_pairs(task, ensure_data(task)["train"][:CASE.pairs * CASE.steps])
    n = lambda s: len(tok(s, add_special_tokens=False)["input_ids"])
    prompt = max(n(p["prompt"]) for p in pairs)
    seq = max(n(p["prompt"]) + 1 + max(n(p["chosen"]), n(p["rejected"])) for p in pairs)   # + EOS
    assert (pred["prompt_len"], pred["completion_len"]) == (prompt, seq - prompt)
    again = D.predict(CASE, prompt, seq - prompt, pred["profile"])
    assert again["stages"] == pred["stages"] and set(pred["stages"]) == {s.value for s in D.STAGES}
    rows = {r["stage"]: r for r in D.dpo_table(record)}
    assert rows["step"]["predicted"] == pytest.approx(sum(pred["stages"].values()))


def test_table_refuses_a_prediction_made_after_training(record):
    late = type(record).load(record.dir)
    late.data["results"]["prediction"] = dict(late.results["prediction"], made="9999-01-01T00:00:00Z")
    with pytest.raises(RlmLabError, match="before results.train_started"):
        D.dpo_table(late)
