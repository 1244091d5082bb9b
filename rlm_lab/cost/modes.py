"""The execution modes of a placement's step: synchronous, one-step-off, bounded staleness eta, and fully
asynchronous with partial (interruptible) rollouts streaming to the trainer.

Inputs (placement.py): the synchronous step's phases, per set its busy time, and the rollout set's engine
(engine.py). Per batch: ``g`` the drained generation (the engine runs one batch from empty until its longest
sequence ends: the long tail is paid), ``t`` the trainer's work (preparation + advantage + training, each phase
the max over the training sets), ``s`` the weight sync and ``r`` the reshard.

**Separate rollout set** (generation and training on different devices, so they can overlap):

* ``sync``: step = r + g + t + s (HybridFlow arXiv 2409.19256 Sec. 4: the phases run one after another);
* ``one_step_off``: generation of batch k + 1 (with the weights of update k - 1) overlaps training on batch k,
  each batch still drained (verl's one-step-off recipe, https://verl.readthedocs.io/en/latest/advance/
  one_step_off.html): step = max(g, t + s) (asynchrony.one_step_off_step);
* ``stale`` (eta >= 1): generation streams across batch boundaries (a finished request's slot is refilled from the
  next batch, up to eta + 1 batches in flight) but is never interrupted: to load new weights the engine drains its
  in-flight requests, and with staleness eta it may load them only every eta-th update (verl's fully-async trainer
  without partial rollouts, ``trigger_parameter_sync_step``, https://verl.readthedocs.io/en/latest/advance/
  fully_async.html; ROLL's ``async_generation_ratio``): the generator's time per batch is
  g_stream + (max(0, g - g_stream) + s) / eta, the trainer's t + s, and the step the larger;
* ``async`` (partial rollouts): generation streams and is interrupted at every weight update; the in-flight
  requests continue with the new weights after their KV is recomputed (AReaL arXiv 2505.24298 Sec. 4.1,
  ``rollout.max_head_offpolicyness`` = eta; verl fully-async ``partial_rollout``; slime ``--partial-rollout``): the
  generator's time per batch is g_stream + s + the recompute prefill (engine.Engine.interrupt_time), the
  trainer's t + s, the step the larger. eta (None = unbounded) caps the requests in flight at (eta + 1) batches.

``g_stream`` is the engine's steady state (engine.Engine.stream): no tail. The requests it keeps in flight are k
batches, k from 1 to eta + 1 (unbounded: until ``max_num_seqs``), the k that makes the generator fastest: more in
flight fills the decode batch, but in ``async`` every update recomputes the KV of all of them. A static engine (transformers'
``generate``) has no streaming regime, so its ``stale`` and ``async`` steps use g (the overlap, not the stream).

**One set** (colocated, hybrid: generation and training time-share the devices): nothing overlaps, so
``one_step_off`` and ``stale`` cost the synchronous step; ``async`` keeps the partial rollouts that carry
unfinished requests over to the next step (APRIL, arXiv 2509.18521; Kimi k1.5's partial rollouts, arXiv
2501.12599): step = r + g_stream + recompute + t + s, with at most two batches in flight (the batch and the
carried-over partials) when eta is unbounded.

Per mode the result gives the step, the side that bounds it and its longest stage, each set's idle share
(1 - busy / step, busy = its engine's generation time on a rollout set, its stages on a training set), and the
exposed sync: the step minus the step with s = r = 0. The staleness a sample is trained with: 0, 1, eta, eta.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..errors import RlmLabError

MODES = ("sync", "one_step_off", "stale", "async")
# how the command line spells them (rlm-lab predict/advise --mode): the names, with - for _ accepted
MODE_HELP = ("sync | one_step_off | stale | async (bounded staleness with --eta; one_step_off is eta 1; async "
             "streams partial rollouts, eta None = unbounded)")


def check_mode(mode: str, eta) -> tuple[str, int | None]:
    """(mode, eta) validated: one of MODES (``-`` read as ``_``), eta an integer >= 1 for ``stale`` (default 2),
    1 for ``one_step_off``, 0 for ``sync``, None (unbounded) or an integer >= 1 for ``async``."""
    m = str(mode).strip().lower().replace("-", "_")
    if m not in MODES:
        raise RlmLabError(f"unknown mode {mode!r}; choose one of: {', '.join(MODES)}")
    if eta is not None and (isinstance(eta, bool) or not isinstance(eta, int) or eta < 0):
        raise RlmLabError(f"eta must be an integer >= 0 (the staleness bound), got {eta!r}")
    if m == "sync":
        if eta not in (None, 0):
            raise RlmLabError(f"mode sync trains on fresh samples (eta 0), got eta {eta}")
        return m, 0
    if m == "one_step_off":
        if eta not in (None, 1):
            raise RlmLabError(f"mode one_step_off has eta 1, got eta {eta}; use --mode stale --eta {eta}")
        return m, 1
    if m == "stale":
        eta = 2 if eta is None else eta
        if eta < 1:
            raise RlmLabError("mode stale needs eta >= 1 (eta 0 is the synchronous mode)")
        return m, eta
    if eta == 0:
        raise RlmLabError("mode async needs eta >= 1 or none (eta 0 is the synchronous mode)")
    return m, eta


@dataclass
class ModeStep:
    """One mode's step: seconds, the bounding side and its longest stage, idle share per set, exposed sync."""

    mode: str
    eta: int | None
    step_s: float
    gen_s: float                 # the generator's time per batch in this mode (with its pauses)
    train_s: float               # the trainer's time per batch (t + s)
    exposed_sync_s: float
    bound: str                   # "generation" | "training" | "sequential" (one set, or sync)
    critical: tuple              # (stage, set, seconds)
    idle: dict = field(default_factory=dict)   # set name -> idle share of the step
    note: str = ""

    def to_dict(self) -> dict:
        return {"mode": self.mode, "eta": self.eta, "step_s": self.step_s, "generation_s": self.gen_s,
                "training_s": self.train_s, "exposed_sync_s": self.exposed_sync_s, "bound": self.bound,
                "critical": dict(zip(("stage", "set", "seconds"), self.critical)), "idle": dict(self.idle),
                "note": self.note}


def _stream(engine, max_batches, interrupt: bool):
    """(g_stream, recompute seconds per update, batches in flight) of the rollout replica's batch; None without an
    engine. The engine keeps k batches of requests in flight, k from 1 to ``max_batches`` ((eta + 1); None:
    until max_num_seqs is reached), the k that makes the generator fastest (AReaL's ``max_concurrent_rollouts`` set
    well): more in flight fills the decode batch, but with ``interrupt`` every update recomputes all of them."""
    if engine is None or not engine.fits:
        return None
    n = len(engine.lengths)
    top = max_batches if max_batches is not None else math.ceil(engine.max_num_seqs / n) + 1
    best = None
    for k in range(1, min(top, 64) + 1):
        g = engine.engine.stream(engine.lengths, k * n).seconds
        rec = engine.engine.interrupt_time(engine.lengths, k * n) if interrupt else 0.0
        if best is None or g + rec < best[0] + best[1] - 1e-12:
            best = (g, rec, k)
    return best


def mode_step(mode: str, eta, phases: dict, busy: dict, separate: bool, engine=None, gen_set: str = "-",
              train_critical=("-", "-", 0.0), gen_critical=("-", "-", 0.0), sync_critical=("-", "-", 0.0)) -> ModeStep:
    """The step of ``mode`` (module docstring). ``phases``: phase -> seconds of the synchronous step (reshard,
    generation, preparation, advantage, training, sync); ``busy``: set name -> busy seconds of its stages;
    ``separate``: the rollout has its own set ``gen_set``; ``engine``: that set's engine.EngineInfo (None: a
    static engine); the ``*_critical`` (stage, set, seconds): the longest stage of each side and of the
    synchronous step."""
    mode, eta = check_mode(mode, eta)
    r, g, s = phases["reshard"], phases["generation"], phases["sync"]
    t = phases["preparation"] + phases["advantage"] + phases["training"]
    sync_step = r + g + t + s
    note = ""

    def idle(step: float, gen_busy: float) -> dict:
        out = {}
        for name, b in busy.items():
            b = gen_busy if (separate and name == gen_set) else b
            out[name] = min(1.0, max(0.0, 1.0 - b / step)) if step > 0 else 0.0
        return out

    if mode == "sync" or (not separate and mode in ("one_step_off", "stale")):
        if mode != "sync":
            note = f"{mode} on one set of devices: generation and training share them, nothing overlaps"
        return ModeStep(mode, eta, sync_step, r + g, t + s, r + s, "sequential", sync_critical,
                        idle(sync_step, r + g), note)

    # requests in flight: at most (eta + 1) batches; unbounded on separate sets, the batch and its carried-over
    # partial rollouts (2 batches) on one set
    cap = (eta + 1) if eta is not None else (None if separate else 2)
    streamed = _stream(engine, cap, interrupt=mode == "async")
    if streamed is None:
        g_stream, recompute = g, 0.0
        if mode in ("stale", "async"):
            note = "a static engine (transformers generate) cannot stream: generation overlaps, batch by batch"
    else:
        g_stream, recompute, k = streamed
        note = f"{k} batch{'es' if k > 1 else ''} of requests in flight"
    if not separate:   # async on one set: partial rollouts carry the unfinished requests over
        gen = r + g_stream + recompute
        step = gen + t + s
        return ModeStep(mode, eta, step, gen, t + s, r + s, "sequential",
                        gen_critical if gen - r >= t else train_critical, idle(step, gen),
                        "async on one set: partial rollouts carried over between steps (no overlap)")
    if mode == "one_step_off":
        gen, gen0 = g, g
    elif mode == "stale":
        tail = max(0.0, g - g_stream)
        gen, gen0 = g_stream + (tail + s) / eta, g_stream + tail / eta
    else:
        gen, gen0 = g_stream + s + recompute, g_stream + recompute
    step = max(gen, t + s)
    exposed = step - max(gen0, t)
    bound = "generation" if gen >= t + s else "training"
    if bound == "generation":
        crit = gen_critical
    else:
        crit = ("weight_sync", "-", s) if s > train_critical[2] else train_critical
    return ModeStep(mode, eta, step, gen, t + s, exposed, bound, crit, idle(step, gen0), note)
