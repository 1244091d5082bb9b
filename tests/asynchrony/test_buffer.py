"""The staleness buffer: a property test over random interleavings of producers and the trainer (hypothesis),
checked against an independent model (a plain list scanned by hand), plus hand-derived cases."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlm_lab.asynchrony.buffer import BufferError, StalenessBuffer

ETA = st.sampled_from([0, 1, 2, 4, 8, None])
# an op: ("put", lag) puts a sample generated `lag` versions behind the trainer; ("take", n); ("update",)
OPS = st.lists(st.one_of(st.tuples(st.just("put"), st.integers(0, 10)),
                         st.tuples(st.just("take"), st.integers(1, 4)),
                         st.tuples(st.just("update"))), max_size=60)


@settings(max_examples=300, deadline=None)
@given(eta=ETA, ops=OPS)
def test_never_too_stale_never_lost_never_twice(eta, ops):
    buf = StalenessBuffer(eta)
    version, put, taken = 0, [], []
    model = []  # independent model: (uid, version) in arrival order
    for op in ops:
        if op[0] == "put":
            s = buf.put(max(0, version - op[1]))
            put.append(s.uid)
            model.append((s.uid, s.version))
        elif op[0] == "update":
            version += 1
        else:
            got = buf.try_take(op[1], version)
            ok = [(u, v) for u, v in model if eta is None or version - v <= eta]
            if len(ok) < op[1]:
                assert got is None
            else:
                assert [(s.uid, s.version) for s in got] == ok[:op[1]]  # FIFO among the admissible
                for s in got:
                    assert 0 <= version - s.version and (eta is None or version - s.version <= eta)
                taken += [s.uid for s in got]
            model = ok if len(ok) < op[1] else ok[op[1]:]  # too-stale ones are evicted either way
    evicted = [s.uid for s in buf.evicted]
    left = [s.uid for s in buf.pending()]
    assert sorted(taken + evicted + left) == sorted(put)  # nothing lost, nothing twice
    assert len(set(taken)) == len(taken)
    assert sum(buf.taken_staleness.values()) == len(taken)


def test_hand_derived_eta_1():
    buf = StalenessBuffer(1)
    a, b = buf.put(0, "a"), buf.put(1, "b")
    # trainer at version 2: a is 2 behind (evicted), b is 1 behind (ok)
    assert buf.try_take(2, 2) is None  # only one admissible: nothing is taken
    assert [s.payload for s in buf.evicted] == ["a"]
    assert [s.payload for s in buf.try_take(1, 2)] == ["b"]
    assert buf.stats()["staleness_hist"] == {"1": 1}
    assert a.uid != b.uid


def test_eta_0_is_on_policy_and_none_is_unbounded():
    on, free = StalenessBuffer(0), StalenessBuffer(None)
    for buf in (on, free):
        buf.put(0)
        buf.put(5)
    assert [s.version for s in on.try_take(1, 5)] == [5]
    assert [s.version for s in free.try_take(2, 5)] == [0, 5]


def test_misuse_is_one_clear_error():
    with pytest.raises(BufferError, match="eta must be"):
        StalenessBuffer(-1)
    buf = StalenessBuffer(2)
    buf.put(3)
    with pytest.raises(BufferError, match="newer than the trainer"):
        buf.try_take(1, 2)
    buf2 = StalenessBuffer(0)
    with pytest.raises(BufferError, match="after 0.05 s"):
        buf2.take(1, 0, timeout_s=0.05)


def test_threads_putting_while_the_trainer_takes():
    """Two producer threads put 200 samples each, tagged with the trainer's version when they generated;
    the trainer takes batches of 8 and updates: every sample handed out is within eta, none twice."""
    import threading
    import time

    buf = StalenessBuffer(2)
    version = [0]

    def produce():
        for _ in range(200):
            buf.put(version[0])

    threads = [threading.Thread(target=produce) for _ in range(2)]
    for t in threads:
        t.start()
    taken = []
    while True:
        live = any(t.is_alive() for t in threads)
        got = buf.try_take(8, version[0])
        if got is None:
            if not live:
                break
            time.sleep(0.001)
            continue
        assert all(version[0] - s.version <= 2 for s in got)
        taken += [s.uid for s in got]
        version[0] += 1
    for t in threads:
        t.join()
    assert len(set(taken)) == len(taken)
    assert len(taken) + len(buf.evicted) + len(buf) == 400
