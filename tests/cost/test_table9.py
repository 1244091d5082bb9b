"""The survey's Table 9 rows (arXiv 2608.27046 Sec. 4, App. B.4) on a placement's stage times: each row by hand on
made-up times, and the baseline against the book's synchronous step of a co-located PPO placement."""

from types import SimpleNamespace

import pytest

from rlm_lab.cost.placement import predict_placement
from rlm_lab.cost.placement_spec import Cluster, colocated
from rlm_lab.cost.table9 import ROWS, depths, table9_rows
from rlm_lab.stages import Stage as S


def _pp():
    gen = SimpleNamespace(stages={S.PREFILL: 1.0, S.DECODE: 9.0})
    train = SimpleNamespace(stages={S.OLD_LOGPROB: 2.0, S.REF_LOGPROB: 3.0, S.REWARD: 1.5, S.VALUES: 2.5,
                                    S.ADVANTAGE: 0.5, S.ACTOR_FORWARD: 2.0, S.ACTOR_BACKWARD: 4.0, S.OPTIMIZER: 1.0,
                                    S.CRITIC_UPDATE: 6.0})
    return SimpleNamespace(sets=[gen, train], phases={"reshard": (0.0, "-"), "sync": (0.25, "-")})


def test_rows_by_hand():
    d = depths(_pp())
    assert d == {"D_G": 10.0, "D_A_sum": 9.0, "D_A_max": 3.0, "D_T_sum": 13.0, "D_T_max": 7.0, "extra": 0.75}
    r = table9_rows(_pp())
    assert tuple(r) == ROWS
    assert r["baseline"] == 10 + 9 + 13 + 0.75
    assert r["stage_fusion_inter"] == max(10, 3) + 7 + 0.75
    assert r["stage_fusion_intra"] == 10 + 9 + 7 + 0.75
    assert r["async_survey"] == max(10 + 3, 7) + 0.75
    assert r["combined"] == max(10, 7) + 0.75
    assert r["combined_conservative"] == max(max(10, 3), 7) + 0.75
    assert min(r.values()) == r["combined"] and max(r.values()) == r["baseline"]


def test_baseline_is_the_colocated_step():
    cl = Cluster(2, "cpu")
    wl = dict(prompts=4, group_size=2, prompt_len=8, response=8)
    pp = predict_placement(colocated(cl, "ppo"), "micro", "ppo", wl, "cpu-2core-epyc", cl)
    rows = table9_rows(pp)
    assert rows["baseline"] == pytest.approx(pp.sync_step_s, rel=1e-12)
    assert rows["stage_fusion_intra"] < rows["baseline"]          # PPO's critic update off the path


def test_cli(capsys):
    from rlm_lab.cli import main
    assert main(["predict", "--algorithm", "ppo", "--model", "micro", "--placement", "colocated", "--table9", "--prompts", "8",
                 "--hardware", "h100-sxm"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("the survey's Table 9"))
    assert all(name in line for name in ROWS)
    assert main(["predict", "--algorithm", "ppo", "--model", "micro", "--table9", "--prompts", "8"]) == 2
    assert "give --placement" in capsys.readouterr().err
