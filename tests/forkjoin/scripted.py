"""A scripted stand-in for a causal LM's ``generate`` (the fork-join decoder's tests)."""

import torch

from rlm_lab.models.tokenizer import char_tokenizer
from rlm_lab.tasks.psum import parallel_trace, parse_prompt

TOK = char_tokenizer()


class Scripted:
    """A stand-in for a causal LM's ``generate``: each row continues its text with the reference trace's next
    segment (outline, the branch its header names, or the join), then pads. Records every call's rows."""

    device = torch.device("cpu")
    training = False

    def __init__(self, break_branch: str | None = None):
        self.calls, self.break_branch = [], break_branch

    def eval(self):
        return self

    def train(self, mode=True):
        return self

    def _next(self, row: str) -> str:
        prompt, _, done = row.partition("=")
        prompt += "="
        pairs = parse_prompt(prompt)
        ref = parallel_trace(pairs)
        if done == "":
            return ref[:ref.index(">") + 1]
        if done.endswith(":"):
            label = done[-2]
            body = ref.split(label + ":", 2)[1].split(";")[0] + ";"
            return "9*9=" if label == self.break_branch else body
        return ref.rsplit(";", 1)[1] + "<eos>"

    def generate(self, ids, attention_mask, max_new_tokens, eos_token_id, pad_token_id, **kw):
        rows = [TOK.decode([t for t, m in zip(r, a) if m]) for r, a in zip(ids.tolist(), attention_mask.tolist())]
        self.calls.append(rows)
        new = [TOK(self._next(r).replace("<eos>", ""), add_special_tokens=False)["input_ids"]
               + ([TOK.eos_token_id] if self._next(r).endswith("<eos>") else []) for r in rows]
        new = [n[:max_new_tokens] for n in new]
        width = max(map(len, new))
        new = [n + [pad_token_id] * (width - len(n)) for n in new]
        return torch.cat([ids, torch.tensor(new)], dim=1)
