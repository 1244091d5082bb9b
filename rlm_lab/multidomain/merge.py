"""Separate RLVR runs merged into one model with PEFT's adapter merging (``LoraModel.add_weighted_adapter``:
https://huggingface.co/docs/peft/main/en/developer_guides/model_merging and
https://huggingface.co/docs/peft/main/en/package_reference/lora#peft.LoraModel.add_weighted_adapter).

Each separate run trains a LoRA adapter on one task from the same SFT model; the adapters are loaded side by
side into one ``PeftModel`` and combined, each with weight 1 (the sum of the task vectors, task arithmetic:
Ilharco et al., arXiv 2212.04089), by:

* ``linear`` (PEFT ``combination_type="linear"``): PEFT sums the adapters' A matrices and their B matrices
  separately, each scaled by sqrt(weight x scaling); the merged update (sum B_i)(sum A_i) therefore carries the
  cross terms B_i A_j of different tasks (PEFT's docstring: "efficient but a very rough approximation");
* ``ties`` (``"ties"``, Yadav et al., arXiv 2306.01708): per matrix, keep the ``density`` share of largest
  entries of each adapter, elect a sign per entry by total mass, then **average** the entries that agree with it
  (PEFT 0.21.2's ``disjoint_merge``: their sum over how many agree, not their sum); on A and B separately, as
  ``linear``;
* ``dare`` (``"dare_linear"``, Yu et al., arXiv 2311.03099): drop each entry with probability 1 - ``density``,
  rescale the rest by 1 / ``density``, then add; random (seeded here);
* ``cat`` (``"cat"``): the adapters' ranks concatenated, so the merged update is exactly sum_i B_i A_i: the
  reference the three approximations are read against.

The merged adapter is folded into the weights (``merge_and_unload``) for evaluation.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import RlmLabError
from ..models import load

# method: PEFT's add_weighted_adapter keyword arguments (density 0.5: keep / drop half the entries)
METHODS = {
    "linear": {"combination_type": "linear"},
    "ties": {"combination_type": "ties", "density": 0.5, "majority_sign_method": "total"},
    "dare": {"combination_type": "dare_linear", "density": 0.5},
    "cat": {"combination_type": "cat"},
}
# The LoRA every separate and mixed run trains (PEFT LoraConfig keyword arguments): rank 8 on every linear layer.
LORA = {"r": 8, "lora_alpha": 16, "lora_dropout": 0.0, "target_modules": "all-linear", "task_type": "CAUSAL_LM"}


def check_methods(methods) -> tuple[str, ...]:
    """The merge methods asked for, each known (an unknown one is one clear error before any work)."""
    methods = tuple(methods)
    bad = [m for m in methods if m not in METHODS]
    if bad or not methods:
        raise RlmLabError(f"unknown merge method {bad[0] if bad else '(none)'!r}; choose from: {', '.join(METHODS)}")
    return methods


def lora_config():
    from peft import LoraConfig

    return LoraConfig(**LORA)


def merged_model(base: str | Path, adapters: dict, method: str, seed: int = 0, weights=None):
    """The SFT model at ``base`` with the LoRA adapters ``{name: folder}`` merged by ``method`` and folded into
    its weights. ``weights``: one per adapter (default 1 each)."""
    import torch
    from peft import PeftModel

    check_methods([method])
    if len(adapters) < 2:
        raise RlmLabError(f"merging needs at least two adapters, got {len(adapters)}")
    names = list(adapters)
    weights = [1.0] * len(names) if weights is None else list(weights)
    if len(weights) != len(names):
        raise RlmLabError(f"{len(weights)} merge weights for {len(names)} adapters; give one per adapter")
    for name, folder in adapters.items():
        if not (Path(folder) / "adapter_config.json").is_file():
            raise RlmLabError(f"adapter {name!r}: {folder} holds no PEFT adapter (adapter_config.json)")
    model, _ = load(str(base))
    peft = PeftModel.from_pretrained(model, str(adapters[names[0]]), adapter_name=names[0])
    for name in names[1:]:
        peft.load_adapter(str(adapters[name]), adapter_name=name)
    torch.manual_seed(seed)  # DARE's random drop
    peft.add_weighted_adapter(names, weights, adapter_name="merged", **METHODS[method])
    peft.set_adapter("merged")
    for name in names:
        peft.delete_adapter(name)
    return peft.merge_and_unload()


def folded(base: str | Path, adapter: str | Path):
    """The SFT model at ``base`` with one LoRA adapter folded into its weights."""
    from peft import PeftModel

    model, _ = load(str(base))
    return PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
