"""Model spec: parameter counts equal the transformers models; malformed configs name the field."""

import pytest
import torch

from rlm_lab.cost.spec import ModelSpec, model_spec, scalar_head, spec_from_config, spec_from_dict
from rlm_lab.errors import RlmLabError
from rlm_lab.models import ZOO, make_config


def _meta_model(config):
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


@pytest.mark.parametrize("name", list(ZOO))
def test_zoo_params_exact(name):
    config = make_config(name)
    model = _meta_model(config)
    spec = model_spec(name)
    assert spec == spec_from_config(config, name)  # zoo table and transformers config agree
    assert spec.params == sum(p.numel() for p in model.parameters())
    assert spec.param_tensors == len(list(model.parameters()))


@pytest.mark.parametrize("family", ["mistral", "qwen2_moe", "llama_bias", "qwen2_tied"])
def test_other_families_params_exact(family):
    from transformers import LlamaConfig, MistralConfig, Qwen2Config, Qwen2MoeConfig

    common = dict(vocab_size=100, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                  num_key_value_heads=2, intermediate_size=48)
    config = {
        "mistral": lambda: MistralConfig(**common),
        "qwen2_moe": lambda: Qwen2MoeConfig(**common, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                                            shared_expert_intermediate_size=24, decoder_sparse_step=1,
                                            mlp_only_layers=[1]),
        "llama_bias": lambda: LlamaConfig(**common, attention_bias=True, mlp_bias=True),
        "qwen2_tied": lambda: Qwen2Config(**common, tie_word_embeddings=True),
    }[family]()
    spec = spec_from_config(config)
    model = _meta_model(config)
    assert spec.params == sum(p.numel() for p in model.parameters())
    assert spec.param_tensors == len(list(model.parameters()))
    if family == "qwen2_moe":
        assert spec.moe_layers == 2 and spec.experts == 4


def test_hub_config_dict_qwen7b():
    cfg = {"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
           "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064, "tie_word_embeddings": False}
    spec = spec_from_dict(cfg)
    assert spec.params == pytest.approx(7.62e9, rel=0.01)  # Qwen2.5-7B model card: 7.61B
    assert spec.kv_bytes_per_token(2) == 57_344            # by hand: 2*28*4*128*2


def test_config_json_path(tmp_path):
    import json

    (tmp_path / "config.json").write_text(json.dumps(make_config("mini").to_dict()))
    assert model_spec(tmp_path).params == model_spec("mini").params


@pytest.mark.parametrize("cfg, field", [
    ({"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 10,
      "intermediate_size": 8}, "hidden_size"),
    ({"model_type": "llama", "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4,
      "intermediate_size": 8}, "vocab_size"),
    ({"model_type": "llama", "hidden_size": "big", "num_hidden_layers": 2, "num_attention_heads": 4,
      "vocab_size": 10, "intermediate_size": 8}, "hidden_size"),
    ({"model_type": "llama", "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 3, "vocab_size": 10, "intermediate_size": 8}, "num_key_value_heads"),
    ({"model_type": "mixtral", "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4,
      "vocab_size": 10, "intermediate_size": 8, "num_local_experts": 4}, "num_experts_per_tok"),
    ({"model_type": "bert"}, "model_type"),
])
def test_malformed_config_names_field(cfg, field):
    with pytest.raises(RlmLabError, match=field):
        spec_from_dict(cfg)


def test_unknown_model_lists_zoo():
    with pytest.raises(RlmLabError, match="micro"):
        model_spec("no-such-model")


def test_scalar_head():
    spec = model_spec("micro")
    critic = scalar_head(spec)
    assert critic.params == spec.params - spec.vocab * spec.hidden + spec.hidden + 1
    assert isinstance(critic, ModelSpec)
