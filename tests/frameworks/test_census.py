"""The census behind the corpus's selection rule: the counts SOURCES states are the census record's
(data/configs/corpus_census.tsv, written by rlm_lab.frameworks.importers.census), not typed apart from it."""

from collections import Counter

from rlm_lab.frameworks.importers.census import NOT_RL
from rlm_lab.frameworks.importers.corpus import CORPUS

CENSUS = CORPUS.parent / "corpus_census.tsv"


def test_sources_states_the_census_records_counts():
    rows = [line.split("\t") for line in CENSUS.read_text().splitlines() if not line.startswith("#")]
    rl = [r for r in rows if r[2] == "true"]
    priced = Counter(r[0] for r in rows if r[3] == "priced")
    runs = Counter(r[0] for r in rl)
    text = " ".join(line.lstrip("# ").strip() for line in (CORPUS / "SOURCES").read_text().splitlines())
    assert f"{len(rows)} files, {len(rl)} of them RL training runs" in text
    assert f"{sum(priced.values())} priced (verl {priced['verl']} of {runs['verl']}, OpenRLHF {priced['openrlhf']} " \
           f"of {runs['openrlhf']}, NeMo-RL {priced['nemo-rl']} of {runs['nemo-rl']}" in text
    assert f"AReaL {priced['areal']} of {runs['areal']})" in text
    # every file the census calls out of scope was refused naming what it is
    assert all(r[3] == "refused" and NOT_RL.search(r[4]) for r in rows if r[2] == "false")


def test_out_of_scope_is_what_the_importers_say_of_non_rl_runs():
    assert NOT_RL.search("verl script run.sh launches verl.trainer.sft_trainer: an SFT run; nothing to price")
    assert not NOT_RL.search("verl actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=2: pipeline "
                             "parallelism is not modelled by the predictor")
