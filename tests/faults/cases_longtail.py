"""Chapter 7's formulas and length-aware policies given a batch they cannot schedule: an empty batch, a group
of 1, n' < n, a length below 1, an unknown policy (issue 11, item 5). API rows: one RlmLabError line each."""

from fault_matrix import Case

from rlm_lab.cost import longtail as lt

CASES = []


def row(id, what, fn, doc, message):
    def call(tmp):
        fn()
    call.__doc__ = doc
    CASES.append(Case(id, what, call=call, message=message))


row("bubble-empty", "the bubble of an empty batch", lambda: lt.bubble([]), "cost.longtail.bubble([])",
    r"lengths is an empty batch; give at least one response length")
row("overprovision-fewer", "over-provisioning that starts fewer responses than it needs (n'=2 < n=4)",
    lambda: lt.overprovision([3, 4, 9], 4, 2), "cost.longtail.overprovision([3, 4, 9], n=4, n_prime=2)",
    r"over-provisioning needs n' >= n .*got n'=2 < n=4")
row("overprovision-empty", "over-provisioning over an empty batch", lambda: lt.overprovision([], 1, 2),
    "cost.longtail.overprovision([], 1, 2)", r"empty batch")
row("dynamic-group-1", "dynamic sampling with a group size of 1 (every group is all-equal)",
    lambda: lt.dynamic_sampling_inflation_dist([0.5], 1), "cost.longtail.dynamic_sampling_inflation_dist([0.5], 1)",
    r"group size 1: every group's rewards are all equal")
row("dynamic-empty", "dynamic sampling with no prompts", lambda: lt.dynamic_sampling_inflation_dist([], 4),
    "cost.longtail.dynamic_sampling_inflation_dist([], 4)", r"at least one prompt \(empty batch\)")
row("dispatch-empty", "length-aware dispatch of an empty batch", lambda: lt.dispatch([], 2, "lpt"),
    "cost.longtail.dispatch([], 2, 'lpt')", r"empty batch")
row("dispatch-policy", "an unknown dispatch policy", lambda: lt.dispatch([3, 1], 2, "random"),
    "cost.longtail.dispatch([3, 1], 2, 'random')", r"dispatch policy must be round_robin or lpt, got 'random'")
row("dispatch-zero-workers", "dispatch to 0 workers", lambda: lt.dispatch([3, 1], 0),
    "cost.longtail.dispatch([3, 1], 0)", r"workers must be an integer >= 1, got 0")
row("length-zero", "a response length of 0 tokens", lambda: lt.tail_batching([3, 0], 2),
    "cost.longtail.tail_batching([3, 0], 2)", r"lengths must be integers >= 1 \(tokens\), got 0")
row("budget-too-small", "a token budget smaller than one sequence", lambda: lt.token_budget_microbatches([9, 2], 8),
    "cost.longtail.token_budget_microbatches([9, 2], 8)", r"a sequence of 9 tokens does not fit a token budget of 8")
row("predictor-bad-prompt", "the length predictor given a prompt that is not a chain",
    lambda: __import__("rlm_lab.tasks.chain", fromlist=["x"]).predicted_length("3+="),
    "tasks.chain.predicted_length('3+=')", r"chain prompt '3\+=' is not of the form 3\+4\*2=")
row("measure-gpu", "chapter 7's measurements asked for at gpu size (CPU only so far)",
    lambda: __import__("rlm_lab.chapters.ch07_long_tail", fromlist=["x"]).measure("gpu", out="/nonexistent/never-written"),
    "chapters.ch07_long_tail.measure('gpu', out=...)", r"chapter 7 measures on CPU only so far")
row("measure-unknown", "an unknown technique", lambda: __import__("rlm_lab.chapters.ch07_long_tail", fromlist=["x"]).measure(
    "smoke", only=["speculation"], out="/nonexistent/never-written"), "chapters.ch07_long_tail.measure('smoke', only=['speculation'])",
    r"unknown technique 'speculation'; choose from: overprovision, tail_batching")


def _taken(tmp):
    (tmp / "ch07_packing").mkdir()
    (tmp / "ch07_packing" / "record.json").write_text('{"status": "completed"}')


CASES += [
    Case("cli-gpu", "rlm-lab longtail --size gpu", argv=["longtail", "--size", "gpu", "--out", "{tmp}"],
         message=r"chapter 7 measures on CPU only so far; use --size smoke or --size cpu"),
    Case("cli-only-unknown", "rlm-lab longtail --only speculation", argv=["longtail", "--only", "speculation"],
         message=r"longtail: argument --only: invalid choice: 'speculation'"),
    Case("cli-out-taken", "--out folder that already holds a run of the technique (a committed record)",
         argv=["longtail", "--size", "smoke", "--only", "tail_batching", "packing", "--out", "{tmp}"], setup=_taken,
         message=r"ch07_packing already holds a run; measure the others with --only, or pass --force"),
]
