"""rlm_lab.compat: the guarded adapters to library privates pass on the pinned libraries, fail with one line
naming the private and the versions where the private is gone, and are the only door to those privates."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from rlm_lab import compat
from rlm_lab.errors import RlmLabError

ROOT = Path(__file__).resolve().parents[1]


def test_profiling_context_is_trls_class_with_a_name():
    from trl.extras.profiling import ProfilingContext

    assert compat.profiling_context() is ProfilingContext


def test_set_attn_implementation_goes_through_transformers_setter():
    from transformers import LlamaConfig

    cfg = LlamaConfig(num_hidden_layers=1, hidden_size=16, intermediate_size=32, num_attention_heads=2)
    compat.set_attn_implementation(cfg, "eager")
    assert cfg._attn_implementation == "eager" and cfg._attn_implementation_internal == "eager"


def test_a_config_without_the_property_is_one_clear_error():
    class Plain:
        _attn_implementation = None

    with pytest.raises(RlmLabError, match=r"Plain\._attn_implementation is no settable property: .* transformers 5\.24\.0"):
        compat.set_attn_implementation(Plain(), "eager")


def test_trainer_privates_read_and_missing():
    class Fake:
        _train_batch_size = 4

        def _get_train_sampler(self):
            return [2, 0, 1]

    assert compat.train_sampler(Fake()) == [2, 0, 1] and compat.train_batch_size(Fake()) == 4
    with pytest.raises(RlmLabError, match=r"object\._train_batch_size is missing"):
        compat.train_batch_size(object())
    with pytest.raises(RlmLabError, match=r"_get_train_sampler\(\) is missing"):
        compat.train_sampler(object())


def test_step_override_is_marked_and_recorded_as_torchs_wrapper_does():
    import torch

    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=1.0)
    calls = []
    compat.track_step_override(opt, lambda *a, **k: calls.append(1))
    assert opt.step._wrapped_by_lr_sched is True and not getattr(opt, "_opt_called", False)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
    assert opt.step._wrapped_by_lr_sched is True  # torch kept the override instead of re-wrapping it
    opt.step()
    assert calls == [1] and opt._opt_called is True
    sched.step()


def test_check_overrides_names_what_trl_lacks():
    from trl import GRPOTrainer

    from rlm_lab.train.ppo import PPOTrainer

    compat.check_overrides(GRPOTrainer, PPOTrainer.TRL_PRIVATES)  # the pinned TRL has every one
    with pytest.raises(RlmLabError, match=r"GRPOTrainer has no _no_such_method \(overridden by rlm-lab's PPO\)"):
        compat.check_overrides(GRPOTrainer, ("_compute_loss", "_no_such_method"))


def test_source_has_reads_lines():
    def f():
        x = 1  # noqa: F841
        return "self.name = name"

    assert compat.source_has(f, ["x = 1", 'return "self.name'])
    assert not compat.source_has(f, ["x = 2"]) and not compat.source_has(len, ["anything"])


# the privates these adapters cover, as they would be written outside rlm_lab/compat.py
PRIVATES = ("_get_train_sampler", "_train_batch_size", "_wrapped_by_lr_sched", "_opt_called")


def test_no_module_but_compat_reaches_these_privates():
    found = []
    for p in sorted((ROOT / "rlm_lab").rglob("*.py")):
        if p.name == "compat.py":
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Attribute) and (node.attr in PRIVATES or (
                    node.attr == "_attn_implementation" and isinstance(getattr(node, "ctx", None), ast.Store))):
                found.append(f"{p.relative_to(ROOT)}:{node.lineno} .{node.attr}")
            if isinstance(node, ast.ImportFrom) and node.module == "trl.extras.profiling" and any(
                    a.name == "ProfilingContext" for a in node.names):
                found.append(f"{p.relative_to(ROOT)}:{node.lineno} ProfilingContext")
    assert not found, f"reach these through rlm_lab.compat: {found}"


def test_ray_start_privates_are_the_verified_ones():
    from rlm_lab import compat

    services, Node, raylet = compat.ray_start_privates()
    assert callable(services.get_node) and callable(Node.start_raylet) and callable(raylet.persist_port)
    # a source line the adapter relies on that is not there must fail the check
    assert not compat.source_has(Node.__init__, ["raylet_start_wait_time_s = 31"])
