"""Execution modes (rlm_lab/cost/modes.py) on hand-derived stage times, their agreement with chapter 6's closed
forms and recurrence, and a placement priced in every mode."""

from types import SimpleNamespace

import pytest

from rlm_lab.cost.asynchrony import one_step_off_step, simulate
from rlm_lab.cost.modes import check_mode, mode_step
from rlm_lab.cost.placement import predict_placement
from rlm_lab.cost.placement_spec import Cluster, get_placement
from rlm_lab.errors import RlmLabError

# r = 0, g = 10 (drained), t = 2 + 0 + 3 = 5, s = 1
PHASES = {"reshard": 0.0, "generation": 10.0, "preparation": 2.0, "advantage": 0.0, "training": 3.0, "sync": 1.0}
BUSY = {"rollout": 10.0, "train": 5.0}


class FakeEngine:
    """An engine whose stream costs 4 s a batch and an interruption 0.5 s; it records the in-flight caps asked."""

    def __init__(self):
        self.caps = []

    def stream(self, lengths, cap=None):
        self.caps.append(cap)
        return SimpleNamespace(seconds=4.0)

    def interrupt_time(self, lengths, cap=None):
        return 0.5


class TradeOffEngine(FakeEngine):
    """More in flight: a faster stream (8 / k s) but a dearer interruption (1.5 k s): the best k is 2 (4 + 3 = 7
    against 8 + 1.5 = 9.5 and 2.67 + 4.5 = 7.17)."""

    def stream(self, lengths, cap=None):
        self.caps.append(cap)
        return SimpleNamespace(seconds=8.0 / (cap // 8))

    def interrupt_time(self, lengths, cap=None):
        return 1.5 * (cap // 8)


def engine():
    return SimpleNamespace(fits=True, lengths=[1] * 8, engine=FakeEngine(), max_num_seqs=16)


def step(mode, eta=None, separate=True, eng=None):
    return mode_step(mode, eta, PHASES, BUSY, separate, eng, "rollout", ("actor_backward", "train", 3.0),
                     ("decode", "rollout", 9.0), ("decode", "rollout", 9.0))


def test_sync_and_one_step_off_by_hand():
    s = step("sync")
    assert s.step_s == 16.0 and s.exposed_sync_s == 1.0 and s.bound == "sequential"
    assert s.idle == {"rollout": pytest.approx(6 / 16), "train": pytest.approx(11 / 16)}
    o = step("one_step_off")
    assert o.step_s == 10.0 == one_step_off_step(10.0, 5.0, 1.0)      # max(g, t + s)
    assert o.exposed_sync_s == 0.0 and o.bound == "generation" and o.critical[0] == "decode"
    assert o.idle == {"rollout": 0.0, "train": pytest.approx(0.5)}
    # the discrete-event recurrence of chapter 6 reaches the same steady state
    sim = simulate([10.0] * 200, [5.0] * 200, 1, 1.0)
    assert sim.step_s == pytest.approx(10.0, rel=0.01)


def test_stale_and_async_by_hand():
    """stale eta 2: g_stream 4 + (tail 6 + s 1) / 2 = 7.5 against t + s = 6; async: 4 + s 1 + recompute 0.5 = 5.5
    against 6, so the trainer bounds it and its exposed sync is s."""
    st = step("stale", 2, eng=engine())
    assert st.step_s == pytest.approx(7.5) and st.bound == "generation"
    assert st.exposed_sync_s == pytest.approx(7.5 - 7.0)              # without s: max(4 + 6 / 2, 5) = 7
    e = engine()
    a = step("async", None, eng=e)
    assert a.step_s == pytest.approx(6.0) and a.bound == "training" and a.critical[0] == "actor_backward"
    assert a.exposed_sync_s == pytest.approx(1.0)
    # unbounded: 1 .. max_num_seqs / 8 + 1 = 3 batches of 8 in flight tried (the fake costs the same: the first kept)
    assert e.engine.caps == [8, 16, 24] and "1 batch of requests in flight" in a.note
    e = engine()
    step("async", 3, eng=e)
    assert e.engine.caps == [8, 16, 24, 32]                            # eta 3: up to (3 + 1) batches of 8


def test_async_keeps_the_best_number_of_batches_in_flight():
    e = SimpleNamespace(fits=True, lengths=[1] * 8, engine=TradeOffEngine(), max_num_seqs=24)
    a = step("async", None, eng=e)
    assert a.gen_s == pytest.approx(4 + 3 + 1) and "2 batches of requests in flight" in a.note
    st = step("stale", 2, eng=SimpleNamespace(fits=True, lengths=[1] * 8, engine=TradeOffEngine(), max_num_seqs=24))
    # no interruption in stale: the most in flight (eta + 1 = 3 batches) streams fastest: 8 / 3 + (tail + s) / 2
    assert st.gen_s == pytest.approx(8 / 3 + (10 - 8 / 3 + 1) / 2)


def test_one_set_overlaps_nothing():
    for mode, eta in (("one_step_off", None), ("stale", 4)):
        s = step(mode, eta, separate=False, eng=engine())
        assert s.step_s == 16.0 and "nothing overlaps" in s.note
    e = engine()
    a = step("async", None, separate=False, eng=e)
    assert a.step_s == pytest.approx(0 + 4 + 0.5 + 5 + 1)             # partial rollouts carried over, in sequence
    assert e.engine.caps == [8, 16]                                    # the batch and its carried-over partials


def test_static_engine_cannot_stream():
    a = step("async", None, eng=None)
    assert a.step_s == pytest.approx(max(10 + 1, 6)) and "cannot stream" in a.note


@pytest.mark.parametrize("mode, eta, want", [
    ("sync", None, ("sync", 0)), ("one-step-off", None, ("one_step_off", 1)), ("stale", None, ("stale", 2)),
    ("STALE", 4, ("stale", 4)), ("async", None, ("async", None)), ("async", 8, ("async", 8)),
])
def test_check_mode(mode, eta, want):
    assert check_mode(mode, eta) == want


@pytest.mark.parametrize("mode, eta, msg", [
    ("fast", None, "unknown mode 'fast'"), ("sync", 2, "eta 0"), ("one_step_off", 2, "eta 1"),
    ("stale", 0, "eta >= 1"), ("async", 0, "eta >= 1 or none"), ("async", -1, "integer >= 0"), ("async", 1.5, "integer"),
])
def test_check_mode_refuses(mode, eta, msg):
    with pytest.raises(RlmLabError, match=msg):
        check_mode(mode, eta)


def test_placement_in_every_mode():
    """A disaggregated GRPO step with a continuous engine and a long tail: the overlapping modes are never slower
    than the synchronous step, one-step-off is max(g, t + s) of its own phases, and async does not pay the tail."""
    c = Cluster(4, "gpu", 80)
    wl = dict(prompts=16, group_size=4, prompt_len=64, response={"kind": "lognormal", "median": 300, "sigma": 1.0,
              "max": 4096}, precision="bf16-mixed", engine="continuous")
    pl = get_placement("disaggregated", c, "grpo", rollout_devices=2)
    steps = {}
    for mode, eta in (("sync", None), ("one_step_off", None), ("stale", 2), ("async", None)):
        pp = predict_placement(pl, "small", "grpo", wl, "h100-sxm", c, mode=mode, eta=eta)
        steps[mode] = pp.step_s
        assert pp.sync_step_s == pytest.approx(sum(t for t, _ in pp.phases.values()))
    ph = {p: t for p, (t, _) in pp.phases.items()}
    g, t, s = ph["generation"], ph["preparation"] + ph["advantage"] + ph["training"], ph["sync"]
    assert steps["sync"] == pytest.approx(g + t + s)
    assert steps["one_step_off"] == pytest.approx(max(g, t + s))
    assert max(steps["stale"], steps["async"]) <= steps["sync"]
    eng = next(x.engine for x in pp.sets if x.name == "rollout")
    assert eng.engine.stream(eng.lengths).seconds < eng.drain.seconds     # the tail the stream does not pay
