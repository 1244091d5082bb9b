"""The survey's 18 frameworks in its three classes (arXiv 2608.27046 Sec. 6.2): all present, each in the class the
survey gives it, Table 11's columns only with the survey's symbols, and bad rows refused in one line."""

import shutil
from pathlib import Path

import pytest

from rlm_lab.errors import RlmLabError
from rlm_lab.frameworks import registry as R

# Sec. 6.2, as the survey lists them
SURVEY = {
    "library-centric": {"TRL", "DeepSpeed-Chat", "ColossalChat"},
    "orchestrator-centric": {"OpenRLHF", "verl", "SkyRL", "NeMo-RL", "slime", "ROLL", "ReaL"},
    "scheduling-centric": {"RLHFuse", "Pipe-RLHF", "StreamRL", "AReaL", "AsyncFlow", "Laminar", "StaleFlow",
                           "MindSpeed RL"},
}


def test_the_eighteen_in_their_classes():
    systems = R.load_survey_systems()
    assert len(systems) == 18
    got = {c: {s.name for s in systems if s.survey_class == c} for c in R.SURVEY_CLASSES}
    assert got == SURVEY
    full = [s for s in systems if s.framework is not None]
    assert len(full) == 9                                      # read from code into every knob cell
    for s in systems:
        assert all(v in R.TABLE11_VALUES for v in s.table11.values())
        assert s.column("ac_share") in R.TABLE11_VALUES + (R.NOT_READ,)


def test_book_only_frameworks_have_no_class():
    reg = R.load_registry()
    none = {f.name for f in reg.values() if f.survey_class == "none"}
    assert {"prime-rl", "Tinker", "NeMo-Aligner"} <= none and "verl" not in none


def _copy(tmp_path):
    dst = tmp_path / "frameworks"
    shutil.copytree(R.REGISTRY, dst)
    return dst


@pytest.mark.parametrize("old, new, msg", [
    ("survey_class: scheduling-centric", "survey_class: streaming", "survey_class must be one of"),
    ("table11: {stage_fusion: documented}", "table11: {stage_fusion: yes}", "table11.stage_fusion must be one of"),
    ("table11: {stage_fusion: documented}", "table11: {fusion: documented}", "unknown column"),
    ("code: not checked", "code: somewhere", "code must be an https URL"),
])
def test_bad_survey_only_rows(tmp_path, old, new, msg):
    folder = _copy(tmp_path)
    p = folder / "survey_only" / "rlhfuse.yaml"
    text = p.read_text()
    assert old in text
    p.write_text(text.replace(old, new))
    with pytest.raises(RlmLabError, match=f"rlhfuse.yaml: .*{msg}"):
        R.load_survey_systems(folder)


def test_full_row_needs_a_class(tmp_path):
    folder = _copy(tmp_path)
    p = folder / "verl.yaml"
    p.write_text(p.read_text().replace("survey_class: orchestrator-centric\n", ""))
    with pytest.raises(RlmLabError, match="verl.yaml: missing survey_class"):
        R.load_registry(folder)


def test_a_system_in_both_places(tmp_path):
    folder = _copy(tmp_path)
    (folder / "survey_only" / "verl.yaml").write_text(
        (folder / "survey_only" / "rlhfuse.yaml").read_text().replace("id: rlhfuse", "id: verl"))
    with pytest.raises(RlmLabError, match="both a full row and a survey-only row"):
        R.load_survey_systems(folder)
