"""Worker functions for the parallel fault rows (``cases_parallel.py``): they must live in an importable
module, because ``rlm_lab.parallel.launch.spawn`` starts fresh interpreters that import them by name
(this folder is on ``sys.path``, which spawned children inherit)."""

import os
import signal
import time


def killed(rank, world):
    """Rank 1 is SIGKILLed (no Python clean-up at all) while rank 0 waits in an all-reduce."""
    import torch
    import torch.distributed as dist

    dist.barrier()
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.all_reduce(torch.ones(4))


def stalled(rank, world):
    """Rank 1 is alive but never joins the all-reduce rank 0 waits in."""
    import torch
    import torch.distributed as dist

    dist.barrier()
    if rank == 1:
        time.sleep(120)
    dist.all_reduce(torch.ones(4))


def exits(rank, world):
    """Rank 1 leaves with status 3 and no exception (a library calling ``sys.exit``)."""
    import torch
    import torch.distributed as dist

    dist.barrier()
    if rank == 1:
        os._exit(3)
    dist.all_reduce(torch.ones(4))


def parity(rank, world, steps, wrong=False):
    """DDP over ``world`` ranks for ``steps`` steps, checked against one process (``run_layout``). ``wrong``: a
    genuinely wrong layout, every rank training on the first rank's share of the batch (a data-slicing bug)."""
    from rlm_lab.parallel import parallelize as P
    from rlm_lab.parallel.bench.measure import run_layout
    from rlm_lab.parallel.mesh import Layout

    if wrong:
        def first_share(x, layout, mesh):
            return x[: x.shape[0] // layout.data_ranks]
        P.data_slice = first_share
    return run_layout(Layout(dp=world), steps=steps, count=False)
