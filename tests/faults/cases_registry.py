"""The frameworks registry of chapter 8 (data/frameworks/*.yaml) given files it cannot use: one RlmLabError line
each, naming the file and what is wrong."""

from pathlib import Path

import yaml
from fault_matrix import Case

REPO = Path(__file__).resolve().parents[2]
CASES = []


def _copy(tmp, mutate):
    doc = yaml.safe_load((REPO / "data" / "frameworks" / "verl.yaml").read_text())
    mutate(doc)
    (tmp / "verl.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))


def row(id, what, mutate, doc, message):
    def setup(tmp):
        _copy(tmp, mutate)

    def call(tmp):
        from rlm_lab.frameworks.registry import load_registry

        load_registry(tmp)
    call.__doc__ = doc
    CASES.append(Case(id, what, call=call, setup=setup, message=message))


row("cell-without-url", "a registry cell with no URL", lambda d: d["cells"]["staleness"].pop("url"),
    "load_registry(folder) with verl.yaml's staleness cell lacking url",
    r"framework registry verl\.yaml: cell 'staleness' has no url")
row("cell-read-undated", "a cell whose read stamp is not a commit and date",
    lambda d: d["cells"]["placement"].update(read="last week"), "placement cell read: 'last week'",
    r"cell 'placement': read 'last week' is not '<12-hex commit> \(<YYYY-MM-DD>\)'")
row("cell-empty-options", "a cell with an empty option list (neither options nor 'not found')",
    lambda d: d["cells"]["lora"].update(options=[]), "lora cell options: []",
    r"cell 'lora': options must be a list of option names or 'not found', got \[\]")
row("knob-missing", "a framework file without one of the knobs", lambda d: d["cells"].pop("packing"),
    "verl.yaml without its packing cell", r"cells must be exactly the knobs .*missing \['packing'\]")


def _empty(tmp):
    from rlm_lab.frameworks.registry import load_registry

    load_registry(tmp)


_empty.__doc__ = "load_registry(an empty folder)"
CASES.append(Case("empty-folder", "a registry folder with no framework file", call=_empty,
                  message=r"framework registry: no <framework>\.yaml under "))
