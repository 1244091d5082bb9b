"""``rlm-lab advise`` (issue 18 item 7): numbers that are not finite and positive, and clusters the step's
sequences cannot fill, refused before any placement is priced; ``--json`` that a strict JSON parser reads."""

import json

from fault_matrix import Case

CASES = []


def add(id, what, argv, message, **kw):
    CASES.append(Case(id, what, argv=["advise", *argv], message=message, **kw))


for flag in ("--link-gbps", "--memory-gib"):
    name = flag.strip("-").replace("-", "_")
    add(f"{name}-nan", f"{flag} nan (priced 32 of 43 placements as NaN and ranked them)", [flag, "nan"],
        rf"{flag} must be a finite number, got nan")
    add(f"{name}-inf", f"{flag} inf", [flag, "inf"], rf"{flag} must be a finite number, got inf")
    add(f"{name}-minus-inf", f"{flag}=-inf", [f"{flag}=-inf"], rf"{flag} must be a finite number, got -inf")
    add(f"{name}-zero", f"{flag} 0", [flag, "0"], rf"{flag} must be > 0, got 0\.0")
    add(f"{name}-negative", f"{flag} -1", [flag, "-1"], rf"{flag} must be > 0, got -1\.0")
    add(f"{name}-word", f"{flag} fast", [flag, "fast"], rf"{flag} must be a number, got 'fast'")
add("json-nan", "--link-gbps nan with --json (printed bare NaN)", ["--link-gbps", "nan", "--json"],
    r"--link-gbps must be a finite number, got nan")
add("devices-100000", "32 sequences over 100,000 devices (predict refuses the same shape)",
    ["--devices", "100000"], r"100000 devices for 32 sequences \(8 prompts x 4\): .* at most 768 devices get a sequence")
add("devices-1000-small-batch", "4 sequences over 1,000 devices, from a config", ["{tmp}/c.yaml", "--devices", "1000"],
    r"1000 devices for 4 sequences \(2 prompts x 2\)",
    setup=lambda tmp: (tmp / "c.yaml").write_text("workload: {prompts: 2, group_size: 2}\n"))


def _config(text):
    def setup(tmp):
        (tmp / "c.yaml").write_text(text)
    return setup


for id, text, message in [
    ("config-link-nan", "cluster: {devices: 8, link_gbps: .nan}\n", r"cluster link_gbps must be a finite number > 0, got nan"),
    ("config-memory-inf", "cluster: {devices: 8, memory_per_device_gib: .inf}\n",
     r"cluster memory_per_device_gib must be a finite number > 0, got inf"),
    ("config-link-negative", "cluster: {devices: 8, link_gbps: -5}\n", r"cluster link_gbps must be a finite number > 0, got -5"),
]:
    add(id, f"a config with {text.strip()}", ["{tmp}/c.yaml"], message, setup=_config(text))


def _strict(text):
    def refuse(token):
        raise AssertionError(f"bare {token} in --json output")
    return json.loads(text, parse_constant=refuse)


def _json_ranked(tmp, out):
    doc = _strict(out)
    steps = [pp["step_s"] for pp in doc["ranked"]]
    assert len(steps) == 3 and steps == sorted(steps) and all(s > 0 for s in steps), steps


def _no_idle_replica(tmp, out):
    # an independent reading of the ranking: no set of any listed placement has more data-parallel ranks than
    # the step's 32 sequences (a rank without a sequence is what predict refuses)
    doc = _strict(out)
    dps = [s["dp"] for pp in doc["ranked"] for s in pp["placement"]["sets"]]
    assert doc["ranked"] and dps and max(dps) <= 32, dps


CASES += [
    Case("json-strict", "--json output read by a strict JSON parser (no NaN or Infinity)", cls="correct-result",
         argv=["advise", "--json", "--top", "3"], check=_json_ranked),
    Case("devices-64-for-32", "64 devices for 32 sequences: placements whose every replica gets a sequence",
         cls="correct-result", argv=["advise", "--devices", "64", "--json", "--top", "10"], check=_no_idle_replica),
]


def _json_text(tmp):
    """records.files.json_text({"a": nan, "b": [inf, 1.5]})"""
    from rlm_lab.records.files import json_text

    text = json_text({"a": float("nan"), "b": [float("inf"), 1.5]}, indent=None)
    assert _strict(text) == {"a": None, "b": [None, 1.5]}, text
    print(text)


CASES.append(Case("json-text-null", "the --json writer given NaN and infinity: null, never a bare NaN",
                  cls="correct-result", call=_json_text, message=r'\{"a": null, "b": \[null, 1\.5\]\}'))
