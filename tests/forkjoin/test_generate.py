"""The fork-join decoder's orchestration, against a scripted model that writes the reference trace: the
outline call, ONE call for every branch of every trace (each row sees only the prompt, the outline and its own
header), the join with the whole trace as context, work and depth equal to the task's own count, and a
malformed trace stopped where it broke."""

import pytest
import torch

from rlm_lab.forkjoin import Limits, fork_join_generate, sequential_generate, text
from rlm_lab.models.tokenizer import char_tokenizer
from rlm_lab.tasks.psum import parallel_trace, parse_prompt, parse_trace

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


def test_branches_are_one_batch_and_see_no_sibling():
    prompts = ["3*1+2*2=", "1*1+3*3+2*1+1*2="]
    m = Scripted()
    got = fork_join_generate(m, TOK, prompts, Limits(8, 8, 14))
    assert len(m.calls) == 3  # outline, branches, join
    branch_rows = m.calls[1]
    assert len(branch_rows) == 2 + 4  # every branch of both traces in one call
    assert branch_rows[0] == "3*1+2*2=<ab>a:" and branch_rows[1] == "3*1+2*2=<ab>b:"
    assert all(";" not in r for r in branch_rows)  # no row sees a sibling's body
    assert m.calls[2][0] == "3*1+2*2=<ab>a:3*1=3;b:2*2=4;"
    for p, d in zip(prompts, got.traces):
        ref = parse_trace(parallel_trace(parse_prompt(p)))
        assert text(TOK, d.trace) == parallel_trace(parse_prompt(p))
        assert (d.work, d.depth, d.stage) == (ref.work, ref.depth, "done")
        assert sum(d.mask) == d.work and d.mask.count(0) == ref.inserted


def test_a_broken_branch_stops_the_trace():
    got = fork_join_generate(Scripted(break_branch="b"), TOK, ["3*1+2*2="], Limits(8, 8, 14))
    d = got.traces[0]
    assert d.segments is None and d.stage == "branches"
    assert text(TOK, d.trace) == "<ab>a:3*1=3;b:9*9="


def test_sequential_is_one_call():
    class Seq(Scripted):
        def _next(self, row):
            return "1*1=1,1*1=1,1+1=2<eos>"

    m = Seq()
    got = sequential_generate(m, TOK, ["1*1+1*1="], 30)
    assert len(m.calls) == 1 and got.traces[0].work == got.traces[0].depth == len("1*1=1,1*1=1,1+1=2") + 1


def test_limits_are_checked():
    from rlm_lab.errors import RlmLabError

    with pytest.raises(RlmLabError, match="limit branch must be an integer >= 1, got 0"):
        Limits(8, 0, 14)
    with pytest.raises(RlmLabError, match="at least one prompt"):
        fork_join_generate(Scripted(), TOK, [])
