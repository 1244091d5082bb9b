"""The trie layout as a transformers model sees it: a 4-D attention mask and position ids per row.

:func:`install` hooks the model's backbone (``model.base_model``, e.g. ``LlamaModel``), through which every
full-sequence forward passes: the causal-LM head's own forward, TRL's fused log-prob head
(``trl.trainer.utils.add_fused_lm_head`` calls the backbone directly) and SFTTrainer's loss. For a forward
without a KV cache (a training or scoring pass), every row that holds a complete trie layout
(:func:`rlm_lab.forkjoin.layout.plan`) gets the mask and positions of its plan; the other rows stay causal.
A forward with a cache (``generate``'s prefill and decode steps) is passed through untouched: the decoder's
requests are ordinary sequences. Both inputs are documented transformers features: a custom 4-D mask
"returned as-is" by ``transformers.masking_utils.create_causal_mask``, and ``position_ids``
(https://huggingface.co/docs/transformers/main/en/model_doc/llama#transformers.LlamaModel.forward).

Rotary position embeddings depend on the difference of positions only, so a row's positions may start at 0
at its first real token (TRL counts left padding into positions; the attention scores are the same).
"""

from __future__ import annotations

from .layout import PREFIX, Tags, causal_plan, plan

MARK = "_rlm_trie_tags"


def trie_inputs(input_ids, attention_mask, tags: Tags):
    """``(mask, position_ids)`` for a batch: ``mask`` is boolean ``(B, 1, L, L)`` (True: may attend), or None
    when no row holds a trie layout (the forward then stays as it was). Padding (0 in the 2-D
    ``attention_mask``) is seen by no token and sees only itself."""
    import torch

    B, L = input_ids.shape
    real = attention_mask.bool() if attention_mask is not None else torch.ones_like(input_ids, dtype=torch.bool)
    plans, any_trie = [], False
    for b in range(B):
        idx = real[b].nonzero().flatten()
        row = input_ids[b, idx].tolist()
        p = plan(row, tags)
        any_trie |= p is not None
        plans.append((idx, p or causal_plan(len(row))))
    if not any_trie:
        return None
    seg = torch.full((B, L), -1, dtype=torch.long)
    pos = torch.zeros((B, L), dtype=torch.long)
    order = torch.full((B, L), -1, dtype=torch.long)
    for b, (idx, p) in enumerate(plans):
        seg[b, idx] = torch.tensor(p.segment, dtype=torch.long)
        pos[b, idx] = torch.tensor(p.position, dtype=torch.long)
        order[b, idx] = torch.arange(len(idx))
    q, k = seg[:, :, None], seg[:, None, :]
    before = order[:, None, :] <= order[:, :, None]
    both = real[:, :, None] & real[:, None, :]
    mask = both & before & ((k == PREFIX) | (k == q))
    mask |= torch.eye(L, dtype=torch.bool)[None]  # a padding query sees itself (no empty softmax row)
    dev = input_ids.device
    return mask[:, None].to(dev), pos.to(dev)


def install(model, tokenizer) -> object:
    """Hook ``model``'s backbone so that scoring and training forwards follow the trie layout (idempotent).
    Returns the model."""
    backbone = model.base_model
    if getattr(backbone, MARK, None) is not None:
        return model
    tags = Tags.of(tokenizer)
    original = backbone.forward

    def forward(*args, **kwargs):
        ids = kwargs.get("input_ids")
        cached = kwargs.get("cache") is not None or kwargs.get("past_key_values") is not None
        mask2d = kwargs.get("attention_mask")
        if args or ids is None or cached or (mask2d is not None and mask2d.dim() != 2):
            return original(*args, **kwargs)
        built = trie_inputs(ids, mask2d, tags)
        if built is not None:
            kwargs["attention_mask"], kwargs["position_ids"] = built
        return original(**kwargs)

    backbone.forward = forward
    setattr(backbone, MARK, tags)
    return model


def installed(model) -> bool:
    return getattr(model.base_model, MARK, None) is not None
