"""slime's run scripts (rlm_lab.frameworks.importers.slime): the engines apart or colocated, the asynchronous loop,
and a quoted string spanning lines read as bash reads it."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from rlm_lab.frameworks.importers import import_from
from rlm_lab.frameworks.importers.shell import commands

SCRIPT = """#!/bin/bash
NUM_GPUS=${NUM_GPUS:-4}
RUNTIME_ENV_JSON="{
  \\"env_vars\\": {\\"PYTHONPATH\\": \\"/opt/Megatron-LM/\\"}
}"
ROLLOUT_ARGS=(
   --rollout-batch-size 16   # prompts per step
   --n-samples-per-prompt 4
   --rollout-max-response-len 2048
   --global-batch-size 32
)
ray job submit --address="http://127.0.0.1:8265" --runtime-env-json="${RUNTIME_ENV_JSON}" \\
   -- python3 MAIN --actor-num-nodes 1 --actor-num-gpus-per-node ${NUM_GPUS} --rollout-num-gpus 4 \\
   --rollout-num-gpus-per-engine 2 --hf-checkpoint /models/Qwen3-4B --tensor-model-parallel-size 2 \\
   ${ROLLOUT_ARGS[@]} --micro-batch-size 2 --kl-loss-coef 0.01 --use-kl-loss
"""


def _imp(tmp_path, main="train.py"):
    p = tmp_path / "run.sh"
    p.write_text(SCRIPT.replace("MAIN", main))
    return import_from(f"slime:{p}")


def test_engines_on_their_own_gpus_are_two_sets_with_a_broadcast(tmp_path):
    imp = _imp(tmp_path)
    sets = {s["name"]: (s["devices"], s["tp"]) for s in imp.config["placement"]["sets"]}
    assert sets == {"rollout": (4, 2), "train": (4, 2)} and imp.config["placement"]["sync"] == "collective"
    wl = imp.config["workload"]
    assert (wl["prompts"], wl["group_size"], wl["minibatches"], wl["micro_batch"]) == (16, 4, 2, 2)
    assert imp.config["beta"] == 0.01 and imp.mode == "sync" and imp.unknown == []


def test_train_async_starts_the_next_rollout_before_training_one_step_off(tmp_path):
    imp = _imp(tmp_path, "train_async.py")
    assert (imp.mode, imp.eta) == ("one_step_off", 1)


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash to compare with")
def test_a_quoted_string_over_lines_is_one_word_as_in_bash(tmp_path):
    # an independent computation: bash runs the script with `ray` replaced by a printer of its arguments
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "ray").write_text("#!/bin/sh\nprintf '%s\\n' \"$@\"\n")
    (fake / "ray").chmod(0o755)
    (tmp_path / "run.sh").write_text(SCRIPT.replace("MAIN", "train.py"))
    out = subprocess.run(["bash", str(tmp_path / "run.sh")], capture_output=True, text=True, timeout=30,
                         env={"PATH": f"{fake}:/usr/bin:/bin"}).stdout
    (words, _), = [c for c in commands(SCRIPT.replace("MAIN", "train.py"), "t") if c[0][0] == "ray"]
    assert out == "\n".join(words[1:]) + "\n"
    assert any('"env_vars"' in w and "\n" in w for w in words)
