"""Chapter 10: the psum task's and the mixture's knobs, the fork-join decoder's limits, the parallelism-aware
reward's options, the cost of a trace, the merge methods, and `rlm-lab open-directions`; a malformed parallel
trace or an unparseable branch follows TRL's reward contract (not scored: None)."""

from fault_matrix import Case

CASES = []

PAR = "<ab>a:3*1=3;b:2*2=4;3+4=7"


def api(id, what, fn, doc, message):
    def call(tmp):
        fn()
    call.__doc__ = doc
    CASES.append(Case(id, what, call=call, message=message))


def _imp(module, name):
    import importlib

    return getattr(importlib.import_module(module), name)


def gen(spec):
    return ["tasks", "generate", "--root", "{tmp}/tasks", "--train", "3", "--test", "2", "--task", spec]


for id, spec, msg in [
    ("psum-terms", "psum:terms=1", r"psum terms must be 2..8, got 1"),
    ("psum-factor", "psum:max_number=12", r"psum max_number must be 2..9, got 12"),
    ("psum-trace", "psum:trace=tree", r"psum trace must be seq or par, got 'tree'"),
    ("mix-unknown", "mix:tasks=arithmetic+sudoku", r"mix tasks 'arithmetic\+sudoku': use arithmetic, countdown, chain, psum"),
    ("mix-twice", "mix:tasks=chain+chain", r"mix tasks 'chain\+chain' names a task twice"),
]:
    CASES.append(Case(f"gen-{id}", f"tasks generate --task {spec!r}", argv=gen(spec), message=msg))

CASES += [
    Case("cli-step", "rlm-lab open-directions --part parallel --only juggle",
         argv=["open-directions", "--part", "parallel", "--only", "juggle", "--out", "{tmp}"],
         message=r"unknown step 'juggle' of part parallel; choose from: predict, sft, grpo, measure"),
    Case("cli-part", "rlm-lab open-directions --part sideways", argv=["open-directions", "--part", "sideways"],
         message=r"argument --part: invalid choice: 'sideways'"),
    Case("cli-seeds", "rlm-lab open-directions --seeds -1", argv=["open-directions", "--seeds", "-1", "--out", "{tmp}"],
         message=r"--seeds must be integers >= 0, got \[-1\]"),
    Case("cli-size", "rlm-lab open-directions --size huge", argv=["open-directions", "--size", "huge", "--out", "{tmp}"],
         message=r"unknown size 'huge'"),
]

api("merge-method", "a merge method PEFT's merging is not asked for here (average)",
    lambda: _imp("rlm_lab.multidomain", "merged_model")("/nonexistent", {"a": "x", "b": "y"}, "average"),
    "multidomain.merged_model(..., 'average')", r"unknown merge method 'average'; choose from: linear, ties, dare, cat")
api("merge-one", "merging a single adapter", lambda: _imp("rlm_lab.multidomain", "merged_model")(
    "/nonexistent", {"a": "x"}, "ties"), "multidomain.merged_model(base, {'a': ...}, 'ties')",
    r"merging needs at least two adapters, got 1")
api("merge-missing", "an adapter folder that holds no adapter", lambda: _imp("rlm_lab.multidomain", "merged_model")(
    "/nonexistent", {"a": "/nonexistent/a", "b": "/nonexistent/b"}, "dare"),
    "multidomain.merged_model(base, {'a': '/nonexistent/a', ...}, 'dare')", r"adapter 'a': /nonexistent/a holds no PEFT adapter")
api("limits-zero", "a fork-join branch limit of 0 tokens", lambda: _imp("rlm_lab.forkjoin", "Limits")(8, 0, 14),
    "forkjoin.Limits(8, 0, 14)", r"fork-join limit branch must be an integer >= 1, got 0")
api("reward-task", "the parallelism-aware reward on a task without parallel traces",
    lambda: _imp("rlm_lab.tasks", "parallelism_aware_reward")(_imp("rlm_lab.tasks", "parse_task")("chain")),
    "tasks.parallelism_aware_reward(chain)", r"needs a task with parallel traces \(psum\), not 'chain'")
api("reward-clip", "the parallelism-aware reward with a negative clip",
    lambda: _imp("rlm_lab.tasks", "parallelism_aware_reward")(_imp("rlm_lab.tasks", "parse_task")("psum"), clip=-0.2),
    "tasks.parallelism_aware_reward(psum, clip=-0.2)", r"weight and clip must be >= 0, got 0.5 and -0.2")
api("sft-trace", "a parallel SFT row whose answer is no fork-join trace",
    lambda: _imp("rlm_lab.forkjoin.sft", "segments_of")("3*1=3,3=3", _imp("rlm_lab.models.tokenizer", "char_tokenizer")()),
    "forkjoin.sft.segments_of('3*1=3,3=3', tokenizer)", r"not a fork-join trace: '3\*1=3,3=3'")
api("dag-no-branch", "a fork-join trace with no branch", lambda: _imp("rlm_lab.cost.forkjoin", "fork_join_dag")(5, [], 3),
    "cost.forkjoin.fork_join_dag(5, [], 3)", r"a fork-join trace needs at least one branch")
api("dag-length", "a branch of 0 tokens", lambda: _imp("rlm_lab.cost.forkjoin", "fork_join_dag")(5, [3, 0], 3),
    "cost.forkjoin.fork_join_dag(5, [3, 0], 3)", r"a branch must be an integer >= 1 \(tokens\), got 0")
api("arm", "an arm that is neither seq nor par", lambda: _imp("rlm_lab.chapters.ch10_open_directions.cases",
    "task_spec")("smoke", "tree"), "ch10 cases.task_spec('smoke', 'tree')", r"unknown arm 'tree'; choose from: seq, par")


def _rewards(tmp):
    from rlm_lab.tasks import parallelism_aware_reward, parse_task

    reward = parallelism_aware_reward(parse_task("psum:trace=par"))
    texts = [PAR, "<ab>a:3*1=3;b:2*2=4", "<ab>a:3*1=3;b:2+2=4;3+4=7", "<ab", "<ab>a:3*1=4;b:2*2=4;4+4=8"]
    print(reward(texts, answer=[PAR] * len(texts)))


_rewards.__doc__ = "tasks.parallelism_aware_reward(psum)([right, no join, unparseable branch, open outline, wrong])"
CASES.append(Case("reward-contract", "a malformed parallel trace and an unparseable branch (TRL: not scored)",
                  cls="correct-result", call=_rewards, message=r"^\[1.1, None, None, None, -1.0\]$"))
