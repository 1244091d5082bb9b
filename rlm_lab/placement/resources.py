"""What a placement asks of Ray and torch.distributed, per resource set: the placement-group bundle, each
actor's resources, the device its models live on and the sync backend. One small function each, so that the
GPU branch (the ``gpu`` size) is unit-tested on a machine without one (``tests/placement/test_resources.py``).

- A CPU set of n cores is a bundle ``{"CPU": n}``; each actor on it asks ``num_cpus`` = its share and
  pins ``torch.set_num_threads`` to it.
- A GPU set of n GPUs is a bundle ``{"GPU": n, "CPU": n}`` (a core to drive each GPU); each actor asks
  ``num_gpus`` = its share and one CPU per GPU. Ray then sets ``CUDA_VISIBLE_DEVICES`` for the actor
  (https://docs.ray.io/en/latest/ray-core/scheduling/accelerators.html), so the actor's ``cuda`` is its GPU.
- Device and backend come from :mod:`rlm_lab.device`: ``cuda`` and NCCL for a GPU set, ``cpu`` and gloo
  otherwise (https://pytorch.org/docs/stable/distributed.html#backends).
"""

from __future__ import annotations

import sys

from ..device import dist_backend
from ..errors import RlmLabError


def set_device(rset) -> str:
    """``cuda`` for a GPU set, ``cpu`` for a CPU one."""
    return "cuda" if rset.kind == "gpu" else "cpu"


def bundle(rset) -> dict:
    """The placement-group bundle that reserves ``rset``."""
    if rset.kind == "gpu":
        return {"GPU": rset.devices, "CPU": rset.devices}
    return {"CPU": rset.devices}


def actor_options(rset, share: int) -> dict:
    """Ray resources of one actor holding ``share`` of ``rset``'s devices."""
    if not 0 < share <= rset.devices:
        raise RlmLabError(f"set {rset.name!r}: an actor's share must be in 1..{rset.devices}, got {share}")
    if rset.kind == "gpu":
        return {"num_gpus": share, "num_cpus": share}
    return {"num_cpus": share}


def threads(rset, share: int) -> int:
    """``torch.set_num_threads`` of an actor: its cores on a CPU set, one (the GPU's driver) on a GPU set."""
    return share if rset.kind == "cpu" else 1


def sync_backend(placement) -> str:
    """torch.distributed backend of the trainer -> rollout weight sync: NCCL between GPUs, gloo between cores."""
    return dist_backend(set_device(placement.set_of("actor")))


def local_gpus() -> int:
    """GPUs a placement can use: the Ray cluster's, when this process is a driver connected to one (a job on a
    multi-node cluster runs its driver on a head without GPUs), else the GPUs torch sees here (0 without CUDA)."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        return int(ray.cluster_resources().get("GPU", 0))
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def check_devices(placement, cpus: int, gpus: int) -> None:
    """One error line when the machine (or Ray cluster) lacks what ``placement`` asks for."""
    need_gpus = sum(s.devices for s in placement.sets if s.kind == "gpu")
    need_cpus = sum(s.devices for s in placement.sets)  # a CPU set's cores; a GPU set's one core per GPU
    if need_gpus > gpus:
        have = "this machine has none (torch sees no CUDA device)" if gpus == 0 else f"there are {gpus}"
        raise RlmLabError(f"placement {placement.name!r} asks for {need_gpus} GPU(s), {have}")
    if need_cpus > cpus:
        raise RlmLabError(f"placement {placement.name!r} asks for {need_cpus} CPUs, there are {cpus}")
