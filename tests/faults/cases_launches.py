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
