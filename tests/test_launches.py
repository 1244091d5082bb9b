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
    # the module a torchrun line ran before every entry point went through rlm_lab.cli
    (lambda n: ["torchrun", "--standalone", f"--nproc-per-node={n}", "-m", "rlm_lab.parallel.cli", "--dp", str(n)],
     "no __main__"),
    (lambda n: ["torchrun", "--standalone", f"--nproc-per-node={n + 1}", "-m", "rlm_lab.cli", "parallel", "--dp", str(n + 1)],
     "processes for"),
    (lambda n: ["torchrun", "--standalone", f"--nproc-per-node={n}", "-m", "rlm_lab.cli", "parallel", "--dp", str(n // 2)],
     "not the"),  # a layout that leaves half the GPUs idle
    (lambda n: ["torchrun", "--standalone", f"--nproc-per-node={n}", "-m", "rlm_lab.cli", "parallel", "--dp", str(n),
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
    # issue 40: the batch shell expands the rank once (every task rank 0), and a rendezvous id every job shares
    ("ch04-slurm-fsdp2", lambda n, g: L._slurm(n, g).replace("srun bash -c 'exec ", "srun ").replace(
        "--model small'", "--model small").replace("$SLURM_PROCID", "$SLURM_NODEID"), "rank 1"),
    ("ch04-slurm-fsdp2", lambda n, g: L._slurm(n, g).replace("--rdzv-id=$SLURM_JOB_ID", "--rdzv-id=rlm-lab"),
     "not the job's"),
    ("ch04-slurm-fsdp2", lambda n, g: L._slurm(n, g).replace("export HEAD_ADDR", "HEAD_ADDR"), "c10d rendezvous"),
    # the head on a third machine (no CPUs), no token, the token made after the head started
    ("ch05-ray-job", lambda n, g: L._ray_job(n, g).replace("--head --port=6379 --num-gpus=" + str(g),
                                                           "--head --port=6379 --num-cpus=0"), "machine 0 of"),
    ("ch05-ray-job", lambda n, g: L._ray_job(n, g).replace("export RAY_AUTH_MODE=token\nray start --address",
                                                           "ray start --address"), "without RAY_AUTH_MODE"),
    ("ch05-ray-job", lambda n, g: "\n".join(sorted(L._ray_job(n, g).splitlines(), key=lambda ln: "get-auth" in ln)),
     "before its token"),
    ("ch05-ray-job", lambda n, g: L._ray_job(n, g).replace("--num-gpus=4\n", "--num-gpus=4 --dashboard-host=0.0.0.0\n", 1),
     "listens on 0.0.0.0"),
    ("ch05-ray-job", lambda n, g: L._ray_job(n, g).replace(f"# {n} machines", "# machines"), "how many machines"),
    ("ch05-kuberay-rayjob", lambda n, g: L._rayjob(n, g).replace("mode: token", "mode: disabled"), "no token"),
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


def _readme_cluster_blocks() -> list[str]:
    import re

    text = (L.REPO / "README.md").read_text()
    section = text[text.index("## Several machines"):]
    section = section[:section.index("\n## ", 1)]
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", section, flags=re.S)]


def test_every_command_of_the_readme_cluster_section_parses_with_the_pinned_tools():
    """Issue 40: each block of the README's "Several machines" is a checked launch (2 machines x 8 GPUs) or
    rlm-lab's own lines; a block edited by hand away from what `rlm-lab launches` checks fails here."""
    import shlex

    from rlm_lab.cli import build_parser

    blocks = _readme_cluster_blocks()
    known = {x.text(2, 8).strip(): x for x in L.CLUSTER_LAUNCHES}
    seen = []
    for block in blocks:
        if block in known:
            launch = known[block]
            L.check_cluster(L.ClusterLaunch(launch.name, launch.chapter, launch.what, lambda n, g, b=block: b,
                                            launch.check), 2, 8)
            seen.append(launch.name)
            continue
        for line in block.splitlines():  # the local lines: rlm-lab's own parser
            argv = shlex.split(line, comments=True)
            assert argv[0] == "rlm-lab", line
            build_parser(argv[1]).parse_args(argv[1:])
    assert {"ch04-torchrun-fsdp2-nodes", "ch04-slurm-fsdp2", "ch05-ray-job"} <= set(seen), seen
    for name in ("KubeRay", "accelerate launch", "ray[default]", "RAY_AUTH_MODE=token", "cluster-rehearsal"):
        assert name in "\n".join(blocks) or name in (L.REPO / "README.md").read_text(), name


def test_the_slurm_tasks_get_their_own_ranks_and_the_jobs_rendezvous():
    """The stand-in srun runs the script's line once per task with that task's SLURM_PROCID."""
    tasks = L._slurm_tasks(L._slurm(3, 4), 3)
    from torch.distributed.run import get_args_parser

    parsed = [get_args_parser().parse_args(t[1:]) for t in tasks]
    assert [int(a.node_rank) for a in parsed] == [0, 1, 2]
    assert {a.rdzv_id for a in parsed} == {L.SLURM_JOB} and {a.rdzv_endpoint for a in parsed} == {"node0:29400"}


def test_cluster_extra_pins_ray_default():
    """`pip install '.[cluster]'` brings Ray's job server; every package ray[default] needs is pinned."""
    import tomllib
    from importlib.metadata import requires

    extra = tomllib.loads((L.REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["cluster"]
    assert any(x.replace(" ", "").startswith("ray[default]") for x in extra), extra
    pins = {ln.split("==")[0].lower().replace("_", "-") for ln in (L.REPO / "constraints.txt").read_text().splitlines()
            if "==" in ln}
    needed = {r.split(";")[0].split("[")[0].split(">")[0].split("<")[0].split("!")[0].split("=")[0].strip().lower().replace("_", "-")
              for r in requires("ray") if 'extra == "default"' in r}
    assert needed and needed <= pins, sorted(needed - pins)
