"""torch's privates (read from torch 2.13.0; the version policy is :mod:`rlm_lab.compat`'s): the LR scheduler's
step marks, the elastic rendezvous' store sites, what the collective counter reads (the dispatcher mode, pytree
flattening, a group's name resolved, an op's schema) and a process group built by hand."""

from __future__ import annotations

import functools

from . import fail, source_has


@functools.cache
def _lr_scheduler_marks() -> None:
    import torch.optim.lr_scheduler as sched  # noqa: PLC0415 - torch stays lazy: compat loads no heavy library

    if not source_has(sched.LRScheduler.__init__, ["_wrapped_by_lr_sched", "opt._opt_called = True"]):
        raise fail("torch", "torch's LRScheduler no longer marks optimizer.step with _wrapped_by_lr_sched "
                            "and _opt_called")


def track_step_override(optimizer, override) -> None:
    """Install ``override`` as ``optimizer.step``, marked and recording its calls as torch's LRScheduler wrapper
    does (``_wrapped_by_lr_sched``, ``optimizer._opt_called``), so that the scheduler neither re-wraps it nor warns
    that ``optimizer.step()`` was never called (``rlm_lab.train.critic``)."""
    _lr_scheduler_marks()

    def step(*args, **kwargs):
        optimizer._opt_called = True  # what torch's own wrapper records
        return override(*args, **kwargs)

    step._wrapped_by_lr_sched = True
    optimizer.step = step


def torchrun_store_sites():
    """``(c10d_rendezvous_backend, DynamicRendezvousHandler)``, checked: the c10d backend builds its store
    through its module name ``TCPStore`` (``c10d_rendezvous_backend._create_tcp_store``) and the handler builds
    the workers' shared store through ``dist.TCPStore`` (``DynamicRendezvousHandler._create_tcp_store_server``),
    both with ``is_master`` as a keyword: the local multi-agent launch binds them to the address it is given
    (``rlm_lab.parallel.nodes``)."""
    try:
        import torch.distributed.elastic.rendezvous.c10d_rendezvous_backend as c10d  # noqa: PLC0415 - torch lazy
        from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (  # noqa: PLC0415 - torch lazy
            DynamicRendezvousHandler,
        )
    except ImportError:
        raise fail("torch", "torch.distributed.elastic's c10d rendezvous is missing") from None
    server = getattr(DynamicRendezvousHandler, "_create_tcp_store_server", None)
    if not (hasattr(c10d, "TCPStore") and source_has(c10d._create_tcp_store, ["store = TCPStore(", "is_master=is_server,"])
            and server is not None and source_has(server, ["return dist.TCPStore(", "is_master=True,"])):
        raise fail("torch", "torch's c10d rendezvous no longer builds its stores through TCPStore(is_master=...)")
    return c10d, DynamicRendezvousHandler


@functools.cache
def torch_dispatch_mode():
    """``torch.utils._python_dispatch.TorchDispatchMode``, the base of a mode that sees every op the dispatcher runs
    (``rlm_lab.parallel.comm_counter.CommCounter``; torch has no public name for it), checked that it still defines
    ``__torch_dispatch__`` and the context-manager methods."""
    try:
        from torch.utils._python_dispatch import TorchDispatchMode  # noqa: PLC0415 - torch lazy
    except ImportError:
        raise fail("torch", "torch.utils._python_dispatch.TorchDispatchMode is missing") from None
    if not all(callable(getattr(TorchDispatchMode, m, None)) for m in ("__torch_dispatch__", "__enter__", "__exit__")):
        raise fail("torch", "TorchDispatchMode no longer has __torch_dispatch__/__enter__/__exit__")
    return TorchDispatchMode


@functools.cache
def _pytree_flatten():
    try:
        from torch.utils._pytree import tree_flatten as flatten  # noqa: PLC0415 - torch lazy
    except ImportError:
        raise fail("torch", "torch.utils._pytree.tree_flatten is missing") from None
    return flatten


def tree_flatten(obj) -> list:
    """The leaves of ``obj`` (nested lists, tuples, dicts), as ``torch.utils._pytree.tree_flatten`` finds them."""
    return _pytree_flatten()(obj)[0]


@functools.cache
def _resolver():
    from torch.distributed import distributed_c10d  # noqa: PLC0415 - torch lazy

    resolve = getattr(distributed_c10d, "_resolve_process_group", None)
    if not callable(resolve):
        raise fail("torch", "torch.distributed.distributed_c10d._resolve_process_group is missing")
    return resolve


def resolve_process_group(name: str):
    """The ``ProcessGroup`` registered under ``name`` (functional collectives name their group by a string);
    torch's own error where ``name`` is no group's name."""
    return _resolver()(name)


def op_schema(func):
    """``func._schema`` of a dispatcher op (``OpOverload``): its name and arguments (the counter matches an op's
    arguments to their names; torch gives no public accessor)."""
    schema = getattr(func, "_schema", None)
    if schema is None or not hasattr(schema, "arguments"):
        raise fail("torch", f"{type(func).__name__}._schema (an op's name and arguments) is missing")
    return schema


def nccl_options(timeout):
    """``ProcessGroupNCCL.Options`` with ``_timeout`` set: a hand-built NCCL group's collective timeout (its public
    constructor takes no timeout; ``init_process_group`` sets the same private)."""
    import torch.distributed as dist  # noqa: PLC0415 - torch lazy

    opts = dist.ProcessGroupNCCL.Options()
    if not hasattr(opts, "_timeout"):
        raise fail("torch", "ProcessGroupNCCL.Options._timeout is missing")
    opts._timeout = timeout
    return opts


def register_backend(pg, device, kind, impl) -> None:
    """Give a hand-built ``ProcessGroup`` its one backend, as ``init_process_group``/``new_group`` do inside
    (``_set_default_backend``, ``_register_backend``): the weight-sync group (``rlm_lab.placement.weights``) is not
    the default group."""
    missing = [m for m in ("_set_default_backend", "_register_backend") if not callable(getattr(pg, m, None))]
    if missing:
        raise fail("torch", f"ProcessGroup.{', '.join(missing)} missing")
    pg._set_default_backend(kind)
    pg._register_backend(device, kind, impl)
