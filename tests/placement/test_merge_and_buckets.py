"""Pieces of the placement runtime checked by hand, without Ray: the merged trace, the prompt chunks, the
weight buckets, and the bucketed broadcast against a plain copy (two ranks of one gloo group, in threads)."""

import threading

import pytest


def test_merge_puts_processes_on_one_axis():
    from rlm_lab.trace_merge import busy_seconds, merge

    t0 = 100.0
    steps = [{"step": 1, "start_s": 0.5, "wall_s": 1.0, "spans": [
        {"stage": "generate", "name": "x.generate", "start_s": 0.5, "dur_s": 0.4, "counted": True},
        {"stage": None, "name": "x._prepare_inputs", "start_s": 0.5, "dur_s": 0.6, "counted": False}]}]
    procs = {
        # the trainer's tracer started 2 s after the reference t0: its relative times shift by +2 s
        "trainer": {"steps": steps, "t0": 102.0, "spans": [{"name": "wait", "stage": "generate",
                                                             "start": 102.5, "end": 102.9}]},
        "rollout0": {"spans": [{"name": "generate", "stage": "generate", "start": 102.6, "end": 102.8},
                               {"name": "receive_weights", "stage": "weight_sync", "start": 102.7, "end": 103.0}]},
    }
    trace = merge(procs, t0)
    x = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    by = {(e["pid"], e["tid"], e["name"]): e for e in x}
    assert by[(0, 0, "step 1")]["ts"] == pytest.approx(2.5e6) and by[(0, 0, "step 1")]["dur"] == pytest.approx(1e6)
    assert by[(0, 1, "generate")]["ts"] == pytest.approx(2.5e6)       # tracer span, shifted by its t0
    assert by[(0, 2, "generate")]["ts"] == pytest.approx(2.5e6)       # raw span of the trainer (runtime lane)
    assert by[(1, 1, "weight_sync")]["ts"] == pytest.approx(2.7e6)
    assert not any(e["name"] == "x._prepare_inputs" for e in x)        # uncounted TRL containers stay out
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
    assert names == {0: "trainer", 1: "rollout0"}
    busy = busy_seconds(trace)
    # rollout0: [2.6, 2.8] and [2.7, 3.0] overlap -> 0.4 s covered, not 0.5
    assert busy["rollout0: work"] == pytest.approx(0.4)


@pytest.mark.parametrize("n,parts,group,expected", [
    (16, 1, 4, [(0, 16)]),
    (16, 2, 4, [(0, 8), (8, 16)]),
    (12, 2, 4, [(0, 8), (8, 12)]),          # 3 groups over 2 workers: 2 + 1
    (8, 4, 4, [(0, 4), (4, 8)]),            # more workers than groups: empty slices dropped
])
def test_chunks_keep_groups_whole(n, parts, group, expected):
    from rlm_lab.placement.rollout import chunks

    assert chunks(n, parts, group) == expected


def test_chunks_refuse_a_broken_group():
    from rlm_lab.placement.rollout import chunks

    with pytest.raises(ValueError):
        chunks(10, 2, 4)


def test_buckets_by_size_and_dtype():
    import torch

    from rlm_lab.placement.weights import buckets

    named = [("a", torch.zeros(100)), ("b", torch.zeros(100)), ("c", torch.zeros(300)),
             ("d", torch.zeros(10, dtype=torch.float16)), ("e", torch.zeros(10, dtype=torch.float16))]
    got = [[n for n, _ in b] for b in buckets(named, bucket_bytes=800)]
    # a+b = 800 B fit; c (1200 B) is a bucket of its own; the fp16 tensors start a new bucket
    assert got == [["a", "b"], ["c"], ["d", "e"]]


def test_synced_parameters_are_the_trainable_ones_when_some_are_frozen():
    from rlm_lab.models import build_model
    from rlm_lab.placement.weights import param_bytes, synced_parameters

    model = build_model("nano")[0]
    full = sum(p.numel() * 4 for p in model.parameters())
    assert param_bytes(model) == full
    for name, p in model.named_parameters():
        p.requires_grad_(name.endswith("lm_head.weight"))
    assert [n for n, _ in synced_parameters(model)] == ["lm_head.weight"]
    assert param_bytes(model) == model.lm_head.weight.numel() * 4


def _rank(rank, port, model, out):
    from rlm_lab.parallel.comm_counter import CommCounter
    from rlm_lab.placement.weights import broadcast_weights, make_group

    group = make_group("127.0.0.1", port, rank, 2, timeout_s=60)
    counter = CommCounter()  # a dispatch mode is per thread: each rank counts its own calls
    with counter:
        info = broadcast_weights(model, group, src=0, bucket_bytes=64 * 1024)
    out[rank] = ({n: p.detach().clone() for n, p in model.named_parameters()}, info, counter.total_bytes())


def test_bucketed_broadcast_copies_every_parameter_and_counts_its_bytes():
    from rlm_lab.models import build_model
    from rlm_lab.host import free_port

    port, out = free_port(), {}
    models = [build_model("nano", seed=r)[0] for r in range(2)]  # different weights on each rank
    threads = [threading.Thread(target=_rank, args=(r, port, models[r], out)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert set(out) == {0, 1}
    src = dict(build_model("nano", seed=0)[0].named_parameters())
    other = dict(build_model("nano", seed=1)[0].named_parameters())
    assert any((src[k] - other[k]).abs().max() > 0 for k in src)   # the receiver really started different
    w1, info, counted = out[1]
    assert all(bool((w1[k] == src[k]).all()) for k in src)          # bit-exact copy of rank 0's weights
    expected = sum(p.numel() * 4 for p in src.values())
    assert info["bytes"] == counted == expected
    assert info["calls"] > 1                                        # 64 KiB buckets: several broadcasts


def test_ranking_tau_and_regret_by_hand():
    from rlm_lab.chapters.ch05_placement.compare import ranking

    rows = [dict(placement="a", predicted_s=1.0, measured_s=2.0), dict(placement="b", predicted_s=2.0, measured_s=1.0),
            dict(placement="c", predicted_s=3.0, measured_s=3.0)]
    r = ranking(rows)
    # pairs (a,b) discordant, (a,c) and (b,c) concordant: tau = (2 - 1) / 3
    assert r["kendall_tau"] == pytest.approx(1 / 3)
    assert r["first_pick"] == "a" and r["best_measured"] == "b" and r["regret"] == pytest.approx(2.0)
    assert ranking(list(reversed(rows)))["kendall_tau"] == pytest.approx(1 / 3)  # order of rows is irrelevant


def test_lora_sync_is_the_adapters_by_hand():
    from peft import LoraConfig, get_peft_model

    from rlm_lab.models import ZOO, build_model
    from rlm_lab.placement.runtime import LORA
    from rlm_lab.placement.weights import param_bytes, synced_parameters

    spec = ZOO["nano"]
    model = get_peft_model(build_model("nano")[0], LoraConfig(**LORA))
    names = [n for n, _ in synced_parameters(model)]
    assert names and all("lora_" in n for n in names)
    # rank r on q_proj (h -> h) and v_proj (h -> kv_heads * head_dim) in every layer: r (d_in + d_out) each
    r, h, kv = LORA["r"], spec.hidden, spec.kv_heads * spec.head_dim
    expected = spec.layers * r * ((h + h) + (h + kv)) * 4
    assert param_bytes(model) == expected


def test_timeline_window_skips_warm_up_and_final_outliers():
    from rlm_lab.chapters.ch05_placement.report import representative_window

    # the chapter 5 colocated run's shape: steady 0.05 s steps, then 0.117, 1.865 and 2.252 s at the end
    d = [0.067, 0.054] + [0.05] * 10 + [0.117, 1.865, 2.252]
    i = representative_window(d, 3)
    assert 2 <= i and i + 3 <= 12  # three steady steps, neither the first nor the last
    assert representative_window([5.0, 1.0, 1.0, 1.0], 3) == 1  # the median is 1: the last three
    assert representative_window([1.0, 2.0], 3) == 0  # fewer steps than asked: from the start
