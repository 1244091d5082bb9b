"""The command line itself: unknown commands and flags, missing arguments, --help."""

from fault_matrix import Case

CASES = [
    Case("no-command", "no subcommand at all", argv=[], message=r"required: COMMAND"),
    Case("unknown-command", "a subcommand that does not exist", argv=["trian"], message=r"invalid choice: 'trian'"),
    Case("unknown-flag", "a flag no subcommand has", argv=["models", "--fast"], message=r"unrecognized arguments: --fast"),
    Case("train-unknown-flag", "a misspelt train flag", argv=["train", "--steps", "5"],
         message=r"unrecognized arguments: --steps"),
    Case("tasks-no-action", "`tasks` without generate/show", argv=["tasks"], message=r"tasks: .*required: action"),
    Case("tasks-show-missing-task", "`tasks show` without a task", argv=["tasks", "show"],
         message=r"required: task"),
    Case("tasks-show-n-not-int", "`tasks show -n` with a word", argv=["tasks", "show", "arithmetic", "-n", "five"],
         message=r"argument -n: invalid int value: 'five'"),
    Case("usage-error-process", "a usage error through a real process (argparse exits on its own)",
         argv=["tasks", "generate", "--train", "-5"], subprocess=True, unchanged=("data/tasks",),
         message=r"--train: must be in 1..10,000,000, got -5"),
    Case("help-is-whole-sentence", "`rlm-lab --help`: the description is not cut mid-sentence", cls="correct-result",
         argv=["--help"], message=r"task data\.\s"),
    Case("subcommand-help", "`rlm-lab train --help` lists the RunConfig fields", cls="correct-result",
         argv=["train", "--help"], message=r"rl_steps \(int\)"),
    Case("console-script", "an error through the installed entry point (a real process)", argv=["tasks", "show", "nope"],
         subprocess=True, message=r"unknown task 'nope'; choose one of: arithmetic, chain, countdown"),
]


def _broken_pipe(tmp):
    """rlm-lab predict --prompts 8 | head -1 (a real pipe the reader closes early)"""
    import subprocess
    import sys

    from fault_matrix import REPO

    r = subprocess.run(f"'{sys.executable}' -m rlm_lab.cli predict --prompts 8 | head -1", shell=True, cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert r.stdout.startswith("prediction: "), r.stdout
    sys.stderr.write(r.stderr)  # the harness checks it holds no traceback
    print("first line only")


def _models_table(tmp, out):
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
    assert rows["micro"][-1] == "341,632" and rows["nano"][1] == "llama", rows


CASES += [
    Case("broken-pipe", "output piped into a reader that stops early", cls="correct-result", call=_broken_pipe,
         message="first line only"),
    Case("models", "`rlm-lab models`: the zoo with exact parameter counts", cls="correct-result", argv=["models"],
         message=r"micro", check=_models_table),
    Case("models-extra-arg", "`rlm-lab models nano` (takes no arguments)", argv=["models", "nano"],
         message=r"unrecognized arguments: nano"),
]
