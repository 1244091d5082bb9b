"""The survey's Table 9 (arXiv 2608.27046 Sec. 4, App. B.4): the depth of one step under each inter-model scheme,
evaluated on the stage times of a priced placement (placement.py).

    rows = table9_rows(predict_placement(...))   # {row name: seconds}

The survey composes depths with unbounded devices per model: stages in one group add, independent models in
separate groups take the max, the Generation -> Assessment -> Training barriers add. With D_G the generation time,
D_A^sum / D_A^max the assessment passes (old and reference log-probs, reward, values) summed / maxed, D_T^sum /
D_T^max the training of actor and critic summed / maxed, and E the book's extra terms the survey leaves out (the
advantage, the reshard and the weight sync: App. B.4.1 says to add what an implementation runs):

    baseline (co-located)     D_G + D_A^sum + D_T^sum + E
    stage fusion, inter       max{D_G, D_A^max} + D_T^max + E     (assessment streams behind generation)
    stage fusion, intra       D_G + D_A^sum + D_T^max + E         (actor and critic training interleaved)
    asynchronous (survey)     max{D_G + D_A^max, D_T^max} + E     (assessment on the generation side)
    combined                  max{D_G, D_T^max} + E               (async + fusion + hybrid: the survey's optimistic row)
    combined, conservative    max{max(D_G, D_A^max), D_T^max} + E

Each stage's time is the one it has on the set the placement gives it; a stage on several sets (generation on a
hybrid set) takes its longest. The rows are the survey's algebra, not the book's placement rule: they assume each
model has its own devices (so concurrent passes do not share a set's time) and no staleness cost. The baseline of a
co-located placement equals the book's synchronous step (a test checks it); the others are lower bounds the book's
placement and mode predictor (placement.py, modes.py) prices with its device budget. Shared actor-critic is Table 9's
row that changes work, not this algebra: price it with ``critic="shared"`` (predict.py).
"""

from __future__ import annotations

from ..stages import Stage

S = Stage
GENERATION = (S.PREFILL, S.DECODE)
ASSESSMENT = (S.OLD_LOGPROB, S.REF_LOGPROB, S.REWARD, S.VALUES)
ACTOR_TRAINING = (S.ACTOR_FORWARD, S.ACTOR_BACKWARD, S.OPTIMIZER)
ROWS = ("baseline", "stage_fusion_inter", "stage_fusion_intra", "async_survey", "combined", "combined_conservative")


def stage_times(pp) -> dict:
    """Stage -> seconds over the placement's sets (the longest where a stage runs on several)."""
    out: dict = {}
    for s in pp.sets:
        for st, t in s.stages.items():
            out[st] = max(out.get(st, 0.0), t)
    return out


def depths(pp) -> dict:
    """D_G, D_A^sum, D_A^max, D_T^sum, D_T^max and the extra terms E of a priced placement (module docstring)."""
    t = stage_times(pp)
    gen = sum(t.get(s, 0.0) for s in GENERATION)
    assess = [t[s] for s in ASSESSMENT if s in t]
    actor = sum(t.get(s, 0.0) for s in ACTOR_TRAINING)
    train = [actor] + ([t[S.CRITIC_UPDATE]] if S.CRITIC_UPDATE in t else [])
    extra = t.get(S.ADVANTAGE, 0.0) + pp.phases["reshard"][0] + pp.phases["sync"][0]
    return {"D_G": gen, "D_A_sum": sum(assess), "D_A_max": max(assess, default=0.0), "D_T_sum": sum(train),
            "D_T_max": max(train), "extra": extra}


def table9_rows(pp) -> dict:
    """Seconds of one step under each of Table 9's rows (module docstring), on ``pp``'s stage times."""
    d = depths(pp)
    g, a_s, a_m, t_s, t_m, e = d["D_G"], d["D_A_sum"], d["D_A_max"], d["D_T_sum"], d["D_T_max"], d["extra"]
    return {"baseline": g + a_s + t_s + e,
            "stage_fusion_inter": max(g, a_m) + t_m + e,
            "stage_fusion_intra": g + a_s + t_m + e,
            "async_survey": max(g + a_m, t_m) + e,
            "combined": max(g, t_m) + e,
            "combined_conservative": max(max(g, a_m), t_m) + e}
