"""Shared by the PP, CP and EP measurements: models, batches, the single-process baseline and the
step-time prediction.

:mod:`.pp`, :mod:`.cp` and :mod:`.ep` each hold their own ``measure_*`` (what one run measures) and
``verify_*`` (correctness against one process); this module holds what the three share, so each of them
stays readable on its own. The recorded runs (``ch04_e2_*``) are :mod:`rlm_lab.chapters.ch04_parallelism.sweeps`'.
"""

from __future__ import annotations

import os
import resource
import statistics
import time

from ...cost.comm import collective_time
from ...cost.hardware import load_profile, profile_of_machine
from ...models import make_config
from ...record import hardware


def cores() -> int:
    return len(os.sched_getaffinity(0))


def zoo_model(name: str, seed: int = 0, layers: int | None = None):
    """A zoo model (fp32, seeded init), optionally with ``layers`` decoder layers instead of the zoo's."""
    import torch
    from transformers import AutoModelForCausalLM

    config = make_config(name)
    if layers:
        config.num_hidden_layers = layers
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32)


def peak_rss_mib() -> float:
    """Peak resident memory of this process (MiB). Includes Python and torch themselves (~hundreds
    of MiB), so at toy sizes it mostly shows the framework floor, not the model's share."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def random_batch(batch: int, seq: int, vocab: int, seed: int):
    """Token ids in [2, vocab) (no pad/eos), from their own generator."""
    import torch

    return torch.randint(2, vocab, (batch, seq), generator=torch.Generator().manual_seed(seed))


def baseline_step_s(model, input_ids, reps: int = 5) -> float:
    """Median seconds of one single-process forward+backward of ``model`` on ``input_ids``.

    The measured reference the parallel predictions start from (a different run than the one judged).
    """
    times = []
    for _ in range(reps + 1):
        t = time.perf_counter()
        model(input_ids=input_ids, labels=input_ids).loss.backward()
        times.append(time.perf_counter() - t)
        model.zero_grad(set_to_none=True)
    return statistics.median(times[1:])


def timed_step(loss_fn, sync_fn, opt) -> dict:
    """One training step timed by phase (forward, backward, gradient sync) after a barrier, so that
    every rank starts the clock together; the optimizer step is not timed."""
    import torch.distributed as dist

    dist.barrier()
    t0 = time.perf_counter()
    loss = loss_fn()
    t1 = time.perf_counter()
    loss.backward()
    t2 = time.perf_counter()
    sync_fn()
    t3 = time.perf_counter()
    opt.step()
    opt.zero_grad()
    return {"fwd_s": t1 - t0, "bwd_s": t2 - t1, "grad_sync_s": t3 - t2, "wall_s": t3 - t0, "loss": loss.item()}


def comm_profile(profile=None):
    """The hardware profile whose α-β fits price the messages (``rlm-lab calibrate`` writes one).

    ``profile``: a name, path or HardwareProfile (an unknown one raises); default: the committed calibrated
    CPU profile of this machine, the one running the measurement (matched by its CPU model and cores:
    :func:`rlm_lab.cost.hardware.profile_of_machine`), or None when it has none (predictions then leave the
    communication term out and say so with ``profile: None``).
    """
    if profile is not None:
        return load_profile(profile)
    return profile_of_machine(hardware(), check=lambda p: p.collective("send_recv"))


def comm_time(op: str, message_bytes: float, world: int, profile) -> float | None:
    """α-β seconds of one message (None without a calibrated profile)."""
    if profile is None:
        return None

    return collective_time(op, message_bytes, world, profile)


def max_rel(got: dict, ref: dict) -> float:
    """max over tensors of max|a-b| / max|b| (fp32 reductions reorder sums: errors scale with the tensor)."""
    return max(((g - ref[n]).abs().max() / ref[n].abs().max().clamp_min(1e-30)).item() for n, g in got.items())


def predict_step_time(result: dict, profile=None) -> dict:
    """Step time of a ``measure_pp/cp/ep`` result as **measured baseline + modelled communication**
    (recomputable later from its record). Not a prediction from the cost model alone: the compute term is
    a measurement made in the same run, so only the schedule (bubble) and the communication are modelled.
    The keys keep their recorded names (``step_s_predicted``, ``predicted_compute_s``, ``predicted_comm_s``).

    Starts from T, rank 0's share of the work run alone in one process before the parallel run
    (``baseline_share_s``: forward+backward, measured, so per-call overheads that do not shrink with
    the share are included):
    PP: T = one micro-batch through the whole model; a stage runs 1/p of it per slot, and a step has
        m+p-1 slots (the bubble): (m+p-1)·T/p, + the busiest rank's sends (m, or 2m mid-pipeline);
    CP: T = b rows of s/c tokens (leaves out attending to the other ranks' keys)
        + 2·L·(c-1) ring messages + one all-reduce of all gradients;
    EP: T = one rank's rows through the whole model (experts all local) + 4 token all-to-alls per
        MoE layer (the slowest rank's) + one all-reduce of the dense gradients.
    Messages cost α + β·bytes from the calibrated profile (``rlm_lab.cost.comm``);
    without one the communication term is None and the total is compute only. Nothing overlaps
    (gloo on CPU runs P2P and collectives in the calling thread's critical path).
    """
    kind, world, t = result["parallelism"], result["world"], result["baseline_share_s"]
    config = make_config(result["model"])
    h, prof = config.hidden_size, comm_profile(profile)
    if prof is None:
        comm = None
    elif kind == "pp":
        m = result["microbatches"]
        comm = comm_time("send_recv", result["batch"] * result["seq"] * h * 4 / m, 2, prof) * m * (2 if world > 2 else 1)
    elif kind == "cp":
        msg = 2 * result["batch"] * (result["seq"] // world) * config.num_key_value_heads * (h // config.num_attention_heads) * 4
        comm = (2 * config.num_hidden_layers * (world - 1) * comm_time("send_recv", msg, 2, prof)
                + comm_time("all_reduce", result["grad_bytes"], world, prof))
    else:
        comm = max(sum(2 * comm_time("all_to_all", sum(s) * h * 4, world, prof) + 2 * comm_time("all_to_all", sum(r) * h * 4, world, prof)
                       for s, r in zip(x["send_counts"], x["recv_counts"])) for x in result["per_rank"])
        comm += comm_time("all_reduce", result["dense_bytes"], world, prof)
    compute = t * (result["microbatches"] + world - 1) / world if kind == "pp" else t
    return {"predicted_compute_s": compute, "predicted_comm_s": comm, "step_s_predicted": compute + (comm or 0.0),
            "profile": getattr(prof, "name", None)}
