"""Library internals through one door: every reach into a private of TRL, transformers or torch, guarded.

rlm-lab uses a few non-public parts of its libraries where no public API does the job. Each adapter below
names the private it relies on, the library version it was read from (:data:`VERIFIED`), and checks, the first
time it is used in a process, that the private is still there in the form relied on: an attribute that exists,
or source lines that are present (``inspect.getsource``). If not, it fails with one clear line (an
:class:`rlm_lab.errors.RlmLabError` naming the private, the verified version and the installed one) before any
work, never with a traceback from inside the library or a silently wrong number. A different version whose
source still matches passes (Colab keeps its own torch), as :mod:`rlm_lab.asynchrony.correction` does for
TRL's ``use_vllm`` gates.

* :func:`profiling_context` -- TRL's ``trl.extras.profiling.ProfilingContext``, whose ``__enter__`` and
  ``__exit__`` the stage tracer wraps (``rlm_lab.train.tracer``; it reads ``self.name``);
* :func:`set_attn_implementation` -- ``PretrainedConfig._attn_implementation``, set to the ring-attention
  kernel registered by ``rlm_lab.parallel.context_parallel`` (``model.set_attn_implementation`` would
  validate the name against the built-in kernels and reload);
* :func:`train_sampler`, :func:`train_batch_size` -- ``Trainer._get_train_sampler()`` and
  ``Trainer._train_batch_size``: the prompts TRL's dataloader would draw next, in its order
  (``rlm_lab.asynchrony.trl_rollout``);
* :func:`track_step_override` -- torch's ``LRScheduler`` marks ``optimizer.step`` as wrapped
  (``_wrapped_by_lr_sched``) and records a call (``optimizer._opt_called``); an instance-level override of
  ``step`` has to do the same (``rlm_lab.train.critic``);
* :func:`check_overrides` -- the private methods of TRL's ``GRPOTrainer`` that PPO (``rlm_lab.train.ppo``)
  overrides and calls through ``super()``;
* :func:`ray_start_privates` -- Ray's ``ray._private.services.get_node`` (polled by ``Node.__init__`` for a
  fixed 30 s until the raylet registers), ``ray._private.node.Node.start_raylet`` and
  ``ray._raylet.persist_port``, which the local head's process (``rlm_lab.placement.ray_head``) wraps so that
  the head starts on a busy machine;
* :func:`ray_worker_node_privates` -- the module of Ray's CLI (``ray.scripts.scripts``) whose ``start`` refuses a
  worker node (``--address``) when ``ray_constants.ENABLE_RAY_CLUSTER`` is false, and
  ``ray._private.node.Node._prepare_socket_file``, which names a node's raylet and object-store sockets: the
  local cluster's worker nodes lift that gate for the CLI alone and put their node name in those socket
  names (``rlm_lab.placement.ray_head``);
* :func:`torchrun_store_sites` -- torch's elastic rendezvous modules that create the c10d rendezvous store
  (``c10d_rendezvous_backend._create_tcp_store``, through the module's name ``TCPStore``) and the store the
  workers share (``DynamicRendezvousHandler._create_tcp_store_server``, through ``dist.TCPStore``): the local
  multi-agent launch binds them to the address they are given (``rlm_lab.parallel.agent``).
"""

from __future__ import annotations

import functools
import inspect
from importlib.metadata import PackageNotFoundError, version

from .errors import RlmLabError

# The versions each adapter was read from (requirements.txt pins the same).
VERIFIED = {"trl": "1.16.0", "transformers": "5.24.0", "torch": "2.13.0", "ray": "2.60.0"}


def installed(lib: str) -> str:
    try:
        return version(lib)
    except PackageNotFoundError:
        return "not installed"


def _fail(lib: str, what: str) -> RlmLabError:
    return RlmLabError(f"{what}: rlm-lab relies on it as in {lib} {VERIFIED[lib]}, but this is {lib} "
                       f"{installed(lib)}; install {lib}=={VERIFIED[lib]} (requirements.txt)")


def source_has(obj, lines) -> bool:
    """Does the source of ``obj`` hold every one of ``lines`` (whitespace-stripped, as substrings of a line)?"""
    try:
        src = [ln.strip() for ln in inspect.getsource(obj).splitlines()]
    except (OSError, TypeError):
        return False
    return all(any(want in ln for ln in src) for want in lines)


@functools.cache
def profiling_context():
    """TRL's ``ProfilingContext`` class, checked: it defines ``__enter__``/``__exit__`` and sets ``self.name``."""
    try:
        from trl.extras.profiling import ProfilingContext
    except ImportError:
        raise _fail("trl", "trl.extras.profiling.ProfilingContext is missing") from None
    if not ("__enter__" in vars(ProfilingContext) and "__exit__" in vars(ProfilingContext)
            and source_has(ProfilingContext.__init__, ["self.name = name"])):
        raise _fail("trl", "trl's ProfilingContext no longer has __enter__/__exit__ and a name")
    return ProfilingContext


@functools.cache
def _attn_setter(config_cls) -> None:
    prop = getattr(config_cls, "_attn_implementation", None)
    if not (isinstance(prop, property) and prop.fset is not None):
        raise _fail("transformers", f"{config_cls.__name__}._attn_implementation is no settable property")


def set_attn_implementation(config, impl: str) -> None:
    """``config._attn_implementation = impl`` (transformers' own setter: it also sets the sub-configs)."""
    _attn_setter(type(config))
    config._attn_implementation = impl


@functools.cache
def _trainer_private(cls, name: str, kind: str) -> None:
    if kind == "method" and not callable(getattr(cls, name, None)):
        raise _fail("transformers", f"{cls.__name__}.{name}() is missing")


def train_sampler(trainer):
    """``trainer._get_train_sampler()``: the sampler TRL's training dataloader iterates (same seed, same order)."""
    _trainer_private(type(trainer), "_get_train_sampler", "method")
    return trainer._get_train_sampler()


def train_batch_size(trainer) -> int:
    """``trainer._train_batch_size``: the per-device batch the Trainer's dataloader was built with."""
    if not hasattr(trainer, "_train_batch_size"):
        raise _fail("transformers", f"{type(trainer).__name__}._train_batch_size is missing")
    return trainer._train_batch_size


@functools.cache
def _lr_scheduler_marks() -> None:
    import torch.optim.lr_scheduler as sched

    if not source_has(sched.LRScheduler.__init__, ["_wrapped_by_lr_sched", "opt._opt_called = True"]):
        raise _fail("torch", "torch's LRScheduler no longer marks optimizer.step with _wrapped_by_lr_sched "
                             "and _opt_called")


def track_step_override(optimizer, override) -> None:
    """Install ``override`` as ``optimizer.step``, marked and recording its calls as torch's LRScheduler wrapper
    does, so that the scheduler neither re-wraps it nor warns that ``optimizer.step()`` was never called."""
    _lr_scheduler_marks()

    def step(*args, **kwargs):
        optimizer._opt_called = True  # what torch's own wrapper records
        return override(*args, **kwargs)

    step._wrapped_by_lr_sched = True
    optimizer.step = step


@functools.cache
def check_overrides(base, names: tuple) -> None:
    """Every one of ``names`` is a method of ``base`` (TRL's GRPOTrainer or what it inherits), so that a
    subclass overriding it and calling ``super()`` still reaches TRL's code."""
    missing = [n for n in names if not callable(getattr(base, n, None))]
    if missing:
        raise _fail("trl", f"{base.__name__} has no {', '.join(missing)} (overridden by rlm-lab's PPO)")


def ray_start_privates():
    """``(services, Node, raylet)``: Ray's modules whose privates the local head wraps, checked: ``Node.__init__``
    still polls ``services.get_node`` with a fixed ``raylet_start_wait_time_s``, and ``Node.start_raylet`` and
    ``raylet.persist_port`` exist."""
    try:
        import ray._private.services as services
        import ray._raylet as raylet
        from ray._private.node import Node
    except ImportError:
        raise _fail("ray", "ray._private.services / ray._private.node / ray._raylet are missing") from None
    if not (callable(getattr(services, "get_node", None)) and callable(getattr(Node, "start_raylet", None))
            and callable(getattr(raylet, "persist_port", None))
            and source_has(Node.__init__, ["raylet_start_wait_time_s = 30", "ray._private.services.get_node("])):
        raise _fail("ray", "Ray's node start-up no longer polls services.get_node for a fixed 30 s")
    return services, Node, raylet


def ray_worker_node_privates():
    """``(scripts, Node)``: ``ray.scripts.scripts``, checked that its ``start`` still gates a worker node on
    ``ray_constants.ENABLE_RAY_CLUSTER`` (read through the module's name ``ray_constants``), and
    ``ray._private.node.Node``, checked that ``_prepare_socket_file`` names an unnamed socket
    ``<sockets dir>/<default_prefix>[.<n>]``."""
    try:
        import ray.scripts.scripts as scripts
        from ray._private.node import Node
    except ImportError:
        raise _fail("ray", "ray.scripts.scripts / ray._private.node are missing") from None
    start = getattr(getattr(scripts, "start", None), "callback", None)
    if not (hasattr(scripts, "ray_constants") and start is not None
            and source_has(start, ["if not ray_constants.ENABLE_RAY_CLUSTER:", "Multi-node Ray clusters are not supported"])):
        raise _fail("ray", "`ray start` no longer gates a worker node on ray_constants.ENABLE_RAY_CLUSTER")
    prepare = getattr(Node, "_prepare_socket_file", None)
    if prepare is None or not source_has(prepare, ["def _prepare_socket_file(self, socket_path: str, default_prefix: str):",
                                                   "prefix=default_prefix, directory_name=self._sockets_dir"]):
        raise _fail("ray", "Node._prepare_socket_file no longer names a socket by its default_prefix")
    return scripts, Node


def torchrun_store_sites():
    """``(c10d_rendezvous_backend, DynamicRendezvousHandler)``, checked: the c10d backend builds its store
    through its module name ``TCPStore`` and the handler builds the workers' shared store through
    ``dist.TCPStore``, both with ``is_master`` as a keyword."""
    try:
        import torch.distributed.elastic.rendezvous.c10d_rendezvous_backend as c10d
        from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler
    except ImportError:
        raise _fail("torch", "torch.distributed.elastic's c10d rendezvous is missing") from None
    server = getattr(DynamicRendezvousHandler, "_create_tcp_store_server", None)
    if not (hasattr(c10d, "TCPStore") and source_has(c10d._create_tcp_store, ["store = TCPStore(", "is_master=is_server,"])
            and server is not None and source_has(server, ["return dist.TCPStore(", "is_master=True,"])):
        raise _fail("torch", "torch's c10d rendezvous no longer builds its stores through TCPStore(is_master=...)")
    return c10d, DynamicRendezvousHandler
