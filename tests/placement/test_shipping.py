"""The warm start as Ray carries it (issue 40): packed from the driver's folder, unpacked on the actor's node into
a folder of its own, the same bytes; a payload cannot write outside the folder it is given."""

import pytest

from rlm_lab.errors import RlmLabError
from rlm_lab.placement.shipping import local_copy, pack, unpack


def _model_folder(tmp_path):
    folder = tmp_path / "driver" / "sft-key"
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "llama"}')
    (folder / "model.safetensors").write_bytes(bytes(range(256)) * 10)
    (folder / "sub" / "tokenizer.json").write_text("{}")
    (folder / "link").symlink_to(tmp_path)  # never followed
    return folder


def test_pack_unpack_is_the_same_files_in_a_folder_of_the_node(tmp_path):
    folder = _model_folder(tmp_path)
    shipped = pack(folder)
    assert sorted(shipped["files"]) == ["config.json", "model.safetensors", "sub/tokenizer.json"]
    with local_copy(shipped) as copy:
        assert copy != folder and copy.name == folder.name and not str(copy).startswith(str(tmp_path))
        for rel in shipped["files"]:
            assert (copy / rel).read_bytes() == (folder / rel).read_bytes()
        kept = copy
    assert not kept.exists()  # the node's copy is removed after use
    with local_copy(str(folder)) as same:  # one process: the folder itself
        assert same == folder


def test_a_model_loaded_from_the_copy_is_the_model(tmp_path):
    import torch

    from rlm_lab.models import load, save

    model, tok = load("micro", seed=3)
    save(model, tok, tmp_path / "m")
    with local_copy(pack(tmp_path / "m")) as copy:
        again, _ = load(str(copy))
    a, b = dict(model.named_parameters()), dict(again.named_parameters())
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("name", ["../evil", "/etc/evil", "a/../../evil", "", "a\\b"])
def test_a_payload_cannot_escape_its_folder(tmp_path, name):
    with pytest.raises(RlmLabError, match="not a plain relative name"):
        unpack({"name": "m", "files": {name: b"x"}}, tmp_path / "into")
    assert not (tmp_path / "evil").exists()


def test_not_a_model_folder_is_one_line(tmp_path):
    with pytest.raises(RlmLabError, match="no config.json"):
        pack(tmp_path)
