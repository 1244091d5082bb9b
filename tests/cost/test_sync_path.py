"""The weight-sync path knob (placement_spec.Placement.sync_path): per-tensor against bucketed broadcasts, the
difference against the latencies counted by hand."""

import math
from pathlib import Path

import pytest

from rlm_lab.cost import load_profile, model_spec
from rlm_lab.cost.comm import collective_time
from rlm_lab.cost.placement import BUCKET_BYTES, predict_placement
from rlm_lab.cost.placement_spec import Cluster, PlacementError, get_placement, placement_from_dict

REPO = Path(__file__).resolve().parents[2]
QWEN_7B = str(REPO / "configs/models/qwen2.5-7b.config.json")
WL = dict(prompts=8, group_size=2, prompt_len=32, response=32, precision="bf16-mixed")


def test_per_tensor_pays_a_latency_per_tensor():
    prof = load_profile("h100-sxm")
    c = Cluster(16, "gpu", 80, devices_per_node=8)
    bucketed = predict_placement(get_placement("disaggregated", c, "dapo", rollout_devices=8, zero=3),
                                 QWEN_7B, "dapo", WL, prof, c)
    per = predict_placement(get_placement("disaggregated", c, "dapo", rollout_devices=8, zero=3,
                                          sync_path="per_tensor"), QWEN_7B, "dapo", WL, prof, c)
    spec = model_spec(QWEN_7B)
    n, nbytes = spec.param_tensors, per.sync_bytes
    alpha = prof.collective("send_recv")["alpha_s"] + prof.network_alpha()     # the sets are on two nodes
    buckets = max(1, math.ceil(nbytes / BUCKET_BYTES))
    want = (n - buckets) * alpha + (n - 1) * collective_time("all_gather", 0.0, 8, prof, 1)
    assert per.sync_s - bucketed.sync_s == pytest.approx(want, rel=1e-9)
    assert per.sync_s > bucketed.sync_s and "per_tensor" in per.placement.describe()


def test_unknown_path_is_one_line():
    d = get_placement("disaggregated", Cluster(4, "gpu", 80), "dapo").to_dict() | {"sync_path": "pigeon"}
    with pytest.raises(PlacementError, match="sync_path"):
        placement_from_dict(d).validate("dapo", Cluster(4, "gpu", 80))
