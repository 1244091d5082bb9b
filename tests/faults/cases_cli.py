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
    Case("help-is-whole-sentence", "`rlm-lab --help`: the description is not cut mid-sentence", cls="correct-result",
         argv=["--help"], message=r"task data\.\s"),
    Case("subcommand-help", "`rlm-lab train --help` lists the RunConfig fields", cls="correct-result",
         argv=["train", "--help"], message=r"rl_steps \(int\)"),
    Case("console-script", "an error through the installed entry point (a real process)", argv=["tasks", "show", "nope"],
         subprocess=True, message=r"unknown task 'nope'; choose one of: arithmetic, countdown"),
]
