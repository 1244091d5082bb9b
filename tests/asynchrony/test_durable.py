"""A trainer crash leaves the buffer's samples and the last checkpoint readable (rlm_lab.asynchrony.durable):
a process that logs samples and dies mid-line (os._exit, no cleanup) leaves every completed sample
readable and the taken/pending split right; a save that crashes half-way leaves the previous checkpoint
loadable with its exact weights, and a crash between the two renames still finds a complete one."""

import subprocess
import sys
import textwrap

import pytest


def test_samples_survive_a_crash_mid_line(tmp_path):
    from rlm_lab.asynchrony.durable import read_samples

    log = tmp_path / "buffer.jsonl"
    code = textwrap.dedent(f"""
        import os
        from rlm_lab.asynchrony.buffer import StalenessBuffer
        from rlm_lab.asynchrony.durable import SampleLog
        buf, spill = StalenessBuffer(eta=1), SampleLog({str(log)!r})
        for i in range(5):
            spill.put(buf.put(i // 3, (i // 3, i, [7, i], [-0.5, -1.0 * i])))
        spill.taken(buf.take(3, current=1), 1)
        with open({str(log)!r}, "a") as f:
            f.write('{{"uid": 99, "vers')  # the line being written when the trainer died
            f.flush()
        os._exit(1)
    """)
    assert subprocess.run([sys.executable, "-c", code]).returncode == 1
    got = read_samples(log)
    assert sorted(got["samples"]) == [0, 1, 2, 3, 4] and got["taken"] == {0, 1, 2} and got["pending"] == [3, 4]
    assert got["samples"][3]["version"] == 1 and got["samples"][4]["logprobs"] == [-0.5, -4.0]


def test_the_previous_checkpoint_survives_a_crashed_save(tmp_path, monkeypatch):
    import torch

    from rlm_lab.asynchrony import durable
    from rlm_lab.models import load

    model, tok = load("nano")
    folder = tmp_path / "checkpoint"
    durable.save_checkpoint(model, tok, folder, step=2)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)

    import rlm_lab.models as models

    real_save = models.save

    def dies_half_way(m, t, dest):
        real_save(m, t, dest)
        raise OSError("disk full")  # the new checkpoint is written but never renamed into place

    monkeypatch.setattr(models, "save", dies_half_way)
    with pytest.raises(OSError):
        durable.save_checkpoint(model, tok, folder, step=4)
    monkeypatch.setattr(models, "save", real_save)
    m2, _, step = durable.load_checkpoint(folder)
    assert step == 2
    assert all(torch.equal(before[k], v) for k, v in m2.state_dict().items())
    # a crash between the two renames: the old checkpoint moved aside, the new one not yet in place
    (folder.parent / "checkpoint").rename(folder.parent / "checkpoint.old")
    assert durable.load_checkpoint(folder)[2] == 2
    durable.save_checkpoint(model, tok, folder, step=4)
    m3, _, step = durable.load_checkpoint(folder)
    assert step == 4 and not (folder.parent / "checkpoint.old").exists()
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in m3.state_dict().items())
