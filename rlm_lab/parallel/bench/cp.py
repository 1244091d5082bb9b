"""Context parallelism measured: ring time, K,V bytes, and ring attention against one process
(the mechanism is ``rlm_lab.parallel.context_parallel``; ring attention: Liu et al. arXiv 2310.01889)."""

from __future__ import annotations

from ...models import make_config
from ..context_parallel import apply_cp, check_cp, cp_loss, predicted_kv_bytes, sync_grads, zigzag_positions
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


def _cp_worker(rank, world, model_name, batch, seq, steps, seed):
    import torch
    import torch.distributed as dist

    model = zoo_model(model_name, seed)
    vocab = model.config.vocab_size
    # one rank's share, alone: its s/c tokens (misses the attention to the other ranks' keys)
    base = baseline_step_s(model, random_batch(batch, seq // world, vocab, seed + 7)) if rank == 0 else None
    dist.barrier()
    rings = apply_cp(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    rows = []
    for step in range(steps + 1):  # step 0 warms up and is not timed
        x = random_batch(batch, seq, vocab, seed + 1 + step)
        for r in rings:
            r.reset()
        times = timed_step(lambda: cp_loss(model, x, x, world, rank), lambda: sync_grads(model), opt)
        if step:
            rows.append({**times, "ring_s": sum(r.stats["ring_s"] for r in rings),
                         "fwd_sent_bytes": sum(r.stats["fwd_sent_bytes"] for r in rings),
                         "bwd_sent_bytes": sum(r.stats["bwd_sent_bytes"] for r in rings),
                         "sends": sum(r.stats["sends"] for r in rings)})
    return {"rank": rank, "steps": rows, "baseline_s": base, "peak_rss_mib": peak_rss_mib(),
            "grad_bytes": sum(p.numel() * p.element_size() for p in model.parameters())}


def measure_cp(model: str = "nano", world: int = 2, steps: int = 2, batch: int = 2, seq: int = 64,
               seed: int = 0, profile=None, timeout_s: float = 120.0) -> dict:
    """Run ``steps`` timed context-parallel steps on ``world`` processes; compare with predictions.

    Returns per-rank forward/backward/grad-sync/ring time, counted and predicted K,V bytes, and the
    predicted step (:func:`~rlm_lab.parallel.bench.common.predict_step_time`).
    """
    config = make_config(model)
    check_cp(seq, world)
    results = spawn(_cp_worker, world, args=(model, batch, seq, steps, seed), timeout_s=timeout_s)
    head_dim = config.hidden_size // config.num_attention_heads
    layers = config.num_hidden_layers
    pred = predicted_kv_bytes(batch, seq, config.num_key_value_heads, head_dim, world, layers)
    per_rank = []
    for r in results:
        rows = r["steps"]
        avg = {k: sum(x[k] for x in rows) / len(rows) for k in ("fwd_s", "bwd_s", "grad_sync_s", "wall_s", "ring_s")}
        per_rank.append({"rank": r["rank"], **avg, "fwd_sent_bytes": rows[-1]["fwd_sent_bytes"],
                         "bwd_sent_bytes": rows[-1]["bwd_sent_bytes"], "sends": rows[-1]["sends"],
                         "peak_rss_mib": r["peak_rss_mib"]})
    t1 = results[0]["baseline_s"]
    out = {
        "parallelism": "cp", "model": model, "world": world, "batch": batch, "seq": seq, "steps": steps,
        "oversubscribed": world > cores(), "loss": sum(x["steps"][-1]["loss"] for x in results),
        "step_s": max(x["wall_s"] for x in per_rank), "per_rank": per_rank,
        "baseline_share_s": t1, "grad_bytes": results[0]["grad_bytes"],
        "sent_bytes": sum(x["fwd_sent_bytes"] + x["bwd_sent_bytes"] for x in per_rank),
        "predicted_bytes": world * pred["total"], "predicted_bytes_per_rank": pred,
        "bytes_match": all(x["fwd_sent_bytes"] == pred["fwd"] and x["bwd_sent_bytes"] == pred["bwd"]
                           for x in per_rank),
    }
    return out | predict_step_time(out, profile)


def _verify_cp_worker(rank, world, model_name, batch, seq, seed):
    import torch.distributed as dist

    model, ref = zoo_model(model_name, seed), zoo_model(model_name, seed)
    x = random_batch(batch, seq, model.config.vocab_size, seed + 1)
    seen = {}
    hooks = [m.model.layers[0].self_attn.register_forward_hook(lambda mod, a, o, key=key: seen.__setitem__(key, o[0]))
             for key, m in (("ref", ref), ("cp", model))]
    out_ref = ref(input_ids=x, labels=x)
    out_ref.loss.backward()
    rings = apply_cp(model)
    loss = cp_loss(model, x, x, world, rank)
    loss.backward()
    sync_grads(model)
    for h in hooks:
        h.remove()
    pos = zigzag_positions(seq, world, rank)
    t = loss.detach().clone()
    dist.all_reduce(t)
    refg = {n: p.grad for n, p in ref.named_parameters()}
    return {"loss_abs": abs(t.item() - out_ref.loss.item()),
            "attn_rel": max_rel({"a": seen["cp"]}, {"a": seen["ref"][:, pos]}),
            "grad_rel": max_rel({n: p.grad for n, p in model.named_parameters()}, refg),
            "fwd_sent_bytes": sum(r.stats["fwd_sent_bytes"] for r in rings),
            "bwd_sent_bytes": sum(r.stats["bwd_sent_bytes"] for r in rings)}


def verify_cp(model: str = "nano", world: int = 2, batch: int = 2, seq: int = 32, seed: int = 0) -> dict:
    """Ring attention on ``world`` ranks vs one process on the same batch: loss difference, max
    relative error of layer 0's attention output (local tokens) and of every gradient, bytes."""
    check_cp(seq, world)
    config = make_config(model)
    res = spawn(_verify_cp_worker, world, args=(model, batch, seq, seed), timeout_s=120)
    pred = predicted_kv_bytes(batch, seq, config.num_key_value_heads, config.hidden_size // config.num_attention_heads,
                              world, config.num_hidden_layers)
    return {"loss_abs": res[0]["loss_abs"], "attn_rel": max(r["attn_rel"] for r in res),
            "grad_rel": max(r["grad_rel"] for r in res), "predicted": pred,
            "sent_bytes": [(r["fwd_sent_bytes"], r["bwd_sent_bytes"]) for r in res]}
