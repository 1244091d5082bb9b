"""Step time of every chapter-4 layout predicted from the hardware profile alone (no baseline timed in the run).

    T = stretch · (T_compute + T_optimizer + T_framework) + Σ_messages (α + β · wire bytes)

* **Compute** at the rank's thread count: the ranks of a multi-process run use 1 torch thread each
  (``rlm_lab.parallel.launch.spawn``; torchrun sets ``OMP_NUM_THREADS=1``) while the profile's headline rates
  were measured with the calibration's threads; :func:`rlm_lab.parallel.bench.framework.at_threads` swaps in
  the rates measured at the rank's thread count. Forward (with autograd) + backward from
  ``rlm_lab.cost.timing`` on the rank's share of the work:
    DP/ZeRO/EP: the local rows b = B/(dp·ep); TP: the matrix products and attention divided by t;
    PP (p stages, m micro-batches, GPipe and 1F1B alike): (m + p - 1) slots of one micro-batch through
      one stage, slot = [fwd+bwd compute of B/m rows]/p + call overheads of L/p layers (Huang et al.
      arXiv 1811.06965; Narayanan et al. arXiv 2104.04473: the same bubble for both schedules);
    CP (c ranks, ring attention, Liu et al. arXiv 2310.01889): s/c local tokens, attention of the local
      queries against all s keys.
* **Optimizer**: AdamW over what the rank holds (1/d of the state under ZeRO, 1/t under TP, 1/p a stage).
* **Messages**: the counted (or formula) collectives at the profile's α-β (``rlm_lab.cost.comm``);
  PP: every send and receive of the first stage (each is on the critical path on CPU);
  CP: one ring hop per send; EP: 4 all-to-alls per MoE layer from the routing counts (or uniform routing).
* **Framework**: what DDP's reducer, ZeroRedundancyOptimizer, FSDP2's hooks, DTensor dispatch, the
  pipeline schedule, the hand-written ring and the expert dispatch cost per step beyond compute and
  the α-β time of their messages: ``base_s + unit_s · units`` per family, calibrated on a hidden-16
  model whose compute is ~0 (``rlm_lab.calibrate.dist_benchmarks``), or None when the profile has none.
* **Oversubscription**: with more ranks than cores each rank gets cores/world of a core: compute,
  optimizer and framework stretch by world/cores; messages are not stretched (a waiting rank does not
  compete for the core).

Nothing overlaps (gloo on CPU runs collectives and P2P in the calling thread).
"""

from __future__ import annotations

import json
from dataclasses import replace

from ...cost.assumed import ASSUMED_DIST_FRAMEWORK
from ...cost.comm import collective_time
from ...cost.fitting import fit_nonneg
from ...cost.hardware import load_profile
from ...cost.spec import model_spec
from ...cost.timing import attention_time, elementwise_time, forward_time, matmul_time, optimizer_time
from ..mesh import Layout
from ..predict import predicted_comm
from .framework import BATCH, DEPTHS, SEQ, at_threads, distributed_section, spec_of, tiny


def families(layout: Layout) -> list[tuple[str, str]]:
    """The framework-cost families a layout runs, with the unit each one's cost grows with."""
    out = []
    if layout.pp > 1:
        return [("pp", "microbatch")]
    if layout.cp > 1:
        return [("cp", "hop")]
    if layout.ep > 1:
        return [("ep", "layer")]
    if layout.tp > 1:
        out.append(("tp_sp" if layout.sp else "tp", "layer"))
    if layout.dp > 1:
        out.append(({0: "ddp", 1: "zero1", 2: "fsdp_zero2", 3: "fsdp_zero3"}[layout.zero], "layer"))
    return out


def units(layout: Layout, layers: int, unit: str) -> int:
    if unit == "microbatch":
        return layout.n_microbatches
    if unit == "hop":
        return 2 * layers * (layout.cp - 1)
    return layers


def _passes(spec, prof, b: int, s: int, kv_len: int | None = None):
    """(compute, split, overhead) seconds of one training forward (autograd on) + backward of b x s tokens.

    ``split``: the part TP divides (matrix products and attention); ``kv_len``: keys each query attends
    to (CP: all s of the sequence for s/c local queries)."""
    kw = dict(dtype="fp32", dtype_bytes=4)
    mm = matmul_time(spec, prof, b * s, None, "fp32", 4)
    fwd = forward_time(spec, prof, b, s, overhead=False, grad=True, **kw)
    # backward_time's compute part: twice the products (dX, dW), attention and elementwise backward
    bwd = 2 * mm + attention_time(spec, prof, b, s, s, backward=True, **kw) + elementwise_time(spec, prof, b * s, "backward", 4)
    key = "forward_grad" if "forward_grad_base_s" in prof.overhead else "forward"
    over_base = prof.call_overhead(f"{key}_base_s") + prof.call_overhead("backward_base_s")
    over_layer = prof.call_overhead(f"{key}_layer_s") + prof.call_overhead("backward_layer_s")
    att = attention_time(spec, prof, b, s, s, **kw) + attention_time(spec, prof, b, s, s, backward=True, **kw)
    compute = fwd + bwd
    if kv_len and kv_len != s:
        full = (attention_time(spec, prof, b, s, kv_len, **kw)
                + attention_time(spec, prof, b, s, kv_len, backward=True, **kw))
        compute += full - att
        att = full
    return compute, 3 * mm + att, (over_base, over_layer)


def _message_time(layout: Layout, comm: dict, prof) -> float:
    t = 0.0
    for kind, v in comm.items():
        calls = v.get("calls") or 1
        if kind == "recv" and layout.pp == 1:
            continue  # CP's ring: a hop is one isend/irecv pair, counted once on its send
        op = "send_recv" if kind in ("send", "recv") else kind
        groups = v.get("groups")
        d = max(groups) if isinstance(groups, list) and groups else max(layout.dp, layout.tp, layout.pp,
                                                                         layout.cp, layout.ep)
        t += calls * collective_time(op, v["bytes"] / calls, d, prof)
    return t


def formula_comm(layout: Layout, model, batch: int, seq: int, routing=None) -> dict:
    """The step's messages from the formulas (``parallel.predict.predicted_comm``); EP: 4 all-to-alls
    per MoE layer from ``routing`` (per layer ``(send_counts, recv_counts)`` of the busiest rank) or
    uniform routing, and the dense gradients' all-reduce."""
    if layout.ep == 1:
        return predicted_comm(layout, model, batch, seq)
    spec = model_spec(model)
    e, h, k = layout.ep, spec.hidden, spec.top_k
    b = batch // layout.data_ranks
    if routing:
        a2a = sum(2 * sum(s) + 2 * sum(r) for s, r in routing) * h * 4
        calls = 4 * len(routing)
    else:
        a2a = 4 * spec.moe_layers * b * seq * k * h * 4
        calls = 4 * spec.moe_layers
    dense = 4 * (spec.params - spec.moe_layers * spec.moe_mlp_params())
    # all_to_all_single's message is the send buffer (rlm_lab.cost.comm: bytes_per_rank = (e-1)/e of it)
    return {"all_to_all": {"calls": calls, "bytes": a2a}, "all_reduce": {"calls": 1, "bytes": dense}}


def predicted_step_time(layout: Layout, model, batch: int, seq: int, profile, comm: dict | None = None,
                        cores: int | None = None, threads: int = 1, framework: bool = True, routing=None,
                        harness: bool = False) -> dict:
    """Seconds of one training step of ``layout`` per rank (module docstring), from the profile alone.

    ``model``: zoo name or ModelSpec; ``batch``: the global batch; ``comm``: counted collectives
    ``{kind: {calls, bytes, groups}}`` (default :func:`formula_comm`); ``cores``: CPU cores the ranks share;
    ``threads``: torch threads per rank; ``framework``: add the calibrated framework cost (False: leave it
    out, e.g. to fit it); ``harness``: the step was timed under ``CommCounter`` (``run_layout``), add its
    calibrated cost (family ``harness``). Returns the terms, the total and what was assumed.
    """
    base = load_profile(profile)
    prof, rates_threads = at_threads(base, threads)
    spec = model_spec(model)
    L = spec.layers
    if layout.pp > 1:
        p, m = layout.pp, layout.n_microbatches
        c, _, (ob, ol) = _passes(spec, prof, batch // m, seq)
        compute = (m + p - 1) * (c / p + ob + L / p * ol)
    elif layout.cp > 1:
        c, _, (ob, ol) = _passes(spec, prof, batch, seq // layout.cp, kv_len=seq)
        compute = c + ob + L * ol
    else:
        c, split, (ob, ol) = _passes(spec, prof, batch // layout.data_ranks, seq)
        compute = c - split + split / layout.tp + ob + L * ol
    params, tensors = spec.params, spec.param_tensors
    if layout.pp > 1:
        params, tensors = params / layout.pp, -(-tensors // layout.pp)
    elif layout.ep > 1:
        params -= spec.moe_layers * spec.moe_mlp_params() * (1 - 1 / layout.ep)
    params /= layout.tp
    opt = optimizer_time(spec, prof, shards=layout.dp if layout.zero >= 1 else 1, params=int(params), tensors=tensors)
    comm = comm if comm is not None else formula_comm(layout, model, batch, seq, routing)
    comm_s = _message_time(layout, comm, base)
    fw_s, fw_src = None, None
    if framework:
        terms, fw_src = framework_terms(base)
        if terms is not None:
            fw_s = 0.0
            for fam, unit in families(layout):
                t = terms.get(fam)
                if t is not None:
                    fw_s += t["base_s"] + t["unit_s"] * units(layout, L, unit)
            if harness and "harness" in terms:
                fw_s += terms["harness"]["base_s"] + terms["harness"]["unit_s"] * L
    on_cpu = base.collectives.get("backend") == "gloo"
    stretch = max(1.0, layout.world / cores) if cores and on_cpu else 1.0
    compute, opt = compute * stretch, opt * stretch
    fw = (fw_s or 0.0) * stretch
    return {"compute_s": compute, "optimizer_s": opt, "comm_s": comm_s, "framework_s": fw if fw_s is not None else None,
            "total_s": compute + opt + comm_s + fw, "oversubscription": stretch, "threads": threads,
            "rates_threads": rates_threads, "framework_source": fw_src, "profile": base.name}


def sweep_layout(result: dict) -> tuple[Layout, int]:
    """(layout, global batch) of a ``measure_pp/cp/ep`` result (the ``ch04_e2_*`` records)."""
    kind, w = result["parallelism"], result["world"]
    if kind == "pp":
        return Layout(pp=w, schedule=result["schedule"], microbatches=result["microbatches"]), result["batch"]
    if kind == "cp":
        return Layout(cp=w), result["batch"]
    return Layout(ep=w), result["batch_per_rank"] * w


def predict_sweep(result: dict, profile, cores: int | None = None, threads: int | None = 1,
                  framework: bool = True) -> dict:
    """:func:`predicted_step_time` of a ``measure_pp/cp/ep`` result from the profile alone (its layers,
    batch and sequence; EP: the busiest rank's routing counts). Those runs are timed without
    ``CommCounter``, with their own instruments (PP: saved-tensor hooks; CP/EP: timers), not modelled."""
    lay, batch = sweep_layout(result)
    spec = model_spec(result["model"])
    if result.get("layers") and result["layers"] != spec.layers:
        spec = replace(spec, layers=result["layers"], moe_layers=result["layers"] if spec.moe_layers else 0)
    routing = None
    if lay.ep > 1:
        busiest = max(result["per_rank"], key=lambda x: sum(map(sum, x["send_counts"])) + sum(map(sum, x["recv_counts"])))
        routing = list(zip(busiest["send_counts"], busiest["recv_counts"]))
    comm = None
    if lay.pp > 1:  # the busiest rank's sends and receives (a middle stage's both ways)
        msg = batch // lay.n_microbatches * result["seq"] * spec.hidden * 4
        n = lay.n_microbatches * (2 if lay.pp > 2 else 1)
        comm = {"send": {"calls": n, "bytes": n * msg}, "recv": {"calls": n, "bytes": n * msg}}
    elif lay.cp > 1:
        comm = formula_comm(lay, result["model"], batch, result["seq"])
        comm["all_reduce"] = {"calls": 1, "bytes": result["grad_bytes"]}
    out = predicted_step_time(lay, spec, batch, result["seq"], profile, comm=comm, cores=cores, routing=routing,
                              threads=threads, framework=framework)
    # measure_pp/cp/ep time the forward, backward and gradient sync, not the optimizer step
    out["total_s"] -= out["optimizer_s"]
    out["optimizer_s"] = 0.0
    return out


# ---- the framework terms: fitted (calibration) and read (prediction) with this module's predictor -----

def framework_terms(profile) -> tuple[dict | None, str | None]:
    """({family: {base_s, unit_s, unit}} or None, source).

    Calibrated profiles: refitted from the section's measured points against THIS profile (the framework
    cost is what the profile's own prediction misses on the hidden-16 models, so a recalibrated profile
    gets its own residual); None without a distributed calibration. Datasheet profiles:
    ``assumed.ASSUMED_DIST_FRAMEWORK``."""
    prof = load_profile(profile)
    sec, src = distributed_section(prof)
    if sec.get("framework_points"):
        key = (prof.name, json.dumps(prof.provenance, sort_keys=True, default=str), src)
        if key not in _FITS:
            _FITS[key] = fit_framework(sec["framework_points"], prof, cores=sec.get("cores", 2))
        return _FITS[key], src
    if sec.get("framework"):
        return sec["framework"], src
    if prof.kind == "datasheet":
        return ASSUMED_DIST_FRAMEWORK, "ASSUMED (assumed.ASSUMED_DIST_FRAMEWORK)"
    return None, None


_FITS: dict = {}


def fit_framework(points: list[dict], profile, cores: int = 2) -> dict:
    """{family: {base_s, unit_s, unit, points}}: NNLS fit of measured - predicted (no framework) per family;
    ``harness``: the counter's cost per step (one process, with minus without), base + per layer."""
    single = {(p["layers"], p["counted"]): p["step_s"] for p in points if p["family"] == "single"}
    hs = [(L, single[(L, True)] - single[(L, False)]) for L in DEPTHS]
    h0, h1 = fit_nonneg([[1.0, L] for L, _ in hs], [y for _, y in hs], relative=False)
    out = {"harness": {"base_s": h0, "unit_s": h1, "unit": "layer", "points": [list(h) for h in hs]}}
    rows: dict[str, list] = {}
    for p in points:
        if p["family"] == "single":
            continue
        lay = Layout(**p["layout"])
        spec = spec_of(tiny(p["layers"], moe=lay.ep > 1))
        pred = predicted_step_time(lay, spec, BATCH, SEQ, profile, comm=p["comm"], cores=cores, threads=1,
                                   framework=False)
        (fam, unit), = families(lay)
        resid = p["step_s"] - pred["total_s"] - (h0 + h1 * p["layers"])  # every case ran under the counter
        rows.setdefault(fam, []).append((units(lay, p["layers"], unit), resid, unit))
    for fam, rs in rows.items():
        c0, c1 = fit_nonneg([[1.0, u] for u, _, _ in rs], [y for _, y, _ in rs], relative=False)
        out[fam] = {"base_s": c0, "unit_s": c1, "unit": rs[0][2], "points": [[u, y] for u, y, _ in rs]}
    return out
