"""Chapter 6's buffer, modes and speed formulas given input they cannot use (issue 10): one RlmLabError line
each, before any work (no Ray starts). The dead rollout worker at smoke size needs a Ray session and lives in
tests/asynchrony/test_modes.py (the run stops within its timeout, the record says no worker is left)."""

from fault_matrix import call_case

CASES = []


def row(id, what, fn, doc, message):
    CASES.append(call_case(id, what, fn, doc, message))


def _buffer(*a):
    from rlm_lab.asynchrony.buffer import StalenessBuffer

    return StalenessBuffer(*a)


def _future(tmp):
    b = _buffer(2)
    b.put(3)
    b.try_take(1, 2)


def _glue(**kw):
    from rlm_lab.asynchrony.trl_rollout import AsyncRolloutFunc

    return AsyncRolloutFunc(None, kw.pop("rollouts", [object()]), None, kw.pop("sync", "object_store"), 1, 0, 10.0, 1, **kw)


row("buffer-eta-negative", "a staleness bound below 0", lambda tmp: _buffer(-1), "asynchrony.buffer.StalenessBuffer(-1)",
    r"staleness bound eta must be an integer >= 0 or None \(unbounded\), got -1")
row("buffer-future-version", "a sample tagged with a policy version newer than the trainer's", _future,
    "StalenessBuffer(2).put(3); .try_take(1, current=2)", r"sample 0 has policy version 3, newer than the trainer's 2")
row("buffer-take-timeout", "the trainer waiting for samples that never come",
    lambda tmp: _buffer(0).take(4, 0, timeout_s=0.05), "StalenessBuffer(0).take(4, 0, timeout_s=0.05)",
    r"the buffer held 0 admissible sample\(s\) after 0.05 s, 4 were needed \(eta=0, version 0\)")
row("mode-unknown", "an unknown execution mode",
    lambda tmp: __import__("rlm_lab.asynchrony.modes", fromlist=["x"]).mode_eta("twostep"),
    "asynchrony.modes.mode_eta('twostep')", r"unknown execution mode 'twostep'; choose sync, one_step_off, async or eta<k>")
row("glue-no-workers", "an asynchronous mode on a placement without rollout workers",
    lambda tmp: _glue(rollouts=[], sync="none"), "AsyncRolloutFunc(rollouts=[])",
    r"the asynchronous modes need rollout workers \(a disaggregated placement\)")
row("glue-ahead-past-eta", "more batches queued ahead than the staleness bound allows",
    lambda tmp: _glue(eta=1, ahead=2), "AsyncRolloutFunc(eta=1, ahead=2)", r"ahead=2 would break the staleness bound eta=1")
row("experiment-first-not-sync", "the mode experiment without the synchronous baseline first",
    lambda tmp: __import__("rlm_lab.chapters.ch06_async.run", fromlist=["x"]).measure("smoke", tmp, modes=("one_step_off",)),
    "chapters.ch06_async.run.measure('smoke', modes=('one_step_off',))",
    r"the first mode must be sync: the others are predicted from its stage times")
row("simulate-eta-negative", "the staleness recurrence with eta below 0",
    lambda tmp: __import__("rlm_lab.cost.asynchrony", fromlist=["x"]).simulate([1.0], 1.0, -2),
    "cost.asynchrony.simulate([1.0], 1.0, eta=-2)", r"eta must be an integer >= 0 or None, got -2")
row("split-one-device", "an asynchronous device split of a single device",
    lambda tmp: __import__("rlm_lab.cost.asynchrony", fromlist=["x"]).best_split(1, lambda d: 1.0, lambda d: 1.0),
    "cost.asynchrony.best_split(1, ...)", r"an asynchronous split needs at least 2 devices, got 1")
