"""Memory model against measured bytes: parameters, AdamW state after one step, KV cache."""

import pytest
import torch

from rlm_lab.cost import memory as M
from rlm_lab.cost.spec import model_spec
from rlm_lab.errors import RlmLabError
from rlm_lab.models import build_model


def _state_bytes(optimizer) -> int:
    return sum(v.nbytes for state in optimizer.state.values() for v in state.values() if torch.is_tensor(v))


@pytest.mark.parametrize("name", ["nano", "micro", "nano-moe"])
@pytest.mark.parametrize("fused", [False, True])
def test_weights_and_adamw_state(name, fused):
    model, _ = build_model(name)
    spec = model_spec(name)
    assert sum(p.nbytes for p in model.parameters()) == M.weight_bytes(spec, 4)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=fused)
    x = torch.randint(2, 50, (2, 6))
    model(x, labels=x).loss.backward()
    assert sum(p.grad.nbytes for p in model.parameters() if p.grad is not None) == M.grad_bytes(spec, "fp32")
    opt.step()
    assert _state_bytes(opt) == M.optimizer_bytes(spec, "fp32")  # 8 B/param + a 4-byte step per tensor
    assert M.model_memory(spec, True, "fp32").total == M.weight_bytes(spec, 4) + M.grad_bytes(spec, "fp32") \
        + M.optimizer_bytes(spec, "fp32")


def _cache_bytes(cache) -> int:
    return sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)


@pytest.mark.parametrize("name", ["nano", "mini", "nano-moe"])
def test_kv_cache_after_generate_and_forward(name):
    model, _ = build_model(name)
    model.generation_config.pad_token_id = 0
    spec = model_spec(name)
    b, P, R = 3, 5, 6
    x = torch.randint(2, 50, (b, P))
    with torch.no_grad():
        out = model.generate(x, max_new_tokens=R, min_new_tokens=R, do_sample=True, return_dict_in_generate=True)
        assert _cache_bytes(out.past_key_values) == M.kv_cache_bytes(spec, b * M.generate_kv_tokens(P, R), 4)
        fwd = model(x, use_cache=True)
    assert _cache_bytes(fwd.past_key_values) == M.kv_cache_bytes(spec, b * P, 4)


def test_zero_and_mixed_precision_golden():
    """ZeRO (1910.02054) per-device bytes, bf16-mixed: 16N; 4N+12N/d; 2N+14N/d; 16N/d (+ step scalars)."""
    spec = model_spec("small")
    n, extra, d = spec.params, 4 * spec.param_tensors, 8
    assert M.train_state_bytes(spec, "bf16-mixed") == 16 * n + extra
    assert M.train_state_bytes(spec, "bf16-mixed", 1, d) == pytest.approx(4 * n + 12 * n / d + extra, abs=1)
    assert M.train_state_bytes(spec, "bf16-mixed", 2, d) == pytest.approx(2 * n + 14 * n / d + extra, abs=1)
    assert M.train_state_bytes(spec, "bf16-mixed", 3, d) == pytest.approx(16 * n / d + extra, abs=1)
    with pytest.raises(RlmLabError, match="zero_stage"):
        M.train_state_bytes(spec, zero_stage=4)


def test_kv_golden_paper_notes():
    """By hand: 7B-class kappa = 56 KiB; B=64, G=8, P=512, R=4096 -> ~135 GB of KV."""
    from rlm_lab.cost.spec import spec_from_dict

    spec = spec_from_dict({"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944,
                           "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
                           "vocab_size": 152064})
    assert M.kv_cache_bytes(spec, 64 * 8 * (512 + 4096)) == pytest.approx(135e9, rel=0.01)


def test_activations_monotone_and_recompute_order():
    spec = model_spec("base")
    a = M.activation_bytes
    assert a(spec, 2, 64) > a(spec, 1, 64) and a(spec, 1, 128) > a(spec, 1, 64)
    assert a(spec, 4, 256, flash=False) > a(spec, 4, 256) == a(spec, 4, 256, recompute="selective") \
        > a(spec, 4, 256, recompute="full")


def test_a_tensor_parallel_ranks_activations_follow_korthikanti():
    """One rank of t-way tensor parallelism without sequence parallelism keeps s b h (10 + 24 / t + 5 a s / (h t))
    per layer (Korthikanti et al., arXiv 2205.05198, Sec. 4.2.1): hand-computed for t = 4 on the base model (a = 12),
    against the whole model's s b h (34 + 5 a s / h). A share that forgot its t would keep the whole 34."""
    from rlm_lab.cost.placement import tp_shard

    spec = model_spec("base")
    s, b, h, a, L = 128, 2, spec.hidden, spec.heads, spec.layers
    shard = tp_shard(spec, 4)
    assert shard.tp == 4 and tp_shard(tp_shard(spec, 2), 2).tp == 4
    assert M.activation_bytes(spec, b, s, flash=False) == int(L * s * b * h * (34 + 5 * a * s / h))
    assert M.activation_bytes(shard, b, s, flash=False) == int(L * s * b * h * (10 + 24 / 4 + 5 * a * s / (h * 4)))
    assert M.activation_bytes(shard, b, s) == L * s * b * h * 16 == M.activation_bytes(shard, b, s, recompute="selective")
    assert M.activation_bytes(shard, b, s, recompute="full") == M.activation_bytes(spec, b, s, recompute="full")
