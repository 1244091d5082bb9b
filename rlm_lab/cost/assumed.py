"""Name every assumed constant a prediction leans on, and how much the prediction moves without it.

A datasheet profile (``kind: datasheet``) holds measured-by-the-vendor peaks (FLOP/s, bandwidth, capacity,
link) and **assumed** round figures: the efficiencies (eta_F, eta_A, eta_B, eta_N, eta_H), the per-call overheads (e.g. a decode
step's per-layer overhead) and the collectives' latency and per-byte cost (the profile's ``notes`` say so).
A profile without ``kernels`` uses assumed kernel terms (hardware.py). ``predict`` prints one
``assumed:`` line per group with the predicted step recomputed without that group (overheads 0, eta = 1,
alpha = 0): a conclusion that changes with it leans on the assumption (issue 12 item 7).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Callable

from ..errors import RlmLabError
from .engine import engine_step_overhead
from .hardware import HardwareProfile, load_profile
from .units import _bytes

# The named assumptions a user can override (``assume:`` in a predict config, ``--assume NAME=VALUE``): name ->
# (where it lives in a profile, what it means). Each is a round figure in the datasheet profiles (their ``notes``);
# rlm-lab validate --published fits some of them on the calibration split of the published cases.
ASSUMPTIONS = {
    "eta_F": (("efficiency", "matmul"), "fraction of the datasheet matrix-product peak achieved"),
    "eta_A": (("efficiency", "attention"), "fraction of the datasheet matrix-product peak the attention kernel "
                                           "achieves, its FLOPs counted as 4 b a q k d_h (no causal halving)"),
    "eta_B": (("efficiency", "memory"), "fraction of the datasheet memory bandwidth achieved"),
    "eta_N": (("efficiency", "network"), "fraction of the network card's bandwidth a collective across nodes achieves"),
    "eta_H": (("efficiency", "host"), "fraction of the host link (PCIe) a device-host copy achieves"),
    "engine_step_s": (("overhead", "engine_step_s"), "host seconds per decode step of a serving engine (engine.py)"),
    "network_alpha_s": (("network", "alpha_s"), "latency of one ring step of a collective across nodes"),
}
FRACTIONS = ("eta_F", "eta_A", "eta_B", "eta_N", "eta_H")
# The efficiencies fitted on the calibration split of the published cluster measurements (rlm-lab validate
# --published --fit): the values the validated errors that advise prints belong to.
FIT_FILE = Path(__file__).resolve().parents[2] / "data" / "published" / "fit.json"


def fitted_assumptions(profile, path: Path = FIT_FILE) -> dict:
    """{eta_F: value, ...}: the efficiencies of ``data/published/fit.json`` as named assumptions (``--fitted``).
    They scale a datasheet profile's peaks, as the fit did; a calibrated profile, no fit, or a damaged one is one
    error line."""
    prof = load_profile(profile)
    if prof.kind != "datasheet":
        raise RlmLabError(f"--fitted scales a datasheet profile's peaks as the published fit did; {prof.name} is "
                          f"{prof.kind} (its rates are measured): drop --fitted")
    try:
        params = json.loads(Path(path).read_text(encoding="utf-8"))["parameters"]
        out = {n: float(params[n]["fitted"]) for n in FRACTIONS}
    except FileNotFoundError:
        raise RlmLabError(f"--fitted: no fit at {path} (rlm-lab validate --published --fit writes it)") from None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise RlmLabError(f"--fitted: {path} does not give a fitted value for each of {', '.join(FRACTIONS)} "
                          f"({type(e).__name__}: {e}); restore it from git") from None
    return out


def apply_assumptions(profile, overrides) -> HardwareProfile:
    """``profile`` with the named assumptions of ``overrides`` ({name: value}) replaced; an unknown name or a value
    that is not a finite number (in (0, 1] for an efficiency, >= 0 for a time) is refused in one line."""
    prof = load_profile(profile)
    if not overrides:
        return prof
    if not isinstance(overrides, dict):
        raise RlmLabError(f"assume must map assumption names to numbers, got {overrides!r}")
    d = prof.to_dict()
    for name, value in overrides.items():
        if name not in ASSUMPTIONS:
            raise RlmLabError(f"unknown assumption {name!r}; known: {', '.join(ASSUMPTIONS)}")
        ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
        if not ok or (name in FRACTIONS and not 0 < value <= 1) or value < 0:
            want = "a number in (0, 1]" if name in FRACTIONS else "a finite number >= 0"
            raise RlmLabError(f"assumption {name} must be {want}, got {value!r}")
        section, key = ASSUMPTIONS[name][0]
        d[section] = dict(d.get(section) or {}, **{key: float(value)})
    d["name"] = prof.name
    d.setdefault("provenance", {})
    d["provenance"] = dict(d["provenance"] or {}, assumed_by_user={k: float(v) for k, v in overrides.items()})
    return load_profile(d)


def parse_assume(items) -> dict:
    """``["eta_F=0.5", "engine_step_s=1e-3"]`` (the ``--assume`` flags) -> {name: value}; malformed ones named."""
    out = {}
    for item in items or ():
        name, sep, value = str(item).partition("=")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            raise RlmLabError(f"--assume takes NAME=NUMBER, got {item!r}") from None
        if not sep:
            raise RlmLabError(f"--assume takes NAME=NUMBER, got {item!r}")
    return out

# TRL's per-optimizer-step bookkeeping between the stages (step_benchmarks.py: padding, decoding, gathering,
# clipping, logging, dataloader): host-side Python, so a GPU host pays about what a CPU host does. A datasheet
# profile has no measurement of it: these round figures (step_benchmarks measured 3.6 ms + 0.11 ms/row +
# 0.05 ms/tensor on the 2-core CPU machine, data/runs/cpu/validation_trl_step) are ASSUMED for a GPU host;
# calibrated profiles carry their own measured terms.
ASSUMED_TRL_STEP = {"trl_step_base_s": 4e-3, "trl_step_row_s": 1e-4, "trl_step_tensor_s": 5e-5}


def trl_step_terms(prof: HardwareProfile) -> tuple[float, float, float]:
    """(base, per row, per tensor) seconds of TRL's bookkeeping per optimizer step: the profile's measured
    ``overhead`` keys; for a datasheet profile without them the assumed :data:`ASSUMED_TRL_STEP`; else 0
    (a calibrated profile made before the benchmark existed)."""
    src = ASSUMED_TRL_STEP if prof.kind == "datasheet" and "trl_step_base_s" not in prof.overhead else prof.overhead
    return tuple(float(src.get(k, 0.0)) for k in ASSUMED_TRL_STEP)


# The framework cost of a distributed layout per step (DDP's reducer, FSDP2's hooks, DTensor dispatch, the
# pipeline schedule, the ring, the expert dispatch; dist_benchmarks.py measures it on a CPU host): a datasheet
# profile has no measurement of it. ASSUMED round figures of the order of PyTorch's per-module hook and DTensor
# dispatch cost on a host CPU (tens of microseconds per layer per step); every prediction that adds them says so
# (``framework_source``).
ASSUMED_DIST_FRAMEWORK = {fam: {"base_s": 1e-4, "unit_s": 5e-5, "unit": unit} for fam, unit in (
    ("ddp", "layer"), ("zero1", "layer"), ("fsdp_zero2", "layer"), ("fsdp_zero3", "layer"), ("tp", "layer"),
    ("tp_sp", "layer"), ("pp", "microbatch"), ("cp", "hop"), ("ep", "layer"), ("harness", "layer"))}


OVERHEAD_GROUPS = {
    "decode-step overheads": ("decode_step_base_s", "decode_step_layer_s", "generate_base_s"),
    "forward/backward call overheads": ("forward_base_s", "forward_layer_s", "forward_grad_base_s",
                                        "forward_grad_layer_s", "backward_base_s", "backward_layer_s"),
    "optimizer and op overheads": ("optimizer_base_s", "optimizer_tensor_s", "op_s"),
    "TRL per-step bookkeeping": tuple(ASSUMED_TRL_STEP),
}


def _fmt_s(x: float) -> str:
    return f"{x * 1e6:.3g} us" if x < 1e-3 else f"{x * 1e3:.3g} ms" if x < 1 else f"{x:.3g} s"


def _variant(prof: HardwareProfile, **changes) -> HardwareProfile:
    d = prof.to_dict()
    for key, value in changes.items():
        d[key] = value
    d["name"] = prof.name + "-variant"
    return load_profile(d)


def assumption_lines(profile, step: Callable[[HardwareProfile], float] | None = None,
                     engine: bool = False) -> list[str]:
    """``assumed: ...`` lines for ``profile``; ``step(profile) -> seconds`` (None: labels only) gives each
    group's sensitivity: the predicted step with that group removed; ``engine``: a continuous engine generates
    (its per-step host cost is named too)."""
    prof = load_profile(profile)
    lines: list[str] = []
    base = step(prof) if step else None

    def moved(variant: HardwareProfile) -> str:
        if base is None:
            return ""
        t = step(variant)
        return f"; without it the step is {_fmt_s(t)} ({100 * (t - base) / base:+.0f} %)"

    user = (prof.provenance or {}).get("assumed_by_user") or {}
    if user:
        lines.append("assumed: set by you: " + ", ".join(f"{k}={v:g}" for k, v in user.items()))
    if prof.kind == "datasheet":
        for group, keys in OVERHEAD_GROUPS.items():
            present = {k: prof.overhead[k] for k in keys if prof.overhead.get(k)}
            if present:
                vals = ", ".join(f"{k}={_fmt_s(v)}" for k, v in present.items())
                zeroed = prof.overhead | {k: 0.0 for k in present}
                lines.append(f"assumed: {group} {vals} (round figures, not measured){moved(_variant(prof, overhead=zeroed))}")
        if "trl_step_base_s" not in prof.overhead:
            vals = ", ".join(f"{k}={_fmt_s(v)}" for k, v in ASSUMED_TRL_STEP.items())
            zeroed = prof.overhead | {k: 0.0 for k in ASSUMED_TRL_STEP}
            lines.append(f"assumed: TRL per-step bookkeeping {vals} (round figures of a CPU host, not measured on "
                         f"this device){moved(_variant(prof, overhead=zeroed))}")
        if engine:
            t = engine_step_overhead(prof)
            lines.append(f"assumed: a serving engine's host cost per decode step engine_step_s={_fmt_s(t)} (CUDA-graph "
                         f"replay, vLLM V1; a round figure){moved(_variant(prof, overhead=prof.overhead | {'engine_step_s': 0.0}))}")
        eff = prof.efficiency
        if any(eff.get(k, 1.0) != 1.0 for k in ("matmul", "attention", "memory")):
            att = eff.get("attention", eff.get("matmul", 1.0))
            lines.append(f"assumed: efficiencies eta_F={eff.get('matmul', 1.0):g}, eta_A={att:g} (attention), "
                         f"eta_B={eff.get('memory', 1.0):g} on the datasheet peaks"
                         f"{moved(_variant(prof, efficiency={'matmul': 1.0, 'attention': 1.0, 'memory': 1.0}))}")
        net = prof.network
        if net:
            lines.append(f"assumed: nodes of {net.get('devices_per_node')} devices, a network card of "
                         f"{_bytes(net.get('bandwidth', 0))}/s per device at eta_N={eff.get('network', 1.0):g}, "
                         f"{prof.network_alpha() * 1e6:g} us per ring step across nodes, host link "
                         f"{_bytes(net.get('host_bandwidth', 0))}/s at eta_H={eff.get('host', 1.0):g} (the vendor's "
                         f"reference node; cluster devices_per_node and network_gbps override)")
        ops = prof.collectives.get("ops", {})
        if ops:
            alpha = max(o.get("alpha_s", 0.0) for o in ops.values())
            no_alpha = dict(prof.collectives, ops={k: dict(v, alpha_s=0.0) for k, v in ops.items()})
            lines.append(f"assumed: collective latency alpha={_fmt_s(alpha)} and per-byte cost from the link's "
                         f"datasheet figure{moved(_variant(prof, collectives=no_alpha))}")
    else:
        missing = [k for keys in OVERHEAD_GROUPS.values() for k in keys if k not in prof.overhead]
        if missing:
            lines.append(f"assumed: not in the profile, taken as 0: {', '.join(missing)}")
    if not prof.kernels_measured:
        lines.append("assumed: kernel terms not measured on this device: elementwise ops and the log-prob head "
                     "memory-bound at 3 passes per element, attention at the matmul rate, weights cache-resident")
    return lines
