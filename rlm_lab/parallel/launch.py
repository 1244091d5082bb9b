"""Start N worker processes with a process group (gloo on CPU, NCCL on GPU) and collect results.

Used by ``rlm-lab parallel``, the benchmark harness, tests and notebooks. Every process group gets a
timeout, so a stalled rank fails the run within it, and a failed run becomes ONE :class:`RlmLabError`
line naming the rank that caused it and how: a rank killed by a signal, a rank that raised (its
exception's last line), a rank that exited early, or a rank that stalled (alive, but its peers timed out
waiting for it). The peers' own errors ("connection closed by peer", "timed out") are consequences and
are not what the message leads with.

Why a hand-written join loop instead of ``torch.multiprocessing.start_processes(join=True)``: on a
failure torch waits up to 30 s per grace period for the other ranks to take SIGTERM (a stalled rank
ignores it until its sleep or collective ends), prints each rank's traceback, and does not say which
rank stalled. Here the parent watches the processes and a results queue together, lets the other ranks
report for a short grace period (at most 1 s, or a twentieth of the timeout), then SIGKILLs what is left.
"""

from __future__ import annotations

import datetime as _dt
import multiprocessing.connection as mpc
import os
import signal
import socket
import time
import traceback

from ..compat.stdlib import simple_queue_reader
from ..errors import RlmLabError
from ..host import die_with_parent, free_port

# a peer's view of another rank's failure, not a cause (gloo/TCPStore messages, torch 2.13)
_CONSEQUENCES = ("closed by peer", "Connection reset", "Timed out", "timed out", "Broken pipe", "Connection refused",
                 "DistBackendError", "failed to recv", "failed to send")


def bound_store(host: str, port: int, world_size: int | None, is_master: bool, timeout_s: float, **kwargs):
    """A ``torch.distributed.TCPStore`` whose server listens on ``host`` alone (``port`` 0: a free one).

    torch's own server binds every interface (``::``) whatever host it is given (torch 2.13, measured here: a
    store made for 127.0.0.1 listened on ``::``); so the master's socket is bound here and handed to the store
    (``master_listen_fd``, https://pytorch.org/docs/stable/distributed.html#torch.distributed.TCPStore), which
    owns it from then on. A port already taken is a RuntimeError, as torch's own store raises. A client
    (``is_master`` false) is torch's store unchanged."""
    import torch.distributed as dist

    timeout = _dt.timedelta(seconds=timeout_s)
    if not is_master or kwargs.get("master_listen_fd") is not None:
        return dist.TCPStore(host, port, world_size, is_master, timeout=timeout, **kwargs)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(512)
    except OSError as e:
        sock.close()
        raise RuntimeError(f"cannot listen on {host}:{port}: {e}") from None
    port = sock.getsockname()[1]
    return dist.TCPStore(host, port, world_size, True, timeout=timeout, master_listen_fd=sock.detach(), **kwargs)


def init_process_group(rank: int, world_size: int, port: int, backend: str = "gloo", timeout_s: float = 60.0):
    """The default group of ``rank`` in ``world_size``, rendezvousing at 127.0.0.1:``port`` (rank 0's store,
    bound to loopback alone: :func:`bound_store`)."""
    import torch.distributed as dist

    store = bound_store("127.0.0.1", port, world_size, rank == 0, timeout_s)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                            timeout=_dt.timedelta(seconds=timeout_s))


def _worker(rank, fn, world_size, port, backend, timeout_s, threads, args, queue):
    import torch
    import torch.distributed as dist

    die_with_parent()
    torch.set_num_threads(threads)
    try:
        init_process_group(rank, world_size, port, backend, timeout_s)
        queue.put((rank, fn(rank, world_size, *args), None))
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which stops the run
        last = f"{type(e).__name__}: {e}".strip().splitlines()
        queue.put((rank, None, (last[0] if last else type(e).__name__, traceback.format_exc())))
        os._exit(1)  # no teardown: destroying a group whose peer is gone can block
    if dist.is_initialized():
        dist.destroy_process_group()


def spawn(fn, world_size: int, args: tuple = (), backend: str = "gloo", timeout_s: float = 60.0,
          threads: int = 1) -> list:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` processes; return the per-rank results.

    ``fn`` must be importable (a module-level function), as with any ``spawn`` start method. A failure
    raises one :class:`RlmLabError` (see the module docstring) within about the collective timeout
    ``timeout_s`` plus the grace period.
    """
    import torch.multiprocessing as mp

    if not isinstance(world_size, int) or world_size < 1:
        raise RlmLabError(f"world size must be >= 1, got {world_size}")
    if not timeout_s > 0:
        raise RlmLabError(f"timeout must be > 0 seconds, got {timeout_s}")
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    port = free_port()
    procs = [ctx.Process(target=_worker, args=(r, fn, world_size, port, backend, timeout_s, threads, args, queue),
                         daemon=False) for r in range(world_size)]
    for p in procs:
        p.start()
    results, errors, done = [None] * world_size, {}, set()
    failed_at = None
    try:
        while len(done) < world_size:
            if failed_at is None:
                wait_s = None
            else:
                wait_s = failed_at + min(1.0, 0.05 * timeout_s) - time.monotonic()
                if wait_s <= 0:
                    break
            mpc.wait([simple_queue_reader(queue)] + [p.sentinel for i, p in enumerate(procs) if i not in done], timeout=wait_s)
            # drain first: a worker blocks on a full pipe until its result is read
            if _drain(queue, results, errors):
                failed_at = failed_at or time.monotonic()
            for i, p in enumerate(procs):
                if i not in done and p.exitcode is not None:
                    done.add(i)
                    if p.exitcode != 0:
                        failed_at = failed_at or time.monotonic()
    except BaseException:  # Ctrl-C (KeyboardInterrupt) or SIGTERM in the parent: no orphaned ranks
        _kill(procs)
        raise
    if _drain(queue, results, errors):  # what the last ranks sent before they exited
        failed_at = failed_at or time.monotonic()
    alive = [i for i, p in enumerate(procs) if p.exitcode is None]
    _kill(procs)
    if failed_at is None:
        return results
    raise RlmLabError(_cause(procs, errors, alive, timeout_s))


def _drain(queue, results: list, errors: dict) -> bool:
    """Read every message the workers sent so far; whether one of them was an error."""
    failed = False
    while not queue.empty():
        rank, value, err = queue.get()
        if err:
            errors[rank], failed = err, True
        else:
            results[rank] = value
    return failed


def _kill(procs) -> None:
    for p in procs:
        if p.is_alive():
            p.kill()  # SIGKILL: a stopped or stalled rank does not act on SIGTERM
    for p in procs:
        p.join(5)


def _cause(procs, errors: dict, alive: list, timeout_s: float) -> str:
    """One line: the rank that caused the failure and how (see the module docstring)."""
    def peer(msg):
        return any(c in msg for c in _CONSEQUENCES)

    rest = "; the other ranks were stopped"
    for i, p in enumerate(procs):  # killed by a signal (not by us: those were still alive above)
        if i not in alive and p.exitcode is not None and p.exitcode < 0:
            try:
                name = signal.Signals(-p.exitcode).name
            except ValueError:
                name = f"signal {-p.exitcode}"
            return f"a worker failed (rank {i} was killed by {name}){rest}"
    for i in sorted(errors):
        if not peer(errors[i][0]):
            return f"a worker failed (rank {i}: {errors[i][0]}){rest}"
    for i, p in enumerate(procs):
        if i not in alive and i not in errors and p.exitcode not in (0, None):
            return f"a worker failed (rank {i} exited with status {p.exitcode} without an error){rest}"
    silent = [i for i in alive if i not in errors]
    if silent and errors:
        first = min(errors)
        return (f"a worker failed (rank {', '.join(map(str, silent))} stalled: no response within the "
                f"{timeout_s:g} s collective timeout; rank {first}: {errors[first][0]}){rest}")
    if errors:
        first = min(errors)
        return f"a worker failed (rank {first}: {errors[first][0]}){rest}"
    return f"a worker failed (ranks {alive} did not finish){rest}"
