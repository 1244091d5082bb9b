"""Fixtures shared across test folders."""

import pytest

PLACE_STEPS = 2  # GRPO steps of the smoke-size Ray runs (placement and asynchrony tests)
BUSY_LOOPS = 4  # busy-loop processes beside the suite's Ray start (issue 18: Ray must start on a busy machine)

_RAY: dict = {}  # the one local Ray of the test session, shared by every module that needs no Ray of its own


def busy_loops(n: int):
    """``n`` processes spinning ``while True: pass`` (the caller kills them)."""
    import subprocess
    import sys

    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def stop(procs) -> None:
    for p in procs:
        p.kill()
    for p in procs:
        p.wait(10)


def _start_shared_ray():
    """A RaySession of 2 CPUs started while BUSY_LOOPS busy loops run; how it went is kept in _RAY."""
    import time

    import psutil

    from rlm_lab.placement.runtime import RaySession

    loops = busy_loops(BUSY_LOOPS)
    t0 = time.perf_counter()
    try:
        session = RaySession(num_cpus=2)
        _RAY["start_s"] = time.perf_counter() - t0
        # CPU seconds the loops burnt while Ray started: proof they were busy, not just present
        _RAY["busy_cpu_s"] = [sum(psutil.Process(p.pid).cpu_times()[:2]) for p in loops]
    finally:
        stop(loops)
    _RAY["session"] = session
    return session


@pytest.fixture(scope="module")
def ray_session():
    """The test session's one local Ray (started once, ~10-30 s, beside busy loops; closed at the end). A
    module that closes it (a test of what closing leaves) makes the next module start a fresh one."""
    s = _RAY.get("session")
    if s is None or not s.owned:
        s = _start_shared_ray()
    return s


@pytest.fixture
def ray_start_info(ray_session):
    """How the shared session's start went: ``busy_cpu_s`` (CPU seconds of each busy loop), ``start_s``."""
    return dict(_RAY, busy_loops=BUSY_LOOPS)


@pytest.fixture(scope="session", autouse=True)
def _close_shared_ray():
    yield
    s = _RAY.pop("session", None)
    if s is not None:
        s.close()


@pytest.fixture(scope="module")
def place_cfg():
    """The smoke-size run config the placement and asynchrony tests share (same seed: comparable runs)."""
    from rlm_lab.chapters.ch05_placement.cases import run_config

    return run_config("smoke", rl_steps=PLACE_STEPS, seed=3)
