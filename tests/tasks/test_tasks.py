"""Tasks: deterministic files, disjoint splits, verifiers, clear errors on bad input."""

import json
import random

import pytest

from rlm_lab.errors import RlmLabError
from rlm_lab.tasks import (
    CHECKSUMS, DATA_DIR, TASKS, Arithmetic, Countdown, checksums, data_paths, ensure_data, generate, get_task, parse_task,
    read_rows, task_from_slug,
)
from rlm_lab.tasks.countdown import evaluate


@pytest.mark.parametrize("spec", ["arithmetic:digits=2", "arithmetic:digits=4,ops=add+mul", "countdown:numbers=4"])
def test_generation_is_deterministic_and_split_is_disjoint(tmp_path, spec):
    task = parse_task(spec)
    a = generate(task, tmp_path / "a", n_train=300, n_test=100, seed=1)
    b = generate(task, tmp_path / "b", n_train=300, n_test=100, seed=1)
    for split in ("train", "test"):
        assert a[split].read_bytes() == b[split].read_bytes()
    train = {r["prompt"] for r in read_rows(a["train"])}
    test = [r["prompt"] for r in read_rows(a["test"])]
    assert len(set(test)) == 100 and not train & set(test)
    c = generate(task, tmp_path / "c", n_train=300, n_test=100, seed=2)
    assert c["test"].read_bytes() != a["test"].read_bytes()


COMMITTED = sorted((DATA_DIR).glob(f"*/{CHECKSUMS}"))


def test_every_task_folder_commits_its_checksums():
    assert len(COMMITTED) >= 12
    assert {p.parent.name for p in COMMITTED} >= {"arithmetic_digits2_opsadd", "countdown_numbers3_max_number9"}


@pytest.mark.parametrize("sums", COMMITTED, ids=lambda p: p.parent.name)
def test_ensure_data_reproduces_the_committed_checksums(tmp_path, sums):
    # git keeps only SHA256SUMS: ensure_data must regenerate byte-identical files from the slug alone
    task = task_from_slug(sums.parent.name)
    assert task.slug == sums.parent.name
    (tmp_path / task.slug).mkdir()
    (tmp_path / task.slug / CHECKSUMS).write_text(sums.read_text())
    rows = ensure_data(task, tmp_path)
    assert checksums(data_paths(task, tmp_path)) == sums.read_text()
    assert rows["train"] and rows["test"]


def test_ensure_data_refuses_files_that_differ_from_the_checksums(tmp_path):
    task = get_task("arithmetic", digits=2)
    (tmp_path / task.slug).mkdir()
    (tmp_path / task.slug / CHECKSUMS).write_text("0" * 64 + "  test.jsonl\n" + "0" * 64 + "  train.jsonl\n")
    with pytest.raises(RlmLabError, match=r"SHA256SUMS: the regenerated arithmetic_digits2_opsadd files differ"):
        ensure_data(task, tmp_path)
    assert sorted(p.name for p in (tmp_path / task.slug).iterdir()) == [CHECKSUMS]  # nothing unchecked left behind


def test_task_from_slug_inverts_slug():
    for task in (Arithmetic(digits=3, ops="add+sub"), Countdown(numbers=4, max_number=20), get_task("psum", trace="seq")):
        assert task_from_slug(task.slug) == task
    with pytest.raises(RlmLabError, match="not a countdown slug"):
        task_from_slug("countdown_digits2")


def test_reference_answers_are_correct():
    rng = random.Random(0)
    for task in (Arithmetic(digits=3, ops="add+sub+mul"), Countdown(numbers=4, max_number=20)):
        for _ in range(200):
            row = task.sample(rng)
            assert task.is_correct(row["answer"], row), row
            assert task.is_well_formed(row["answer"])


def test_arithmetic_verifier():
    t = Arithmetic()
    row = {"prompt": "37+45=", "answer": "82"}
    assert t.is_correct("82", row) and t.is_correct(" 82 ", row)
    assert not t.is_correct("81", row) and not t.is_correct("82x", row) and not t.is_correct("", row)
    assert t.is_well_formed("-3") and not t.is_well_formed("3+4")


def test_countdown_verifier_needs_each_number_once():
    t = Countdown()
    row = {"numbers": "3,5,7", "target": "22"}
    assert t.is_correct("3*5+7", row) and t.is_correct("7+5*3", row)
    assert not t.is_correct("3*5+7+0", row)  # extra number
    assert not t.is_correct("5*5-3", row)  # reuses 5, misses 7
    assert not t.is_correct("3*5+8", row)
    assert evaluate("(1+2)*3") == (9, [1, 2, 3])
    for bad in ("", "1+", "(1+2", "1++2", "01+2", "2**3", "1/2", "((((", "9" * 70):
        assert evaluate(bad) is None, bad


def test_bad_task_names_and_knobs():
    with pytest.raises(RlmLabError, match="unknown task 'sorting'"):
        get_task("sorting")
    with pytest.raises(RlmLabError, match="no knob 'level'"):
        parse_task("arithmetic:level=3")
    with pytest.raises(RlmLabError, match="not key=value"):
        parse_task("arithmetic:digits")
    with pytest.raises(RlmLabError, match="digits must be"):
        get_task("arithmetic", digits=0)
    assert set(TASKS) >= {"arithmetic", "countdown"}


@pytest.mark.parametrize("content,msg", [
    ('{"prompt": "1+1=", "answer": "2"}\nnot json\n', r":2: not valid JSON"),
    ('{"prompt": "1+1="}\n', r":1: missing or non-string field\(s\) answer"),
    ("[1, 2]\n", r":1: expected a JSON object"),
    ("\n", r"is empty"),
])
def test_malformed_task_file_names_the_line(tmp_path, content, msg):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(RlmLabError, match=msg):
        read_rows(path)


def test_missing_task_file_says_how_to_create_it(tmp_path):
    with pytest.raises(RlmLabError, match="rlm-lab tasks generate"):
        read_rows(tmp_path / "nope.jsonl")


def test_task_file_alphabet_is_exactly_what_the_tokenizer_encodes(tmp_path):
    # independent check: read_rows refuses a character exactly when the character tokenizer maps it to <unk>
    from rlm_lab.models.tokenizer import char_tokenizer

    tok = char_tokenizer()
    f = tmp_path / "t.jsonl"
    for ch in "09+-*=,;()az AZé\t_#":
        f.write_text(json.dumps({"prompt": f"1{ch}2=", "answer": "3"}) + "\n")
        unk = tok.unk_token_id in tok(f"1{ch}2=")["input_ids"]
        if unk:
            with pytest.raises(RlmLabError, match=r"t.jsonl:1: prompt has character"):
                read_rows(f)
        else:
            assert read_rows(f)[0]["prompt"] == f"1{ch}2="


@pytest.mark.parametrize("task", [Arithmetic(digits=1), Arithmetic(digits=4, ops="add+sub+mul"), Countdown(),
                                  Countdown(numbers=5, max_number=99)], ids=lambda t: t.slug)
def test_max_prompt_len_bounds_every_sampled_prompt(task):
    rng = random.Random(1)
    longest = max(len(task.sample(rng)["prompt"]) for _ in range(3000))
    assert longest <= task.max_prompt_len() <= longest + 3  # a bound, and a tight one
