"""The trie row as the model sees it: every decoded token's log-probability in the row equals its
log-probability in the request that decoded it, run on its own (an independent computation); padding, plain
rows and generation are left as they were."""

import pytest
import torch

from rlm_lab.forkjoin.layout import completion
from rlm_lab.forkjoin.sft import segments_of, trie_dataset
from rlm_lab.forkjoin.trie import install, installed
from rlm_lab.models import build_model

PROMPT, TRACE = "3*4+5*6+7*2=", "<abc>a:3*4=12;b:5*6=30;c:7*2=14;12+30+14=56"


@pytest.fixture(scope="module")
def nano():
    model, tok = build_model("nano", seed=0)
    model.eval()
    return model, tok


def logits(model, ids, mask=None):
    with torch.no_grad():
        return model(input_ids=torch.tensor(ids), attention_mask=None if mask is None else torch.tensor(mask)).logits


def test_trie_row_matches_each_request(nano):
    model, tok = nano
    enc = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    plain = logits(model, [enc(PROMPT + "<abc>b:5*6=30;")])[0]  # branch b's request, before the hook
    join_req = logits(model, [enc(PROMPT + TRACE) + [tok.eos_token_id]])[0]
    row = enc(PROMPT) + completion(segments_of(TRACE, tok))
    before = logits(model, [row])[0]
    install(model, tok)
    assert installed(model)
    got = logits(model, [[0, 0] + row], [[0, 0] + [1] * len(row)])[0, 2:]  # left padding, as TRL pads prompts
    p, o, leaf = len(PROMPT), 5, 9  # prompt, outline "<abc>", leaf "a:3*4=12;"
    b = p + o + leaf  # first token of leaf b in the row
    assert torch.allclose(got[b:b + leaf], plain[p + o:p + o + leaf], atol=1e-5)
    assert not torch.allclose(before[b:b + leaf], plain[p + o:p + o + leaf], atol=1e-3)  # without the mask: not
    assert torch.allclose(got[-12:], join_req[-12:], atol=1e-5)  # the join (11 tokens + EOS)


def test_plain_rows_and_generation_are_unchanged(nano):
    model, tok = nano
    fresh, _ = build_model("nano", seed=0)
    fresh.eval()
    install(model, tok)
    ids = [tok("3*4+5*6=3*4=12,5*6=30,12+30=42", add_special_tokens=False)["input_ids"]]
    assert torch.allclose(logits(model, ids), logits(fresh, ids), atol=1e-6)
    x = torch.tensor(tok(["3*4+5*6=<ab>a:"], add_special_tokens=False)["input_ids"])
    a = model.generate(x, max_new_tokens=6, do_sample=False, pad_token_id=0)
    b = fresh.generate(x, max_new_tokens=6, do_sample=False, pad_token_id=0)
    assert torch.equal(a, b)


def test_sft_rows_train_only_what_is_decoded(nano):
    _, tok = nano
    ds = trie_dataset([{"prompt": PROMPT, "answer": TRACE}], tok)
    ids, labels = ds["input_ids"][0], ds["labels"][0]
    kept = tok.decode([t for t, lab in zip(ids, labels) if lab != -100])
    assert kept == "<abc>" + "3*4=12;5*6=30;7*2=14;" + "12+30+14=56" + "<eos>"
