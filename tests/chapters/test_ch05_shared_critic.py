"""Chapter 5's shared actor-critic section: the prediction against an independent count of what sharing removes (the
critic's weights, gradients and AdamW state, less the value head's), a prediction is written once, and the
analysis of a protocol record: the Student-t interval of the paired ratios, the error at its ends, the verdict by
the bar, the model states counted against the predicted ones, the peak saving as a paired difference, and a
prediction made after the first repeat refused."""

import json
import math
import statistics

import pytest
from scipy import stats

from rlm_lab.compare import BAR
from rlm_lab.cost import model_spec, scalar_head
from rlm_lab.errors import RlmLabError
from rlm_lab.protocol import summarize
from rlm_lab.record import RunRecord
from rlm_lab.chapters.ch05_placement import shared_critic as S
from rlm_lab.chapters.cli import resolve


def test_case_and_state_keys():
    assert S.case("shared", "smoke").critic == "shared" and S.case("separate", "smoke").algo == "ppo"
    with pytest.raises(RlmLabError, match="unknown arm"):
        S.case("twin", "smoke")
    counts = {"actor_weights": 10, "actor_gradients": 10, "actor_optimizer": 20, "critic_weights": 5,
              "reference_weights": 10, "kv_cache": 999}
    assert S.model_state_bytes(counts) == 55          # the KV cache is no model state


def test_prediction_against_a_hand_count():
    p = S.predict("smoke")
    shared, separate = p["arms"]["shared"], p["arms"]["separate"]
    assert "critic_update" in separate["stages"] and "critic_update" not in shared["stages"]
    assert 0 < p["ratio"] < 1 and math.isclose(p["ratio"], shared["step_s"] / separate["step_s"])
    # fp32 AdamW: weights 4 + gradients 4 + moments 8 bytes per trained parameter, a 4-byte step per tensor
    spec = model_spec(S.case("shared", "smoke").model)
    critic = scalar_head(spec).params * 16 + 4 * scalar_head(spec).param_tensors
    head = (spec.hidden + 1) * 16 + 4 * 2
    assert p["model_state_saving_bytes"] == critic - head
    assert p["peak_saving_bytes"] > 0 and p["bar"] == BAR


def test_prediction_is_written_once(tmp_path):
    path = S.write_prediction("smoke", tmp_path)
    assert S.load_prediction(tmp_path)["ratio"] == json.loads(path.read_text())["ratio"]
    with pytest.raises(RlmLabError, match="made once"):
        S.write_prediction("smoke", tmp_path)
    with pytest.raises(RlmLabError, match="no prediction"):
        S.load_prediction(tmp_path / "nothing")


def _window(folder, ratios, pred, started="2030-01-01T00:00:00+00:00", peaks=(100, 90)):
    """A protocol record of paired repeats with the given ratios (separate = 1 s)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / S.PREDICTION).write_text(json.dumps(pred))
    a, b = list(ratios), [1.0] * len(ratios)
    rows = []
    for i, (x, y) in enumerate(zip(a, b)):
        for name, v, peak in (("shared", x, peaks[1] + i), ("separate", y, peaks[0] + 2 * i)):
            rows.append({"pair": i, "name": name, "started": started, "load_before": {"per_core": 0.5 + i / 10},
                         "report": {"step_s": v, "model_state_bytes": pred["arms"][name]["model_state_bytes"],
                                    "peak_bytes": peak}})
    with RunRecord(folder / S.PROTOCOL, {"metric": "step_s"}) as rec:
        rec.update(repeats=rows, summary=summarize(a, b, S.ARMS), gate_timeouts=0, window="w-test")


def _pred(ratio=0.712):
    return {"made": "2029-12-31T00:00:00+00:00", "size": "smoke", "profile": "p", "ratio": ratio, "bar": BAR,
            "arms": {"shared": {"step_s": ratio, "model_state_bytes": 60, "peak_bytes": 1},
                     "separate": {"step_s": 1.0, "model_state_bytes": 100, "peak_bytes": 13}},
            "model_state_saving_bytes": 40, "peak_saving_bytes": 12}


def test_analysis_interval_error_and_verdict(tmp_path):
    ratios = [0.70, 0.72, 0.74]
    _window(tmp_path, ratios, _pred())
    a = S.analysis("smoke", tmp_path)
    m, se = statistics.mean(ratios), statistics.stdev(ratios) / math.sqrt(3)
    half = stats.t.ppf(0.975, 2) * se
    assert a["ratio"].method == "Student-t" and a["n"] == 3
    assert a["ratio"].lo == pytest.approx(m - half) and a["ratio"].hi == pytest.approx(m + half)
    assert a["error"].lo == pytest.approx(0.712 / (m + half) - 1) and a["error"].hi == pytest.approx(0.712 / (m - half) - 1)
    assert a["verdict"] == "met" and a["word"] == "faster"
    assert a["state_exact"] and a["state_saving"] == 40
    # peak saving per pair: (100 + 2i) - (90 + i) = 10 + i -> mean 11, t-interval; the predicted 12 lies inside
    assert a["peak_saving"].estimate == pytest.approx(11) and a["peak_word"] == "inside"
    assert a["load"] == (0.5, pytest.approx(0.7))
    values = S.glue_values(a)
    assert values["ch05_ac_verdict"] == "met" and values["ch05_ac_bar"] == "25%"
    assert "shared" in S.section_text(a)


def test_analysis_not_met_and_refusals(tmp_path):
    _window(tmp_path / "far", [0.95, 0.96, 0.97], _pred(0.5))
    assert S.analysis("smoke", tmp_path / "far")["verdict"] == "not met"
    _window(tmp_path / "two", [0.7, 0.72], _pred())
    a = S.analysis("smoke", tmp_path / "two")
    assert a["verdict"] == "undecided" and not a["ratio"].decided          # two pairs decide nothing
    late = _pred()
    late["made"] = "2030-01-02T00:00:00+00:00"
    _window(tmp_path / "late", [0.7, 0.72, 0.74], late)
    with pytest.raises(RlmLabError, match="not made before"):
        S.analysis("smoke", tmp_path / "late")


def test_a_repeat_is_this_module_run_through_the_cli(tmp_path):
    argv = S.arm_command("shared", "smoke", tmp_path)
    assert argv[1:7] == ("-m", "rlm_lab.cli", "chapter", "5", "shared-critic", "--arm")
    assert resolve(5, "shared-critic") is S.main      # the step the child names is this module's main
