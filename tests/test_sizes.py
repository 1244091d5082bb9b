"""The size registry: every knob a chapter reads is runnable at every size (checked with the chapters' own
validators, without running anything), and the book's table has one row per size."""

import pytest

from rlm_lab import sizes
from rlm_lab.errors import RlmLabError


@pytest.mark.parametrize("size", sizes.SIZES)
def test_every_training_preset_is_a_valid_run_config(size):
    from rlm_lab.train import ALGOS, make_config

    for algo in ALGOS:
        cfg = make_config(algo, size)
        assert cfg.size == size and cfg.model == sizes.get(size).train["model"]


@pytest.mark.parametrize("size", sizes.SIZES)
def test_every_parallel_layout_and_sweep_validates(size):
    from rlm_lab.models import ZOO, make_config
    from rlm_lab.parallel.context_parallel import check_cp
    from rlm_lab.parallel.expert_parallel import check_ep
    from rlm_lab.parallel.mesh import Layout, validate
    from rlm_lab.parallel.pipeline_parallel import check_pp

    s = sizes.get(size)
    for world, items in s.parallel_layouts:
        for degrees, kw in items:
            args = dict(s.parallel) | dict(kw)
            validate(Layout(**degrees), args["model"], world_size=world, batch=args["batch"], seq=args["seq"])
    for kind, kw in s.parallel_sweeps:
        if kind == "pp":
            check_pp(kw.get("layers") or make_config(kw["model"]).num_hidden_layers, kw["world"], kw["batch"],
                     kw["microbatches"])
        elif kind == "cp":
            check_cp(kw["seq"], kw["world"])
        else:
            check_ep(ZOO[kw["model"]].experts, kw["world"])


def test_registry_is_frozen_and_unknown_sizes_are_one_clear_error():
    from dataclasses import FrozenInstanceError

    with pytest.raises(TypeError):
        sizes.get("cpu").train["rl_steps"] = 1  # MappingProxyType: read-only
    with pytest.raises(FrozenInstanceError):
        sizes.get("cpu").placement_steps = 1
    with pytest.raises(RlmLabError, match="unknown size 'huge'; choose one of: cpu, gpu, smoke"):
        sizes.get("huge")


def test_book_table_has_one_row_per_size_saying_what_it_shows():
    rows = sizes.table()
    assert [r["size"] for r in rows] == list(sizes.SIZES)
    assert all(len(r["what it shows"]) > 100 and r["model (ch. 1)"] for r in rows)
