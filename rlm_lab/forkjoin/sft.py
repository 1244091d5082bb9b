"""Supervised rows of a fork-join trace: the reference trace cut into its requests and laid out as a trie row
(:mod:`rlm_lab.forkjoin.layout`), the loss on what the model decodes (outline, bodies, join, EOS), never on the
headers the decoder writes or the trunk's copies. TRL's ``SFTTrainer`` trains on them with the backbone
hooked (:func:`rlm_lab.forkjoin.trie.install`), so a branch is trained in the context it is decoded in.
"""

from __future__ import annotations

from ..errors import RlmLabError
from .layout import Segments, Tags, completion, loss_mask


def segments_of(trace: str, tokenizer) -> Segments:
    """The requests of a well-formed trace text ``<ab>a:...;b:...;join``: outline, headers ``x:``, bodies
    ``...;``, join (+ EOS). A text that is not one is a clear error naming it."""
    tags = Tags.of(tokenizer)
    enc = tokenizer(trace, add_special_tokens=False)["input_ids"]
    try:
        close = enc.index(tags.close)
        if enc[0] != tags.open:
            raise ValueError
        i, heads, bodies = close + 1, [], []
        for label in enc[1:close]:
            if enc[i] != label or enc[i + 1] != tags.colon:
                raise ValueError
            end = enc.index(tags.semi, i + 2)
            heads.append(tuple(enc[i:i + 2]))
            bodies.append(tuple(enc[i + 2:end + 1]))
            i = end + 1
    except (ValueError, IndexError):
        raise RlmLabError(f"not a fork-join trace: {trace[:60]!r} (expected <ab>a:...;b:...;join)") from None
    return Segments(tuple(enc[:close + 1]), tuple(heads), tuple(bodies), tuple(enc[i:]) + (tokenizer.eos_token_id,))


def trie_dataset(rows: list[dict], tokenizer, n: int | None = None):
    """The first ``n`` rows (cycled) ``{"prompt", "answer"}`` with parallel reference traces -> a tokenized
    ``datasets.Dataset`` of trie rows: ``input_ids`` (prompt + trie completion) and ``labels`` (-100 on the
    prompt, the headers and the trunk)."""
    from datasets import Dataset

    n = len(rows) if n is None else n
    ids, labels = [], []
    for k in range(n):
        r = rows[k % len(rows)]
        p = tokenizer(r["prompt"], add_special_tokens=False)["input_ids"]
        seg = segments_of(r["answer"], tokenizer)
        comp = completion(seg)
        ids.append(p + comp)
        labels.append([-100] * len(p) + [t if m else -100 for t, m in zip(comp, loss_mask(seg))])
    return Dataset.from_dict({"input_ids": ids, "labels": labels})
