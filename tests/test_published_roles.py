"""A published case may give its critic and reward model another size than the actor (issue 39): the loader
checks the configs, the prediction prices them."""

import shutil

import pytest
import yaml

from rlm_lab.errors import RlmLabError
from rlm_lab.validate.published import PUBLISHED, load_published
from rlm_lab.validate.published_predict import predict_case, predict_config

CASE = "openrlhf-llama2-13b-dschat-step"


def _registry(tmp_path, extra):
    (tmp_path / "cases").mkdir(parents=True)
    for f in ("sources.yaml", "split.yaml"):
        shutil.copy(PUBLISHED / f, tmp_path / f)
    data = yaml.safe_load((PUBLISHED / "cases" / f"{CASE}.yaml").read_text(encoding="utf-8")) | extra
    (tmp_path / "cases" / f"{CASE}.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    return load_published(tmp_path)


def test_a_smaller_critic_is_priced(tmp_path):
    same = _registry(tmp_path / "a", {}).cases[CASE]
    small = _registry(tmp_path / "b", {"critic": {"name": "meta-llama/Llama-2-7b-hf", "config": "llama2-7b.config.json"},
                                       "reward_model": {"name": "meta-llama/Llama-2-7b-hf",
                                                        "config": "llama2-7b.config.json"}}).cases[CASE]
    cfg = predict_config(small, {})
    assert cfg["critic"].endswith("llama2-7b.config.json") and cfg["reward_model"].endswith("llama2-7b.config.json")
    assert "critic" not in predict_config(same, {})
    a, b = predict_case(same), predict_case(small)
    assert a.predicted and b.predicted and b.predicted < a.predicted     # a 7B critic and reward model cost less


def test_a_critic_config_must_exist(tmp_path):
    with pytest.raises(RlmLabError, match="critic config"):
        _registry(tmp_path, {"critic": {"name": "x", "config": "nope.config.json"}})
