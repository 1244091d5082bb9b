"""A calibration of the weight sync's fixed cost per sync, separate from the placement runs it is used on.

Chapter 5's disaggregated runs measure ~4.5 ms per sync where the α-β wire model predicts ~0.7 ms. The gap is
what the runtime adds around the broadcast (the Ray call that sets the worker receiving, flattening a bucket,
the copy into the rollout's parameters). This measures it on its own: two Ray actors on the cores of the
placement (trainer, rollout), the same gloo group and the same :func:`rlm_lab.placement.weights.broadcast_weights`
path as :class:`rlm_lab.placement.trl_rollout.RolloutFunc`, on synthetic "models" (one flat fp32 parameter) of
several sizes, ``repeats`` syncs each. A least-squares line T(B) = t0 + B / β gives the fixed cost per sync
t0 and the effective bandwidth β; the record holds every sample, so the fit can be checked.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from ...host import free_port, load_average
from ...placement.proc import pin as _pin
from ...placement.runtime import RaySession
from ...placement.weights import DEFAULT_BUCKET_BYTES, broadcast_weights, make_group
from ...record import RunRecord
from .run import _now

SIZES = (1 << 10, 1 << 14, 1 << 17, 1 << 19, 1 << 20, 1 << 21)  # bytes per sync: 1 KiB .. 2 MiB


class _Side:
    """One end of the sync (a Ray actor): a one-parameter module of ``nbytes`` and a gloo group."""

    def __init__(self, threads: int):
        _pin(threads)
        self.group, self.model = None, None

    def join(self, port: int, rank: int, timeout_s: float) -> int:
        self.group = make_group("127.0.0.1", port, rank, 2, timeout_s)
        return rank

    def shape(self, nbytes: int) -> int:
        import torch

        self.model = torch.nn.Linear(1, max(1, nbytes // 4), bias=False)
        return sum(p.numel() * p.element_size() for p in self.model.parameters())

    def receive(self, bucket_bytes: int) -> dict:
        return broadcast_weights(self.model, self.group, src=0, bucket_bytes=bucket_bytes)

    def send(self, peer, bucket_bytes: int) -> float:
        """What the trainer's glue does per sync: ask the worker to receive, broadcast, wait for it."""
        import ray

        t0 = time.perf_counter()
        ref = peer.receive.remote(bucket_bytes)
        broadcast_weights(self.model, self.group, src=0, bucket_bytes=bucket_bytes)
        ray.get(ref)
        return time.perf_counter() - t0


def fit(samples: list[tuple[int, float]]) -> dict:
    """Least squares T = t0 + B * s over (bytes, seconds): t0 (s), bandwidth 1/s (B/s), residual RMS."""
    n = len(samples)
    mx = sum(b for b, _ in samples) / n
    my = sum(t for _, t in samples) / n
    sxx = sum((b - mx) ** 2 for b, _ in samples)
    slope = sum((b - mx) * (t - my) for b, t in samples) / sxx
    t0 = my - slope * mx
    rms = (sum((t - t0 - slope * b) ** 2 for b, t in samples) / n) ** 0.5
    return {"t0_s": t0, "bandwidth_Bps": 1 / slope if slope > 0 else None, "residual_rms_s": rms}


def measure(root: str | Path, repeats: int = 20, bucket_bytes: int | None = None, command=None):
    """Record ``<root>/ch05_sync_calibration/<UTC time>``: every (bytes, seconds) sample and the fit."""
    bucket_bytes = bucket_bytes or DEFAULT_BUCKET_BYTES
    folder = Path(root) / "ch05_sync_calibration" / _now()
    with RunRecord(folder, {"sizes": list(SIZES), "repeats": repeats, "bucket_bytes": bucket_bytes}, command) as rec:
        rec.update(load_average_start=load_average(2))
        with RaySession(num_cpus=2) as session:  # before Ray is imported: it sets Ray's token first
            ray = session.ray
            a, b = (ray.remote(_Side).options(num_cpus=1).remote(1) for _ in range(2))
            try:
                port = free_port()
                ray.get([a.join.remote(port, 0, 60), b.join.remote(port, 1, 60)], timeout=120)
                samples = []
                for size in SIZES:
                    actual = ray.get([a.shape.remote(size), b.shape.remote(size)])[0]
                    ray.get(a.send.remote(b, bucket_bytes))  # warm-up: first call pays connection set-up
                    samples += [(actual, ray.get(a.send.remote(b, bucket_bytes))) for _ in range(repeats)]
            finally:
                for h in (a, b):
                    ray.kill(h, no_restart=True)
        rec.update(samples=samples, fit=fit(samples), load_average_end=load_average(2))
    return RunRecord.load(folder)


def main(argv=None) -> int:
    """``rlm-lab chapter 5 sync-calibration [RUNS_ROOT]`` (default ``_build/runs/cpu``): measure and fit the sync."""
    argv = sys.argv[1:] if argv is None else argv
    r = measure(argv[0] if argv else "_build/runs/cpu", command=["rlm-lab", "chapter", "5", "sync-calibration", *argv])
    print(r.results["fit"], "->", r.dir)
    return 0
