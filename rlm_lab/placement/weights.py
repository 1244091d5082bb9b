"""Weight sync trainer -> rollout workers: a bucketed broadcast over a process group made between the actors,
and the naive baseline through Ray's object store.

The collective path is what verl, OpenRLHF and NeMo-RL do (HybridFlow arXiv 2409.19256; OpenRLHF
arXiv 2405.11143): the trainer (rank 0) and the rollout workers (ranks 1..R) build one process group of
their own (gloo on CPU, NCCL on GPU) and the trainer broadcasts its weights in flat buckets.

The group is *stateless*: a ``TCPStore`` on the trainer's node (its server bound to that address alone,
:func:`rlm_lab.parallel.launch.bound_store`) plus a ``ProcessGroup`` with one backend registered,
built by hand because ``torch.distributed.init_process_group`` would create the *default* group in the
trainer's process, and accelerate/transformers read that as "this process is one rank of a data-parallel
job". (vLLM's ``StatelessProcessGroup`` exists for the same reason.) Collectives on such a group still go
through the c10d dispatcher ops, so :class:`rlm_lab.parallel.comm_counter.CommCounter` counts their bytes.

Bytes of one sync, the formula the chapter checks: the sum of the parameter bytes of the synced weights
(all parameters for full fine-tuning; the adapters only for LoRA), :func:`param_bytes`.
"""

from __future__ import annotations

import datetime
import hashlib
import time

from ..compat.torch import nccl_options, register_backend
from ..parallel.launch import bound_store

DEFAULT_BUCKET_BYTES = 1 << 20  # 1 MiB buckets: several per sync at cpu size, few calls at gpu size


def make_group(host: str, port: int, rank: int, world: int, timeout_s: float, backend: str = "gloo"):
    """A process group over ``world`` ranks that is not the default group (see the module docstring)."""
    import torch
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=timeout_s)
    store = bound_store(host, port, world, rank == 0, timeout_s, wait_for_workers=True)
    pg = dist.ProcessGroup(store, rank, world)
    if backend == "gloo":
        impl, device, kind = dist.ProcessGroupGloo(store, rank, world, timeout), torch.device("cpu"), \
            dist.ProcessGroup.BackendType.GLOO
    elif backend == "nccl":
        impl, device, kind = dist.ProcessGroupNCCL(store, rank, world, nccl_options(timeout)), torch.device("cuda"), \
            dist.ProcessGroup.BackendType.NCCL
    else:
        raise ValueError(f"unknown backend {backend!r}")
    register_backend(pg, device, kind, impl)
    return Group(pg, store)


class Group:
    """A process group and the store it rendezvoused through (kept alive as long as the group)."""

    def __init__(self, pg, store):
        self.pg, self.store = pg, store

    def rank(self) -> int:
        return self.pg.rank()

    def size(self) -> int:
        return self.pg.size()

    def broadcast(self, tensors, opts):
        return self.pg.broadcast(tensors, opts)


def synced_parameters(model) -> list:
    """``[(name, tensor)]`` the rollout needs after each step: trainable parameters when some are frozen
    (LoRA: the adapters), else all parameters. Same order in every process (module registration order)."""
    params = list(model.named_parameters())
    trainable = [(n, p) for n, p in params if p.requires_grad]
    return trainable if 0 < len(trainable) < len(params) else params


def param_bytes(model) -> int:
    """The formula: bytes of one weight sync = sum over synced parameters of numel x element size."""
    return sum(p.numel() * p.element_size() for _, p in synced_parameters(model))


def buckets(named, bucket_bytes: int = DEFAULT_BUCKET_BYTES) -> list[list]:
    """Consecutive runs of parameters of one dtype, each at most ``bucket_bytes`` (a bigger tensor is a
    bucket of its own). Deterministic: sender and receivers compute the same buckets from the same model."""
    out, cur, size, dtype = [], [], 0, None
    for name, p in named:
        nb = p.numel() * p.element_size()
        if cur and (size + nb > bucket_bytes or p.dtype != dtype):
            out.append(cur)
            cur, size = [], 0
        cur.append((name, p))
        size += nb
        dtype = p.dtype
    if cur:
        out.append(cur)
    return out


def broadcast_weights(model, group, src: int = 0, bucket_bytes: int = DEFAULT_BUCKET_BYTES, on_bucket=None) -> dict:
    """Broadcast the synced parameters of ``model`` from rank ``src`` in flat buckets; every rank calls it
    (the source sends its weights, the others overwrite theirs). Returns calls, bytes and seconds.
    ``on_bucket(i)``: called after bucket ``i`` (fault injection: a worker that dies mid-broadcast)."""
    import torch
    import torch.distributed as dist

    t0 = time.perf_counter()
    calls = nbytes = 0
    opts = dist.BroadcastOptions()
    opts.rootRank = src
    with torch.no_grad():
        for bucket in buckets(synced_parameters(model), bucket_bytes):
            flat = torch.cat([p.detach().reshape(-1) for _, p in bucket]) if group.rank() == src else \
                torch.empty(sum(p.numel() for _, p in bucket), dtype=bucket[0][1].dtype, device=bucket[0][1].device)
            group.broadcast([flat], opts).wait()
            if group.rank() != src:
                off = 0
                for _, p in bucket:
                    p.copy_(flat[off:off + p.numel()].view_as(p))
                    off += p.numel()
            calls += 1
            nbytes += flat.numel() * flat.element_size()
            if on_bucket is not None:
                on_bucket(calls - 1)
    return {"calls": calls, "bytes": nbytes, "seconds": time.perf_counter() - t0}


def weights_digest(model) -> str:
    """SHA-256 of every parameter's name and bytes (registration order): two runs that end with the same
    weights, bit for bit, have the same digest, whichever process or node computed it."""
    import torch

    h = hashlib.sha256()
    for name, p in model.named_parameters():
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def state_for_object_store(model) -> dict:
    """The baseline's payload: ``{name: tensor}`` of the synced parameters (what ``ray.put`` serializes)."""
    return {n: p.detach().clone() for n, p in synced_parameters(model)}


def load_synced(model, state: dict) -> int:
    """Copy an object-store payload into ``model``; returns the bytes copied."""
    import torch

    named = dict(synced_parameters(model))
    missing = sorted(set(named) - set(state))
    if missing:
        raise ValueError(f"weight payload lacks {len(missing)} parameter(s), e.g. {missing[0]}")
    n = 0
    with torch.no_grad():
        for name, p in named.items():
            p.copy_(state[name])
            n += p.numel() * p.element_size()
    return n
