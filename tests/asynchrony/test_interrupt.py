"""Interruptible rollouts (rlm_lab.asynchrony.interrupt), each checked against an independent computation:

(a) no update: bitwise chapter 5's RolloutEngine.generate; an "update" to the *same* weights with the cache kept:
    bitwise too (what the stop / resume machinery must preserve: cache, masks, the RNG stream);
(b) an update at decode step k: tokens before k bitwise the old-weights run; with ``reprefill`` the later tokens'
    log-probs are those of a fresh, unpadded forward of the new weights on prompt + tokens so far; with ``keep``
    they are not (old keys and values), by far more than the tolerance;
(c) per-token version tags, and an update from another thread during a request: applied mid-generation
    (interruptible) or after the request (today's behaviour).
A fresh-initialised nano model (no SFT cache), small batches: a few seconds in all.
"""

import copy
import threading
import time

import pytest

torch = pytest.importorskip("torch")

from rlm_lab.asynchrony.interrupt import InterruptibleEngine, check_policy, sample_version  # noqa: E402
from rlm_lab.chapters.ch06_async.interrupt import main, perturbed  # noqa: E402
from rlm_lab.errors import RlmLabError  # noqa: E402
from rlm_lab.placement.rollout import RolloutEngine  # noqa: E402

T = 0.7  # temperature: the processed scores are logits / T (TRL's top_k=0, top_p=1: no other processor)
PROMPTS = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14], [15, 16, 17, 18], [19], [20, 21, 22]]
K = 3


@pytest.fixture(scope="module")
def base():
    from rlm_lab.models import load

    torch.set_num_threads(1)
    model, tok = load("nano", seed=0)
    model.eval()
    gen = {"max_new_tokens": 8, "do_sample": True, "temperature": T, "top_p": 1.0, "top_k": 0,
           "pad_token_id": tok.pad_token_id, "eos_token_id": [tok.eos_token_id]}
    return model, tok, gen, perturbed(model, scale=0.05)


def engine(base, policy="reprefill", version=0, interruptible=True, **gen_over):
    model, tok, gen, _ = base
    return InterruptibleEngine(copy.deepcopy(model), {**gen, **gen_over}, tok.pad_token_id, tok.eos_token_id,
                               policy, version, interruptible)


def reference(base, seed):
    model, tok, gen, _ = base
    return RolloutEngine(copy.deepcopy(model), gen, tok.pad_token_id, tok.eos_token_id).generate(PROMPTS, seed)


def new_model(base):
    from rlm_lab.placement.weights import load_synced

    m = copy.deepcopy(base[0])
    load_synced(m, base[3])
    return m


def fresh_logprobs(model, prompt, completion):
    """Log-probs of ``completion`` after ``prompt`` from one unpadded forward (no cache, no generate)."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + completion])).logits[0].float() / T
    lp = logits.log_softmax(-1)
    return [lp[len(prompt) - 1 + j, t].item() for j, t in enumerate(completion)]


def test_no_update_is_bitwise_the_uninterrupted_engine(base):
    ref = reference(base, 11)
    out = engine(base).generate(PROMPTS, 11)
    assert out["completion_ids"] == ref["completion_ids"] and out["logprobs"] == ref["logprobs"]
    assert out["interrupts"] == [] and all(set(v) <= {0} for v in out["versions"])


def test_keep_with_unchanged_weights_is_bitwise_uninterrupted(base):
    model = base[0]
    same = {n: p.detach().clone() for n, p in model.named_parameters()}
    ref = reference(base, 12)
    out = engine(base, "keep").generate(PROMPTS, 12, schedule={K: (same, 1)})
    assert [i["at_token"] for i in out["interrupts"]] == [K]  # it did stop and resume
    assert out["completion_ids"] == ref["completion_ids"] and out["logprobs"] == ref["logprobs"]


@pytest.mark.parametrize("policy", ["reprefill", "keep"])
def test_update_at_step_k(base, policy):
    new = base[3]
    old_run = reference(base, 13)
    e = engine(base, policy, version=5)
    out = e.generate(PROMPTS, 13, schedule={K: (new, 6)})
    assert [(i["at_token"], i["from"], i["to"]) for i in out["interrupts"]] == [(K, 5, 6)]
    fresh_model = new_model(base)
    gap = []
    for p, c, lp, ref_c, ref_lp, v in zip(PROMPTS, out["completion_ids"], out["logprobs"], old_run["completion_ids"],
                                          old_run["logprobs"], out["versions"]):
        assert c[:K] == ref_c[:K] and lp[:K] == ref_lp[:K]  # before the update: the old weights' run, bitwise
        assert v == [5] * min(K, len(c)) + [6] * max(0, len(c) - K)  # (c) per-token versions
        assert sample_version(v, 5) == 5
        fresh = fresh_logprobs(fresh_model, p, c)
        gap += [abs(a - b) for a, b in zip(lp[K:], fresh[K:])]
    assert gap, "no row generated past the update"
    if policy == "reprefill":  # exact under the new weights from the update on
        assert max(gap) < 1e-4
    else:  # the old weights' keys and values change what the new weights sample from
        assert max(gap) > 1e-2


def test_update_from_another_thread(base):
    """A real arrival: a thread offers new weights while the request runs (min_new_tokens keeps it long)."""
    new = base[3]
    for interruptible in (True, False):
        e = engine(base, "reprefill", interruptible=interruptible, max_new_tokens=40, min_new_tokens=40)
        staged = []

        def arrive():
            while len(e.step_times) < 4 and not staged:  # during the 3rd decode step or later
                time.sleep(0.0005)
            staged.append(e.offer(new, 1))

        th = threading.Thread(target=arrive)
        th.start()
        out = e.generate(PROMPTS, 14)
        th.join()
        assert staged == [False], "the update arrived after the request: nothing was tested"
        u = [x for x in e.updates if "where" in x]
        assert len(u) == 1 and e.version == 1
        if interruptible:
            k = out["interrupts"][0]["at_token"]
            assert u[0]["where"] == "mid-generation" and 3 <= k < 40
            assert all(v == [0] * k + [1] * (40 - k) for v in out["versions"])
        else:
            assert u[0]["where"] == "after the request" and out["interrupts"] == []
            assert all(set(v) == {0} for v in out["versions"])
        assert all(torch.equal(p, new[n]) for n, p in e.model.named_parameters() if n in new)


def test_bad_input_one_line(capsys):
    with pytest.raises(RlmLabError, match="unknown KV-cache policy"):
        check_policy("drop")
    assert main(["--size", "huge"]) == 2
    assert main(["--size", "smoke", "--repeats", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("rlm-lab: error:") for line in err)
