"""Task specs, `rlm-lab tasks generate|show`, and task files (the JSON Lines the trainers read)."""

import json
from pathlib import Path

from fault_matrix import Case

from rlm_lab.tasks import Arithmetic, Countdown, ensure_data, generate, read_rows

CASES = []
GOOD = json.dumps({"prompt": "1+2=", "answer": "3"}) + "\n"


def gen(*args):
    return ["tasks", "generate", "--root", "{tmp}/tasks", *args]


def add(id, what, argv, message, cls="clear-error", **kw):
    CASES.append(Case(id, what, cls=cls, argv=argv, message=message, **kw))


# ---- tasks generate / show ---------------------------------------------------------------------------------
add("train-negative", "--train -5", gen("--train", "-5"), r"argument --train: must be in 1..10,000,000, got -5")
add("test-zero", "--test 0", gen("--test", "0"), r"argument --test: must be in 1..1,000,000, got 0")
add("train-zero", "--train 0", gen("--train", "0"), r"--train: must be in 1..10,000,000, got 0")
add("train-word", "--train many", gen("--train", "many"), r"--train: invalid int value: 'many'")
add("test-too-many", "more test problems than the task has (1-digit sums: 100)",
    gen("--task", "arithmetic:digits=1", "--test", "200", "--train", "5"), r"has only 100 distinct problems")
add("root-is-file", "--root is a file", ["tasks", "generate", "--root", "{tmp}/f", "--train", "3", "--test", "2"],
    r"task folder .*/f is a file, so no folder can be made under it", setup=lambda tmp: (tmp / "f").write_text("x"))
add("root-unwritable", "--root on a read-only file system (/proc)",
    ["tasks", "generate", "--root", "/proc/rlm-lab-fault", "--train", "3", "--test", "2", "--task", "arithmetic"],
    r"task folder /proc/rlm-lab-fault/arithmetic_digits2_opsadd is not writable")
add("train-huge", "--train 10**11 (would run until memory runs out)", gen("--train", "100000000000"),
    r"--train: must be in 1..10,000,000, got 100,000,000,000")
add("show-n-huge", "tasks show -n 10**9", ["tasks", "show", "arithmetic", "-n", "1000000000"], r"-n: must be in 1..10,000")
add("test-beyond-sampled", "more test problems than a sampled task has (a hang before)",
    gen("--task", "countdown:numbers=2,max_number=2", "--test", "100", "--train", "5"),
    r"countdown_numbers2_max_number2 gave only 13 distinct problems in 20,000 tries")
add("train-all-in-test", "every problem of a sampled task already in the test split (a hang before)",
    gen("--task", "countdown:numbers=2,max_number=2", "--test", "13", "--train", "5"),
    r"every problem drawn in 20,000 tries is in the 13 test problems")
add("show-n-zero", "tasks show -n 0", ["tasks", "show", "arithmetic", "-n", "0"], r"-n: must be in 1..10,000, got 0")
for id, spec, msg in [
    ("spec-unknown", "sudoku", r"unknown task 'sudoku'; choose one of: arithmetic, chain, countdown"),
    ("spec-empty", "", r"unknown task ''"),
    ("spec-knob-typo", "arithmetic:digit=2", r"task 'arithmetic' has no knob 'digit'; its knobs are: digits, ops"),
    ("spec-knob-no-eq", "arithmetic:digits", r"task knob 'digits' in 'arithmetic:digits' is not key=value"),
    ("spec-knob-no-value", "arithmetic:digits=", r"needs a name and a value"),
    ("spec-knob-twice", "arithmetic:digits=2,digits=3", r"task knob 'digits' given twice"),
    ("spec-digits-zero", "arithmetic:digits=0", r"arithmetic digits must be 1..6, got 0"),
    ("spec-digits-huge", "arithmetic:digits=12", r"arithmetic digits must be 1..6, got 12"),
    ("spec-digits-word", "arithmetic:digits=two", r"knob digits must be an integer, got 'two'"),
    ("spec-ops-unknown", "arithmetic:ops=div", r"arithmetic ops 'div': use add, sub, mul"),
    ("spec-ops-int", "arithmetic:ops=3", r"knob ops must be a string, got 3"),
    ("spec-countdown-numbers", "countdown:numbers=9", r"countdown numbers must be 2..5, got 9"),
    ("spec-countdown-max", "countdown:max_number=1", r"countdown max_number must be 2..99, got 1"),
]:
    add(f"gen-{id}", f"tasks generate --task {spec!r}", gen("--task", spec, "--train", "3", "--test", "2"), msg)
    add(f"show-{id}", f"tasks show {spec!r}", ["tasks", "show", spec], msg)


def _generated(tmp: Path, out: str):
    files = sorted((tmp / "tasks").rglob("*.jsonl"))
    assert [f.name for f in files] == ["test.jsonl", "train.jsonl"], files
    rows = {f.stem: read_rows(f) for f in files}
    assert len(rows["train"]) == 7 and len(rows["test"]) == 3
    assert not {r["prompt"] for r in rows["train"]} & {r["prompt"] for r in rows["test"]}
    assert all(Countdown().is_correct(r["answer"], r) for r in rows["train"] + rows["test"])
    import os

    umask = os.umask(0)
    os.umask(umask)
    assert oct(files[0].stat().st_mode & 0o777) == oct(0o644 & ~umask), "task files: 0644 (less the umask), not 0600"


add("gen-ok", "a small countdown split", gen("--task", "countdown:numbers=3", "--train", "7", "--test", "3"),
    r"countdown:numbers=3: ", cls="correct-result", check=_generated)
add("show-ok", "tasks show arithmetic:digits=3 -n 3: three solved problems", ["tasks", "show", "arithmetic:digits=3",
                                                                             "-n", "3"],
    r"^(\d+\+\d+=\d+\n){3}$", cls="correct-result")

# ---- task files ----------------------------------------------------------------------------------------------


def file_case(id, what, data: bytes, message, cls="clear-error", extra=(), check=None):
    def setup(tmp: Path):
        (tmp / "train.jsonl").write_bytes(data)

    def call(tmp: Path):
        rows = read_rows(tmp / "train.jsonl", extra)
        print(f"{len(rows)} rows")
    call.__doc__ = f"read_rows(train.jsonl{', ' + repr(extra) if extra else ''})"
    CASES.append(Case(id, what, cls=cls, call=call, setup=setup, message=message, check=check))


file_case("file-binary", "a binary task file", b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe", r"train.jsonl:1: not text")
file_case("file-binary-line-3", "a non-UTF-8 byte on line 3", (GOOD * 2 + '{"prompt": "1+2=", "answer": "3').encode()
          + b"\xff\"}\n", r"train.jsonl:3: not text")
file_case("file-bad-json", "a torn JSON line", (GOOD + '{"prompt": "1+2=", "ans\n').encode(),
          r"train.jsonl:2: not valid JSON")
file_case("file-list-line", "a line that is a JSON list", (GOOD + '["1+2=", "3"]\n').encode(),
          r"train.jsonl:2: expected a JSON object per line, got list")
file_case("file-missing-answer", "a row without answer", b'{"prompt": "1+2="}\n', r"train.jsonl:1: missing .* answer")
file_case("file-int-answer", "a numeric answer", b'{"prompt": "1+2=", "answer": 3}\n', r"train.jsonl:1: missing or non-string")
file_case("file-empty-prompt", "an empty prompt", b'{"prompt": "", "answer": "3"}\n', r"train.jsonl:1: field prompt is empty")
file_case("file-empty", "an empty task file", b"", r"train.jsonl is empty")
file_case("file-blank-lines", "only blank lines", b"\n\n  \n", r"train.jsonl is empty")
file_case("file-uppercase", "a character outside the tokenizer's alphabet (uppercase X)",
          (GOOD + json.dumps({"prompt": "1X2=", "answer": "2"}) + "\n").encode(),
          r"train.jsonl:2: prompt has character\(s\) 'X' outside the tokenizer's alphabet")
file_case("file-unicode", "a non-ASCII character in an answer (é)",
          (json.dumps({"prompt": "1+2=", "answer": "3é"}, ensure_ascii=False) + "\n").encode(),
          r"train.jsonl:1: answer has character\(s\) 'é'")
file_case("file-tab", "a tab character in a prompt", (json.dumps({"prompt": "1+\t2=", "answer": "3"}) + "\n").encode(),
          r"train.jsonl:1: prompt has character\(s\) '\\t'")
file_case("file-countdown-missing", "a countdown row without its numbers",
          b'{"prompt": "1,2;3=", "answer": "1+2", "target": "3"}\n', r"train.jsonl:1: missing .*numbers",
          extra=("numbers", "target"))
file_case("file-blank-between", "blank lines between rows are skipped", (GOOD + "\n\n" + GOOD).encode(), r"^2 rows",
          cls="correct-result")
file_case("file-crlf", "Windows line endings", GOOD.replace("\n", "\r\n").encode() * 3, r"^3 rows", cls="correct-result")
file_case("file-no-final-newline", "no newline after the last row", GOOD.strip().encode(), r"^1 rows", cls="correct-result")


def folder_call(tmp):
    """read_rows(a folder)"""
    read_rows(tmp)


def missing_call(tmp):
    """read_rows(a missing file)"""
    read_rows(tmp / "none.jsonl")


def ensure_bad_call(tmp):
    """ensure_data(arithmetic, root with a corrupt test file)"""
    ensure_data(Arithmetic(), tmp)


def _corrupt_test_file(tmp: Path):
    paths = generate(Arithmetic(), tmp, n_train=4, n_test=3)
    paths["test"].write_bytes(paths["test"].read_bytes()[:-9] + b"\n")


def generate_zero_call(tmp):
    """generate(arithmetic, n_train=0)"""
    generate(Arithmetic(), tmp, n_train=0, n_test=5)


def generate_bool_call(tmp):
    """generate(arithmetic, n_test=True)"""
    generate(Arithmetic(), tmp, n_train=3, n_test=True)


def regenerate_call(tmp):
    """generate twice with the same seed: byte-identical files"""
    a = generate(Countdown(), tmp / "a", n_train=20, n_test=5, seed=3)
    b = generate(Countdown(), tmp / "b", n_train=20, n_test=5, seed=3)
    assert all(a[k].read_bytes() == b[k].read_bytes() for k in a)
    print("identical")


CASES += [
    Case("file-folder", "a folder where a task file should be", call=folder_call, message=r"is a folder"),
    Case("file-missing", "a task file that does not exist", call=missing_call,
         message=r"none.jsonl does not exist; run `rlm-lab tasks generate`"),
    Case("ensure-corrupt", "a torn last line in the test split", call=ensure_bad_call, setup=_corrupt_test_file,
         message=r"test.jsonl:3: not valid JSON"),
    Case("generate-zero", "API: zero training problems", call=generate_zero_call, message=r"n_train must be an integer >= 1"),
    Case("generate-bool", "API: True as a count", call=generate_bool_call, message=r"n_test must be an integer >= 1, got True"),
    Case("regenerate", "regenerating with one seed", cls="correct-result", call=regenerate_call, message="identical"),
]
