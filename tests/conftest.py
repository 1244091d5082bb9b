"""Fixtures shared across test folders."""

import pytest

PLACE_STEPS = 2  # GRPO steps of the smoke-size Ray runs (placement and asynchrony tests)


@pytest.fixture(scope="module")
def ray_session():
    """One local Ray for a test module (starting Ray costs ~10 s); closed at the module's end."""
    from rlm_lab.placement.runtime import RaySession

    s = RaySession(num_cpus=2)
    yield s
    s.close()


@pytest.fixture(scope="module")
def place_cfg():
    """The smoke-size run config the placement and asynchrony tests share (same seed: comparable runs)."""
    from rlm_lab.placement.experiment import run_config

    return run_config("smoke", rl_steps=PLACE_STEPS, seed=3)
