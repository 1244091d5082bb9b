"""`rlm-lab predict`: flags, config files and workloads the cost model cannot price, and the shipped configs."""

import json
import re
from pathlib import Path

from fault_matrix import REPO, Case

CASES = []


def add(id, what, argv, message, cls="clear-error", **kw):
    CASES.append(Case(id, what, cls=cls, argv=["predict", *argv], message=message, **kw))


def write(name, data: bytes):
    def setup(tmp: Path):
        (tmp / name).write_bytes(data)
    return setup


for id, argv, msg in [
    ("beta-negative", ["--beta", "-1"], r"beta must be a finite number >= 0 .*got -1.0"),
    ("beta-nan", ["--beta", "nan"], r"beta must be a finite number >= 0 .*got nan"),
    ("beta-inf", ["--beta", "inf"], r"beta must be a finite number >= 0 .*got inf"),
    ("beta-word", ["--beta", "high"], r"argument --beta: invalid float value: 'high'"),
    ("devices-million", ["--devices", "1000000", "--prompts", "4", "--group-size", "8"],
     r"1000000 devices for 32 sequences"),
    ("devices-zero", ["--devices", "0"], r"workload.devices must be an integer >= 1, got 0"),
    ("devices-negative", ["--devices", "-2"], r"workload.devices must be an integer >= 1, got -2"),
    ("prompts-zero", ["--prompts", "0"], r"workload.prompts must be an integer >= 1, got 0"),
    ("prompts-negative", ["--prompts", "-3"], r"workload.prompts must be an integer >= 1, got -3"),
    ("group-size-zero", ["--group-size", "0"], r"workload.group_size must be an integer >= 1"),
    ("prompt-len-negative", ["--prompt-len", "-1"], r"workload.prompt_len must be an integer >= 1"),
    ("response-len-zero", ["--response-len", "0"], r"response.length must be >= 1"),
    ("precision", ["--precision", "fp8"], r"workload.precision must be one of fp32, bf16-mixed, bf16"),
    ("model-unknown", ["--model", "nope"], r"unknown model 'nope'"),
    ("model-folder", ["--model", "{tmp}"], r"unknown model|config.json"),
    ("hardware-unknown", ["--hardware", "nope"], r"unknown hardware profile 'nope'"),
    ("algorithm-unknown", ["--algorithm", "a2c"], r"unknown algorithm 'a2c'"),
    ("dpo-group-size", ["--algorithm", "dpo", "--group-size", "4"],
     r"workload.group_size=4: dpo scores a chosen and a rejected completion"),
    ("dpo-beta-zero", ["--algorithm", "dpo", "--beta", "0"], r"beta = 0 with dpo"),
    ("shared-critic-grpo", ["--algorithm", "grpo", "--critic", "shared"], r"critic: shared: grpo has no critic"),
    ("table9-no-placement", ["--table9"], r"--table9 evaluates the survey's Table 9 .*give --placement"),
    ("config-missing", ["{tmp}/none.yaml"], r"config file .*none.yaml not found"),
    ("config-folder", ["{tmp}"], r"is a folder; pass a predict config YAML"),
    ("prompts-word", ["--prompts", "many"], r"argument --prompts: invalid int value"),
    # one rule with advise: a missing workload is refused naming the flags, for every model (a zoo toy too)
    ("real-model-no-workload", ["--model", "qwen2.5-7b", "--hardware", "h100-sxm"],
     r"predict needs a workload for qwen2.5-7b: give a config with workload: or --prompts, --group-size, "
     r"--prompt-len and --response-len"),
    ("toy-model-no-workload", ["--model", "micro"],
     r"predict needs a workload for micro: give a config with workload: or --prompts, --group-size, "
     r"--prompt-len and --response-len"),
    ("bare", [], r"predict needs a workload for micro: .*--prompts, --group-size, --prompt-len and --response-len"),
    ("zero-word", ["--zero", "4"], r"argument --zero: invalid choice: 4"),
    ("offload-flag-unknown", ["--offload", "disk", "--prompts", "8"], r"unknown workload.offload kind\(s\) disk"),
    ("gen-tp-with-tp", ["--tp", "2", "--gen-tp", "4", "--devices", "8", "--prompts", "8"],
     r"--gen-tp 4 reshards a ZeRO-3 \(FSDP\) trainer; training --tp 2 cannot be resharded"),
]:
    add(id, "predict " + " ".join(argv), argv, msg)

for id, data, msg in [
    ("config-binary", bytes(range(256)), r"c.yaml is not a text file"),
    ("config-malformed", b"workload: {prompts: 8\n", r"c.yaml is not valid YAML"),
    ("config-list", b"- model\n- micro\n", r"c.yaml must be a mapping of model, algorithm"),
    ("config-unknown-key", b"modle: micro\n", r"c.yaml: unknown key\(s\) modle"),
    ("config-model-json", json.dumps({"model_type": "qwen2", "hidden_size": 64}).encode(),
     r"c.yaml is a model config \(transformers config.json\), not a predict config; pass it as --model"),
    ("config-beta-negative", b"beta: -0.1\n", r"beta must be a finite number >= 0"),
    ("config-beta-string", b"beta: lots\n", r"beta must be a finite number >= 0 .*got 'lots'"),
    ("config-brent-zero", b"brent_p: [0, 2]\n", r"brent_p must be a list of processor counts >= 1"),
    ("config-brent-scalar", b"brent_p: 4\n", r"brent_p must be a list"),
    ("workload-unknown", b"workload: {prompt: 8}\n", r"unknown workload field\(s\) prompt"),
    ("workload-not-mapping", b"workload: 8\n", r"workload must be a mapping of workload fields, got 8"),
    ("workload-devices-over", b"workload: {prompts: 2, group_size: 2, devices: 8}\n", r"8 devices for 4 sequences"),
    ("response-kind", b"workload: {response: {kind: zipf}}\n", r"response.kind must be fixed, uniform, lognormal"),
    ("response-uniform", b"workload: {response: {kind: uniform, low: 9, high: 3}}\n", r"response needs 1 <= low <= high"),
    ("zero-stage", b"workload: {zero_stage: 5}\n", r"workload.zero_stage must be 0, 1, 2 or 3"),
]:
    add(id, f"a predict config: {data[:60]!r}", ["{tmp}/c.yaml"], msg, setup=write("c.yaml", data))

for id, flag, data, msg in [
    ("model-binary", "--model", bytes(range(256)), r"model file .*f.json is not a text \(JSON\) file"),
    ("model-bad-json", "--model", b"{bad", r"f.json is not valid JSON"),
    ("model-json-list", "--model", b"[1, 2]", r"model file .*f.json must hold a JSON object, got list"),
    ("model-missing-field", "--model", b"{}", r"model config .*f.json' is missing the field 'hidden_size'"),
    ("hardware-binary", "--hardware", bytes(range(256)), r"hardware file .*f.json is not a text \(JSON\) file"),
    ("hardware-bad-json", "--hardware", b"{bad", r"hardware profile .*f.json is not valid JSON"),
    ("hardware-list", "--hardware", b"[]", r"hardware file .*f.json must hold a JSON object, got list"),
    ("hardware-empty-object", "--hardware", b"{}", r"hardware profile .*f.json is missing the field 'name'"),
]:
    add(id, f"predict {flag} FILE holding {data[:20]!r}", [flag, "{tmp}/f.json"], msg, setup=write("f.json", data))


def _no_decimal_gb(tmp, out):
    assert not re.search(r"\d (GB|TB|MB|kB)\b", out), "bytes must all be binary units (GiB like the memory check)"


for cfg in sorted((REPO / "configs" / "predict").glob("*")):  # every file there is a predict config
    oom = "oom" in cfg.name
    add(f"shipped-{cfg.stem}", f"the shipped example {cfg.name}", [str(cfg.relative_to(REPO))],
        r"DOES NOT FIT: needs [\d.]+ GiB" if oom else r"(iteration|step) time: ", cls="correct-result",
        exit=1 if oom else 0, check=_no_decimal_gb)
add("params-format", "the micro model's parameter count is printed as 342k, not 0.342M", ["--prompts", "8"],
    r"micro \(342k params\)", cls="correct-result", check=_no_decimal_gb)
add("params-billions", "a 1.5B model's parameter count reads 1.54B", ["--model", "configs/models/qwen2.5-1.5b.config.json",
                                                                      "--prompts", "8", "--group-size", "4",
                                                                      "--prompt-len", "8", "--response-len", "16"],
    r"\(1.54B params\)", cls="correct-result", exit=1)


def _json_ok(tmp, out):
    # ``out`` is stdout then stderr: one JSON document, then at most rlm-lab's own lines (the machine check warns
    # when this process's torch thread count is not the profile's, as after a test that pinned threads)
    d, end = json.JSONDecoder().raw_decode(out)
    assert all(ln.startswith("rlm-lab: ") for ln in out[end:].strip().splitlines()), out[end:]
    assert d["fits"] is True and d["total_s"] > 0 and d["model"]["params"] == 341632, d.keys()


add("json", "--json prints one JSON document", ["--prompts", "8", "--json"], "", cls="correct-result", check=_json_ok)
add("beta-zero", "beta 0 drops the reference model", ["--beta", "0", "--prompts", "8"], r"iteration time", cls="correct-result",
    check=lambda tmp, out: None if "reference" not in out else (_ for _ in ()).throw(AssertionError(out)))

# ---- sizes the cost model would materialize past memory (issue 18 item 7) ------------------------------------
for id, argv, msg in [
    ("response-len-1e12", ["--response-len", "1000000000000"],
     r"response lengths up to 1,000,000,000,000 tokens: the cost model takes at most 1,048,576"),
    ("response-len-1e12-float", ["--response-len", "1e12"], r"argument --response-len: invalid int value: '1e12'"),
    ("response-len-past-bound", ["--response-len", "1048577"], r"response lengths up to 1,048,577 tokens"),
    ("prompt-len-1e11", ["--prompt-len", "100000000000"], r"workload.prompt_len=100,000,000,000: the cost model takes at most"),
    ("sequences-16m", ["--prompts", "1000000", "--group-size", "16"],
     r"16,000,000 sequences per step \(1,000,000 prompts x 16\): the cost model takes at most 1,048,576"),
]:
    add(id, "predict " + " ".join(argv), argv, msg)
for id, data, msg in [
    ("response-lognormal-max-huge", b"workload: {response: {kind: lognormal, median: 100, max: 1000000000000}}\n",
     r"response lengths up to 1,000,000,000,000 tokens: .*lognormal"),
    ("response-uniform-high-huge", b"workload: {response: {kind: uniform, low: 1, high: 10000000000}}\n",
     r"response lengths up to 10,000,000,000 tokens: .*uniform"),
    ("response-list-huge", b"workload: {response: [4, 8, 100000000000]}\n", r"response lengths up to 100,000,000,000"),
]:
    add(id, f"a predict config: {data[:70]!r}", ["{tmp}/c.yaml"], msg, setup=write("c.yaml", data))
add("response-len-at-bound", "--response-len 1048576 (the bound): priced, and does not fit a CPU's memory",
    ["--response-len", "1048576"], r"DOES NOT FIT: needs [\d.]+ GiB", cls="correct-result", exit=1)
for id, text, msg in [
    ("placement-link-nan", b"placement: disaggregated\ncluster: {devices: 4, link_gbps: .nan}\n",
     r"cluster link_gbps must be a finite number > 0, got nan"),
    ("placement-memory-inf", b"placement: colocated\ncluster: {devices: 2, memory_per_device_gib: .inf}\n",
     r"cluster memory_per_device_gib must be a finite number > 0, got inf"),
]:
    add(id, f"a predict config with a placement: {text[:70]!r}", ["{tmp}/c.yaml"], msg, setup=write("c.yaml", text))


# ---- modes, engines, topology and named assumptions (issue 21) ---------------------------------------------------
DIS = "configs/predict/grpo-micro-cpu-disaggregated.yaml"
for id, argv, msg in [
    ("mode-without-placement", ["--mode", "async"], r"--mode async prices a placement: give one"),
    ("mode-unknown", [DIS, "--mode", "fast"], r"unknown mode 'fast'; choose one of: sync, one_step_off, stale, async"),
    ("eta-without-mode", [DIS, "--eta", "2"], r"--eta 2 bounds the staleness of --mode stale or async"),
    ("eta-one-step-off", [DIS, "--mode", "one_step_off", "--eta", "3"], r"mode one_step_off has eta 1, got eta 3"),
    ("assume-unknown", ["--assume", "speed=2"], r"unknown assumption 'speed'; known: eta_F"),
    ("assume-negative", ["--assume", "engine_step_s=-1"], r"assumption engine_step_s must be a finite number >= 0"),
]:
    add(id, "predict " + " ".join(argv), argv, msg)
for id, data, msg in [
    ("engine-fraction-over-one", b"workload: {engine: continuous, engine_memory_fraction: 1.5}\n",
     r"workload.engine_memory_fraction must be in \(0, 1\]"),
    ("engine-fraction-nan", b"workload: {engine: continuous, engine_memory_fraction: .nan}\n",
     r"workload.engine_memory_fraction must be in \(0, 1\]"),
    ("cluster-node-zero", b"placement: colocated\ncluster: {devices: 2, devices_per_node: 0}\n",
     r"cluster devices_per_node must be an integer > 0, got 0"),
    ("cluster-network-nan", b"placement: disaggregated\ncluster: {devices: 2, network_gbps: .nan}\n",
     r"cluster network_gbps must be a finite number > 0, got nan"),
    ("ep-not-dividing", b"placement: {sets: [{name: all, devices: 2, ep: 4}], roles: {actor: all, rollout: all, "
     b"reference: all}}\ncluster: {devices: 2}\n", r"set 'all': ep=4 must be an integer >= 1 dividing its data-parallel size 2"),
    ("ep-dense-model", b"placement: {sets: [{name: all, devices: 2, ep: 2}], roles: {actor: all, rollout: all, "
     b"reference: all}}\ncluster: {devices: 2}\n", r"ep=2: micro is a dense model; expert parallelism needs a MoE model"),
    ("assume-config-word", b"assume: {eta_F: fast}\n", r"assumption eta_F must be a number in \(0, 1\], got 'fast'"),
    ("offload-unknown", b"workload: {offload: [weights]}\n",
     r"unknown workload.offload kind\(s\) weights; known: params, optimizer, host_optimizer, frozen, sleep, swap"),
    ("offload-not-list", b"workload: {offload: 3}\n", r"workload.offload must be a list of params, optimizer"),
    ("offload-contradiction", b"workload: {offload: [optimizer, host_optimizer]}\n",
     r"workload.offload: optimizer and host_optimizer contradict each other"),
    ("offload-swap-frozen", b"workload: {offload: [swap, frozen]}\n",
     r"workload.offload: swap and frozen contradict each other"),
    ("offload-swap-reference-apart", b"beta: 0.04\nworkload: {offload: [swap]}\nplacement: {sets: [{name: all, devices: 1}, "
     b"{name: ref, devices: 1}], roles: {actor: all, rollout: all, reference: ref}}\ncluster: {devices: 2}\n",
     r"set 'ref': offload 'swap' swaps the reference's weights with the policy's, so the reference must share the "
     r"actor's set"),
    ("logprob-chunk-zero", b"workload: {logprob_chunk: 0}\n",
     r"workload.logprob_chunk must be an integer >= 1 \(positions\) or omitted, got 0"),
]:
    add(id, f"a predict config: {data[:70]!r}", ["{tmp}/c.yaml"], msg, setup=write("c.yaml", data))
add("engine-kv-too-small", "a continuous engine on an L4 next to a 7B trainer: no KV cache left for one sequence",
    ["--model", "configs/models/qwen2.5-7b.config.json", "--hardware", "l4", "{tmp}/c.yaml"],
    r"DOES NOT FIT: .*KV cache holds 0 tokens", cls="correct-result", exit=1,
    setup=write("c.yaml", b"workload: {engine: continuous, precision: bf16-mixed, prompts: 4, group_size: 2}\n"))


def _modes_printed(tmp, out):
    # the synchronous step and the asked mode, each with its critical stage, exposed sync and idle share per set
    assert "mode sync: step" in out and "mode async eta unbounded: step" in out, out
    assert "idle rollout" in out and "exposed sync" in out


add("mode-async-placement", "the shipped disaggregated CPU example in the fully asynchronous mode",
    [DIS, "--mode", "async"], r"step time: .* \(mode async\)", cls="correct-result", check=_modes_printed)


# the README's flag example: a 7B GRPO step on 8 H100 described by the flags of a real run gives a time
add("readme-7b-8xh100", "7B GRPO on 8 H100 from flags (micro-batch 4, ZeRO-3, gradient checkpointing): a time, and the "
    "validated error band of its regime", ["--model", "qwen2.5-7b", "--hardware", "h100-sxm", "--devices", "8",
                                          "--prompts", "64", "--group-size", "8", "--prompt-len", "256",
                                          "--response-len", "1024", "--precision", "bf16-mixed", "--micro-batch", "4",
                                          "--zero", "3", "--gradient-checkpointing"],
    r"iteration time: [\d.]+ s[\s\S]*validated error of the predictor against published cluster measurements",
    cls="correct-result")


# ---- issue 42: model configs whose numbers are not integers, and a binary config.json in a folder -----------------

def _qwen_with(**fields):
    def setup(tmp):
        cfg = json.loads((REPO / "configs" / "models" / "qwen2.5-0.5b.config.json").read_text())
        cfg.update(fields)
        (tmp / "m.config.json").write_text(json.dumps(cfg))   # json.dumps writes NaN as NaN, which json.loads reads
    return setup


def _binary_config(tmp):
    (tmp / "model").mkdir()
    (tmp / "model" / "config.json").write_bytes(bytes(range(128, 256)) * 4)


ADVISE_TOY = ["--prompts", "8", "--group-size", "4", "--prompt-len", "8", "--response-len", "16"]
for command, extra in (("predict", []), ("advise", ADVISE_TOY)):
    for id, fields, shown in [("nan", {"hidden_size": float("nan")}, "nan"),
                              ("1e300", {"hidden_size": 1e300}, r"1e\+300"),
                              ("text", {"hidden_size": "896"}, "'896'"),
                              ("bool", {"num_hidden_layers": True}, "True")]:
        field_name = next(iter(fields))
        message = (rf"model config '.*m\.config\.json': field '{field_name}' must be a number, got {shown}"
                   if id in ("text", "bool") else
                   rf"model config '.*m\.config\.json': field '{field_name}' must be a non-negative integer at most "
                   rf"16,777,216, got {shown}")
        CASES.append(Case(f"{command}-model-{field_name}-{id}", f"{command} --model: a config.json with "
                          f"{field_name}: {fields[field_name]!r}", argv=[command, "--model", "{tmp}/m.config.json",
                                                                         *extra],
                          setup=_qwen_with(**fields), message=message))
    CASES.append(Case(f"{command}-model-type-list", f"{command} --model: model_type given as a list",
                      argv=[command, "--model", "{tmp}/m.config.json", *extra], setup=_qwen_with(model_type=["qwen2"]),
                      message=r"model_type \['qwen2'\] is not a supported decoder family"))
    CASES.append(Case(f"{command}-model-binary-folder", f"{command} --model FOLDER whose config.json is binary "
                      "(a UnicodeDecodeError traceback)", argv=[command, "--model", "{tmp}/model", *extra],
                      setup=_binary_config,
                      message=r"model config .*model/config\.json: is not a text file \(byte 0 is not UTF-8\)"))
