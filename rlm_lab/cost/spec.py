"""Model shape for the cost model: the handful of numbers every formula needs.

A :class:`ModelSpec` is read from a transformers config object, a hub ``config.json`` dict or
file, or a zoo name (without importing transformers). Llama, Qwen2, Mistral-style dense models,
Mixtral (every layer MoE) and Qwen2-MoE (sparse layers, shared expert) are understood.

Parameter count (exact for the transformers implementations of these families):

    embed V*h + per layer [ q h*a*d + k,v 2*h*kv*d + o a*d*h (+ biases) + 2 norms 2h + MLP ]
    (+ Qwen3's q_norm and k_norm 2*d_h) + final norm h + lm_head V*h (0 if tied)
    dense MLP: 3*h*I ; MoE MLP: E*3*h*I_e + router h*E (+ shared expert 3*h*I_s + its gate h)

"Matmul parameters per token" are the weights a token multiplies with (the active ones for MoE):
the forward pass costs 2 FLOPs per such weight per token (Kaplan et al. 2001.08361, Sec. 2.1;
Kaplan et al., arXiv 2001.08361). Embedding lookups are gathers, not matmuls, so they cost no FLOPs.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from ..errors import RlmLabError, read_input_text
from ..models.tokenizer import ALPHABET, SPECIALS
from ..models.zoo import ZOO


@dataclass(frozen=True)
class ModelSpec:
    """The shape of one decoder-only LM (L layers, hidden size h, n_kv KV heads of size d_h)."""

    name: str
    arch: str            # llama | qwen2 | qwen3 | mistral | mixtral | qwen2_moe | qwen3_moe
    vocab: int           # V
    hidden: int          # h
    layers: int          # L
    heads: int           # a
    kv_heads: int        # n_kv
    head_dim: int        # d_h
    intermediate: int    # I (dense MLP width)
    experts: int = 0     # E per MoE layer (0 = dense)
    top_k: int = 0       # experts per token
    expert_intermediate: int = 0   # I_e (Mixtral: = intermediate)
    shared_intermediate: int = 0   # I_s (Qwen2-MoE shared expert; 0 = none)
    moe_layers: int = 0  # how many of the L layers are MoE
    tied: bool = False   # lm_head shares the embedding matrix
    qkv_bias: bool = False
    attention_bias: bool = False   # Llama's bias on q, k, v and o
    mlp_bias: bool = False
    head_out: int | None = None    # output width of the head; None = vocab (an LM head), 1 = value/reward head
    qk_norm: bool = False          # Qwen3: an RMSNorm of width d_h on the queries and on the keys of every layer
    tp: int = 1                    # the tensor-parallel degree this spec is one rank's share of (placement.tp_shard)

    # ---- derived counts -------------------------------------------------------------------
    @property
    def d_attn(self) -> int:
        """a * d_h, the width of the attention projections."""
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    def attention_params(self) -> int:
        h, q, kv = self.hidden, self.d_attn, self.kv_dim
        n = h * q + 2 * h * kv + q * h
        if self.attention_bias:
            n += q + 2 * kv + h
        elif self.qkv_bias:
            n += q + 2 * kv
        return n

    def dense_mlp_params(self) -> int:
        h, i = self.hidden, self.intermediate
        return 3 * h * i + ((2 * i + h) if self.mlp_bias else 0)

    def moe_mlp_params(self) -> int:
        h = self.hidden
        n = self.experts * 3 * h * self.expert_intermediate + h * self.experts
        if self.shared_intermediate:
            n += 3 * h * self.shared_intermediate + h
        return n

    @property
    def params(self) -> int:
        """Total parameters N, embeddings and lm_head included."""
        dense_layers = self.layers - self.moe_layers
        per_layer = self.attention_params() + 2 * self.hidden + (2 * self.head_dim if self.qk_norm else 0)
        n = self.vocab * self.hidden + self.layers * per_layer + self.hidden
        n += dense_layers * self.dense_mlp_params() + self.moe_layers * self.moe_mlp_params()
        return n + self.head_params()

    def head_params(self) -> int:
        """The lm_head (V*h, 0 when tied) or a scalar value/reward head (h + bias)."""
        if self.head_out is not None:
            return self.head_out * self.hidden + self.head_out
        return 0 if self.tied else self.vocab * self.hidden

    @property
    def head_width(self) -> int:
        return self.vocab if self.head_out is None else self.head_out

    @property
    def param_tensors(self) -> int:
        """How many parameter tensors the model has (optimizers keep one ``step`` per tensor)."""
        attn = 4 + (4 if self.attention_bias else 3 if self.qkv_bias else 0)
        dense = 3 + (3 if self.mlp_bias else 0)
        # Mixtral stores experts as 2 fused 3-D tensors (+ router); Qwen2-MoE adds a shared expert (3) and its gate
        moe = 3 + (4 if self.shared_intermediate else 0)
        norms = 2 + (2 if self.qk_norm else 0)
        n = self.layers * (attn + norms) + (self.layers - self.moe_layers) * dense + self.moe_layers * moe
        head = 2 if self.head_out is not None else (0 if self.tied else 1)
        return n + 2 + head

    def matmul_params_per_token(self, lm_head: bool = True) -> int:
        """Weights one token multiplies with in a forward pass (active experts only; biases excluded).

        Ignores: embedding lookup (a gather), norms, activations, residual adds (elementwise).
        """
        h = self.hidden
        attn = h * self.d_attn + 2 * h * self.kv_dim + self.d_attn * h
        dense = 3 * h * self.intermediate
        moe = self.top_k * 3 * h * self.expert_intermediate + h * self.experts
        if self.shared_intermediate:
            moe += 3 * h * self.shared_intermediate + h
        n = self.layers * attn + (self.layers - self.moe_layers) * dense + self.moe_layers * moe
        return n + (self.head_width * h if lm_head else 0)

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """kappa = 2 * L * n_kv * d_h * bytes (K and V of every layer)."""
        return 2 * self.layers * self.kv_dim * dtype_bytes

    def to_dict(self) -> dict:
        return asdict(self) | {"params": self.params}


# ---- constructors ------------------------------------------------------------------------------
_MOE_TYPES = {"mixtral", "qwen2_moe", "qwen3_moe"}
_KNOWN_TYPES = {"llama", "qwen2", "mistral", "mixtral", "qwen2_moe", "qwen3", "qwen3_moe"}


MAX_FIELD = 2**24    # any integer field of a model config (vocab, widths, layers, experts): far above real models
MAX_CONFIG_BYTES = 10_000_000   # a config.json is a few kilobytes


def _field(cfg: dict, key: str, where: str, default=None, required: bool = True):
    value = cfg.get(key, default)
    if value is None and required:
        raise RlmLabError(f"model config {where} is missing the field {key!r}")
    if key in ("model_type", "mlp_only_layers") or value is None:
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RlmLabError(f"model config {where}: field {key!r} must be a number, got {value!r}")
    if not math.isfinite(value) or value != int(value) or not 0 <= value <= MAX_FIELD:
        raise RlmLabError(f"model config {where}: field {key!r} must be a non-negative integer at most "
                          f"{MAX_FIELD:,}, got {value!r}")
    return int(value)


def spec_from_dict(cfg: dict, name: str | None = None) -> ModelSpec:
    """Build a spec from a config dict (``config.to_dict()`` or a hub ``config.json``).

    A missing or invalid field raises :class:`RlmLabError` naming the field.
    """
    if not isinstance(cfg, dict):
        raise RlmLabError(f"model config must be a mapping, got {type(cfg).__name__}")
    where = repr(name or cfg.get("_name_or_path") or cfg.get("model_type") or "?")
    model_type = cfg.get("model_type", "llama")
    if not isinstance(model_type, str) or model_type not in _KNOWN_TYPES:
        raise RlmLabError(f"model config {where}: model_type {model_type!r} is not a supported decoder "
                          f"family; use one of {', '.join(sorted(_KNOWN_TYPES))}")
    g = lambda k, d=None, req=True: _field(cfg, k, where, d, req)  # noqa: E731
    hidden, heads, layers = g("hidden_size"), g("num_attention_heads"), g("num_hidden_layers")
    if heads == 0 or hidden == 0 or layers == 0:
        raise RlmLabError(f"model config {where}: hidden_size, num_attention_heads and num_hidden_layers must be > 0")
    kv_heads = g("num_key_value_heads", heads)
    if kv_heads == 0 or heads % kv_heads:
        raise RlmLabError(f"model config {where}: num_key_value_heads={kv_heads} must divide "
                          f"num_attention_heads={heads}")
    head_dim = g("head_dim", None, req=False) or hidden // heads
    experts = top_k = expert_inter = shared_inter = moe_layers = 0
    intermediate = g("intermediate_size", 0, req=model_type not in _MOE_TYPES)
    if model_type == "mixtral":
        experts, top_k = g("num_local_experts"), g("num_experts_per_tok")
        expert_inter, moe_layers = intermediate, layers
    elif model_type in ("qwen2_moe", "qwen3_moe"):
        # the Hub's config.json says num_experts; transformers 5's to_dict() writes num_local_experts
        key = "num_experts" if cfg.get("num_experts") is not None or "num_local_experts" not in cfg else "num_local_experts"
        experts, top_k = g(key), g("num_experts_per_tok")
        expert_inter = g("moe_intermediate_size")
        if model_type == "qwen2_moe":   # Qwen3-MoE has no shared expert
            shared_inter = g("shared_expert_intermediate_size", 0, req=False) or 0
        step = g("decoder_sparse_step", 1) or 1
        only = cfg.get("mlp_only_layers") or []
        if not isinstance(only, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in only):
            raise RlmLabError(f"model config {where}: field 'mlp_only_layers' must be a list of layer numbers, "
                              f"got {only!r}")
        only = set(only)
        moe_layers = sum(1 for i in range(layers) if i not in only and experts > 0 and (i + 1) % step == 0)
    if experts and not 0 < top_k <= experts:
        raise RlmLabError(f"model config {where}: num_experts_per_tok={top_k} must be in 1..{experts}")
    return ModelSpec(
        name=str(name or cfg.get("_name_or_path") or model_type), arch=model_type,
        vocab=g("vocab_size"), hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads,
        head_dim=head_dim, intermediate=intermediate, experts=experts, top_k=top_k,
        expert_intermediate=expert_inter, shared_intermediate=shared_inter, moe_layers=moe_layers,
        tied=bool(cfg.get("tie_word_embeddings", False)),
        qkv_bias=model_type in ("qwen2", "qwen2_moe"),
        attention_bias=bool(cfg.get("attention_bias", False)) and model_type in ("llama", "mistral", "mixtral"),
        mlp_bias=bool(cfg.get("mlp_bias", False)) and model_type == "llama",
        qk_norm=model_type in ("qwen3", "qwen3_moe"),
    )


def spec_from_config(config, name: str | None = None) -> ModelSpec:
    """Build a spec from a transformers ``PretrainedConfig`` (or anything with ``to_dict``)."""
    if isinstance(config, dict):
        return spec_from_dict(config, name)
    d = config.to_dict()
    # to_dict() drops class defaults in some versions; read the attributes we need directly
    for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                "head_dim", "intermediate_size", "num_local_experts", "num_experts", "num_experts_per_tok",
                "moe_intermediate_size", "shared_expert_intermediate_size", "decoder_sparse_step",
                "mlp_only_layers", "tie_word_embeddings", "attention_bias", "mlp_bias", "model_type"):
        if hasattr(config, key):
            d[key] = getattr(config, key)
    return spec_from_dict(d, name)


def scalar_head(spec: ModelSpec) -> ModelSpec:
    """The same backbone with a scalar head (h -> 1, with bias): a PPO critic or a reward model."""
    return replace(spec, name=f"{spec.name}+value_head", head_out=1, tied=False)


def _zoo_spec(name: str) -> ModelSpec:
    """A zoo model's spec from the zoo table, without importing transformers (keeps the CLI fast)."""
    z = ZOO[name]
    cfg = dict(model_type=z.arch, vocab_size=len(SPECIALS) + len(ALPHABET), hidden_size=z.hidden,
               num_hidden_layers=z.layers, num_attention_heads=z.heads, num_key_value_heads=z.kv_heads,
               intermediate_size=z.intermediate, tie_word_embeddings=False)
    if z.arch == "mixtral":
        cfg |= dict(num_local_experts=z.experts, num_experts_per_tok=z.top_k)
    return spec_from_dict(cfg, name)


def model_spec(model) -> ModelSpec:
    """Resolve anything that names a model: a ModelSpec, a zoo name, a config.json path (or its
    folder), a dict, or a transformers config."""
    if isinstance(model, ModelSpec):
        return model
    if isinstance(model, (str, Path)):
        if str(model) in ZOO:
            return _zoo_spec(str(model))
        path = Path(model)
        if path.is_dir():
            path = path / "config.json"
        if path.exists():   # anything named so is read (a FIFO or a binary file: one line, never a hang)
            text = read_input_text(path, f"model config {path}", MAX_CONFIG_BYTES)
            try:
                cfg = json.loads(text)
            except json.JSONDecodeError as e:
                raise RlmLabError(f"{path} is not valid JSON ({e})") from None
            return spec_from_dict(cfg, name=str(model))
        raise RlmLabError(f"unknown model {str(model)!r}: give a zoo name ({', '.join(ZOO)}) "
                          f"or the path of a config.json")
    if isinstance(model, dict):
        return spec_from_dict(model)
    if hasattr(model, "to_dict"):
        return spec_from_config(model)
    if hasattr(model, "config"):
        return spec_from_config(model.config)
    raise RlmLabError(f"cannot read a model shape from {type(model).__name__}")
