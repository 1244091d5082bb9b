"""``rlm-lab launches --gpus N`` (issue 18 item 7): GPU counts no one machine has are refused before any
command line is built; the largest one machine holds gives every launch with that many processes."""

import re

from fault_matrix import Case

from rlm_lab.launches import LAUNCHES, MAX_GPUS

CASES = [
    Case("gpus-100000", "--gpus 100000 (printed 100000-process command lines as 'checked')",
         argv=["launches", "--gpus", "100000"], message=r"--gpus 100000: .*a machine holds at most 16 GPUs"),
    Case("gpus-18", "--gpus 18 (one node above the largest machine)", argv=["launches", "--gpus", "18"],
         message=r"a machine holds at most 16 GPUs"),
    Case("gpus-odd", "--gpus 3", argv=["launches", "--gpus", "3"], message=r"--gpus must be an even number >= 2, got 3"),
    Case("gpus-zero", "--gpus 0", argv=["launches", "--gpus", "0"], message=r"--gpus must be an even number >= 2, got 0"),
    Case("gpus-negative", "--gpus -8", argv=["launches", "--gpus", "-8"], message=r"--gpus must be an even number >= 2"),
    Case("gpus-word", "--gpus eight", argv=["launches", "--gpus", "eight"], message=r"invalid int value: 'eight'"),
]


def _sixteen(tmp, out):
    lines = [ln for ln in out.splitlines() if not ln.startswith("#")]
    assert len(lines) == len(LAUNCHES), out
    for ln in lines:  # every launch asks for exactly 16 processes, through its own launcher's flag
        n = re.search(r"--nproc-per-node=(\d+)|--num_processes (\d+)", ln)
        assert n and int(n.group(1) or n.group(2)) == MAX_GPUS, ln


CASES.append(Case("gpus-16", "--gpus 16 (the largest one machine): every launch, 16 processes each",
                  cls="correct-result", argv=["launches", "--gpus", "16"], message=r"- checked", check=_sixteen))

# several machines (issue 25): --nodes N --gpus-per-node G
CASES += [
    Case("nodes-one", "--nodes 1 (one machine is --gpus)", argv=["launches", "--nodes", "1", "--gpus-per-node", "8"],
         message=r"--nodes must be 2 to 4096 \(one machine: --gpus\), got 1"),
    Case("nodes-zero", "--nodes 0", argv=["launches", "--nodes", "0", "--gpus-per-node", "8"],
         message=r"--nodes must be 2 to 4096"),
    Case("nodes-without-gpus", "--nodes 2 without --gpus-per-node", argv=["launches", "--nodes", "2"],
         message=r"a cluster needs both --nodes N and --gpus-per-node G"),
    Case("gpus-per-node-without-nodes", "--gpus-per-node 8 without --nodes", argv=["launches", "--gpus-per-node", "8"],
         message=r"a cluster needs both --nodes N and --gpus-per-node G"),
    Case("gpus-and-nodes", "--gpus 8 with --nodes 2 --gpus-per-node 8 (which count?)",
         argv=["launches", "--gpus", "8", "--nodes", "2", "--gpus-per-node", "8"],
         message=r"--gpus is one machine's count; with --nodes give --gpus-per-node instead"),
    Case("gpus-per-node-odd", "--gpus-per-node 3", argv=["launches", "--nodes", "2", "--gpus-per-node", "3"],
         message=r"--gpus-per-node must be an even number >= 2, got 3"),
    Case("gpus-per-node-32", "--gpus-per-node 32 (no machine holds that many)",
         argv=["launches", "--nodes", "2", "--gpus-per-node", "32"], message=r"a machine holds at most 16 GPUs"),
    Case("no-count", "neither --gpus nor --nodes", argv=["launches"],
         message=r"give --gpus N \(one machine\) or --nodes N --gpus-per-node G \(a cluster\)"),
    Case("cluster-only-unknown", "--only names no cluster launch",
         argv=["launches", "--nodes", "2", "--gpus-per-node", "8", "--only", "ch04-torchrun-dp"],
         message=r"unknown launch 'ch04-torchrun-dp'; known: ch04-torchrun-dp-nodes"),
]


def _cluster(tmp, out):
    from rlm_lab.launches import CLUSTER_LAUNCHES

    heads = [ln for ln in out.splitlines() if ln.startswith("# ch0")]
    assert [h.split(":")[0][2:] for h in heads] == [x.name for x in CLUSTER_LAUNCHES], heads
    assert all("checked for 4 machines x 8 GPUs" in h for h in heads), heads
    assert out.count("--nnodes=4") == 4 and "#SBATCH --nodes=4" in out and "replicas: 4" in out, out


CASES.append(Case("nodes-4-gpus-8", "--nodes 4 --gpus-per-node 8: every cluster launch, checked for each node rank",
                  cls="correct-result", argv=["launches", "--nodes", "4", "--gpus-per-node", "8"],
                  message=r"- checked for 4 machines x 8 GPUs", check=_cluster))
