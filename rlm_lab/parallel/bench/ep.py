"""Expert parallelism measured: all-to-all bytes against the routing-count formula, load imbalance, and
EP against one process (the mechanism is ``rlm_lab.parallel.expert_parallel``)."""

from __future__ import annotations

from ...cost.comm import ep_all_to_all_bytes
from ...models import ZOO, check_model, make_config
from ..expert_parallel import apply_ep, check_ep, imbalance, is_expert_param, predicted_a2a_bytes, sync_grads
from ..launch import spawn
from .common import (
    baseline_step_s,
    cores,
    max_rel,
    peak_rss_mib,
    predict_step_time,
    random_batch,
    timed_step,
    zoo_model,
)


def _ep_worker(rank, world, model_name, batch, seq, steps, seed):
    import torch
    import torch.distributed as dist

    model = zoo_model(model_name, seed)
    vocab = model.config.vocab_size
    # one rank's share, alone: its rows through the whole model with all experts local
    base = baseline_step_s(model, random_batch(batch, seq, vocab, seed + 7)) if rank == 0 else None
    dist.barrier()
    experts = apply_ep(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    rows = []
    for step in range(steps + 1):  # step 0 warms up and is not timed
        x = random_batch(batch * world, seq, vocab, seed + 1 + step)[rank * batch:(rank + 1) * batch]
        for m in experts:
            m.reset_stats()
        times = timed_step(lambda: model(input_ids=x, labels=x).loss, lambda: sync_grads(model), opt)
        if step:
            rows.append({**times, "layers": [dict(m.stats) for m in experts]})
    dense = sum(p.numel() * p.element_size() for n, p in model.named_parameters() if not is_expert_param(n))
    return {"rank": rank, "steps": rows, "baseline_s": base, "peak_rss_mib": peak_rss_mib(), "dense_bytes": dense}


def measure_ep(model: str = "nano-moe", world: int = 2, steps: int = 2, batch: int = 4, seq: int = 32,
               seed: int = 0, profile=None, timeout_s: float = 120.0) -> dict:
    """Run ``steps`` timed expert-parallel steps (``batch`` sequences per rank); compare with predictions.

    Bytes: counted off-rank all-to-all bytes vs the exact formula from the routing counts, and the
    uniform-routing expectation; λ (max/mean load) per layer over experts and over ranks.
    Predicted step: :func:`~rlm_lab.parallel.bench.common.predict_step_time`.
    """
    spec = ZOO[check_model(model)]
    check_ep(spec.experts, world)
    config = make_config(model)
    h, k = config.hidden_size, spec.top_k
    results = spawn(_ep_worker, world, args=(model, batch, seq, steps, seed), timeout_s=timeout_s)
    per_rank, lam_expert, lam_rank = [], [], []
    last = [r["steps"][-1] for r in results]
    for r, row in zip(results, last):
        counted = {key: sum(L[key] for L in row["layers"]) for key in ("dispatch", "combine", "bwd_dispatch",
                                                                     "bwd_combine", "meta", "message_bytes")}
        exact = [predicted_a2a_bytes(L["send_counts"][0], L["recv_counts"][0], r["rank"], h) for L in row["layers"]]
        avg = {key: sum(x[key] for x in r["steps"]) / len(r["steps"]) for key in ("fwd_s", "bwd_s", "grad_sync_s", "wall_s")}
        per_rank.append({"rank": r["rank"], **avg, "counted": counted, "peak_rss_mib": r["peak_rss_mib"],
                         "send_counts": [L["send_counts"][0] for L in row["layers"]],
                         "recv_counts": [L["recv_counts"][0] for L in row["layers"]],
                         "predicted_fwd": sum(x["fwd"] for x in exact), "predicted_bwd": sum(x["bwd"] for x in exact)})
    for i in range(len(last[0]["layers"])):
        loads = [n for row in last for n in row["layers"][i]["expert_load"][0]]  # rank-major = expert order
        lam_expert.append(imbalance(loads))
        lam_rank.append(imbalance([sum(row["layers"][i]["expert_load"][0]) for row in last]))
    t1 = results[0]["baseline_s"]
    counted_total = sum(sum(x["counted"][key] for key in ("dispatch", "combine", "bwd_dispatch", "bwd_combine"))
                        for x in per_rank)
    out = {
        "parallelism": "ep", "model": model, "world": world, "batch_per_rank": batch, "seq": seq, "steps": steps,
        "experts": spec.experts, "top_k": k, "oversubscribed": world > cores(),
        "loss": sum(x["loss"] for x in last) / world, "step_s": max(x["wall_s"] for x in per_rank),
        "per_rank": per_rank, "lambda_expert": lam_expert, "lambda_rank": lam_rank,
        "baseline_share_s": t1, "dense_bytes": results[0]["dense_bytes"],
        "sent_bytes": counted_total,
        "predicted_bytes": sum(x["predicted_fwd"] + x["predicted_bwd"] for x in per_rank),
        "expected_bytes_uniform": world * 4 * config.num_hidden_layers * ep_all_to_all_bytes(batch * seq, k, h, world, 4),
        "bytes_match": all(x["counted"]["dispatch"] + x["counted"]["combine"] == x["predicted_fwd"]
                           and x["counted"]["bwd_dispatch"] + x["counted"]["bwd_combine"] == x["predicted_bwd"]
                           for x in per_rank),
    }
    return out | predict_step_time(out, profile)


def _verify_ep_worker(rank, world, model_name, batch, seq, seed):
    import torch.distributed as dist

    model, ref = zoo_model(model_name, seed), zoo_model(model_name, seed)
    x = random_batch(batch * world, seq, model.config.vocab_size, seed + 1)
    seen = {}
    hooks = [m.model.layers[0].mlp.register_forward_hook(lambda mod, a, o, key=key: seen.__setitem__(key, o))
             for key, m in (("ref", ref), ("ep", model))]
    ref_loss = ref(input_ids=x, labels=x).loss
    ref_loss.backward()
    experts = apply_ep(model)
    rows = slice(rank * batch, (rank + 1) * batch)
    loss = model(input_ids=x[rows], labels=x[rows]).loss
    loss.backward()
    sync_grads(model)
    for h in hooks:
        h.remove()
    t = loss.detach().clone()
    dist.all_reduce(t)
    grads, refg = {}, {}
    for n, p in model.named_parameters():
        g = ref.get_parameter(n).grad
        grads[n], refg[n] = p.grad, (g[rank * p.shape[0]:(rank + 1) * p.shape[0]] if is_expert_param(n) else g)
    return {"loss_abs": abs(t.item() / world - ref_loss.item()),
            "moe_rel": max_rel({"a": seen["ep"]}, {"a": seen["ref"][rows]}), "grad_rel": max_rel(grads, refg),
            "layers": [{k: m.stats[k] for k in ("dispatch", "combine", "bwd_dispatch", "bwd_combine",
                                                 "send_counts", "recv_counts", "expert_load")} for m in experts]}


def verify_ep(model: str = "nano-moe", world: int = 2, batch: int = 2, seq: int = 16, seed: int = 0) -> dict:
    """EP on ``world`` ranks (``batch`` rows each) vs one process on all rows: loss difference, max
    relative error of layer 0's MoE output and of every gradient, counted vs exact-formula bytes."""
    check_ep(ZOO[check_model(model)].experts, world)
    h = make_config(model).hidden_size
    res = spawn(_verify_ep_worker, world, args=(model, batch, seq, seed), timeout_s=120)
    counted, predicted = [], []
    for rank, r in enumerate(res):
        counted.append(sum(L[k] for L in r["layers"] for k in ("dispatch", "combine", "bwd_dispatch", "bwd_combine")))
        predicted.append(sum(predicted_a2a_bytes(L["send_counts"][0], L["recv_counts"][0], rank, h)["fwd"] * 2
                             for L in r["layers"]))
    loads = [[n for r in res for n in r["layers"][i]["expert_load"][0]] for i in range(len(res[0]["layers"]))]
    return {"loss_abs": res[0]["loss_abs"], "moe_rel": max(r["moe_rel"] for r in res),
            "grad_rel": max(r["grad_rel"] for r in res), "sent_bytes": counted, "predicted_bytes": predicted,
            "expert_loads": loads, "lambda_expert": [imbalance(x) for x in loads]}
