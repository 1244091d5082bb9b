"""Hardware profiles: the few numbers the time model needs about one device and its links.

A profile is a JSON file in ``data/hardware/<name>.json``::

    name, kind ("calibrated" | "datasheet"), device, source (datasheet URLs or "rlm-lab calibrate")
    memory_bytes                     capacity of one device
    matmul_flops    {dtype: FLOP/s}  peak (datasheet) or best measured (calibrated)
    matmul_curve    {dtype: [[gemm_flops, FLOP/s], ...]}  optional: measured rate vs product size
    memory_bandwidth                 bytes/s (datasheet peak or measured large copy)
    efficiency      {"matmul": eta_F, "memory": eta_B, "network": eta_N, "host": eta_H}  applied to peaks (1.0
                    for measured numbers; absent keys 1.0); every one a named assumption a user can override
                    (assumed.ASSUMPTIONS, ``assume:`` in a predict config)
    overhead        {op_s, forward_base_s, forward_layer_s, decode_step_base_s, decode_step_layer_s,
                     backward_layer_s, optimizer_tensor_s}   per-call costs (launch / Python dispatch);
                    optional: backward_base_s, optimizer_base_s, generate_base_s (setup of one generate call),
                    forward_grad_base_s, forward_grad_layer_s (a forward with autograd recording);
                    trl_step_base_s, trl_step_row_s, trl_step_tensor_s: TRL's bookkeeping per optimizer step
                    between the stages (the tracer's ``other``) = base + rows x row + parameter tensors x
                    tensor, measured on a real GRPOTrainer (step_benchmarks.py); absent: 0 for calibrated
                    profiles, the ASSUMED figures of ``assumed.ASSUMED_TRL_STEP`` for datasheet profiles
    overlap_overhead                 true when launches overlap compute (asynchronous CUDA streams)
    link_bandwidth                   bytes/s between devices of one node (NVLink, one direction; weight sync, p2p)
    network         optional {bandwidth, alpha_s, devices_per_node, host_bandwidth}: the node's shape and its
                    slower tiers: bytes/s of the network card each GPU has (one direction), the per-step latency
                    of a collective crossing nodes, GPUs per node, bytes/s to host memory (PCIe, one direction);
                    absent: one node, no slower tier (comm.py: topology)
    collectives     {backend, world, ops: {op: {alpha_s, beta_s_per_byte}}}
    threads, provenance              (calibrated profiles) how and where it was measured
    spread          (calibrated, repeated) {statistic, repeats, quartiles, min_max, noisy}: for every
                    measured number its [q1, q3] and [min, max] over the repeats (calibrate.py);
                    spread.py turns it into a predicted interval
    load            (calibrated) load averages before, during and after the calibration, and "busy"
    kernels         optional, measured by ``rlm-lab calibrate`` (kernel_benchmarks.py); without it the ASSUMED
                    defaults of the methods below apply (see ``kernels_measured``):
                    elementwise  {forward|forward_grad|backward: {s_per_element}}  norms, rotary, SiLU*mul,
                                 residual adds of a decoder layer (timing.elementwise_elements counts them)
                    attention    {curve, backward_curve: [[flops, FLOP/s], ...]}  the SDPA kernel's rate
                    logprob_head {forward|forward_grad|backward: {base_s, s_per_row, s_per_element}}
                                 TRL's fused log-prob head beyond its matrix product
                    weight_stream {bandwidth, cache_bytes}  weight reads of products whose model does
                                 not fit in the last-level cache
                    attention_bf16 {curve, backward_curve}  (CPU) the SDPA kernel under bf16 autocast
    bf16 autocast on CPU (autocast_benchmarks.py): ``matmul_curve``/``matmul_flops`` ``bf16`` = F.linear of fp32
                    tensors under torch.autocast(cpu, bfloat16), ``bf16_backward`` its backward's rate;
                    overhead ``checkpoint_base_s``, ``checkpoint_layer_s``: gradient checkpointing's per-call work;
                    ``autocast_{forward,backward,decode}_{base,layer}_s``: what autocast adds per call (charged
                    for bf16 only; timing._autocast_overhead)
    insitu          optional (rlm_lab.insitu): the per-call overhead terms were refitted on traced TRL runs of the
                    calibration suite (the records, the base profile, each group's scale and its bootstrap
                    interval); the ``overhead`` values are then the in-situ ones
    distributed     optional (dist_benchmarks.py): {threads: {"1": {matmul_curve, matmul_flops, overhead, kernels}}}
                    the rates at the thread count a rank of a multi-process run uses, and {framework: {family:
                    {base_s, unit_s, unit}}} the cost per step of DDP's reducer, FSDP2, DTensor, the pipeline
                    schedule, the ring and the expert all-to-all beyond the alpha-beta time of their messages

The roofline time of one operator is max(FLOPs / (eta_F F), bytes / (eta_B BW)) (Williams,
Waterman & Patterson, CACM 2009, doi 10.1145/1498765.1498785), with F read from ``matmul_curve`` when the
profile has one, because small products on CPU run far below the peak.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..device import gpu_profile
from ..errors import RlmLabError
from ..record import atomic_write_json
from ..records.portable import portable
from ..sizes import check_size

HARDWARE_DIR = Path(__file__).resolve().parents[2] / "data" / "hardware"
# The calibrated profile of the machine the committed cpu runs were made on; $RLM_CPU_PROFILE points
# the notebooks at another one (a name in data/hardware/ or a path) after `rlm-lab calibrate` elsewhere.
CPU_PROFILE = os.environ.get("RLM_CPU_PROFILE", "cpu-2core-epyc")
# The same machine's profile with its per-call terms fitted in situ on the calibration suite's traced runs
# (rlm_lab.insitu; data/hardware/cpu-2core-epyc-insitu.json): what `rlm-lab validate` judges by default.
# The chapters keep CPU_PROFILE, so that their committed comparisons reproduce as they were made.
INSITU_PROFILE = os.environ.get("RLM_INSITU_PROFILE", "cpu-2core-epyc-insitu")
KINDS = ("calibrated", "datasheet")
OVERHEAD_KEYS = ("op_s", "forward_base_s", "forward_layer_s", "decode_step_base_s", "decode_step_layer_s",
                 "backward_layer_s", "optimizer_tensor_s")
REQUIRED = ("name", "kind", "device", "memory_bytes", "matmul_flops", "memory_bandwidth", "overhead", "collectives")


@dataclass
class HardwareProfile:
    name: str
    kind: str
    device: str
    memory_bytes: float
    matmul_flops: dict
    memory_bandwidth: float
    overhead: dict
    collectives: dict
    efficiency: dict = field(default_factory=lambda: {"matmul": 1.0, "memory": 1.0})
    matmul_curve: dict = field(default_factory=dict)
    overlap_overhead: bool = False
    link_bandwidth: float = 0.0
    source: str = ""
    threads: int | None = None
    provenance: dict = field(default_factory=dict)
    notes: str = ""
    kernels: dict = field(default_factory=dict)
    spread: dict = field(default_factory=dict)
    load: dict = field(default_factory=dict)
    distributed: dict = field(default_factory=dict)
    insitu: dict = field(default_factory=dict)  # per-call terms fitted on traced runs (rlm_lab.insitu)
    network: dict = field(default_factory=dict)  # the node's shape and its slower tiers (module docstring)

    # ---- rates ------------------------------------------------------------------------------
    @property
    def kernel_factor(self) -> float:
        """How much longer every kernel (products, attention, elementwise, the log-prob head, memory traffic)
        takes inside a real traced step than in its microbenchmark: ``insitu.kernel_factor``, fitted by
        rlm_lab.insitu; 1 for a profile that was not fitted in situ. Every rate below is divided by it
        (every per-element cost multiplied), so a roofline max(FLOPs / F, bytes / BW) scales by exactly it."""
        return float(self.insitu.get("kernel_factor", 1.0)) if self.insitu else 1.0

    def product_factor(self, dtype: str) -> float:
        """:attr:`kernel_factor` for the products and attention of ``dtype``; bf16 autocast on CPU (``bf16``,
        ``bf16_backward``) has its own in-situ factor ``insitu.kernel_factor_bf16`` when fitted (its kernels
        are other code paths than fp32's), else the common one; the bf16 backward products their own
        ``insitu.kernel_factor_bf16_backward`` when fitted (issue 35: a base calibration of another machine has
        another ratio of bf16 backward to forward rates, e.g. with AMX)."""
        ins = self.insitu or {}
        if dtype == "bf16_backward" and "kernel_factor_bf16_backward" in ins:  # its own code path (AMX, oneDNN)
            return float(ins["kernel_factor_bf16_backward"])
        if dtype and dtype.startswith("bf16") and "kernel_factor_bf16" in ins:
            return float(ins["kernel_factor_bf16"])
        return self.kernel_factor

    def dtype_factor(self, dtype: str | None) -> float:
        """The in-situ factor of every kernel term (products, attention, elementwise, the log-prob head, memory
        traffic) of a call in ``dtype``: bf16 autocast's own factor when the fit scoped it to all of a bf16
        call's kernels (``insitu.bf16_scope == "kernels"``, issue 35: under autocast the elementwise work, the
        head and the cache traffic are bf16 code paths as much as the products), else the common factor (older
        profiles: bf16 products and attention only, :meth:`product_factor`). ``dtype`` None: the common one."""
        if dtype and (self.insitu or {}).get("bf16_scope") == "kernels":
            return self.product_factor(dtype)
        return self.kernel_factor

    def peak_flops(self, dtype: str = "bf16") -> float:
        if dtype not in self.matmul_flops:
            raise RlmLabError(f"profile {self.name!r} has no matmul rate for dtype {dtype!r}; "
                              f"it has: {', '.join(self.matmul_flops)}")
        return float(self.matmul_flops[dtype])

    def matmul_rate(self, gemm_flops: float, dtype: str = "bf16") -> float:
        """Achieved FLOP/s of one matrix product of ``gemm_flops`` FLOPs.

        With a measured curve: log-log interpolation between the calibrated points (clamped at the
        ends). Without: eta_F * peak for every size. Ignores: shape (aspect ratio), data layout.
        """
        curve = self.matmul_curve.get(dtype)
        if not curve:
            return self.efficiency.get("matmul", 1.0) * self.peak_flops(dtype) / self.product_factor(dtype)
        return _interp(curve, gemm_flops) / self.product_factor(dtype)

    def bandwidth(self, dtype: str | None = None) -> float:
        """Achieved memory bandwidth eta_B * BW (bytes/s) (``dtype``: of the call moving them, :meth:`dtype_factor`)."""
        return self.efficiency.get("memory", 1.0) * float(self.memory_bandwidth) / self.dtype_factor(dtype)

    def roofline_time(self, flops: float, nbytes: float, gemm_flops: float | None = None,
                      dtype: str = "bf16") -> float:
        """max(FLOPs / F_eff, bytes / BW_eff) seconds (roofline, Williams et al., CACM 2009)."""
        rate = self.matmul_rate(flops if gemm_flops is None else gemm_flops, dtype)
        return max(flops / rate if flops else 0.0, nbytes / self.bandwidth(dtype) if nbytes else 0.0)

    # ---- kernels beyond the matrix products ---------------------------------------------------
    @property
    def kernels_measured(self) -> bool:
        """True when the profile holds calibrated kernel terms; False: the assumed defaults apply."""
        return bool(self.kernels)

    def elementwise_s_per_element(self, kind: str = "forward", dtype_bytes: int = 4, dtype: str | None = None) -> float:
        """Seconds per element of a decoder layer's elementwise work (kind: forward | forward_grad | backward).

        Measured: kernel_benchmarks.bench_elementwise. ASSUMED without it: memory-bound, 3 tensor passes
        (2 reads + 1 write) per element per op at the achieved bandwidth, twice that for backward.
        """
        term = self.kernels.get("elementwise", {}).get(kind)
        if term:
            return float(term["s_per_element"]) * self.dtype_factor(dtype)
        return (2 if kind == "backward" else 1) * 3 * dtype_bytes / self.bandwidth(dtype)

    def attention_rate(self, flops: float, dtype: str = "bf16", backward: bool = False) -> float:
        """FLOP/s of the attention kernel for a call of ``flops`` (4 b a q k d_h) FLOPs.

        Measured: kernel_benchmarks.bench_attention (log-log interpolation). ASSUMED without it: the named
        assumption eta_A (``efficiency.attention``) of the datasheet peak where the profile gives one (the datasheet
        profiles start it at their eta_F), else the matrix product rate at half the size (QK^T and AV are two
        batched products); the same for backward. eta_A is its own assumption because attention's kernels
        (FlashAttention's tiles, its recompute in backward) are not the dense products' and the calibration's
        cases differ most in their share of attention (prime-rl's 16k-token sequences against ~1k elsewhere).
        """
        att = self.kernels.get(f"attention_{dtype}") or self.kernels.get("attention", {})
        curve = att.get("backward_curve" if backward else "curve")
        if not curve:
            if "attention" in self.efficiency and not self.matmul_curve.get(dtype):
                return self.efficiency["attention"] * self.peak_flops(dtype) / self.product_factor(dtype)
            return self.matmul_rate(flops / 2, dtype)
        return _interp(curve, flops) / self.product_factor(dtype)

    def logprob_head_time(self, rows: int, vocab: int, kind: str = "forward", dtype_bytes: int = 4,
                          dtype: str | None = None) -> float:
        """Seconds of the log-prob head beyond its matrix product: base + s_row * rows + s_el * rows * vocab.

        Measured: kernel_benchmarks.bench_logprob_head (TRL's fused head). ASSUMED without it: memory-bound,
        3 passes over the (rows x vocab) logits (log-softmax, gather, entropy).
        """
        if rows <= 0:
            return 0.0
        term = self.kernels.get("logprob_head", {}).get(kind)
        if term:
            return (float(term["base_s"]) + rows * float(term["s_per_row"])
                    + rows * vocab * float(term["s_per_element"])) * self.dtype_factor(dtype)
        return 3 * rows * vocab * dtype_bytes / self.bandwidth(dtype)

    def weight_stream_bandwidth(self, model_bytes: float, dtype: str | None = None) -> float | None:
        """Bytes/s at which products read weights of a model of ``model_bytes``: the measured
        streaming rate when the model exceeds the last-level cache, None (no extra bound) otherwise
        or when not measured (ASSUMED: the matmul curve's rate, i.e. cache-resident weights)."""
        ws = self.kernels.get("weight_stream")
        if not ws or model_bytes <= ws.get("cache_bytes", 0):
            return None
        return float(ws["bandwidth"]) / self.dtype_factor(dtype)

    # ---- the node and its slower tiers ---------------------------------------------------------------
    @property
    def devices_per_node(self) -> int | None:
        """GPUs per node (None: the profile knows no node boundary; everything sits in one node)."""
        v = self.network.get("devices_per_node")
        return int(v) if v else None

    def network_bandwidth(self) -> float:
        """Achieved bytes/s of one GPU's network card, eta_N * B_net (the intra-node link when there is none)."""
        bw = float(self.network.get("bandwidth") or self.link_bandwidth or self.memory_bandwidth)
        return self.efficiency.get("network", 1.0) * bw

    def network_alpha(self) -> float:
        """Latency of one step of a collective that crosses nodes (0 when the profile gives none)."""
        return float(self.network.get("alpha_s", 0.0))

    def host_bandwidth(self) -> float:
        """Achieved bytes/s between a device and host memory (PCIe), eta_H * B_host; the memory bandwidth when
        the profile gives none (a CPU device: its host memory is its memory)."""
        bw = float(self.network.get("host_bandwidth") or self.memory_bandwidth)
        return self.efficiency.get("host", 1.0) * bw

    def call_overhead(self, key: str) -> float:
        return float(self.overhead.get(key, 0.0))

    # ---- communication ---------------------------------------------------------------------
    @property
    def backend(self) -> str:
        return self.collectives.get("backend", "nccl")

    def collective(self, op: str) -> dict:
        """The alpha-beta fit of ``op``: {alpha_s, beta_s_per_byte, world}."""
        ops = self.collectives.get("ops", {})
        if op not in ops:
            note = self.collectives.get("note", "")
            hint = (f"it was calibrated without collectives ({note}): predict one device with it, or several with a "
                    f"datasheet profile or one calibrated on two devices") if not ops and note else \
                f"it has: {', '.join(sorted(ops)) or 'none'} (re-run rlm-lab calibrate)"
            raise RlmLabError(f"profile {self.name!r} has no fit for collective {op!r}; {hint}")
        return ops[op] | {"world": self.collectives.get("world", 2)}

    def to_dict(self) -> dict:
        return asdict(self)


def _interp(curve, size: float) -> float:
    """Log-log interpolation of a measured [[size, rate], ...] curve, clamped at its ends."""
    pts = sorted(curve)
    x = math.log(max(size, 1.0))
    if x <= math.log(pts[0][0]):
        return pts[0][1]
    for (f0, r0), (f1, r1) in zip(pts, pts[1:]):
        if x <= math.log(f1):
            w = (x - math.log(f0)) / (math.log(f1) - math.log(f0))
            return math.exp((1 - w) * math.log(r0) + w * math.log(r1))
    return pts[-1][1]


def known_profiles(folder: Path = HARDWARE_DIR) -> list[str]:
    return sorted(p.stem for p in Path(folder).glob("*.json"))


def profile_for(size: str):
    """The hardware profile predictions at ``size`` use: the calibrated CPU profile for smoke/cpu; for gpu
    ``$RLM_GPU_PROFILE``, else a calibrated profile of this GPU if one was written, else its datasheet
    (:func:`rlm_lab.device.gpu_profile`, which asks torch; this module imports none)."""
    if check_size(size) != "gpu":
        return CPU_PROFILE
    if os.environ.get("RLM_GPU_PROFILE"):
        return os.environ["RLM_GPU_PROFILE"]
    return gpu_profile(known_profiles())


def profile_from_dict(d: dict, where: str = "?") -> HardwareProfile:
    """Validate and build a profile; a missing or invalid field raises an error naming it."""
    if not isinstance(d, dict):
        raise RlmLabError(f"hardware profile {where} must be a JSON object")
    for key in REQUIRED:
        if key not in d:
            raise RlmLabError(f"hardware profile {where} is missing the field {key!r}")
    if d["kind"] not in KINDS:
        raise RlmLabError(f"hardware profile {where}: kind must be one of {KINDS}, got {d['kind']!r}")
    for key in ("memory_bytes", "memory_bandwidth"):
        if not isinstance(d[key], (int, float)) or d[key] <= 0:
            raise RlmLabError(f"hardware profile {where}: field {key!r} must be a positive number")
    if not d["matmul_flops"] or any(not isinstance(v, (int, float)) or v <= 0 for v in d["matmul_flops"].values()):
        raise RlmLabError(f"hardware profile {where}: field 'matmul_flops' must map dtypes to positive FLOP/s")
    missing = [k for k in OVERHEAD_KEYS if k not in d["overhead"]]
    if missing:
        raise RlmLabError(f"hardware profile {where}: field 'overhead' is missing {', '.join(missing)}")
    bad = next((k for k, v in d["overhead"].items()
                if not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0), None)
    if bad is not None:
        raise RlmLabError(f"hardware profile {where}: overhead.{bad} = {d['overhead'][bad]!r} must be a number >= 0")
    for key in ("kernel_factor", "kernel_factor_bf16", "kernel_factor_bf16_backward"):  # divisors of every kernel rate: 0 would divide by zero
        v = (d.get("insitu") or {}).get(key, 1.0)
        if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise RlmLabError(f"hardware profile {where}: insitu.{key} = {v!r} must be a positive number "
                              "(refit it: `rlm-lab insitu`, whose fit keeps it within its bounds)")
    fields = HardwareProfile.__dataclass_fields__
    return HardwareProfile(**{k: v for k, v in d.items() if k in fields})


def load_profile(name_or_path) -> HardwareProfile:
    """Load a profile by name (``data/hardware/<name>.json``), by path, or pass one through.

    An unknown name raises :class:`RlmLabError` listing the known profiles.
    """
    if isinstance(name_or_path, HardwareProfile):
        return name_or_path
    if isinstance(name_or_path, dict):
        return profile_from_dict(name_or_path, where=repr(name_or_path.get("name", "?")))
    path = Path(str(name_or_path))
    if not path.is_file():
        path = HARDWARE_DIR / f"{name_or_path}.json"
    if not path.is_file():
        known = ", ".join(known_profiles())
        raise RlmLabError(f"unknown hardware profile {str(name_or_path)!r}; known profiles: {known} "
                          f"(or pass the path of a profile JSON; `rlm-lab calibrate` writes one)")
    try:
        d = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as e:  # a binary file (or another encoding): not a profile JSON
        raise RlmLabError(f"hardware profile {path} is not a text (JSON) file (byte {e.start} is not UTF-8)") from None
    except json.JSONDecodeError as e:
        raise RlmLabError(f"hardware profile {path} is not valid JSON ({e})") from None
    return profile_from_dict(d, where=str(path))


def same_machine(a: dict, b: dict) -> bool:
    """Whether two provenances' ``hardware`` (or the hardware dicts themselves) name the same machine: the same
    CPU model and core count (a record names no more of its machine than that)."""
    a, b = a.get("hardware", a), b.get("hardware", b)
    return bool(a.get("cpu_model")) and (a.get("cpu_model"), a.get("cpu_count")) == (b.get("cpu_model"),
                                                                                     b.get("cpu_count"))


def profile_of_machine(hardware: dict, check=None, folder: Path = HARDWARE_DIR) -> HardwareProfile | None:
    """The calibrated CPU profile of the machine whose provenance (or its ``hardware`` dict) is given: how a
    committed record is priced with the profile of the machine that made it, never with one named after the
    machine that builds the book. ``CPU_PROFILE`` first, then the committed profiles by name; ``check``: a
    callable that raises :class:`RlmLabError` for a profile lacking what the caller needs (e.g. collectives).
    A GPU profile calibrated on a machine of that CPU is not one (its ``device`` names the GPU).
    None when no such profile exists (the caller then predicts nothing and says so)."""
    names = [CPU_PROFILE] + [n for n in known_profiles(folder) if n != CPU_PROFILE]
    for name in names:
        try:
            prof = load_profile(name if name == CPU_PROFILE else Path(folder) / f"{name}.json")
            hw = hardware.get("hardware", hardware)
            cpu = prof.device == f"{hw.get('cpu_model')} ({hw.get('cpu_count')} cores)"  # calibrate's CPU name
            if prof.kind != "calibrated" or not cpu or not same_machine(hardware, prof.provenance):
                continue
            if check is not None:
                check(prof)
        except RlmLabError:
            continue
        return prof
    return None


def save_profile(profile: HardwareProfile | dict, path) -> Path:
    d = portable(profile.to_dict() if isinstance(profile, HardwareProfile) else profile)  # no machine paths
    profile_from_dict(d, where=str(path))  # never write a profile we could not read back
    return atomic_write_json(path, d)
