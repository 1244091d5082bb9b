"""``rlm_lab.book.glued_values``: every value a built book glues into its prose, read back from the execution
cache (what the before/after comparison of a refactoring and the "every number comes from a record" check
use). Checked on a hand-made cache: a notebook executed with glue outputs, matched by its source as the build
matches it; an edited source is no match; a figure's glue is named by a hash of its image."""

import json

import nbformat
import pytest
from jupyter_cache import get_cache
from jupyter_cache.base import CacheBundleIn
from myst_nb.core.read import read_myst_markdown_notebook

from rlm_lab import book
from rlm_lab.errors import RlmLabError

SOURCE = ("---\njupytext:\n  text_representation:\n    format_name: myst\nkernelspec:\n  name: python3\n"
          "  display_name: Python 3\n---\n\n# A page\n\n```{code-cell} ipython3\nx = 1\n```\n\n"
          "The value is {glue:text}`a_x`.\n\n```{code-cell} ipython3\nglue('a_x', x)\n```\n")


PREFIX = "application/papermill.record/"  # where MyST-NB's glue puts a value's MIME types


def glue_output(name, data):
    return nbformat.v4.new_output("display_data", data={PREFIX + k: v for k, v in data.items()},
                                  metadata={"scrapbook": {"name": name, "mime_prefix": PREFIX}})


def executed(tmp_path, source=SOURCE, outputs=None):
    """A notebooks/ folder with ``a.md`` and a cache holding it executed with ``outputs`` (per code cell)."""
    nbs = tmp_path / "notebooks"
    nbs.mkdir(exist_ok=True)
    (nbs / "a.md").write_text(source)
    nb = read_myst_markdown_notebook(source)
    code = [c for c in nb.cells if c.cell_type == "code"]
    for cell, outs in zip(code, outputs or [[], []]):
        cell.outputs = outs
    cache = get_cache(str(tmp_path / "cache"))
    cache.cache_notebook_bundle(CacheBundleIn(nb, str(nbs / "a.md")), check_validity=False)
    return nbs, tmp_path / "cache"


def test_reads_the_glued_text_of_the_executed_notebook_and_nothing_else(tmp_path):
    outs = [[nbformat.v4.new_output("stream", text="printed, not glued\n")],
            [glue_output("a_x", {"text/plain": "1.5%"}),
             nbformat.v4.new_output("display_data", data={"text/plain": "shown, not glued"}),
             glue_output("a_fig", {"image/png": "iVBOR", "text/plain": "<Figure>"})]]
    nbs, cache = executed(tmp_path, outputs=outs)
    got = book.glued_values("smoke", cache=cache, notebooks=nbs, chapters=[(None, "a"), (None, "not_written")])
    assert got == {"a": {"a_x": "1.5%", "a_fig": "<Figure>"}}


def test_a_glued_output_without_text_is_named_by_a_hash_of_its_data():
    one = book.glued_output(glue_output("f", {"image/png": "AAAA"}))
    other = book.glued_output(glue_output("f", {"image/png": "AAAB"}))
    assert one[0] == "f" and one[1].startswith("<image/png sha256:") and one != other
    assert book.glued_output(nbformat.v4.new_output("display_data", data={"text/plain": "x"})) is None
    unprefixed = nbformat.v4.new_output("display_data", data={"text/plain": "'x'"}, metadata={"scrapbook": {"name": "g"}})
    assert book.glued_output(unprefixed) == ("g", "'x'")


def test_a_source_edited_since_the_build_is_an_error_not_an_old_answer(tmp_path):
    nbs, cache = executed(tmp_path, outputs=[[], [glue_output("a_x", {"text/plain": "1"})]])
    (nbs / "a.md").write_text(SOURCE.replace("x = 1", "x = 2"))
    with pytest.raises(RlmLabError, match=r"notebooks/a.md as it is now was not executed at smoke size"):
        book.glued_values("smoke", cache=cache, notebooks=nbs, chapters=[(None, "a")])
    with pytest.raises(RlmLabError, match="no execution cache"):
        book.glued_values("smoke", cache=tmp_path / "nowhere", notebooks=nbs, chapters=[(None, "a")])


def test_compare_names_every_changed_missing_and_new_value():
    before = {"a": {"x": "1", "y": "2", "gone": "3"}, "b": {"z": "4"}}
    after = {"a": {"x": "1", "y": "2.0", "new": "5"}, "b": {"z": "4"}}
    assert book.compare_glued(before, after) == [
        "a: gone is gone (was '3')", "a: new is new ('5')", "a: y: '2' -> '2.0'"]
    assert book.compare_glued(before, json.loads(json.dumps(before))) == []


def test_the_execution_cache_is_keyed_on_the_package_and_the_records(tmp_path):
    """A rewritten record or a changed package must not be served the outputs of the build before it: the cache's
    fingerprint moves with any byte under rlm_lab/ or data/, and not with a writer's lock or a staging copy."""
    for folder in book.FINGERPRINTED:
        (tmp_path / folder).mkdir()
    rec = tmp_path / "data" / "runs" / "r1" / "record.json"
    rec.parent.mkdir(parents=True)
    rec.write_text('{"results": {"x": 1}}')
    (tmp_path / "rlm_lab" / "report.py").write_text("X = 1\n")
    first = book.inputs_fingerprint(tmp_path)
    (rec.parent / ".lock").write_text("pid 1")
    (tmp_path / "data" / "runs" / ".replaced-r0").mkdir()
    (tmp_path / "data" / "runs" / ".replaced-r0" / "record.json").write_text("{}")
    assert book.inputs_fingerprint(tmp_path) == first
    rec.write_text('{"results": {"x": 2}}')
    second = book.inputs_fingerprint(tmp_path)
    assert second != first
    (tmp_path / "rlm_lab" / "report.py").write_text("X = 2\n")
    assert book.inputs_fingerprint(tmp_path) not in (first, second)
    assert book.cache_dir("smoke").name.startswith(".jupyter_cache_smoke-")
