"""The frameworks registry (chapter 8): every cell sourced, every link to the book and the predictor real.

The shape checks read the YAML files directly (not through the loader), so a loader that skipped a check would
not hide a bad cell; the loader is then tested on files broken one way each.
"""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import pytest
import yaml

from rlm_lab.errors import RlmLabError
from rlm_lab.frameworks import registry as R

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted((ROOT / "data" / "frameworks").glob("*.yaml"))
EXPECTED = {"trl", "verl", "openrlhf", "nemo-rl", "areal", "slime", "roll", "skyrl", "prime-rl", "torchforge", "oat",
            "easyr1", "rllm", "art", "deepspeed-chat", "nemo-aligner", "tinker"}
PERMALINK = re.compile(r"^https://github\.com/[\w.-]+/[\w.-]+/blob/([0-9a-f]{40})/\S+$")


def raw(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def test_the_seventeen_frameworks_are_registered():
    assert {p.stem for p in FILES} == EXPECTED
    reg = R.load_registry()
    assert set(reg) == EXPECTED
    assert [f.order for f in reg.values()] == sorted(f.order for f in reg.values())


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_every_cell_has_an_option_or_not_found_a_permalink_and_a_snapshot(path):
    doc = raw(path)
    assert set(doc["cells"]) == set(R.KNOBS)
    commit = doc["snapshot"]["commit"]
    for knob, cell in doc["cells"].items():
        opts = cell["options"]
        assert opts == "not found" or (isinstance(opts, list) and opts and all(isinstance(o, str) and o for o in opts)), knob
        m = PERMALINK.match(cell["url"])
        assert m, f"{path.stem}.{knob}: {cell['url']} is not a permalink to a file at a commit"
        # the read stamp names the commit the URL points at (the snapshot, or a newer copy for ART)
        assert cell["read"].startswith(m.group(1)[:12]), f"{path.stem}.{knob}: read {cell['read']} vs {m.group(1)}"
        if m.group(1) == commit:
            assert cell["read"] == f"{commit[:12]} ({doc['snapshot']['date']})"
        assert cell["note"].strip()


def test_at_least_fourteen_frameworks_have_a_url_in_every_verified_cell():
    reg = R.load_registry()
    complete = [f for f in reg.values() if all(PERMALINK.match(c.url) for c in f.cells.values())]
    assert len(complete) >= 14
    # and a registry that says nothing is useless: most cells of the big frameworks are found
    assert all(reg[k].found() >= 10 for k in ("verl", "openrlhf", "nemo-rl", "areal", "skyrl", "roll"))


@pytest.mark.parametrize("knob", list(R.KNOBS))
def test_every_linked_record_exists_and_is_a_run_record(knob):
    k = R.KNOBS[knob]
    assert bool(k.records) == k.measured, "a measured knob links records; an unmeasured one links none"
    if not k.measured:
        assert k.why.startswith("not measured")
    for rec in k.records:
        folder = ROOT / rec
        assert folder.is_dir(), rec
        assert (folder / "record.json").exists() or list(folder.glob("*/record.json")), f"{rec}: no record.json"
    if k.chapter:
        assert (ROOT / "notebooks" / f"{k.chapter}.md").exists()


@pytest.mark.parametrize("knob", [k for k in R.KNOBS if R.KNOBS[k].terms])
def test_every_predictor_term_is_a_real_rlm_lab_attribute(knob):
    for term in R.KNOBS[knob].terms:
        obj = R.resolve(term)
        assert callable(obj), term
        assert inspect.getmodule(obj).__name__.startswith("rlm_lab.cost"), term


def test_resolve_refuses_a_missing_term_with_one_line():
    with pytest.raises(RlmLabError, match="has no not_a_function") as e:
        R.resolve("rlm_lab.cost.asynchrony.not_a_function")
    assert "\n" not in str(e.value)
    with pytest.raises(RlmLabError, match="no such module"):
        R.resolve("nowhere.at_all")


def _latest(rec: str) -> dict:
    folder = ROOT / rec
    path = folder / "record.json"
    if not path.exists():
        path = sorted(folder.glob("*/record.json"))[-1]
    return json.loads(path.read_text())["results"]


def _get(d, dotted):
    for p in dotted.split("."):
        d = d[p]
    return d


@pytest.mark.parametrize("knob", [k for k in R.KNOBS if R.KNOBS[k].measures])
def test_every_measure_names_a_number_in_its_record(knob):
    for m in R.KNOBS[knob].measures:
        assert m.record in R.KNOBS[knob].records
        res = _latest(m.record)
        assert isinstance(_get(res, m.measured), (int, float)), (m.record, m.measured)
        if m.predicted:
            assert isinstance(_get(res, m.predicted), (int, float)), (m.record, m.predicted)


def test_published_numbers_are_quoted_with_a_permalink():
    reg = R.load_registry()
    pubs = [(f.id, p) for f in reg.values() for p in f.published]
    assert len(pubs) >= 10
    for fid, p in pubs:
        assert PERMALINK.match(p.url) and reg[fid].commit in p.url, (fid, p.url)


# ---- the loader refuses a broken file with one line ------------------------------------------------------

def _write(tmp_path, mutate) -> Path:
    doc = raw(ROOT / "data" / "frameworks" / "verl.yaml")
    mutate(doc)
    p = tmp_path / "verl.yaml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return p


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["cells"]["staleness"].pop("url"), "cell 'staleness' has no url"),
    (lambda d: d["cells"]["staleness"].update(url="http://example.com/x"), "not an https URL"),
    (lambda d: d["cells"]["staleness"].update(read="last week"), "is not '<12-hex commit>"),
    (lambda d: d["cells"]["staleness"].update(options=[]), "options must be a list"),
    (lambda d: d["cells"]["staleness"].update(options="missing"), "options must be a list"),
    (lambda d: d["cells"].pop("packing"), "missing ['packing']"),
    (lambda d: d["cells"].update(speed={"options": ["x"]}), "unknown ['speed']"),
    (lambda d: d.update(id="other"), "differs from the file name"),
    (lambda d: d["snapshot"].update(commit="abc"), "40-hex commit"),
    (lambda d: d["published"][0].pop("url"), "published[0] needs exactly"),
    (lambda d: d.update(colour="blue"), "unknown fields ['colour']"),
])
def test_a_broken_registry_file_is_one_error_line(tmp_path, mutate, message):
    p = _write(tmp_path, mutate)
    with pytest.raises(RlmLabError) as e:
        R.load_registry(tmp_path)
    assert message in str(e.value) and "\n" not in str(e.value)
    assert str(e.value).startswith("framework registry verl.yaml")


def test_an_intact_copy_loads_and_an_empty_folder_is_refused(tmp_path):
    p = _write(tmp_path, lambda d: None)
    fw = R.load_registry(tmp_path)["verl"]
    assert fw.cells["staleness"].found and fw.cells["staleness"].options[0] == "trainer.v1.sampler.max_off_policy_threshold"
    p.unlink()
    with pytest.raises(RlmLabError, match="no <framework>.yaml"):
        R.load_registry(tmp_path)


def test_not_found_cells_render_as_not_found():
    reg = R.load_registry()
    cell = reg["openrlhf"].cells["lora_sync"]
    assert not cell.found and cell.text() == "not found" and cell.url.endswith("ppo_actor.py")


def test_every_framework_cites_an_entry_of_the_bibliography():
    keys = set(re.findall(r"^@\w+\{([^,]+),", (ROOT / "book" / "references.bib").read_text(), re.M))
    missing = {f.id: f.bib for f in R.load_registry().values() if f.bib not in keys}
    assert not missing, missing


def test_every_cell_links_into_its_own_framework_repository():
    for f in R.load_registry().values():
        for knob, c in f.cells.items():
            for u in (c.url, *c.also):
                assert u.startswith(f.repo + "/blob/"), (f.id, knob, u)


def test_the_book_page_knob_table_agrees_with_the_registry():
    page = (ROOT / "book" / "ch08_frameworks.md").read_text()
    rows = dict(re.findall(r"^\| ([^|]+?) \| [^|]+ \| ([^|]+?) \|$", page, re.M))
    for k in R.KNOBS.values():
        want = f"chapter {int(k.chapter[2:4])}" if k.chapter else "not measured †"
        assert rows.get(k.title) == want, (k.title, rows.get(k.title), want)
