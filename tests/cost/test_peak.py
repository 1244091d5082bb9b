"""Peak memory per stage (rlm_lab.cost.peak): each term against a hand count or a live measurement."""

import pytest

from rlm_lab.cost import model_spec
from rlm_lab.cost import peak as PK
from rlm_lab.validate.traced_case import Case, predict_case


def test_generation_kv_matches_the_live_cache_of_generate():
    """The KV term against the tensors of a real transformers generate (independent of the formula)."""
    import torch

    from rlm_lab.train.memory_probes import measure_kv_cache
    from rlm_lab.models import build_model

    torch.manual_seed(0)
    model, _ = build_model("nano", seed=0)
    measured = measure_kv_cache(model, 3, 5, 4)
    assert PK.generation_bytes(model_spec("nano"), 3, 5, 4, 4)["kv_cache"] == measured


def test_terms_by_hand_for_nano():
    """nano: L=2, h=64, 4 kv heads of 16, fp32. KV bytes/token = 2 (K,V) * 2 layers * 4 * 16 * 4 = 1024."""
    spec = model_spec("nano")
    g = PK.generation_bytes(spec, 16, 6, 8, 4)
    assert g["kv_cache"] == 1024 * 16 * (6 + 8 - 1)
    assert g["kv_grow_copy"] == 512 * 16 * 13           # one of the two layers again
    assert g["sampling"] == 3 * 16 * spec.vocab * 4
    s, b, h = 14, 16, 64
    full = PK.training_bytes(spec, b, s, 9, 4)
    assert full["activations"] == 2 * s * b * h * 34 * 2   # 34 sbh at 2 bytes, fp32 doubles it, 2 layers
    assert full["logits"] == 3 * b * 9 * spec.vocab * 4
    ckpt = PK.training_bytes(spec, b, s, 9, 4, checkpointing=True)
    # checkpointing: each layer's input (2 sbh at 2 bytes -> 4 sbh fp32) + one layer recomputed
    assert ckpt["activations"] == 2 * (2 * s * b * h * 2) + s * b * h * 34 * 2
    nograd = PK.forward_bytes(spec, b, s, 9, 4)
    assert nograd["activations"] == s * b * h * 34 * 2 and nograd["logits"] == 2 * b * 9 * spec.vocab * 4


def test_stage_peaks_hold_the_model_states_and_the_right_batch():
    case = Case("t", "grpo", 0.04, "micro", 64, 8, 16, steps=1, warmup=0)
    pred = predict_case(case, "cpu-2core-epyc")
    peaks = PK.stage_peaks(pred)
    spec = model_spec("micro")
    base = pred.persistent.total
    # GRPO with beta > 0: actor weights + AdamW state + reference weights, all fp32
    assert base == spec.params * 4 * 2 + spec.params * 8 + 4 * spec.param_tensors
    train = peaks["actor_backward"]
    assert train["total"] == base + train["activations"] + train["logits"] + spec.params * 4
    assert train["activations"] == PK.training_bytes(spec, 64, 22, 17, 4)["activations"]  # micro-batch = 64 rows
    assert peaks["generate"]["kv_cache"] == 64 * (6 + 15) * spec.kv_bytes_per_token(4)
    assert peaks["ref_logprob"]["total"] < train["total"]
    assert PK.stage_peaks(pred, checkpointing=True)["actor_backward"]["total"] < train["total"]


def test_peak_rows_add_the_runtime_baseline():
    class Rec:
        results = {"trace": {"stages": {"generate": {"peak_bytes": 10_000_000}, "actor_backward": {"peak_bytes": 0}}}}

    pred = predict_case(Case("t", "grpo", 0.0, "nano", 16, 2, 4, steps=1, warmup=0), "cpu-2core-epyc")
    rows = {r["stage"]: r for r in PK.peak_rows(Rec, pred, 9_000_000)}
    assert set(rows) == {"generate"}  # a stage without a measured peak is not compared
    g = rows["generate"]
    want = PK.stage_peaks(pred)["generate"]["total"]
    assert g["peak_predicted"] == 9_000_000 + want and g["transient_measured"] == 1_000_000
    assert g["transient_rel_error"] == pytest.approx(want / 1_000_000 - 1)
