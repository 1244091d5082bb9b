"""rlm-lab validate: the suite is disjoint from chapter 2's cases, the summary is right on hand-made rows,
bad input is one line, and one smoke workload runs end to end and is compared with its own record."""

import math

import pytest

from rlm_lab import validate as V
from rlm_lab.cli import main
from rlm_lab.chapters.ch02_anatomy import algorithm_cases, sweep_cases
from rlm_lab.compare import OTHER, STEP


def _shape(c):
    return (c.model, c.batch, c.group, c.length)


def test_suite_is_kept_apart_from_what_chapter_2_fitted():
    for size in ("smoke", "cpu"):
        used = {_shape(c) for c in {**algorithm_cases(size), **sweep_cases(size)}.values()}
        suite = V.workloads(size)
        assert not used & {_shape(c) for c in suite}
        assert len({c.name for c in suite}) == len(suite)
        assert all(c.batch // c.group >= 8 for c in suite)  # >= 8 prompts: the 6-token prompt the model assumes
    cpu = V.workloads("cpu")
    assert {"nano-moe", "micro-moe"} <= {c.model for c in cpu}
    assert {"ppo", "grpo"} <= {c.algo for c in cpu} and any(c.beta == 0 for c in cpu)


def _row(run, stage, p, m, step_m):
    return {"run": run, "stage": stage, "predicted": p, "measured": m, "rel_error": (p - m) / m,
            "share": m / step_m}


def test_summary_by_hand():
    rows = [_row("a", "generate", 0.8, 1.0, 2.0), _row("a", "advantage", 0.001, 0.02, 2.0),  # 1 %: not judged
            _row("a", "actor_backward", 0.55, 0.5, 2.0), _row("a", STEP, 1.6, 2.0, 2.0),
            {"run": "a", "stage": OTHER, "predicted": 0.0, "measured": 0.3, "rel_error": float("nan"), "share": 0.15},
            _row("b", "generate", 1.0, 1.0, 1.0), _row("b", STEP, 1.05, 1.0, 1.0)]
    s = V.summary(rows)
    assert s["runs"] == 2 and s["stages_judged"] == 3
    assert s["step_median"] == pytest.approx(0.125)       # |-20 %| and |+5 %|
    assert s["step_worst"] == pytest.approx(0.2) and s["bias"] == pytest.approx(-0.075)
    assert s["under_predicted"] == 1
    assert s["stage_median"] == pytest.approx(0.1) and s["stage_worst"] == pytest.approx(0.2)
    assert s["worst_stage"] == "a:generate"
    assert s["per_stage"]["generate"]["bias"] == pytest.approx(-0.1)
    assert s["verdicts"]["step_median"].startswith("met") and s["verdicts"]["bias"].startswith("met")
    assert s["verdicts"]["stage_worst"].startswith("met")
    rows[0] = _row("a", "generate", 0.7, 1.0, 2.0)         # -30 %: the stage bar is missed
    assert V.summary(rows)["verdicts"]["stage_worst"] == "not met (30.0% > 25%)"


@pytest.mark.parametrize("argv, msg", [
    (["validate", "--size", "gpu"], "no validation suite at size 'gpu'"),
    (["validate", "--size", "huge"], "unknown size"),
    (["validate", "--only", "x"], "--only needs --run"),
    (["validate", "--size", "smoke", "--profile", "nope"], "unknown hardware profile"),
])
def test_bad_input_is_one_line(argv, msg, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlm-lab: error:") and msg in err and err.count("\n") == 1


@pytest.mark.slow
def test_one_smoke_workload_end_to_end(tmp_path, capsys):
    name = "nano_dapo_B16_G2_R4"
    assert main(["validate", "--size", "smoke", "--run", "--only", name, "--out", str(tmp_path)]) == 0
    suite, recs = V.load_suite("smoke", tmp_path)
    assert list(recs) == [name]
    base = suite.results["baseline_rss_bytes"][name]
    assert 50 * 2**20 < base < 8 * 2**30                # a python + torch process, not a unit mix-up
    rep = V.report("smoke", tmp_path)
    trace = recs[name].results["trace"]
    step = next(r for r in rep["rows"] if r["stage"] == STEP)
    assert step["measured"] == trace["step_wall_s"]["median"]
    gen = next(r for r in rep["rows"] if r["stage"] == "generate")
    assert gen["peak_measured"] == trace["stages"]["generate"]["peak_bytes"] >= base
    assert gen["transient_measured"] == gen["peak_measured"] - base
    assert math.isfinite(rep["summary"]["step_median"])
    # the least-disturbed statistic: the fastest traced step after warm-up, read here from spans.jsonl directly
    import json

    lines = (tmp_path / f"validation_{name}" / "spans.jsonl").read_text().splitlines()
    walls = [json.loads(x)["wall_s"] for x in lines][trace["warmup_steps_excluded"]:]
    rep_min = V.report("smoke", tmp_path, statistic="min")
    assert next(r for r in rep_min["rows"] if r["stage"] == STEP)["measured"] == min(walls)
    assert rep_min["contention"][name] == pytest.approx(max(walls) / min(walls))
    assert recs[name].results["trace"]["step_wall_s"]["median"] == step["measured"]  # the record is not changed
    assert main(["validate", "--size", "smoke", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "whole step: median |error|" in out and ("step_median: met" in out or "step_median: not met" in out)


def test_a_workload_failing_in_its_process_is_one_clear_error(tmp_path):
    """Each workload runs in a spawned process: an error there comes back as one RlmLabError naming it."""
    from rlm_lab.errors import RlmLabError
    from rlm_lab.validate.suite import _run_in_fresh_process

    case = V.workloads("smoke")[0]
    with pytest.raises(RlmLabError, match=f"{case.name} failed in its process .*size"):
        _run_in_fresh_process(case, "huge", tmp_path / "run", tmp_path / "warmup", 0)
    assert not (tmp_path / "run").exists()


def test_a_workload_the_profile_cannot_predict_is_listed_not_counted(tmp_path):
    """A bf16-autocast workload against a profile without bf16 rates: its row says why, the numbers leave it out."""
    class Rec:
        config = {"case": {"name": "x_bf16", "model": "nano", "batch": 16, "group": 2, "length": 4, "bf16": True}}
        results = {"trace": {"step_wall_s": {"median": 0.05}, "stages": {}}}

    rows = V.compare({"x_bf16": Rec()}, "cpu-2core-epyc", reward_s=0.0)
    assert len(rows) == 1 and rows[0]["stage"] == STEP and "no matmul rate for dtype 'bf16'" in rows[0]["unpredicted"]
    s = V.summary(rows + [_row("a", "generate", 0.8, 1.0, 2.0), _row("a", STEP, 1.6, 2.0, 2.0)])
    assert s["runs"] == 1 and s["step_median"] == pytest.approx(0.2) and list(s["unpredicted"]) == ["x_bf16"]
