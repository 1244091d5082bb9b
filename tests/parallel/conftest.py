"""One set of 2 processes runs every DP/ZeRO/TP layout the tests check (starting a process group costs
~5-10 s on 2 busy cores, more than the steps themselves), shared by test_dp, test_fsdp and test_tp; one set
of 4 processes runs every 4-rank check (dp2 x tp2, CP over 4 ranks, EP over 4 ranks), shared by test_tp,
test_cp and test_ep."""

import pytest

LAYOUTS = {
    "dp2": dict(dp=2), "dp2-zero1": dict(dp=2, zero=1), "dp2-zero2": dict(dp=2, zero=2),
    "dp2-zero3": dict(dp=2, zero=3), "tp2": dict(tp=2), "tp2-sp": dict(tp=2, sp=True),
}


@pytest.fixture(scope="session")
def nano_trainable():
    """How many trainable tensors the nano model has, counted from the model (every one must get a
    gradient that matches one process)."""
    from rlm_lab.models import build_model

    return sum(1 for p in build_model("nano")[0].parameters() if p.requires_grad)


@pytest.fixture(scope="session")
def two_rank_results():
    from rlm_lab.parallel.bench.measure import spawn_layouts
    from rlm_lab.parallel.mesh import Layout

    results = spawn_layouts([Layout(**kw) for kw in LAYOUTS.values()], world=2, steps=3, timeout_s=120)
    return dict(zip(LAYOUTS, results))


FOUR_RANK = {  # name: (layout degrees, run_layout kwargs)
    "dp2-tp2-zero2": (dict(dp=2, tp=2, zero=2), {}),
    "dp2-tp2-zero3-sp": (dict(dp=2, tp=2, zero=3, sp=True), {}),
    "cp4": (dict(cp=4), {"seq": 32}),             # ring attention: 3 hops per layer, 8 chunks of 4 tokens
    "ep4": (dict(ep=4), {"model": "nano-moe"}),   # one expert per rank, 2 sequences per rank
}


@pytest.fixture(scope="session")
def four_rank_results():
    """One launch of 4 processes (oversubscribed on 2 cores: correctness only, no timing) for every
    4-rank check: the 2-D meshes dp2 x tp2, context parallelism over 4 ranks and expert parallelism
    over 4 ranks, each against one process on the same batch."""
    from rlm_lab.parallel.bench.measure import spawn_layouts
    from rlm_lab.parallel.mesh import Layout

    jobs = [(Layout(**deg), kw) for deg, kw in FOUR_RANK.values()]
    return dict(zip(FOUR_RANK, spawn_layouts(jobs, world=4, steps=3, timeout_s=240)))
