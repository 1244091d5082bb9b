"""Speed of the asynchronous modes: the recurrence against hand-derived timelines and the closed forms."""

import pytest

from rlm_lab.cost.asynchrony import (advise_mode, async_rate, best_split, one_step_off_step, simulate,
                                     sync_step)
from rlm_lab.errors import RlmLabError


def test_closed_forms_by_hand():
    assert sync_step(3, 2, 0.5) == 5.5
    assert one_step_off_step(3, 2, 0.5) == 3  # generation-bound
    assert one_step_off_step(1, 2, 0.5) == 2.5  # training-bound
    assert async_rate(3, 2, 0.5, replicas=2) == pytest.approx(min(2 / 3, 1 / 2.5))


def test_eta_0_alternates_hand_timeline():
    # g=3, t=2, s=0.5: gen [0,3] train [3,5.5] gen [5.5,8.5] train [8.5,11] ...
    sim = simulate([3, 3, 3], 2, eta=0, sync_s=0.5)
    assert sim.seconds == pytest.approx(3 * 5.5)
    assert sim.staleness == (0, 0, 0)


def test_eta_1_one_step_off_hand_timeline():
    # g=3, t=2: gen0 [0,3], gen1 [3,6] (may start: update -1 needed, none), train0 [3,5];
    # gen2 needs fin0=5 and gen1's end 6 -> [6,9]; train1 [6,8]; train2 [9,11]
    sim = simulate([3, 3, 3], 2, eta=1)
    assert sim.seconds == pytest.approx(11)
    assert sim.staleness == (0, 1, 1)  # batch 1 started before update 0 finished; batch 2 at 6 after fin0=5 only
    # long run: the step converges to max(g, t + s)
    long = simulate([3] * 200, 2, eta=1, sync_s=0.5)
    assert long.step_s == pytest.approx(one_step_off_step(3, 2, 0.5), rel=0.02)


def test_unbounded_reaches_the_async_rate_and_staleness_grows():
    sim = simulate([1.0] * 300, 2.0, eta=None, replicas=1)  # generation twice as fast as training
    assert 1 / sim.step_s == pytest.approx(async_rate(1.0, 2.0), rel=0.01)
    assert sim.staleness[-1] > 100  # unbounded: the producer runs away
    bounded = simulate([1.0] * 300, 2.0, eta=4)
    assert max(bounded.staleness) <= 4 and bounded.step_s == pytest.approx(sim.step_s, rel=0.01)


def test_two_replicas_double_the_generation_rate():
    sim = simulate([4.0] * 400, 1.0, eta=None, replicas=2)
    assert 1 / sim.step_s == pytest.approx(async_rate(4.0, 1.0, replicas=2), rel=0.01)  # 0.5 batches/s


def test_long_tail_is_absorbed_by_staleness():
    gens = [1.0, 1.0, 1.0, 6.0] * 25  # every fourth batch has a long straggler; mean g = 2.25 = t
    s0, s1, s8 = (simulate(gens, 2.25, eta=e) for e in (0, 1, 8))
    assert s0.step_s == pytest.approx(2.25 + 2.25)
    assert s8.step_s < s1.step_s < s0.step_s
    adv = advise_mode(gens, 2.25)
    assert adv["eta"] not in (0, 1) and adv["mode"] == "async" and adv["speedup_vs_sync"] > 1.8


def test_best_split_equalises_the_rates():
    # generation 12 s on one device, training 4 s on one device, both scale linearly: 8 devices ->
    # rates d_g/12 and (8-d_g)/4 equal at d_g = 6
    split = best_split(8, lambda d: 12 / d, lambda d: 4 / d)
    assert split["rollout_devices"] == 6 and split["gen_rate"] == pytest.approx(split["train_rate"])


def test_bad_input():
    with pytest.raises(RlmLabError, match="eta must be"):
        simulate([1], 1, eta=-1)
    with pytest.raises(RlmLabError, match="at least 2 devices"):
        best_split(1, lambda d: 1, lambda d: 1)
