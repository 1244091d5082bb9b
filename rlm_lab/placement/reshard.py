"""The hybrid engine's reshard, measured: one copy of the actor, trained under FSDP2 (ZeRO-3) over the set's
s ranks, resharded into a replicated generation layout (t_g = 1) and back.

HybridFlow's 3D-HybridEngine (arXiv 2409.19256, Sec. 5.4, Table 2): going from the training layout to a
generation layout of tensor-parallel size t_g, each device all-gathers the parameters of its generation
group; with training shards over s devices, each device *receives* M (s - t_g) / (t_g s) bytes
(M = the model's parameter bytes), and the way back frees the gathered copy without any transfer (zero
redundancy). For t_g = 1 on s = 2: M / 2 received per device; the all-gather *message* (the full buffer,
what :class:`rlm_lab.parallel.comm_counter.CommCounter` records) is M per group, padded as FSDP2 pads.

The measurement (``measure(model, s)``, 2 gloo ranks on CPU): FSDP2 over every decoder layer and the root
(``rlm_lab.parallel.fsdp.apply_fsdp``), one training step, then ``unshard()`` of every FSDP group (the
generation layout: every rank holds the whole model), a short greedy ``generate`` to show it is usable,
``reshard()`` back. Counted: the all-gather messages of the unshard, the bytes each rank received
(message x (s-1)/s), and the process's peak resident memory (VmHWM, reset through /proc/self/clear_refs)
in the training layout and in the generation layout.
Ignores: tensor-parallel generation layouts (t_g > 1: torch has no resharding FSDP2 -> TP for an HF model
without rewriting its modules), GPU memory (on CPU the RSS is what there is).
"""

from __future__ import annotations

from ..models import build_model
from ..parallel.fsdp import apply_fsdp, fsdp_groups, group_bytes
from ..parallel.launch import spawn


def _peak_rss() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def _reset_peak() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def _rank(rank: int, world: int, model_name: str, steps: int) -> dict:
    import torch
    from torch.distributed.device_mesh import init_device_mesh

    from ..parallel.comm_counter import CommCounter  # noqa: PLC0415  heavy: rlm_lab.parallel.comm_counter imports torch at its top

    torch.manual_seed(0)
    model, _ = build_model(model_name, seed=0)
    full_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    padded = sum(group_bytes(model, world))
    mesh = init_device_mesh("cpu", (world,))
    apply_fsdp(model, mesh, zero=3)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(3, 20, (4, 12))
    _reset_peak()
    for _ in range(steps):  # the training layout: sharded parameters, gradients, optimizer state
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    train_peak = _peak_rss()
    _reset_peak()
    groups = fsdp_groups(model)
    counter = CommCounter()
    with counter:  # training layout -> generation layout (replicated: t_g = 1)
        for g in groups:
            g.unshard()
    gathered = counter.summary()
    for g in groups:  # keep the generation layout through generate (FSDP would re-shard after each forward)
        g.set_reshard_after_forward(False)
    during = CommCounter()
    with torch.no_grad(), during:
        model.eval()
        out = model.generate(input_ids=ids[:, :4], attention_mask=torch.ones_like(ids[:, :4]), max_new_tokens=4,
                             do_sample=False)
    gen_peak = _peak_rss()
    back = CommCounter()
    with back:  # generation layout -> training layout: free the gathered copy, nothing sent
        for g in groups:
            g.reshard()
            g.set_reshard_after_forward(True)
    return {"rank": rank, "world": world, "model": model_name, "param_bytes": full_bytes, "padded_bytes": padded,
            "allgather": gathered.get("all_gather", {}), "back_bytes": back.total_bytes(),
            "generate_comm_bytes": during.total_bytes(),
            "train_peak_bytes": train_peak, "generate_peak_bytes": gen_peak, "generated": tuple(out.shape)}


def measure(model: str = "micro", world: int = 2, steps: int = 2, timeout_s: float = 120.0) -> dict:
    """Run the reshard on ``world`` gloo ranks; returns rank 0's numbers plus the formula's."""
    results = spawn(_rank, world, args=(model, steps), timeout_s=timeout_s)
    r = results[0]
    s, t_g, m = world, 1, r["param_bytes"]
    r["formula_received_per_device"] = m * (s - t_g) / (t_g * s)
    r["measured_received_per_device"] = r["allgather"].get("bytes", 0) * (s - 1) / s
    r["all_ranks_same_bytes"] = len({x["allgather"].get("bytes") for x in results}) == 1
    return r
