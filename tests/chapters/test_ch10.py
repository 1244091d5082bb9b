"""Chapter 10's cases (the same budget for the arms and the paradigms) and comparisons, on records made up by
hand so every verdict can be checked (rlm_lab.chapters.ch10_open_directions)."""

from types import SimpleNamespace

import pytest

from rlm_lab.chapters.ch10_open_directions import cases, compare, report
from rlm_lab.errors import RlmLabError
from rlm_lab.tasks.mix import COMPONENTS


@pytest.mark.parametrize("size", ["smoke", "cpu"])
def test_the_arms_and_the_paradigms_share_a_budget(size, tmp_path):
    seq, par = (cases.grpo_config(size, a, 0, tmp_path, "") for a in cases.ARMS)
    for f in ("rl_steps", "batch_size", "num_generations", "rl_lr", "model", "beta", "scale_rewards", "epsilon",
              "temperature", "loss_type"):
        assert getattr(seq, f) == getattr(par, f), f
    assert seq.extra == par.extra == {"epsilon_high": 0.28} and seq.scale_rewards == "none" and seq.beta == 0
    mixed = cases.md_config(size, None, 0, tmp_path)
    parts = [cases.md_config(size, d, 0, tmp_path) for d in COMPONENTS]
    assert sum(c.rl_steps for c in parts) == mixed.rl_steps
    assert {c.batch_size for c in parts} == {mixed.batch_size} and {c.rl_lr for c in parts} == {mixed.rl_lr}


def test_bad_arm_and_domain(tmp_path):
    with pytest.raises(RlmLabError, match="unknown arm 'tree'; choose from: seq, par"):
        cases.task_spec("smoke", "tree")
    with pytest.raises(RlmLabError, match="unknown task 'sudoku'; choose from: arithmetic"):
        cases.md_config("smoke", "sudoku", 0, tmp_path)


def _measure(seq_acc, par_acc, seq_depth=30, par_depth=20):
    q = {}
    for s, (a, b) in enumerate(zip(seq_acc, par_acc)):
        n = 10
        q[f"seq_seed{s}"] = {"correct": [i < a * n for i in range(n)], "work": [seq_depth] * n,
                             "depth": [seq_depth] * n}
        q[f"par_seed{s}"] = {"correct": [i < b * n for i in range(n)], "work": [seq_depth + 4] * n,
                             "depth": [par_depth + (i % 3) for i in range(n)]}
    lat = {"seq": [{"median_s": 0.30 + 0.01 * i} for i in range(8)],
           "par": [{"median_s": 0.20 + 0.01 * i} for i in range(8)]}
    return {"quality": q, "latency": lat}


PRED = {"work_seq": 30.0, "work_par": 34.0, "depth_seq": 30.0, "depth_par": 21.0, "latency_speedup": 1.45,
        "speedup_steps_brent": [1.0, 1.43]}


def test_parallel_verdicts_by_hand():
    m = _measure([0.5, 0.6, 0.5], [0.7, 0.8, 0.8])
    qa = compare.quality(m, [0, 1, 2])
    assert qa["difference"].estimate == pytest.approx(0.7 / 3 + 0.0, abs=0.01) and qa["word"] == "higher"
    la = compare.latency(m, PRED)
    assert la["word"] == "faster" and la["verdict"] == "met"  # measured ~1.43, predicted 1.45
    tk = compare.tokens(m, [0, 1, 2], PRED)
    assert tk["depth"]["ratio"].estimate == pytest.approx(30 / 21) and tk["depth"]["verdict"] == "met"
    assert compare.quality(_measure([0.5, 0.6, 0.5], [0.6, 0.5, 0.6]), [0, 1, 2])["word"] == "undecided"
    rows = compare.parallel_rows(m, PRED, [0, 1, 2])
    assert [r["measure"].split(" ")[0] for r in rows] == ["accuracy", "work", "depth", "latency"]


def _matrix(seed, mixed_gain):
    tasks = list(COMPONENTS)
    m = {"sft": {t: {"accuracy": 0.4} for t in tasks}}
    for sp in tasks:
        m[sp] = {t: {"accuracy": 0.6 if t == sp else 0.4} for t in tasks}
    m["mixed"] = {t: {"accuracy": 0.6 + mixed_gain + 0.01 * seed} for t in tasks}
    for meth in ("linear", "ties", "dare", "cat"):
        m[f"merge_{meth}"] = {t: {"accuracy": 0.5} for t in tasks}
    return SimpleNamespace(results={"matrix": m})


def test_multidomain_verdicts_by_hand():
    recs = {s: _matrix(s, 0.1) for s in range(3)}
    vs = compare.against_specialists(recs)
    assert all(w == "higher" for _, w in vs["mixed"].values())
    assert all(w == "lower" for _, w in vs["merge_linear"].values())
    assert compare.matrix(recs)["own"]["chain"].estimate == pytest.approx(0.6)
    assert compare.transfer(recs)["chain"]["psum"].estimate == pytest.approx(0.4)
    assert [r["task"] for r in compare.matrix_rows(recs)] == list(COMPONENTS)


def test_the_matrix_has_power_only_on_tasks_the_specialists_moved():
    recs = {s: _matrix(s, 0.1) for s in range(3)}
    assert all(w == "higher" for _, w in compare.power(recs).values())   # every specialist 0.6 against SFT 0.4
    flat = list(COMPONENTS)[0]
    for r in recs.values():   # one task its specialist did not move: no power there, whatever the paradigms say
        r.results["matrix"][flat][flat]["accuracy"] = 0.4
    pw = compare.power(recs)
    assert pw[flat][1] == "undecided" and pw[flat][0].estimate == pytest.approx(0.0)
    assert sum(w == "higher" for _, w in pw.values()) == len(COMPONENTS) - 1
    # the page says "no power" there, not "undecided"; a moved task keeps its word, a decided word stays
    assert compare.powered_word("undecided", pw[flat]) == "no power"
    moved = list(COMPONENTS)[1]
    assert compare.powered_word("undecided", pw[moved]) == "undecided"
    assert compare.powered_word("lower", pw[flat]) == "lower" and compare.powered_word("undecided", None) == "undecided"


def test_the_glue_names_are_the_closing_notes():
    text = open(report.__file__.replace("rlm_lab/chapters/ch10_open_directions/report.py",
                                        "notebooks/ch10_open_directions.md")).read()
    for key in report.PARALLEL_GLUE + report.MD_GLUE:
        assert f"{{glue:text}}`{key}`" in text, key
    assert set(report.parallel_values({}, "smoke").values()) == {report.NOT_YET}


def test_systems_and_step_times_by_hand():
    batches = {k: [{"seconds": 1.0 if k == "mixed" else 0.5, "lengths": [3, 30] if k == "mixed" else [3, 3],
                    "bubble": 0.45 if k == "mixed" else 0.0} for _ in range(3)] for k in ("mixed", *COMPONENTS)}
    pred = {"bubble_mixed": 0.4, **{f"bubble_{t}": 0.0 for t in COMPONENTS}}
    out = compare.systems(SimpleNamespace(results={"batches": batches}), pred)
    assert out["mixed"]["bubble"].estimate == pytest.approx(0.45) and out["mixed"]["max_length"] == 30
    assert out["mixed_over_separate"]["ratio"].estimate == pytest.approx(2.0)
    st = compare.step_times({"mixed": [[{"wall_s": 9, "cpu_s": 9}] + [{"wall_s": 1, "cpu_s": 0.5}] * 4]})
    assert st["mixed"]["wall_s"].estimate == 1 and st["mixed"]["steps"] == 4  # the first step left out
    one = compare.step_times({"psum": [[{"wall_s": 2, "cpu_s": 1}]]})  # a run of one step keeps it
    assert one["psum"]["wall_s"].estimate == 2 and one["psum"]["steps"] == 1
