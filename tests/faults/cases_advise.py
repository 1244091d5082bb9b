"""``rlm-lab advise`` (issue 18 item 7): numbers that are not finite and positive, and clusters the step's
sequences cannot fill, refused before any placement is priced; ``--json`` that a strict JSON parser reads."""

import json

from fault_matrix import Case

CASES = []
# advise prices no default workload (issue 21 item 5): the toy shape, given in full on the command line
TOY = ["--prompts", "8", "--group-size", "4", "--prompt-len", "8", "--response-len", "16"]
QWEN_7B = "configs/models/qwen2.5-7b.config.json"


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
    ["--devices", "100000", *TOY], r"100000 devices for 32 sequences \(8 prompts x 4\): .* at most 768 devices get a sequence")
add("no-workload", "the README's 7B PPO on 64 GPUs with no workload (priced a toy 8 x 4 batch of 8-token prompts "
    "silently, issue 21)", ["--model", QWEN_7B, "--algo", "ppo", "--devices", "64"],
    r"advise needs a workload for .*qwen2.5-7b.*: give a config with workload: or --prompts, --group-size, "
    r"--prompt-len and --response-len")
add("no-workload-toy", "a zoo toy with no workload: refused as predict refuses it (one rule)", ["--model", "micro"],
    r"advise needs a workload for micro: give a config with workload: or --prompts, --group-size, --prompt-len")
add("mode-unknown", "--mode fast", ["--mode", "fast", *TOY], r"unknown mode 'fast'; choose one of: sync, one_step_off")
add("mode-empty", "--mode ','", ["--mode", ",", *TOY], r"--mode needs at least one of")
add("eta-without-stale", "--eta 2 with the synchronous mode only", ["--eta", "2", *TOY],
    r"--eta 2 bounds the staleness of --mode stale or async")
add("eta-negative", "--mode stale --eta -1", ["--mode", "stale", "--eta", "-1", *TOY],
    r"eta must be an integer >= 0 \(the staleness bound\), got -1")
add("eta-zero-stale", "--mode stale --eta 0 (that is the synchronous mode)", ["--mode", "stale", "--eta", "0", *TOY],
    r"mode stale needs eta >= 1")
add("assume-unknown", "--assume eta_X=0.5", ["--assume", "eta_X=0.5", *TOY], r"unknown assumption 'eta_X'; known: eta_F")
add("assume-out-of-range", "--assume eta_F=1.5 (an efficiency above 1)", ["--assume", "eta_F=1.5", *TOY],
    r"assumption eta_F must be a number in \(0, 1\], got 1.5")
add("assume-nan", "--assume eta_B=nan", ["--assume", "eta_B=nan", *TOY], r"assumption eta_B must be a number in \(0, 1\]")
add("assume-malformed", "--assume eta_F (no value)", ["--assume", "eta_F", *TOY], r"--assume takes NAME=NUMBER, got 'eta_F'")
add("devices-per-node-zero", "--devices-per-node 0", ["--devices-per-node", "0", *TOY],
    r"--devices-per-node must be > 0, got 0")
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
         argv=["advise", "--json", "--top", "3", *TOY], check=_json_ranked),
    Case("devices-64-for-32", "64 devices for 32 sequences: placements whose every replica gets a sequence",
         cls="correct-result", argv=["advise", "--devices", "64", "--json", "--top", "10", *TOY],
         check=_no_idle_replica),
]


def _async_ranked(tmp, out):
    # --mode async ranks asynchronous candidates, each with its mode, staleness, idle shares and memory per device
    doc = _strict(out)
    assert doc["modes"] == ["async"] and doc["ranked"], doc["modes"]
    for pp in doc["ranked"]:
        assert pp["mode"] == "async" and pp["eta"] is None and pp["mode_step"]["mode"] == "async"
        assert set(pp["idle"]) == {s["name"] for s in pp["sets"]}
        assert all(0 <= v <= 1 for v in pp["idle"].values())
    steps = [pp["step_s"] for pp in doc["ranked"]]
    assert steps == sorted(steps), steps


def _defaults_named(tmp, out):
    # the same default hardware as predict, named; the workload printed in full; the validated error or "not validated"
    lines = out.splitlines()
    assert lines[0].startswith("hardware: cpu-2core-epyc [calibrated] (the default"), lines[0]
    assert lines[1].startswith("workload: 8 prompts x 4 samples = 32 sequences, prompt 8 tokens, responses 16 tokens")
    assert "validated error" in lines[2] and ("not validated" in lines[2] or "median |error|" in lines[2])
    assert any(line.startswith("ties (equal step time") for line in lines)


CASES += [
    Case("mode-async", "--mode async: placements ranked in the fully asynchronous mode (issue 21 item 2)",
         cls="correct-result", argv=["advise", "--mode", "async", "--devices", "2", "--json", "--top", "3", *TOY],
         check=_async_ranked),
    Case("defaults-named", "no --hardware: predict's default profile, named, with the workload in full and the "
         "validated error", cls="correct-result", argv=["advise", "--devices", "2", "--top", "2", *TOY],
         check=_defaults_named),
]


def _json_text(tmp):
    """records.files.json_text({"a": nan, "b": [inf, 1.5]})"""
    from rlm_lab.records.files import json_text

    text = json_text({"a": float("nan"), "b": [float("inf"), 1.5]}, indent=None)
    assert _strict(text) == {"a": None, "b": [None, 1.5]}, text
    print(text)


CASES.append(Case("json-text-null", "the --json writer given NaN and infinity: null, never a bare NaN",
                  cls="correct-result", call=_json_text, message=r'\{"a": null, "b": \[null, 1\.5\]\}'))
