"""The local Ray head's process: ``ray start`` (Ray's own CLI, ``ray.scripts.scripts.main``) with a longer wait
for the raylet to register, for :class:`rlm_lab.placement.session.RaySession`.

    python -m rlm_lab.placement.ray_head start --head --block ...   # what RaySession runs; not a user command

Why: ``ray start`` (Ray 2.60, ``ray._private.node.Node.__init__``) waits a fixed 30 s for the raylet to
register with the GCS, polling ``ray._private.services.get_node`` in a loop with no pause, and then fails
with "The current node timed out during startup". On a 2-core machine under load (four busy loops, or
another test suite) the raylet and its agents, Python processes importing Ray, can take longer than that.
Here ``get_node`` itself waits up to ``RLM_RAY_REGISTER_WAIT_S`` seconds (default 120), polling every
0.5 s, before Ray's 30 s count goes on; the loop no longer spins a core the raylet needs.
"""

from __future__ import annotations

import os
import time

REGISTER_WAIT_ENV = "RLM_RAY_REGISTER_WAIT_S"
DEFAULT_REGISTER_WAIT_S = 120.0


def patient(get_node, wait_s: float, pause_s: float = 0.5):
    """``get_node`` that retries its RuntimeError ("node not found yet") for up to ``wait_s`` seconds."""

    def wrapped(*args, **kwargs):
        deadline = time.monotonic() + wait_s
        while True:
            try:
                return get_node(*args, **kwargs)
            except RuntimeError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(pause_s)

    wrapped.__wrapped__ = get_node
    return wrapped


def main() -> None:
    import ray._private.services as services
    from ray.scripts.scripts import main as ray_main

    wait_s = float(os.environ.get(REGISTER_WAIT_ENV, DEFAULT_REGISTER_WAIT_S))
    services.get_node = patient(services.get_node, wait_s)
    ray_main()


if __name__ == "__main__":
    main()
