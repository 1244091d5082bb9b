"""Parallel degrees -> a validated :class:`Layout` -> a named ``DeviceMesh``.

A layout is the set of degrees ``pp x dp x ep x cp x tp`` (outermost to innermost, as in torchtitan:
the innermost dimension, TP, talks most often and belongs on the fastest links) plus the ZeRO stage,
sequence parallelism and the pipeline schedule. Its world size is the product of the degrees. Expert
parallelism is its own mesh dimension here (not borrowed from DP as in torchtitan): the EP ranks hold
different experts and see different tokens, so for the dense parameters they act as extra DP ranks.

:func:`validate` checks a layout against a model *without* starting any process: a degree that does
not divide the heads, KV heads, FFN width, layers or experts, a batch that does not split, a world
size that differs from the product of the degrees, or an unsupported combination raises one
:class:`RlmLabError` naming the fix. :func:`build_mesh` then turns it into a ``DeviceMesh`` inside a
running process group.

API (used by every parallelism module, the measurement harness and the CLI)::

    layout = Layout(dp=2, tp=1, zero=3)
    validate(layout, "nano", world_size=2, batch=8, seq=16)   # raises RlmLabError, starts nothing
    mesh = build_mesh(layout)                                  # inside init_process_group
    mesh["dp"], mesh["tp"]                                     # 1-D sub-meshes by name
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..errors import RlmLabError, unknown
from ..models import ZOO, check_model

DIMS = ("pp", "dp", "ep", "cp", "tp")  # mesh dimension order, outermost first
SCHEDULES = ("gpipe", "1f1b")
ZERO_STAGES = (0, 1, 2, 3)


@dataclass(frozen=True)
class Layout:
    """Degrees of each parallelism and how data parallelism shards state.

    ``zero``: 0 = DDP (replicated everything), 1 = ZeroRedundancyOptimizer (optimizer state sharded),
    2 = FSDP2 ``reshard_after_forward=False`` (grads + optimizer state sharded; params gathered once
    per step), 3 = FSDP2 ``reshard_after_forward=True`` (params sharded too, re-gathered in backward).
    ``sp``: sequence parallelism on top of TP (norms and dropout sharded along the sequence).
    ``microbatches``: pipeline micro-batches (0 = ``2 * pp``).
    """

    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    zero: int = 0
    sp: bool = False
    schedule: str = "1f1b"
    microbatches: int = 0

    @property
    def world(self) -> int:
        return self.pp * self.dp * self.ep * self.cp * self.tp

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(getattr(self, d) for d in DIMS)

    @property
    def n_microbatches(self) -> int:
        return self.microbatches or 2 * self.pp

    @property
    def data_ranks(self) -> int:
        """Ranks that see different samples (DP and EP both split the batch)."""
        return self.dp * self.ep

    def name(self) -> str:
        """Short stable label, e.g. ``dp2-zero3`` or ``tp2-sp``; used for run directories and plots."""
        parts = [f"{d}{getattr(self, d)}" for d in DIMS if getattr(self, d) > 1] or ["single"]
        if self.zero:
            parts.append(f"zero{self.zero}")
        if self.sp:
            parts.append("sp")
        if self.pp > 1:
            parts.append(self.schedule)
        return "-".join(parts)

    def to_dict(self) -> dict:
        return asdict(self) | {"world": self.world, "name": self.name()}


def _spec(model):
    """A ``ZooSpec`` for a zoo name, or the spec itself."""
    return ZOO[check_model(model)] if isinstance(model, str) else model


def validate(layout: Layout, model="nano", world_size: int | None = None, batch: int | None = None,
             seq: int | None = None, vocab: int | None = None) -> Layout:
    """Check that ``layout`` can run ``model``; raise one clear :class:`RlmLabError` otherwise.

    Starts nothing and imports no torch, so a bad layout fails in milliseconds, before any process
    group exists (torchrun would otherwise start every rank just to fail in each).
    """
    for d in DIMS:
        v = getattr(layout, d)
        if not isinstance(v, int) or v < 1:
            raise RlmLabError(f"--{d} must be a positive integer, got {v!r}")
    if layout.zero not in ZERO_STAGES:
        raise unknown("ZeRO stage", layout.zero, ZERO_STAGES)
    if layout.schedule not in SCHEDULES:
        raise unknown("pipeline schedule", layout.schedule, SCHEDULES)
    if not isinstance(layout.microbatches, int) or layout.microbatches < 0:
        raise RlmLabError(f"--microbatches must be >= 0 (0 = 2 x pp), got {layout.microbatches!r}")
    if layout.microbatches and layout.pp == 1:
        raise RlmLabError("--microbatches cuts the batch for a pipeline; it needs --pp > 1")
    if layout.pp > 1 and layout.n_microbatches < layout.pp:
        raise RlmLabError(f"--microbatches {layout.n_microbatches} < {layout.pp} pipeline stages "
                          f"(a stage would sit empty); use at least {layout.pp}")
    if layout.zero and layout.dp == 1:
        raise RlmLabError(f"--zero {layout.zero} shards over the data-parallel ranks; it needs --dp > 1")
    for d in ("pp", "cp", "ep"):  # see rlm_lab.parallel.parallelize: these run alone
        others = [f"--{o} {getattr(layout, o)}" for o in DIMS if o != d and getattr(layout, o) > 1]
        if getattr(layout, d) > 1 and others:
            raise RlmLabError(f"--{d} runs alone here (every other degree 1); it does not compose with "
                              f"{', '.join(others)}")
    if world_size is not None and world_size != layout.world:
        raise RlmLabError(
            f"world size {world_size} != product of degrees {' x '.join(f'{d}{getattr(layout, d)}' for d in DIMS)}"
            f" = {layout.world}; start {layout.world} processes (torchrun --nproc_per_node {layout.world}) "
            f"or change the degrees")
    spec = _spec(model)
    t = layout.tp
    checks = [
        (spec.heads, t, "attention heads", "--tp"),
        (spec.kv_heads, t, "KV heads", "--tp"),
        (spec.intermediate, t, "FFN width", "--tp"),
        (spec.layers, layout.pp, "layers", "--pp"),
    ]
    for total, deg, what, flag in checks:
        if total % deg:
            raise RlmLabError(f"{flag} {deg} does not divide the model's {total} {what}; "
                              f"choose {flag} from {_divisors(total)}")
    if layout.ep > 1:
        if spec.experts == 0:
            raise RlmLabError(f"--ep {layout.ep} needs a mixture-of-experts model (e.g. nano-moe, micro-moe)")
        if spec.experts % layout.ep:
            raise RlmLabError(f"--ep {layout.ep} does not divide the model's {spec.experts} experts; "
                              f"choose --ep from {_divisors(spec.experts)}")
    if layout.sp and t == 1:
        raise RlmLabError("--sp (sequence parallelism) shards along the TP group; it needs --tp > 1")
    if t > 1 and vocab is not None and vocab % t:
        raise RlmLabError(f"--tp {t} does not divide the vocabulary ({vocab}); choose --tp from {_divisors(vocab)}")
    if layout.zero == 1 and t > 1:
        raise RlmLabError("--zero 1 (ZeroRedundancyOptimizer) composes only with plain DP here; "
                          "use --zero 2 or 3 (FSDP2) with --tp")
    if layout.zero == 0 and layout.dp > 1 and t > 1:
        raise RlmLabError("DDP does not compose with DTensor tensor parallelism; "
                          "use --zero 2 or --zero 3 (FSDP2 over the dp dimension) with --tp > 1")
    if batch is not None:
        if not isinstance(batch, int) or batch < 1:
            raise RlmLabError(f"batch must be a positive number of sequences, got {batch!r}")
        per = layout.data_ranks * (layout.n_microbatches if layout.pp > 1 else 1)
        if batch % per:
            raise RlmLabError(f"batch {batch} does not split over {layout.data_ranks} data-parallel ranks"
                              + (f" x {layout.n_microbatches} micro-batches" if layout.pp > 1 else "")
                              + f"; use a batch that is a multiple of {per}")
    if seq is not None:
        if not isinstance(seq, int) or seq < 2:
            raise RlmLabError(f"sequence length must be >= 2 (next-token loss needs two tokens), got {seq!r}")
        div = (2 * layout.cp if layout.cp > 1 else 1) * (t if layout.sp else 1)
        if seq % div:
            raise RlmLabError(f"sequence length {seq} must be a multiple of {div} "
                              f"(2 x cp chunks for causal load balancing x tp when --sp); change --seq")
        if seq > spec.max_positions:
            raise RlmLabError(f"sequence length {seq} exceeds the model's {spec.max_positions} positions")
    return layout


def local_tensor(t):
    """The local shard of a DTensor (or the tensor itself)."""
    return t.to_local() if hasattr(t, "to_local") else t


def full_tensor(t):
    """The whole tensor of a DTensor (a collective!) or the tensor itself."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def _divisors(n: int) -> str:
    return ", ".join(str(k) for k in range(1, n + 1) if n % k == 0)


def device_type() -> str:
    """``cuda`` when GPUs are visible, else ``cpu`` (gloo)."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def backend_for(device: str) -> str:
    return "nccl" if device == "cuda" else "gloo"


def build_mesh(layout: Layout, device: str | None = None):
    """The ``DeviceMesh`` of ``layout`` with named dimensions ``pp, dp, ep, cp, tp`` (size-1 ones included,
    so ``mesh["tp"]`` always exists). Must run inside an initialised process group of ``layout.world`` ranks.
    """
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    if not dist.is_initialized():
        raise RlmLabError("build_mesh needs a process group: launch with torchrun or rlm_lab.parallel.launch.spawn")
    validate(layout, _AnyModel(), world_size=dist.get_world_size())
    return init_device_mesh(device or device_type(), layout.shape, mesh_dim_names=DIMS)


class _AnyModel:
    """Spec that every degree divides: lets build_mesh check only the world size (the model was
    validated before the processes started)."""

    heads = kv_heads = intermediate = layers = experts = 2 * 3 * 4 * 5 * 7 * 8
    max_positions = 1 << 30
