"""The version-tagged sample buffer with a staleness bound eta (pure Python: no Ray, no torch).

Every sample carries the policy version that generated it (the number of optimizer updates the weights had
seen). The trainer, about to apply update ``v`` (its weights are version ``v``), takes a batch whose samples
have ``v - version <= eta``; samples older than that are *evicted* (counted, kept for the record, never
handed out). eta = 0 is on-policy (synchronous), eta = 1 is one-step-off, eta = None is unbounded ("fully
async" with no bound). This is AReaL's staleness control (arXiv 2505.24298, Sec. 4: the rollout controller
stops submitting once a sample would exceed eta; here the buffer enforces the same bound on the consumer
side, so it holds whatever the producers do).

Invariants (property-tested over random arrival orders, tests/asynchrony/test_buffer.py):

- no sample handed out for version ``v`` has ``v - version > eta`` or ``version > v`` (a sample from the
  future is an error: the producer's weights cannot be newer than the trainer's);
- every sample put in ends up exactly once in taken, evicted or still buffered: nothing lost, nothing twice.

Order: first in, first out among the admissible samples (what a queue between generation and training does;
AReaL and verl's fully-async recipe both consume in arrival order). Thread safe: producers (threads that
collect rollout results) ``put`` while the trainer ``take``-s; :meth:`take` can wait for enough samples.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from ..errors import RlmLabError

INF = None  # eta = None: no staleness bound
ETAS = (0, 1, 2, 4, 8, INF)  # the bounds chapter 6 measures


class BufferError(RlmLabError, ValueError):
    """Misuse of the buffer (a negative bound, a sample from a future version, a timed-out take)."""


@dataclass(frozen=True)
class Sample:
    """One generated sample: ``uid`` (unique, given by the buffer), the policy ``version`` that generated
    it, and an opaque ``payload`` (prompt ids, completion ids, behaviour log-probs, dataset row...)."""

    uid: int
    version: int
    payload: Any = field(default=None, compare=False)


def check_eta(eta) -> int | None:
    if eta is None:
        return None
    if isinstance(eta, bool) or not isinstance(eta, int) or eta < 0:
        raise BufferError(f"staleness bound eta must be an integer >= 0 or None (unbounded), got {eta!r}")
    return eta


def eta_label(eta) -> str:
    return "inf" if eta is None else str(eta)


class StalenessBuffer:
    """FIFO of :class:`Sample` with staleness bound ``eta`` (see the module docstring)."""

    def __init__(self, eta: int | None = 0):
        self.eta = check_eta(eta)
        self._q: deque[Sample] = deque()
        self._next_uid = 0
        self._cv = threading.Condition()
        self.evicted: list[Sample] = []
        self.taken_staleness: Counter = Counter()  # staleness -> samples handed out with it
        self.puts = 0
        self.taken = 0

    # ---- producers
    def put(self, version: int, payload: Any = None) -> Sample:
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise BufferError(f"a sample's policy version must be an integer >= 0, got {version!r}")
        with self._cv:
            s = Sample(self._next_uid, version, payload)
            self._next_uid += 1
            self._q.append(s)
            self.puts += 1
            self._cv.notify_all()
            return s

    # ---- the trainer
    def admissible(self, sample: Sample, current: int) -> bool:
        return self.eta is None or current - sample.version <= self.eta

    def _evict(self, current: int) -> None:
        keep = deque()
        for s in self._q:
            if s.version > current:
                raise BufferError(f"sample {s.uid} has policy version {s.version}, newer than the trainer's "
                                  f"{current}: versions must come from the trainer")
            (keep if self.admissible(s, current) else self.evicted).append(s)
        self._q = keep

    def try_take(self, n: int, current: int) -> list[Sample] | None:
        """``n`` admissible samples (oldest first) for the trainer at version ``current``, or None if fewer
        than ``n`` are buffered (then nothing is taken). Too-stale samples are evicted first."""
        if n < 1:
            raise BufferError(f"take needs n >= 1, got {n}")
        with self._cv:
            self._evict(current)
            if len(self._q) < n:
                return None
            out = [self._q.popleft() for _ in range(n)]
            for s in out:
                self.taken_staleness[current - s.version] += 1
            self.taken += n
            return out

    def take(self, n: int, current: int, timeout_s: float | None = None) -> list[Sample]:
        """Like :meth:`try_take` but waits (up to ``timeout_s``) for producers to deliver enough samples."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cv:
            while True:
                got = self.try_take(n, current)
                if got is not None:
                    return got
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise BufferError(f"the buffer held {len(self._q)} admissible sample(s) after "
                                      f"{timeout_s:g} s, {n} were needed (eta={eta_label(self.eta)}, "
                                      f"version {current})")
                self._cv.wait(left)

    # ---- reading
    def __len__(self) -> int:
        with self._cv:
            return len(self._q)

    def pending(self) -> list[Sample]:
        with self._cv:
            return list(self._q)

    def stats(self) -> dict:
        """What the run record keeps: the staleness distribution of the samples trained on, and evictions."""
        with self._cv:
            return {"eta": eta_label(self.eta), "put": self.puts, "taken": self.taken,
                    "evicted": len(self.evicted), "buffered": len(self._q),
                    "staleness_hist": {str(k): v for k, v in sorted(self.taken_staleness.items())}}
