"""PEFT's merges of two LoRA adapters (rlm_lab.multidomain.merge), checked on one weight matrix against the
adapters' own A and B: ``cat`` is the exact sum of the updates, ``linear`` PEFT's sum of A's times sum of B's
(cross terms included); bad merge options are one clear error."""

import pytest
import torch

from rlm_lab.errors import RlmLabError
from rlm_lab.models import build_model, save
from rlm_lab.multidomain import LORA, check_methods, merged_model

TARGET = "model.layers.0.self_attn.q_proj"


@pytest.fixture(scope="module")
def adapters(tmp_path_factory):
    from peft import LoraConfig, get_peft_model

    root = tmp_path_factory.mktemp("merge")
    model, tok = build_model("nano", seed=0)
    base = save(model, tok, root / "base")
    out = {}
    for i, name in enumerate(("a", "b")):
        torch.manual_seed(10 + i)
        m, _ = build_model("nano", seed=0)
        peft = get_peft_model(m, LoraConfig(**{**LORA, "init_lora_weights": False}))  # B != 0: a real update
        peft.save_pretrained(root / name)
        sd = {k: v.detach().clone() for k, v in peft.state_dict().items() if TARGET in k and "lora_" in k}
        out[name] = (root / name, sd)
    return base, out


def _ab(sd):
    a = next(v for k, v in sd.items() if "lora_A" in k)
    b = next(v for k, v in sd.items() if "lora_B" in k)
    return a, b


def _weight(model):
    return dict(model.named_parameters())[TARGET + ".weight"].detach()


def test_cat_is_the_exact_sum_and_linear_has_cross_terms(adapters):
    base, ad = adapters
    w0 = _weight(build_model("nano", seed=0)[0])
    (a1, b1), (a2, b2) = _ab(ad["a"][1]), _ab(ad["b"][1])
    s = LORA["lora_alpha"] / LORA["r"]
    folders = {k: v[0] for k, v in ad.items()}
    cat = _weight(merged_model(base, folders, "cat"))
    assert torch.allclose(cat, w0 + s * (b1 @ a1 + b2 @ a2), atol=1e-5)
    linear = _weight(merged_model(base, folders, "linear"))
    assert torch.allclose(linear, w0 + s * (b1 + b2) @ (a1 + a2), atol=1e-5)
    assert not torch.allclose(linear, cat, atol=1e-3)  # the cross terms B_i A_j are there
    ties, dare = _weight(merged_model(base, folders, "ties")), _weight(merged_model(base, folders, "dare", seed=0))
    assert not torch.allclose(ties, linear, atol=1e-4) and not torch.allclose(dare, linear, atol=1e-4)
    assert torch.equal(dare, _weight(merged_model(base, folders, "dare", seed=0)))  # seeded


def test_bad_merge_options(adapters, tmp_path):
    base, ad = adapters
    folders = {k: v[0] for k, v in ad.items()}
    with pytest.raises(RlmLabError, match="unknown merge method 'average'; choose from: linear, ties, dare, cat"):
        merged_model(base, folders, "average")
    with pytest.raises(RlmLabError, match="at least two adapters"):
        merged_model(base, {"a": folders["a"]}, "linear")
    with pytest.raises(RlmLabError, match="holds no PEFT adapter"):
        merged_model(base, {"a": folders["a"], "b": tmp_path}, "linear")
    with pytest.raises(RlmLabError, match="2 merge weights for 3 adapters"):
        merged_model(base, {**folders, "c": folders["a"]}, "linear", weights=[1, 1])
    assert check_methods(["ties", "cat"]) == ("ties", "cat")
