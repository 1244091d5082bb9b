"""Which calibration is judged on which records (rlm_lab.validate.pairs), and what the committed in-situ profile
was fitted on: only calibration runs, never a validation workload."""

from rlm_lab import validate as V
from rlm_lab.cost import load_profile
from rlm_lab.cost.hardware import INSITU_PROFILE
from rlm_lab.validate.traced_case import Case
from rlm_lab.record import REPO_ROOT, load_record
from rlm_lab.validate.pairs import BEFORE, PAIRS


def test_every_pair_has_its_profile_and_its_suite():
    assert len({k for k, *_ in PAIRS}) == len(PAIRS)
    for key, _, profile, root in PAIRS:
        load_profile(profile)
        suite, recs = V.load_suite("cpu", REPO_ROOT / root)
        assert len(recs) == len(suite.config["workloads"]) == len(V.workloads("cpu")), key


def test_the_in_situ_profile_is_judged_on_its_own_machine_by_default():
    prof = load_profile(INSITU_PROFILE)
    assert prof.insitu["validation_root"] == BEFORE
    rep = V.report("cpu")
    assert rep["root"] == str(REPO_ROOT / BEFORE) and rep["profile"] == INSITU_PROFILE


def test_the_in_situ_profile_was_fitted_on_calibration_runs_only():
    prof = load_profile(INSITU_PROFILE)
    validation = {(c.algo, c.beta, c.model, c.batch, c.group, c.length, c.bf16, c.checkpointing)
                  for c in V.workloads("cpu")}
    assert len(prof.insitu["records"]) >= 8
    for folder in prof.insitu["records"]:
        rec = load_record(REPO_ROOT / folder)
        c = Case(**rec.config["case"])
        assert (c.algo, c.beta, c.model, c.batch, c.group, c.length, c.bf16, c.checkpointing) not in validation, folder
    # the headline suite was measured before the fit was made (so nothing about it shaped the fit's choices)
    before = load_record(REPO_ROOT / BEFORE / V.SUITE)
    assert before.data["ended"] < prof.insitu["fitted"]
