"""Fixtures shared across test folders."""

import os

import pytest

from rlm_lab.host import bound_sockets, loopback  # the listening-socket scan (the cluster rehearsal uses it too)


@pytest.fixture(autouse=True, scope="session")
def _no_calibration_of_this_machine(tmp_path_factory):
    """No test calibrates this machine for real (rlm_lab.insitu.this_machine: ``predict`` and ``validate --run``
    would on a machine with no profile of its own) or reads the user's cache of profiles (issue 35)."""

    saved = {k: os.environ.get(k) for k in ("RLM_NO_CALIBRATE", "RLM_CACHE_DIR")}
    os.environ.update(RLM_NO_CALIBRATE="1", RLM_CACHE_DIR=str(tmp_path_factory.mktemp("rlm-lab-cache")))
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


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


@pytest.fixture
def sockets():
    """``sockets.bound(pids)`` and ``sockets.loopback(ip)``: the listening-socket scan of the loopback tests."""
    import types

    return types.SimpleNamespace(bound=bound_sockets, loopback=loopback)


def shared_ray():
    """The shared session, started (again) if no module has it open."""
    s = _RAY.get("session")
    if s is None or not s.owned:
        s = _start_shared_ray()
    return s


@pytest.fixture(scope="module")
def ray_session():
    """The test session's one local Ray (started once, ~10-30 s, beside busy loops; closed at the end). A
    module that closes it (a test of what closing leaves, or a multi-node cluster of its own) makes the next
    module start a fresh one."""
    return shared_ray()


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


def _place_cfg():
    from rlm_lab.chapters.ch05_placement.cases import run_config

    return run_config("smoke", rl_steps=PLACE_STEPS, seed=3)


@pytest.fixture(scope="module")
def place_cfg():
    """The smoke-size run config the placement and asynchrony tests share (same seed: comparable runs)."""
    return _place_cfg()


@pytest.fixture(scope="session")
def one_node_run(tmp_path_factory):
    """``get(kind)``: a run of ``place_cfg`` on the shared one-node Ray, weights returned, made once per test
    session for every module that compares with it: ``"disaggregated"`` (chapter 5: trainer and one rollout
    worker, collective sync) or ``"one_step_off"`` (chapter 6, eta = 1, its importance weights recorded)."""
    cache = {}

    def get(kind: str) -> dict:
        if kind not in cache:
            from rlm_lab.asynchrony.modes import mode_placement, run_mode
            from rlm_lab.placement.runtime import run_placement

            cfg, session, folder = _place_cfg(), shared_ray(), tmp_path_factory.mktemp(f"one_node_{kind}")
            if kind == "disaggregated":
                cache[kind] = run_placement(mode_placement(cfg, sync="collective"), cfg, folder, session=session,
                                            return_weights=True, timeout_s=60)
            else:
                cache[kind] = run_mode(kind, cfg, folder, session=session, return_weights=True, timeout_s=60,
                                       importance=True)  # the weights tests/asynchrony/test_modes.py checks
        return cache[kind]

    return get
