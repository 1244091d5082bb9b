"""``rlm-lab insitu`` end to end on committed calibration records (no training): the profile it writes loads,
carries the fit and its spread, names its records, and predicts differently from its base."""

import json

from rlm_lab.cli import main
from rlm_lab.cost import load_profile
from rlm_lab.cost.hardware import HARDWARE_DIR
from rlm_lab.record import REPO_ROOT
from rlm_lab.validate.pairs import BEFORE

BASE = HARDWARE_DIR / "calibrations" / "cpu-2core-epyc-2026-12-01T18-51.json"


def test_fit_from_records_writes_a_usable_profile(tmp_path, capsys):
    out = tmp_path / "p.json"
    assert main(["insitu", "--out", str(REPO_ROOT / "data/runs/cpu/insitu/A"), "--base", str(BASE), "--write", str(out),
                 "--bootstrap", "3", "--validation-root", str(REPO_ROOT / BEFORE)]) == 0
    assert "in-situ fit over" in capsys.readouterr().out
    prof = load_profile(out)
    fit = prof.insitu
    assert fit["validation_root"] == BEFORE and len(fit["records"]) == 10
    assert all(r.startswith("data/runs/cpu/insitu/A/insitu_") for r in fit["records"])
    assert prof.kernel_factor == fit["factors"]["kernels"] > 0
    assert set(prof.spread["quartiles"]["insitu"]) == {"kernel_factor", "kernel_factor_bf16", "kernel_factor_bf16_backward"}
    base = json.loads(BASE.read_text())
    changed = [k for k, v in prof.overhead.items() if v != base["overhead"].get(k)]
    assert "forward_layer_s" in changed and "moe_expert_forward_s" in changed
    # a second write to the same path is refused without --force (the first profile is kept)
    before = out.read_bytes()
    assert main(["insitu", "--out", str(REPO_ROOT / "data/runs/cpu/insitu/A"), "--base", str(BASE),
                 "--write", str(out)]) == 2
    assert out.read_bytes() == before


def test_a_fitted_profile_is_refused_as_base(tmp_path, capsys):
    """Fitting on top of an in-situ profile would compound the factors: one clear error."""
    assert main(["insitu", "--out", str(REPO_ROOT / "data/runs/cpu/insitu/A"), "--base", "cpu-2core-epyc-insitu",
                 "--write", str(tmp_path / "p.json"), "--bootstrap", "0"]) == 2
    assert not (tmp_path / "p.json").exists()
    assert "the base profile was itself fitted in situ" in capsys.readouterr().err
