"""The model zoo: small decoder-only LMs built offline from a transformers config.

Named sizes span ~0.1M parameters (CI) to ~200M (one GPU). Every model is a stock
transformers class (Llama, Qwen2 or Mixtral for the MoE variant) with a character tokenizer,
so TRL, PEFT and ``torch.distributed`` treat it exactly like a hub model.
A hub id (e.g. ``Qwen/Qwen2.5-0.5B-Instruct``) or a local folder loads through transformers
instead; that path needs the network for hub ids and is not exercised in CI.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import RlmLabError, unknown
from .tokenizer import ALPHABET, SPECIALS, char_tokenizer


@dataclass(frozen=True)
class ZooSpec:
    """Shape of a zoo model. ``arch`` is the transformers family."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    arch: str = "llama"  # llama | qwen2 | mixtral
    experts: int = 0      # mixtral only: experts per MoE layer
    top_k: int = 0        # mixtral only: experts per token
    max_positions: int = 512

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


ZOO: dict[str, ZooSpec] = {
    # name          hidden layers heads kv  inter
    "nano": ZooSpec(64, 2, 4, 4, 128),                    # 88,896 params: CI
    "micro": ZooSpec(128, 2, 4, 4, 256),                  # 341,632 params: cpu-size RL
    "mini": ZooSpec(256, 4, 8, 4, 704, arch="qwen2"),     # ~3.0M: cpu-size scaling demos
    "small": ZooSpec(512, 8, 8, 4, 1408, arch="qwen2"),   # ~24M
    "base": ZooSpec(768, 12, 12, 4, 2048),                # ~76M: gpu size
    "large": ZooSpec(1024, 16, 16, 8, 2816, arch="qwen2"),  # ~189M: gpu size
    # Mixture of experts (for expert parallelism): Mixtral blocks, top-2 routing.
    "nano-moe": ZooSpec(64, 2, 4, 4, 128, arch="mixtral", experts=4, top_k=2),
    "micro-moe": ZooSpec(128, 2, 4, 4, 256, arch="mixtral", experts=8, top_k=2),
}


def make_config(name_or_spec: str | ZooSpec, vocab_size: int | None = None):
    """The transformers config of a zoo model (no weights)."""
    spec = ZOO[check_model(name_or_spec)] if isinstance(name_or_spec, str) else name_or_spec
    if vocab_size is None:
        vocab_size = len(SPECIALS) + len(ALPHABET)
    common = dict(
        vocab_size=vocab_size,
        hidden_size=spec.hidden,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        num_key_value_heads=spec.kv_heads,
        intermediate_size=spec.intermediate,
        max_position_embeddings=spec.max_positions,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=None,
        tie_word_embeddings=False,
    )
    if spec.arch == "llama":
        from transformers import LlamaConfig

        return LlamaConfig(**common)
    if spec.arch == "qwen2":
        from transformers import Qwen2Config

        return Qwen2Config(**common)
    if spec.arch == "mixtral":
        from transformers import MixtralConfig

        return MixtralConfig(**common, num_local_experts=spec.experts, num_experts_per_tok=spec.top_k)
    raise RlmLabError(f"unknown arch {spec.arch!r}; use llama, qwen2 or mixtral")


def check_model(name: str) -> str:
    """Return ``name`` if it is a zoo model; raise a clear error otherwise."""
    if name not in ZOO:
        raise unknown("model", name, ZOO)
    return name


def build_model(name: str, seed: int = 0):
    """A randomly initialised zoo model and its tokenizer: ``(model, tokenizer)``. fp32, CPU."""
    import torch
    from transformers import AutoModelForCausalLM

    tokenizer = char_tokenizer()
    config = make_config(name, vocab_size=len(tokenizer))
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model, tokenizer


def save(model, tokenizer, folder: str | Path) -> Path:
    """Save weights, config and tokenizer so ``load(folder)`` (or TRL, given the path) restores them."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def load(name_or_path: str, seed: int = 0):
    """Load ``(model, tokenizer)`` from a zoo name (fresh random init), a saved folder, or a hub id.

    A zoo name always wins; a path must exist; anything else with a ``/`` is treated as a hub id
    and needs the network (transformers raises its own error offline).
    """
    if name_or_path in ZOO:
        return build_model(name_or_path, seed=seed)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(name_or_path)
    if path.exists():
        if not (path / "config.json").exists():
            raise RlmLabError(f"{path} has no config.json; pass a folder written by rlm_lab.models.save")
        return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    if "/" in name_or_path and not name_or_path.startswith((".", "/")):
        try:
            model = AutoModelForCausalLM.from_pretrained(name_or_path)
            tok = AutoTokenizer.from_pretrained(name_or_path)
        except OSError as e:
            raise RlmLabError(
                f"could not load hub model {name_or_path!r} ({str(e).splitlines()[0]}); "
                f"check the id and your network, or use a zoo model: {', '.join(ZOO)}"
            ) from None
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        return model, tok
    raise unknown("model", name_or_path, ZOO)


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())


def describe(name: str) -> dict:
    """The zoo spec as a plain dict (for records and tables)."""
    return {"name": name, **asdict(ZOO[check_model(name)])}
