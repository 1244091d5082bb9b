"""A one-set placement (``colocated``) run in this process, without Ray: the GPU edition's chapter 5 on a lent GPU
whose image has no Ray (issue 40; Ray's wheel is larger than the device tool carries).

With one resource set there is nothing to place: :func:`rlm_lab.placement.runtime.run_placement` reserves one bundle
and starts one actor, :class:`rlm_lab.placement.workers.TrainerWorker`, which trains with the in-process rollout
engine (no rollout workers, no weight sync). Here the same ``TrainerWorker.train`` runs in this process on the same
job, and the record has the same results (``ray_run.results_of``: step times, stages, sync, weights' SHA-256,
memory), with ``nodes.strategy`` "in-process (no Ray)" saying how it ran. A placement of several sets is refused in
one line: it needs Ray.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from ..errors import RlmLabError
from ..host import load_average
from ..record import RunRecord
from .resources import threads
from .ray_run import LORA, fail_record, results_of, write_timeline
from .runtime import _sft_checkpoint, check_placement
from .weights import DEFAULT_BUCKET_BYTES
from .workers import TrainerWorker

STRATEGY = "in-process (no Ray)"


def run_inprocess(placement, cfg, run_dir: str | Path, *, prediction: dict | None = None, command=None,
                  timeout_s: float = 120.0) -> dict:
    """Run GRPO ``cfg`` under the one-set ``placement`` in this process; write ``run_dir``'s record, metrics and
    timeline as :func:`~rlm_lab.placement.runtime.run_placement` does. Returns the record's results."""
    import torch

    if len(placement.sets) != 1 or placement.rollout_separate:
        raise RlmLabError(f"placement {placement.name!r} has {len(placement.sets)} resource sets; only a one-set "
                          f"placement (colocated) runs without Ray")
    check_placement(placement, cfg)
    record = RunRecord(Path(run_dir), {"run": cfg.to_dict(), "placement": placement.to_dict(), "chunks": 1,
                                       "timeout_s": timeout_s, "bucket_bytes": DEFAULT_BUCKET_BYTES,
                                       "runtime": STRATEGY}, command, cfg.seed)
    record.update(prediction=prediction, load_average_start=load_average(2))
    t_start, threads_before = time.perf_counter(), torch.get_num_threads()
    try:
        model_path = _sft_checkpoint(cfg)
        rset = placement.sets[0]
        nodes = {"strategy": STRATEGY, "count": 1, "sets": {rset.name: "this process"}}
        record.update(nodes=nodes)
        worker = TrainerWorker(threads(rset, rset.devices))
        t_ready = time.perf_counter()
        out = worker.train({"cfg": cfg.to_dict(), "model": str(model_path), "metrics_path": str(record.metrics_path),
                            "rollouts": [], "sync": "none", "chunks": 1, "timeout_s": timeout_s,
                            "bucket_bytes": DEFAULT_BUCKET_BYTES,
                            "lora": dict(LORA) if placement.lora else None})
        spans = {"trainer": out["trainer_spans"]}
        results = results_of(out, placement, spans, [os.getpid()], t_ready - t_start, cfg)
        results.update(nodes=nodes, load_average_end=load_average(2), prediction=prediction)
        write_timeline(record.dir, placement, out, spans)
        record.complete(**results)
        return results
    except BaseException as e:
        fail_record(record, e, t_start)
        raise
    finally:
        torch.set_num_threads(threads_before)  # the worker pinned this process's threads to its set
