"""The model zoo: sizes, save/load round trip, tokenizer, clear errors."""

import pytest
import torch

from rlm_lab.errors import RlmLabError
from rlm_lab.models import ALPHABET, ZOO, build_model, char_tokenizer, count_parameters, load, make_config, save


def _meta_params(name):
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        return count_parameters(AutoModelForCausalLM.from_config(make_config(name)))


def test_zoo_spans_ci_to_gpu_sizes():
    sizes = {name: _meta_params(name) for name in ZOO}
    assert 50_000 < sizes["nano"] < 150_000  # ~0.1M for CI
    assert sizes["base"] > 50e6 and sizes["large"] > 100e6  # GPU profile
    dense = [n for n in ZOO if ZOO[n].arch != "mixtral"]
    assert [sizes[n] for n in dense] == sorted(sizes[n] for n in dense)  # named in increasing size


@pytest.mark.parametrize("name", ["nano", "micro", "nano-moe"])
def test_forward_and_generate(name):
    model, tok = build_model(name)
    batch = tok(["12+3=", "7+7="], return_tensors="pt", padding=True)
    out = model(**batch)
    assert out.logits.shape[:2] == batch["input_ids"].shape and out.logits.shape[-1] == len(tok)
    gen = model.generate(**batch, max_new_tokens=3, min_new_tokens=3, do_sample=False)
    assert gen.shape[1] == batch["input_ids"].shape[1] + 3  # exactly 3 new tokens after the prompt
    assert torch.equal(gen[:, :batch["input_ids"].shape[1]], batch["input_ids"])
    # greedy: the first new token is the argmax of the forward pass's last logits
    assert torch.equal(gen[:, batch["input_ids"].shape[1]], out.logits[:, -1].argmax(-1))


def test_same_seed_same_weights():
    a, _ = build_model("nano", seed=3)
    b, _ = build_model("nano", seed=3)
    c, _ = build_model("nano", seed=4)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)


def test_save_load_round_trip(tmp_path):
    model, tok = build_model("nano")
    save(model, tok, tmp_path / "m")
    model2, tok2 = load(str(tmp_path / "m"))
    ids = tok("37+45=", return_tensors="pt")["input_ids"]
    assert torch.equal(tok2("37+45=", return_tensors="pt")["input_ids"], ids)
    torch.testing.assert_close(model(ids).logits, model2(ids).logits)


def test_tokenizer_is_one_token_per_character():
    tok = char_tokenizer()
    text = "3,5,7;22=(3*5)+7"
    ids = tok(text)["input_ids"]
    assert len(ids) == len(text)
    assert tok.decode(ids) == text
    assert tok.eos_token_id == 1 and tok.pad_token_id == 0
    assert len(tok) == 3 + len(ALPHABET)


def test_unknown_model_is_a_clear_error(tmp_path):
    with pytest.raises(RlmLabError, match="unknown model 'tiny'.*nano"):
        load("tiny")
    with pytest.raises(RlmLabError, match="no config.json"):
        load(str(tmp_path))
