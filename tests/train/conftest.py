"""Fixtures the trainer tests share."""

import pytest

from rlm_lab.models import build_model, save


@pytest.fixture(scope="module")
def nano_path(tmp_path_factory):
    """The nano zoo model saved to a folder, as a trainer loads it (one per test module)."""
    model, tok = build_model("nano", seed=0)
    return save(model, tok, tmp_path_factory.mktemp("nano") / "model")
