"""rlm_lab.compat: the guarded adapters to library privates pass on the pinned libraries, fail with one line
naming the private and the versions where the private is gone, and are the only door to those privates."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from rlm_lab import compat
from rlm_lab.compat import accelerate as cacc
from rlm_lab.compat import ray as cray
from rlm_lab.compat import stdlib as cstd
from rlm_lab.compat import torch as ctorch
from rlm_lab.compat import transformers as ctf
from rlm_lab.compat import trl as ctrl
from rlm_lab.errors import RlmLabError

ROOT = Path(__file__).resolve().parents[1]


def test_profiling_context_is_trls_class_with_a_name():
    from trl.extras.profiling import ProfilingContext

    assert ctrl.profiling_context() is ProfilingContext


def test_set_attn_implementation_goes_through_transformers_setter():
    from transformers import LlamaConfig

    cfg = LlamaConfig(num_hidden_layers=1, hidden_size=16, intermediate_size=32, num_attention_heads=2)
    ctf.set_attn_implementation(cfg, "eager")
    assert cfg._attn_implementation == "eager" and cfg._attn_implementation_internal == "eager"


def test_a_config_without_the_property_is_one_clear_error():
    class Plain:
        _attn_implementation = None

    with pytest.raises(RlmLabError, match=r"Plain\._attn_implementation is no settable property: .* transformers 5\.24\.0"):
        ctf.set_attn_implementation(Plain(), "eager")


def test_trainer_privates_read_and_missing():
    class Fake:
        _train_batch_size = 4

        def _get_train_sampler(self):
            return [2, 0, 1]

    assert ctf.train_sampler(Fake()) == [2, 0, 1] and ctf.train_batch_size(Fake()) == 4
    with pytest.raises(RlmLabError, match=r"object\._train_batch_size is missing"):
        ctf.train_batch_size(object())
    with pytest.raises(RlmLabError, match=r"_get_train_sampler\(\) is missing"):
        ctf.train_sampler(object())


def test_step_override_is_marked_and_recorded_as_torchs_wrapper_does():
    import torch

    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=1.0)
    calls = []
    ctorch.track_step_override(opt, lambda *a, **k: calls.append(1))
    assert opt.step._wrapped_by_lr_sched is True and not getattr(opt, "_opt_called", False)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
    assert opt.step._wrapped_by_lr_sched is True  # torch kept the override instead of re-wrapping it
    opt.step()
    assert calls == [1] and opt._opt_called is True
    sched.step()


def test_check_overrides_names_what_trl_lacks():
    from trl import GRPOTrainer

    from rlm_lab.train.ppo import PPOTrainer

    ctrl.check_overrides(GRPOTrainer, PPOTrainer.TRL_PRIVATES)  # the pinned TRL has every one
    with pytest.raises(RlmLabError, match=r"GRPOTrainer has no _no_such_method \(overridden by rlm-lab's PPO\)"):
        ctrl.check_overrides(GRPOTrainer, ("_compute_loss", "_no_such_method"))


def test_source_has_reads_lines():
    def f():
        x = 1  # noqa: F841
        return "self.name = name"

    assert compat.source_has(f, ["x = 1", 'return "self.name'])
    assert not compat.source_has(f, ["x = 2"]) and not compat.source_has(len, ["anything"])


# the privates these adapters cover, as they would be written outside rlm_lab/compat/ (through an attribute or a
# parameter, where tests/test_private_door.py cannot tell a library object)
PRIVATES = ("_get_train_sampler", "_train_batch_size", "_wrapped_by_lr_sched", "_opt_called", "_schema", "_tokenizer",
            "_compile_all_devices", "_last_loaded_step", "_models", "_actor_id", "_ray_params", "_reader",
            "_register_backend", "_set_default_backend", "_timeout", "_resolve_process_group")


def test_no_module_but_compat_reaches_these_privates():
    found = []
    for p in sorted((ROOT / "rlm_lab").rglob("*.py")):
        if "compat" in p.relative_to(ROOT).parts[1:-1]:
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            own = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
            if isinstance(node, ast.Attribute) and not own and (node.attr in PRIVATES or (
                    node.attr == "_attn_implementation" and isinstance(getattr(node, "ctx", None), ast.Store))):
                found.append(f"{p.relative_to(ROOT)}:{node.lineno} .{node.attr}")
            if isinstance(node, ast.ImportFrom) and node.module == "trl.extras.profiling" and any(
                    a.name == "ProfilingContext" for a in node.names):
                found.append(f"{p.relative_to(ROOT)}:{node.lineno} ProfilingContext")
            # getattr(x, "_private") and sys.modules["ray._private..."]
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                    node.value in PRIVATES or node.value.startswith("ray._private")):
                found.append(f"{p.relative_to(ROOT)}:{node.lineno} {node.value!r}")
    assert not found, f"reach these through rlm_lab.compat: {found}"


def test_ray_start_privates_are_the_verified_ones():
    services, Node, raylet = cray.ray_start_privates()
    assert callable(services.get_node) and callable(Node.start_raylet) and callable(raylet.persist_port)
    # a source line the adapter relies on that is not there must fail the check
    assert not compat.source_has(Node.__init__, ["raylet_start_wait_time_s = 31"])


def test_importing_compat_loads_no_heavy_library():
    import subprocess
    import sys

    code = ("import sys, rlm_lab.compat, rlm_lab.compat.torch, rlm_lab.compat.trl, rlm_lab.compat.ray\n"
            "print(sorted(m for m in ('torch', 'transformers', 'trl', 'ray', 'accelerate') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_the_library_modules_use_the_one_policy():
    # every adapter module builds its errors with the package's fail (one wording, one version table)
    for m in (cacc, cray, cstd, ctorch, ctf, ctrl):
        assert m.fail is compat.fail and m.__name__.rsplit(".", 1)[1] in {*compat.VERIFIED, "stdlib"}


def test_the_policy_line_names_library_private_and_both_versions(monkeypatch):
    monkeypatch.setattr(compat, "installed", lambda lib: "9.9.9")
    e = compat.fail("ray", "Node._x is missing")
    assert str(e) == ("Node._x is missing: rlm-lab relies on it as in ray 2.60.0, but this is ray 9.9.9; "
                      "install ray==2.60.0 (requirements.txt)")


def test_collective_counter_privates():
    import torch

    assert ctorch.torch_dispatch_mode().__name__ == "TorchDispatchMode"
    assert [int(t) for t in ctorch.tree_flatten({"a": [torch.ones(1), (torch.zeros(1),)], "b": 3})[:2]] == [1, 0]
    assert ctorch.op_schema(torch.ops.aten.add.Tensor).name == "aten::add"
    with pytest.raises(RlmLabError, match=r"object\._schema .*torch 2\.13\.0"):
        ctorch.op_schema(object())
    with pytest.raises(Exception):  # torch's own error: a name that is no group's
        ctorch.resolve_process_group("no-such-group")


def test_process_group_backend_privates_missing_are_one_line():
    with pytest.raises(RlmLabError, match=r"ProcessGroup\._set_default_backend, _register_backend missing"):
        ctorch.register_backend(object(), None, None, None)


def test_queue_reader_is_the_connection_wait_can_wait_on():
    import multiprocessing
    import multiprocessing.connection as mpc

    q = multiprocessing.get_context("spawn").SimpleQueue()
    q.put(1)
    assert mpc.wait([cstd.simple_queue_reader(q)], timeout=5) == [cstd.simple_queue_reader(q)]
    with pytest.raises(RlmLabError, match=r"list\._reader .* python 3\.11"):
        cstd.simple_queue_reader([])


def test_compile_config_on_every_device():
    cfg = ctf.compile_on_every_device()
    assert cfg._compile_all_devices is True and type(cfg).__name__ == "CompileConfig"


def test_accelerate_and_trl_object_privates():
    class Acc:
        _models = ["m"]

    assert cacc.prepared_models(Acc()) == ["m"]
    with pytest.raises(RlmLabError, match=r"object\._models .*accelerate 1\.15\.0"):
        cacc.prepared_models(object())
    with pytest.raises(RlmLabError, match=r"object\._tokenizer .*trl 1\.16\.0"):
        ctrl.trainer_tokenizer(object())
    assert cray.actor_id(object()) is None  # no actor handle: no id


def test_use_vllm_gates_check_follows_the_policy_not_the_version_number(monkeypatch):
    from trl import GRPOTrainer

    from rlm_lab.asynchrony import correction

    class Mine(GRPOTrainer):
        def __init__(self):  # no model needed: the check reads GRPOTrainer's source
            pass

    monkeypatch.setattr(compat, "installed", lambda lib: "99.0.0")  # another TRL whose gates are the same: passes
    ctrl.check_use_vllm_gates(Mine(), correction.VERIFIED_GATES)
    with pytest.raises(RlmLabError, match=r"other places than the verified ones.*trl 1\.16\.0, but this is trl 99"):
        ctrl.check_use_vllm_gates(Mine(), correction.VERIFIED_GATES[:-1])
    with pytest.raises(RlmLabError, match=r"object is no GRPOTrainer"):
        ctrl.check_use_vllm_gates(object(), correction.VERIFIED_GATES)


def test_ray_cluster_gate_and_agent_ports(monkeypatch):
    import sys
    import types

    fake = types.SimpleNamespace(ENABLE_RAY_CLUSTER=True)
    monkeypatch.setitem(sys.modules, "ray._private.ray_constants", fake)
    cray.close_cluster_gate()
    assert fake.ENABLE_RAY_CLUSTER is False
    with pytest.raises(RlmLabError, match=r"object\._ray_params .*ray 2\.60\.0"):
        cray.persist_agent_ports(object(), ())
