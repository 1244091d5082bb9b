"""Start N worker processes with a process group (gloo on CPU, NCCL on GPU) and collect results.

Used by tests and notebooks; ``torchrun`` is the launcher for the CLI. Every process group gets a
timeout, so a stalled rank fails the run within it, and a rank that dies or raises turns into one
:class:`RlmLabError` naming the rank, instead of a hang.
"""

from __future__ import annotations

import datetime as _dt
import os
import socket
import traceback

from ..errors import RlmLabError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_process_group(rank: int, world_size: int, port: int, backend: str = "gloo", timeout_s: float = 60.0):
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group(backend, rank=rank, world_size=world_size,
                            timeout=_dt.timedelta(seconds=timeout_s))


def _worker(rank, fn, world_size, port, backend, timeout_s, threads, args, queue):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(threads)
    init_process_group(rank, world_size, port, backend, timeout_s)
    try:
        queue.put((rank, fn(rank, world_size, *args), None))
    except BaseException as e:  # noqa: BLE001 - reported to the parent, then re-raised
        queue.put((rank, None, f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def spawn(fn, world_size: int, args: tuple = (), backend: str = "gloo", timeout_s: float = 60.0,
          threads: int = 1) -> list:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` processes; return the per-rank results.

    ``fn`` must be importable (a module-level function), as with any ``spawn`` start method.
    """
    import torch.multiprocessing as mp

    if world_size < 1:
        raise RlmLabError(f"world size must be >= 1, got {world_size}")
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    port = free_port()
    try:
        mp.start_processes(_worker, args=(fn, world_size, port, backend, timeout_s, threads, args, queue),
                           nprocs=world_size, join=True, start_method="spawn")
    except (mp.ProcessRaisedException, mp.ProcessExitedException) as e:
        errors = _drain(queue, world_size)[1]
        # name the rank that failed first: its peers only report the broken connection afterwards
        causes = sorted(errors.items(), key=lambda kv: ("closed by peer" in kv[1] or "Timed out" in kv[1], kv[0]))
        first = next((f"rank {r}: {msg.splitlines()[0]}" for r, msg in causes), str(e).splitlines()[-1])
        raise RlmLabError(f"a worker failed ({first}); the other ranks were stopped") from None
    results, errors = _drain(queue, world_size)
    return results


def _drain(queue, world_size):
    results, errors = [None] * world_size, {}
    while not queue.empty():
        rank, value, err = queue.get()
        results[rank] = value
        if err:
            errors[rank] = err
    return results, errors
