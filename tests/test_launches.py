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


# ---- several machines (issue 25) -----------------------------------------------------------------------------
@pytest.mark.parametrize("nodes,gpn", [(2, 8), (3, 4), (16, 2)])
def test_every_cluster_launch_checks_out(nodes, gpn):
    for launch in L.CLUSTER_LAUNCHES:
        text = L.check_cluster(launch, nodes, gpn)
        assert str(nodes) in text


def _one_line(name, text):
    return L.ClusterLaunch(name, 4, "test", lambda n, g: text(n, g), dict((x.name, x.check) for x in L.CLUSTER_LAUNCHES)[name])


@pytest.mark.parametrize("name,text,message", [
    # the process count of every machine does not add up to the layout's ranks
    ("ch04-torchrun-dp-nodes", lambda n, g: L._torchrun_nodes(n, g, "--dp", str(g)), "not the"),
    # one machine's agents told a different node count
    ("ch04-torchrun-dp-nodes", lambda n, g: L._torchrun_nodes(n + 1, g, "--dp", str((n + 1) * g)), "not 2 nodes"),
    # a fixed node rank: every machine would claim rank 0
    ("ch04-torchrun-dp-nodes", lambda n, g: L._torchrun_nodes(n, g, "--dp", str(n * g), rank="0"), "rank 1"),
    # the static rendezvous instead of c10d
    ("ch04-torchrun-dp-nodes", lambda n, g: L._torchrun_nodes(n, g, "--dp", str(n * g)).replace("c10d", "static"),
     "not a c10d rendezvous"),
    # accelerate's --num_processes is every machine's, not one machine's
    ("ch04-accelerate-fsdp2-nodes", lambda n, g: L._accelerate_nodes(n, g).replace(f"--num_processes {n * g}",
                                                                                    f"--num_processes {g}"),
     "processes in all"),
    ("ch04-slurm-fsdp2", lambda n, g: L._slurm(n, g).replace(f"--nodes={n}", "--nodes=1"), "#SBATCH"),
    ("ch04-slurm-fsdp2", lambda n, g: L._slurm(n, g).replace("$(scontrol", "$((scontrol"), "bash -n"),
    ("ch05-ray-job", lambda n, g: L._ray_job(n, g).replace("--num-gpus", "--num-gpu"), "Ray's CLI refuses"),
    ("ch05-ray-job", lambda n, g: L._ray_job(n, g).replace(f"--nodes {n}", "--nodes 1"), "over 1 node"),
    ("ch05-ray-job", lambda n, g: L._ray_job(n, g).replace("place --nodes", "place --nodez"), "refuses"),
    ("ch05-kuberay-rayjob", lambda n, g: L._rayjob(n, g).replace("replicas: 2", "replicas: 1", 1), "workers of"),
    ("ch05-kuberay-rayjob", lambda n, g: L._rayjob(n, g).replace("rayVersion: 2.60.0", "rayVersion: 2.9.0"),
     "is not the Ray"),
    ("ch05-kuberay-rayjob", lambda n, g: L._rayjob(n, g).replace("kind: RayJob", "kind: RayService"), "not a RayJob"),
])
def test_broken_cluster_launches_are_caught(name, text, message):
    with pytest.raises(RlmLabError, match=message):
        L.check_cluster(_one_line(name, text), 2, 4)


def test_cluster_lines_leave_the_variables_to_the_shell():
    """$NODE_RANK and $HEAD_ADDR unquoted (a quoted '$NODE_RANK' would reach torchrun as those 9 characters)."""
    import shlex

    line = L._torchrun_nodes(2, 8, "--dp", "16")
    assert "--node-rank=$NODE_RANK" in line.split() and "'" not in line
    assert shlex.split(line.replace("$NODE_RANK", "1"))[2] == "--node-rank=1"


def test_cli_prints_cluster_launches_and_refuses_bad_shapes(capsys):
    from rlm_lab.cli import main

    assert main(["launches", "--nodes", "2", "--gpus-per-node", "8", "--only", "ch04-slurm-fsdp2"]) == 0
    out = capsys.readouterr().out
    assert "#SBATCH --nodes=2" in out and "--nproc-per-node=8" in out and "checked for 2 machines x 8 GPUs" in out
    for argv in (["--nodes", "1", "--gpus-per-node", "8"], ["--nodes", "2"], ["--gpus", "8", "--nodes", "2",
                 "--gpus-per-node", "8"], [], ["--nodes", "2", "--gpus-per-node", "32"]):
        assert main(["launches", *argv]) == 2
    assert capsys.readouterr().err.count("rlm-lab: error:") == 5


@pytest.mark.slow  # starts a local Ray: 20-60 s on 2 cores
def test_a_local_ray_starts_after_the_cluster_checks_imported_ray():
    # the chapter-5 checks import Ray's own CLI; Ray reads its authentication mode once, at import, so a session
    # started later in the same process (a test run, a notebook) must still be admitted by its own head
    import subprocess
    import sys
    from pathlib import Path

    code = ("from rlm_lab.launches import CLUSTER_LAUNCHES, check_cluster\n"
            "[check_cluster(x, 2, 8) for x in CLUSTER_LAUNCHES if x.chapter == 5]\n"
            "from rlm_lab.placement.session import RaySession\n"
            "s = RaySession(num_cpus=1)\nprint('cpus', s.cpus())\ns.close()\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                         cwd=Path(__file__).resolve().parents[1])
    assert run.returncode == 0 and run.stdout.strip().endswith("cpus 1"), run.stderr[-3000:]
