"""Multi-GPU command lines: every launch of the book passes its launcher's own parser for 2-8 GPUs, and the
dry-run check catches each kind of broken launch a config edit could produce."""

import json

import pytest

from rlm_lab import launches as L
from rlm_lab.errors import RlmLabError


@pytest.mark.parametrize("gpus", [2, 4, 8])
def test_every_launch_checks_out(gpus):
    for launch in L.LAUNCHES:
        argv = L.check(launch, gpus)
        assert str(gpus) in " ".join(argv)


def _with(argv):
    return L.Launch("ch04-accelerate-zero2", 4, "test", lambda n: argv(n))


@pytest.mark.parametrize("argv,message", [
    # a module that does nothing under -m (the old comment in configs/accelerate/*.yaml named this one)
    (lambda n: ["accelerate", "launch", "--config_file", "configs/accelerate/ddp.yaml", "--num_processes", str(n),
                "-m", "rlm_lab.train.cli", "--size", "gpu"], "no __main__"),
    (lambda n: ["torchrun", "--standalone", f"--nproc-per-node={n + 1}", "-m", "rlm_lab.parallel.cli", "--dp", str(n + 1)],
     "processes for"),
    (lambda n: ["torchrun", "--standalone", f"--nproc-per-node={n}", "-m", "rlm_lab.parallel.cli", "--dp", str(n // 2)],
     "not the"),  # a layout that leaves half the GPUs idle
    (lambda n: ["torchrun", "--standalone", f"--nproc-per-node={n}", "-m", "rlm_lab.parallel.cli", "--dp", str(n),
                "--zeroo", "3"], "refuses"),
    (lambda n: ["accelerate", "launch", "--config_file", "configs/accelerate/deepspeed_zero3.yaml",
                "--num_processes", str(n), "-m", "rlm_lab.cli", "train", "--size", "gpu"], "ZeRO stage 3"),
    (lambda n: ["accelerate", "launch", "--config_file", "configs/accelerate/nope.yaml", "--num_processes", str(n),
                "-m", "rlm_lab.cli", "train"], "does not exist"),
    (lambda n: ["torchrun", "--standalone", f"--nproc-per-node={n}", "-m", "rlm_lab.no_such_module"], "does not exist"),
])
def test_broken_launches_are_caught(argv, message):
    with pytest.raises(RlmLabError, match=message):
        L.check(_with(argv), 4)


def test_a_cpu_config_is_not_a_multi_gpu_launch(tmp_path, monkeypatch):
    cfg = tmp_path / "configs" / "accelerate"
    cfg.mkdir(parents=True)
    (cfg / "cpu.yaml").write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_CPU\nnum_processes: 4\n"
                                  "use_cpu: true\nmachine_rank: 0\nnum_machines: 1\n")
    monkeypatch.setattr(L, "REPO", tmp_path)
    launch = L.Launch("x", 4, "t", lambda n: ["accelerate", "launch", "--config_file", "configs/accelerate/cpu.yaml",
                                              "--num_processes", str(n), "-m", "rlm_lab.cli", "train"])
    with pytest.raises(RlmLabError, match="not a multi-GPU config"):
        L.check(launch, 4)


def test_deepspeed_configs_are_the_stage_they_are_named():
    for stage in (2, 3):
        cfg = json.loads((L.REPO / "configs" / "deepspeed" / f"zero{stage}.json").read_text())
        assert cfg["zero_optimization"]["stage"] == stage


def test_cli_prints_checked_lines_and_refuses_bad_counts(capsys):
    from rlm_lab.cli import main

    assert main(["launches", "--gpus", "8", "--only", "ch04-torchrun-fsdp2"]) == 0
    out = capsys.readouterr().out
    assert "--nproc-per-node=8" in out and "--zero 3" in out
    assert main(["launches", "--gpus", "3"]) == 2
    assert main(["launches", "--gpus", "4", "--only", "nope"]) == 2
    assert "rlm-lab: error:" in capsys.readouterr().err
