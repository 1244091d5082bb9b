"""One set of 2 processes runs every DP/ZeRO/TP layout the tests check (starting a process group costs
~5-10 s on 2 busy cores, more than the steps themselves), shared by test_dp, test_fsdp and test_tp."""

import pytest

LAYOUTS = {
    "dp2": dict(dp=2), "dp2-zero1": dict(dp=2, zero=1), "dp2-zero2": dict(dp=2, zero=2),
    "dp2-zero3": dict(dp=2, zero=3), "tp2": dict(tp=2), "tp2-sp": dict(tp=2, sp=True),
}


@pytest.fixture(scope="session")
def two_rank_results():
    from rlm_lab.parallel.measure import spawn_layouts
    from rlm_lab.parallel.mesh import Layout

    results = spawn_layouts([Layout(**kw) for kw in LAYOUTS.values()], world=2, steps=3, timeout_s=120)
    return dict(zip(LAYOUTS, results))


@pytest.fixture(scope="session")
def four_rank_results():
    """2-D meshes: dp2 x tp2 on 4 processes (oversubscribed on 2 cores: correctness only, no timing)."""
    from rlm_lab.parallel.measure import spawn_layouts
    from rlm_lab.parallel.mesh import Layout

    layouts = [Layout(dp=2, tp=2, zero=2), Layout(dp=2, tp=2, zero=3, sp=True)]
    return spawn_layouts(layouts, world=4, steps=3, timeout_s=180)
