"""Chapter 8's tables (rlm_lab.chapters.ch08_frameworks.report), checked against the registry files and records read directly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rlm_lab.cost.asynchrony import one_step_off_step
from rlm_lab.errors import RlmLabError
from rlm_lab.frameworks import registry as R
from rlm_lab.chapters.ch08_frameworks import report as P

ROOT = Path(__file__).resolve().parents[2]


def test_coverage_counts_the_cells_of_the_files():
    docs = [yaml.safe_load(p.read_text()) for p in sorted((ROOT / "data" / "frameworks").glob("*.yaml"))]
    found = sum(c["options"] != "not found" for d in docs for c in d["cells"].values())
    cov = P.coverage()
    assert cov["frameworks"] == len(docs) == 17
    assert cov["cells"] == 17 * len(R.KNOBS) and cov["found"] == found
    assert cov["per_knob"]["staleness"] == sum(d["cells"]["staleness"]["options"] != "not found" for d in docs)


@pytest.mark.parametrize("title, keys", P.GROUPS)
def test_registry_table_shows_every_cell_with_its_link(title, keys):
    reg = R.load_registry()
    html = P.registry_html(keys, reg)
    assert html.count("<tr>") == 1 + len(reg)
    for f in reg.values():
        assert f">{f.name}</a>" in html
        for k in keys:
            assert f.cells[k].url in html
            for o in f.cells[k].options:
                assert f"<code>{o}</code>" in html.replace("&quot;", '"').replace("&#x27;", "'")
    missing = sum(not f.cells[k].found for f in reg.values() for k in keys)
    assert html.count("not found (") == missing
    for k in keys:
        assert (P.UNMEASURED in P.knob_header(k)) == (not R.KNOBS[k].measured)


def test_the_groups_cover_every_knob_once_and_unknown_knobs_are_refused():
    keys = [k for _, ks in P.GROUPS for k in ks]
    assert sorted(keys) == sorted(R.KNOBS)
    with pytest.raises(RlmLabError, match="unknown knobs"):
        P.registry_rows(["placement", "speed"])


def test_knob_rows_mark_the_unmeasured_knobs():
    rows = P.knob_rows()
    unmeasured = [r["knob"] for r in rows if r["chapter"].startswith("none")]
    assert unmeasured == [R.KNOBS["engine"].title, R.KNOBS["orchestration"].title]


def _record(rec):
    folder = ROOT / rec
    p = folder / "record.json"
    return json.loads((p if p.exists() else sorted(folder.glob("*/record.json"))[-1]).read_text())["results"]


def test_measured_rows_are_the_records_numbers():
    rows = P.measured_rows()
    assert len(rows) == sum(len(k.measures) for k in R.KNOBS.values())
    by = {(r["knob"], r["what"]): r for r in rows}
    pk = by[(R.KNOBS["packing"].title, R.KNOBS["packing"].measures[0].what)]
    res = _record("data/runs/cpu/ch07_packing")
    assert pk["measured"] == res["measured"]["speedup"] and pk["predicted"] == res["predicted"]["speedup"]
    assert pk["error"] == pytest.approx((res["predicted"]["speedup"] - res["measured"]["speedup"]) / res["measured"]["speedup"])
    ws = by[(R.KNOBS["weight_sync"].title, R.KNOBS["weight_sync"].measures[0].what)]
    res = _record("data/runs/cpu/ch05_disaggregated")
    assert ws["measured"] == res["stage_seconds_mean"]["weight_sync"] and ws["predicted"] == res["prediction"]["sync_s"]
    assert ws["record"].startswith("data/runs/cpu/ch05_disaggregated/")
    assert all(r["error"] is None for r in rows if r["predicted"] is None)
    html = P.measured_html(rows)
    assert "<code>data/runs/cpu/ch07_packing</code>" in html
    url = yaml.safe_load((ROOT / "book" / "_config.yml").read_text())["repository"]["url"]
    assert f'href="{url}/tree/main/data/runs/cpu/ch07_packing"' in html


def test_a_missing_record_or_field_is_one_line(tmp_path):
    with pytest.raises(RlmLabError, match="no record under"):
        P.latest_results("data/runs/cpu/nothing_here", tmp_path)
    with pytest.raises(RlmLabError, match="record has no 'measured.nope'"):
        P._dig({"measured": {}}, "measured.nope")


def test_published_numbers_keep_their_source():
    rows = P.published_rows()
    assert {r["framework"] for r in rows} >= {"verl", "NeMo-RL", "EasyR1"}
    html = P.published_html(rows)
    assert all(r["source"] in html and r["value"] in html for r in rows)


# ---- predictions under each framework's default -----------------------------------------------------------

def test_defaults_cover_the_registry():
    assert [d.framework for d in P.DEFAULTS] == list(R.load_registry())


def _pp(name, devices=8, **kw):
    from rlm_lab.cost.placement import predict_placement
    from rlm_lab.cost.workload import algorithm
    from rlm_lab.cost.placement_spec import Cluster, get_placement

    c = Cluster(devices, "gpu")
    alg = algorithm("grpo", 0)
    wl = P.workload_7b(prompts=16, group=4, prompt_len=64, response_len=128)
    return predict_placement(get_placement(name, c, alg, **kw), str(ROOT / "configs/models/qwen2.5-1.5b.config.json"),
                             alg, wl, "h100-sxm", c)


def test_one_step_off_on_separate_devices_is_the_closed_form_and_shared_devices_do_not_overlap():
    pp = _pp("disaggregated", zero=3)
    ph = {p: t for p, (t, _) in pp.phases.items()}
    g, t, s = ph["reshard"] + ph["generation"], ph["preparation"] + ph["advantage"] + ph["training"], ph["sync"]
    closed = one_step_off_step(g, t, s)
    got = P.mode_step(pp, "one_step_off")
    # 64 simulated steps: the first one has nothing to overlap with, so the mean sits above the steady state
    assert closed <= got <= closed + (g + t + s) / 64 + 1e-12
    assert got < pp.step_s
    co = _pp("colocated", zero=3)
    assert P.mode_step(co, "one_step_off") == co.step_s == P.mode_step(co, "sync")
    with pytest.raises(RlmLabError, match="mode must be"):
        P.mode_step(pp, "eventually")
    with pytest.raises(RlmLabError, match="needs a staleness bound"):
        P.mode_step(pp, "async", 0)
    # constant stage times: a deeper bound cannot beat the steady state max(g, t + s), only shorten the start
    deeper = P.mode_step(pp, "async", 4)
    assert closed - 1e-12 <= deeper <= got + 1e-12


def test_default_rows_label_every_framework_and_keep_its_basis():
    small = tuple(d for d in P.DEFAULTS if d.framework in ("trl", "verl", "prime-rl", "deepspeed-chat", "tinker"))
    rows = P.default_rows(devices=8, model="configs/models/qwen2.5-1.5b.config.json",
                          workload=P.workload_7b(prompts=16, group=4, prompt_len=64, response_len=128), defaults=small)
    by = {r["framework"]: r for r in rows}
    assert by["Tinker"]["placement"] is None and by["Tinker"]["step_s"] is None
    assert by["DeepSpeed-Chat"]["algorithm"] == "PPO" and "reshard" in by["DeepSpeed-Chat"]["placement"]
    assert by["prime-rl"]["mode"] == "one_step_off" and by["prime-rl"]["step_s"] < by["prime-rl"]["sync_step_s"]
    assert by["verl"]["step_s"] == by["verl"]["sync_step_s"]
    for r in rows:
        if r["fits"]:
            assert r["memory_gib"] <= r["capacity_gib"] and r["critical"]
        assert r["basis"]
    html = P.default_html(rows)
    assert html.count("<tr>") == 1 + len(rows)


def test_example_table_shows_each_row_and_both_step_times():
    rows = [{"framework": "verl", "config": "configs/frameworks/verl/a.yaml", "model": "qwen2.5-7b.config.json",
             "devices": 8, "placement": "rollout[4 gpu] | actor[4 gpu zero3]", "mode": "async", "eta": 2, "fits": True,
             "step_s": 12.5, "sync_step_s": 20.0, "critical": "actor_backward on train",
             "memory_per_device_bytes": 40 * 2**30, "capacity_bytes": 80e9},
            {"framework": "trl", "config": "configs/frameworks/trl/b.yaml", "model": "m", "devices": 1,
             "placement": "actor+rollout[1 gpu]", "mode": "sync", "eta": 0, "fits": False, "step_s": None,
             "critical": None, "memory_per_device_bytes": 100 * 2**30, "capacity_bytes": 80e9}]
    html = P.example_html(rows)
    assert html.count("<tr>") == 3
    assert "async (eta 2)" in html and "12.50 s" in html and "20.00 s" in html and "40.0 of 74.5" in html
    assert "<td>sync</td>" in html and "<td>no</td>" in html and "100.0 of 74.5" in html
    assert ">verl<" in html and ">TRL<" in html


def test_advisor_row_is_the_advisors_first_pick_and_no_slower_than_any_synchronous_default():
    from rlm_lab.cost.advise import advise
    from rlm_lab.cost.workload import algorithm
    from rlm_lab.cost.placement_spec import Cluster

    wl = P.workload_7b(prompts=16, group=4, prompt_len=64, response_len=128)
    model = "configs/models/qwen2.5-1.5b.config.json"
    row = P.advisor_row(devices=8, model=model, workload=wl)
    direct = advise(str(ROOT / model), algorithm("grpo", 0), wl, Cluster(8, "gpu"), "h100-sxm").ranked[0]
    assert row["step_s"] == direct.step_s and row["placement"] == direct.placement.describe()
    sync_defaults = tuple(d for d in P.DEFAULTS if d.algo == "grpo" and d.placement and not dict(d.kw).get("lora"))
    rows = P.default_rows(devices=8, model=model, workload=wl, defaults=sync_defaults)
    assert all(row["step_s"] <= r["sync_step_s"] + 1e-9 for r in rows if r["fits"])


def test_example_rows_come_from_the_importers_and_name_registered_frameworks():
    pytest.importorskip("rlm_lab.frameworks.importers")
    rows, note = P.example_rows()
    assert rows and note == ""
    reg = R.load_registry()
    assert {r["framework"] for r in rows} <= set(reg) and len({r["framework"] for r in rows}) >= 4
    for r in rows:
        assert (ROOT / r["config"]).exists(), r["config"]
        assert (r["step_s"] is not None) == bool(r["fits"])
    html = P.example_html(rows)
    assert html.count("<tr>") == 1 + len(rows)


def test_defaults_agree_with_the_importers_reading_of_the_same_frameworks():
    """Two independent readings of a framework's default: the registry's (DEFAULTS) and the importers', which
    write the workload in the framework's own config format and import it (rlm_lab.frameworks.importers)."""
    sw = pytest.importorskip("rlm_lab.frameworks.importers.same_workload")
    from rlm_lab.cost.placement_spec import Cluster, get_placement

    theirs = {r["framework"]: r for r in sw.same_workload_predictions()}
    ours = {d.framework: d for d in P.DEFAULTS}
    assert set(theirs) <= set(ours) and len(theirs) >= 4
    for fw, r in theirs.items():
        d = ours[fw]
        p = get_placement(d.placement, Cluster(64, "gpu"), d.algo, **dict(d.kw))
        assert ("|" in r["placement"]) == p.rollout_separate, (fw, r["placement"], p.describe())
        assert r["placement"].endswith("reshard") == p.reshard, (fw, r["placement"], p.describe())
        assert (r["mode"], r["eta"]) == (d.mode, d.eta), (fw, r["mode"], r["eta"], d.mode, d.eta)
    # verl's defaults read both ways give one placement, so one prediction
    verl = next(r for r in P.default_rows(defaults=[ours["verl"]]))
    assert verl["placement"] == theirs["verl"]["placement"].replace("+reference", "")


def test_corpus_values_count_per_framework():
    from rlm_lab.chapters.ch08_frameworks import report as F

    rows = [{"framework": "verl", "outcome": "priced"}, {"framework": "verl", "outcome": "refused"},
            {"framework": "trl", "outcome": "priced"}]
    v = F.corpus_values(rows)
    assert (v["ch08_corpus"], v["ch08_corpus_priced"], v["ch08_corpus_share"]) == ("3", "2", "67 %")
    assert v["ch08_corpus_counts"] == "trl 1 of 1; verl 1 of 2" and v["ch08_corpus_frameworks"] == "2"
    # one upstream file per framework: its first priced entry with a step, the accelerate config left out
    rows = [{"framework": "verl", "outcome": "refused", "file": "verl/examples/a.sh", "step_s": None},
            {"framework": "verl", "outcome": "priced", "file": "verl/examples/b.sh", "step_s": 12.345},
            {"framework": "verl", "outcome": "priced", "file": "verl/examples/c.sh", "step_s": 1.0},
            {"framework": "trl", "outcome": "priced", "file": "trl/x.yaml+trl/acc.yaml", "step_s": 0.5}]
    assert F.corpus_values(rows)["ch08_corpus_upstream"] == "trl x.yaml 500.0 ms; verl examples/b.sh 12.35 s"
    census = [{"rl_run": True, "outcome": "priced", "why": ""}, {"rl_run": True, "outcome": "does not fit", "why": ""},
              {"rl_run": True, "outcome": "refused", "why": "x='y': no model config ships for it"},
              {"rl_run": False, "outcome": "refused", "why": "an SFT run"}]
    assert F.census_values(census) == {"ch08_census_runs": "3", "ch08_census_priced": "1", "ch08_census_share": "33 %",
                                       "ch08_census_no_model": "1"}
    real = F.census_values()
    assert int(real["ch08_census_runs"]) > int(real["ch08_census_priced"]) > 0
    html = F.corpus_html([{"framework": "verl", "file": "verl/examples/run.sh", "commit": "1dda039b9c63",
                           "outcome": "refused", "why": "verl ... a <reason>", "step_s": None, "critical": None,
                           "memory_per_device_bytes": None}])
    assert "&lt;reason&gt;" in html and "<code>examples/run.sh</code>" in html


def test_the_two_7b_tables_are_reconciled_by_their_engines():
    from rlm_lab.chapters.ch08_frameworks import report as F

    defaults = [{"framework": "verl", "step_s": 12.0, "placement": "p"}, {"framework": "TRL", "step_s": None,
                                                                          "placement": "q"}]
    same = [{"framework": "verl", "step_s": 4.0, "placement": "p"}, {"framework": "trl", "step_s": None,
                                                                      "placement": "q"},
            {"framework": "prime-rl", "step_s": 3.0, "placement": "r"}]
    rows = F.reconcile(defaults, same)
    assert [r["framework"] for r in rows] == ["verl"] and rows[0]["static / continuous"] == "3.00x"
    assert F.workload_7b().engine == "static"   # what the defaults table prices generation with
