"""The stage tracer: name mapping (incl. the vLLM path), span accounting, outputs, and on a real TRL GRPO
run: it changes nothing the run computes, covers every stage in order, and its hooks, timed as they fire
in that run, cost < 3 % of a cpu-size step."""

import gzip
import json
import os
import statistics
import time
from collections import Counter

import pytest

from rlm_lab.stages import Stage
from rlm_lab.train.tracer import (LOGPS_NAME, OTHER, STAGE_ORDER, chrome_trace, stage_for_name, summarize,
                                  tracer_class)


# ---- pure parts -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, stage", [
    ("GRPOTrainer.transformers.generate", Stage.GENERATE),
    ("RLOOTrainer.transformers.generate_batch", Stage.GENERATE),
    ("GRPOTrainer.vLLM.generate", Stage.GENERATE),          # use_vllm=True, colocate or server
    ("GRPOTrainer.sync_weights", Stage.WEIGHT_SYNC),        # vLLM weight sync
    ("VLLMGeneration.sync_weights", Stage.WEIGHT_SYNC),
    ("GRPOTrainer._move_model_to_vllm", Stage.WEIGHT_SYNC),
    ("GRPOTrainer._calculate_rewards", Stage.REWARD),
    ("GRPOTrainer.compute_loss", Stage.ACTOR_FORWARD),
    ("PPOTrainer.values", Stage.VALUES),
    ("PPOTrainer.advantage", Stage.ADVANTAGE),
    ("PPOTrainer.critic_update", Stage.CRITIC_UPDATE),
    ("PPOTrainer.reward_model", Stage.REWARD),
    ("GRPOTrainer._prepare_inputs", None),
    ("GRPOTrainer.correctness", None),                      # a reward function: detail inside "reward"
])
def test_profiling_names_map_to_stages(name, stage):
    assert stage_for_name(name) == stage


def test_logps_name_is_resolved_by_the_model_it_runs_on():
    assert stage_for_name("GRPOTrainer._get_per_token_logps_and_entropies") == LOGPS_NAME


def _row(step, start, spans, wall):
    stages = {}
    for s in spans:
        if s["counted"]:
            stages[s["stage"]] = stages.get(s["stage"], 0) + s["dur_s"]
    stages[OTHER] = wall - sum(stages.values())
    return {"step": step, "rank": 0, "start_s": start, "wall_s": wall, "peak_bytes": 10, "stages": stages,
            "peaks": {k: 5 for k in stages}, "spans": spans}


def _span(stage, start, dur, counted=True, name=None):
    return {"stage": stage, "name": name or stage, "start_s": start, "dur_s": dur, "peak_bytes": 5,
            "depth": 1, "counted": counted}


def test_summary_amortizes_a_stage_that_runs_every_other_step():
    rows = [_row(1, 0.0, [_span("generate", 0.0, 9.0)], 10.0),  # warm-up step, excluded
            _row(2, 10.0, [_span("generate", 10.0, 0.4), _span("actor_forward", 10.4, 0.2)], 1.0),
            _row(3, 11.0, [_span("actor_forward", 11.0, 0.2)], 0.5)]
    s = summarize(rows, warmup=1)
    assert s["steps"] == 2 and s["warmup_steps_excluded"] == 1
    assert s["stages"]["generate"]["mean_s"] == pytest.approx(0.2) and s["stages"]["generate"]["calls"] == 1
    assert s["stages"]["actor_forward"]["median_s"] == pytest.approx(0.2)
    assert sum(v["share"] for v in s["stages"].values()) == pytest.approx(1.0)
    assert list(s["stages"])[-1] == OTHER


def test_chrome_trace_has_complete_events_in_microseconds():
    rows = [_row(1, 0.5, [_span("generate", 0.5, 0.25), _span(None, 0.5, 0.3, counted=False, name="x")], 1.0)]
    events = json.loads(json.dumps(chrome_trace(rows)))["traceEvents"]
    x = [e for e in events if e["ph"] == "X"]
    gen = next(e for e in x if e["name"] == "generate")
    assert gen["ts"] == pytest.approx(0.5e6) and gen["dur"] == pytest.approx(0.25e6) and gen["tid"] == 1
    assert any(e["name"] == "x" and e["tid"] == 2 for e in x)
    assert any(e["name"] == "step 1" and e["dur"] == pytest.approx(1e6) for e in x)


class _State:
    global_step = 1


def test_a_different_stage_nested_in_a_stage_is_counted_and_taken_out_of_it():
    """Our PPO runs critic_update inside TRL's compute_loss span; a reward model runs inside _calculate_rewards."""
    tr = tracer_class()(object(), out_dir=None)
    tr.on_step_begin(None, _State, None)
    tr._open_profiled("PPOTrainer.compute_loss")
    time.sleep(0.01)
    tr._open_profiled("PPOTrainer.critic_update")
    time.sleep(0.02)
    tr._close("PPOTrainer.critic_update")
    tr._close("PPOTrainer.compute_loss")
    tr._open_profiled("PPOTrainer._calculate_rewards")
    tr._open_profiled("PPOTrainer.reward_model")  # same stage: a detail, not counted twice
    time.sleep(0.005)
    tr._close("PPOTrainer.reward_model")
    tr._close("PPOTrainer._calculate_rewards")
    tr.on_step_end(None, _State, None)
    (row,) = tr.steps
    spans = {sp["name"]: sp for sp in row["spans"]}
    assert spans["PPOTrainer.critic_update"]["counted"] and not spans["PPOTrainer.reward_model"]["counted"]
    loss = spans["PPOTrainer.compute_loss"]
    assert loss["self_s"] == pytest.approx(loss["dur_s"] - spans["PPOTrainer.critic_update"]["dur_s"])
    # actor_forward is compute_loss less the nested critic_update (a double count would give compute_loss's whole
    # duration); checked against the spans, not against the sleeps, which overshoot on a busy machine
    critic = spans["PPOTrainer.critic_update"]["dur_s"]
    assert row["stages"]["critic_update"] == pytest.approx(critic) and critic >= 0.02
    assert row["stages"]["actor_forward"] == pytest.approx(loss["dur_s"] - critic) and row["stages"]["actor_forward"] >= 0.01
    assert row["stages"]["reward"] >= 0.005
    # exclusive times: critic_update is not counted again inside actor_forward, so the stages fit in the step
    assert sum(v for k, v in row["stages"].items() if k != OTHER) <= row["wall_s"]
    assert all(sp["peak_bytes"] > 0 for sp in row["spans"])  # VmHWM read through /proc


def test_the_vllm_path_through_trls_own_profiling_contexts():
    """vLLM cannot run here; its two profiling points (weight sync, generation) are TRL's own contexts,
    so the hook is exercised by entering them exactly as grpo_trainer.py does with use_vllm=True."""
    from types import SimpleNamespace

    from trl.extras.profiling import profiling_context

    class GRPOTrainer:  # the attributes profiling_context reads, nothing else
        state = SimpleNamespace(global_step=0)
        args = SimpleNamespace(report_to=[])
        accelerator = SimpleNamespace(is_main_process=True, process_index=0, device=SimpleNamespace(type="cpu"))

    fake = GRPOTrainer()
    tr = tracer_class()(fake, out_dir=None)
    tr.on_train_begin(None, _State, None)
    tr.on_step_begin(None, _State, None)
    with profiling_context(fake, "sync_weights"):
        time.sleep(0.003)
    with profiling_context(fake, "vLLM.generate"):
        time.sleep(0.003)
    tr.on_step_end(None, _State, None)
    tr.on_train_end(None, _State, None)
    with profiling_context(fake, "vLLM.generate"):  # after training: no tracer active, nothing recorded
        pass
    (row,) = tr.steps
    assert [s["stage"] for s in row["spans"]] == ["weight_sync", "generate"]
    assert [s["name"] for s in row["spans"]] == ["GRPOTrainer.sync_weights", "GRPOTrainer.vLLM.generate"]
    assert row["stages"]["weight_sync"] >= 0.003 and row["stages"]["generate"] >= 0.003


# ---- on a real TRL GRPO run --------------------------------------------------------------------------
STEPS = 4


def _grpo(tmp_path, tag, traced, record=None, steps=STEPS, instrument=None):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from rlm_lab.models import build_model, save
    from rlm_lab.tasks import ensure_data, get_task, reward_funcs
    from rlm_lab.train.tracer import trace

    model_dir = tmp_path / "model"
    if not model_dir.exists():
        save(*build_model("nano", seed=0), model_dir)
    task = get_task("arithmetic", digits=2)
    args = GRPOConfig(
        output_dir=str(tmp_path / f"out_{tag}"), use_cpu=True, bf16=False, activation_checkpointing=False,
        learning_rate=1e-3, report_to="none", save_strategy="no", logging_steps=1, seed=0, max_steps=steps,
        per_device_train_batch_size=8, num_generations=4, max_completion_length=6, beta=0.04,
        steps_per_generation=2, disable_tqdm=True)  # beta > 0: a reference pass; steps_per_generation 2: old log-probs
    trainer = GRPOTrainer(model=str(model_dir), args=args, reward_funcs=reward_funcs(task),
                          train_dataset=Dataset.from_list(ensure_data(task)["train"][:64]))
    tracer = trace(trainer, record=record) if traced else None
    if instrument is not None:
        instrument(tracer)
    trainer.train()
    return trainer, tracer


def _computed(trainer):
    keep = ("loss", "reward", "grad_norm", "kl", "entropy", "rewards/format_ok/mean")
    return [{k: h[k] for k in keep if k in h} for h in trainer.state.log_history if "loss" in h]


# The tracer's entry points: what TRL's ProfilingContext hook, the patched accelerator.backward /
# log-prob function and the Trainer's callback events call. Everything the tracer does runs inside them.
HOOKS = ("_open_profiled", "_open", "_close", "on_step_begin", "on_pre_optimizer_step", "on_optimizer_step",
         "on_step_end")


def _time_hooks(tracer, clock):
    """Wrap the tracer's entry points on the instance: seconds spent inside them (outermost call only,
    so a hook calling another is not counted twice), per optimizer step, and calls per hook. The seconds are
    this thread's CPU time: on 2 shared cores the wall time inside a hook also counts the other jobs that
    pre-empted it, which is the machine's load, not the tracer's cost."""
    clock.update(per_step=[], calls=Counter(), spent=0.0, depth=0)
    for name in HOOKS:
        orig = getattr(tracer, name)

        def wrapped(*args, _orig=orig, _name=name, **kwargs):
            clock["calls"][_name] += 1
            if clock["depth"]:
                return _orig(*args, **kwargs)
            clock["depth"] += 1
            t0 = time.thread_time()
            try:
                return _orig(*args, **kwargs)
            finally:
                clock["spent"] += time.thread_time() - t0
                clock["depth"] -= 1
                if _name == "on_step_end":
                    clock["per_step"].append(clock["spent"])
                    clock["spent"] = 0.0

        setattr(tracer, name, wrapped)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from rlm_lab.record import RunRecord

    tmp = tmp_path_factory.mktemp("grpo")
    plain, _ = _grpo(tmp, "plain", traced=False)
    record = RunRecord(tmp / "run", config={"test": "tracer"}, command="pytest", seed=0)
    hooks: dict = {}
    traced, tracer = _grpo(tmp, "traced", traced=True, record=record, instrument=lambda t: _time_hooks(t, hooks))
    return plain, traced, tracer, record, hooks


@pytest.mark.slow
def test_tracer_does_not_change_what_the_run_computes(runs):
    plain, traced, _, _, _ = runs
    a, b = _computed(plain), _computed(traced)
    assert len(a) == STEPS and a == b  # bitwise: CPU runs with one seed are deterministic


@pytest.mark.slow
def test_spans_cover_each_stage_in_order_and_sum_to_the_step(runs):
    _, _, tracer, _, _ = runs
    assert [r["step"] for r in tracer.steps] == list(range(1, STEPS + 1))
    order = [s.value for s in STAGE_ORDER]
    gen_steps = [r for r in tracer.steps if "generate" in r["stages"]]
    assert [r["step"] for r in gen_steps] == [1, 3]  # steps_per_generation=2
    for r in tracer.steps:
        counted = [s for s in r["spans"] if s["counted"]]
        expected = (["generate", "old_logprob", "ref_logprob", "reward", "advantage"] if r in gen_steps else []) \
            + ["actor_forward", "actor_backward", "optimizer"]
        assert [s["stage"] for s in counted] == expected
        starts = [s["start_s"] for s in counted]
        assert starts == sorted(starts)
        assert [order.index(s) for s in expected] == sorted(order.index(s) for s in expected)
        # counted spans never overlap, lie inside the step, and with "other" add up to the step's wall time
        for s, t in zip(counted, counted[1:]):
            assert s["start_s"] + s["dur_s"] <= t["start_s"] + 1e-9
        assert counted[0]["start_s"] >= r["start_s"] and counted[-1]["start_s"] + counted[-1]["dur_s"] <= \
            r["start_s"] + r["wall_s"] + 1e-9
        assert all(s["self_s"] == s["dur_s"] for s in counted)  # GRPO nests no stage in another
        # the counted stages fit in the step ("other" = the rest is never clamped at 0)
        assert sum(v for k, v in r["stages"].items() if k != OTHER) <= r["wall_s"]
        # stages explain the step: a missing stage would leave its time in "other". A step without generation
        # lasts ~10 ms at this size, of which the Trainer's own per-step work (data loading, logging, callbacks)
        # is several ms on a loaded machine, so it gets half; the forward+backward it would lose is more.
        share = 0.25 if r in gen_steps else 0.5
        assert r["stages"][OTHER] < share * r["wall_s"] or r["step"] == 1, (r["step"], r["stages"], r["wall_s"])
        assert all(s["peak_bytes"] > 0 for s in counted)


@pytest.mark.slow
def test_outputs_land_in_the_run_record(runs):
    _, _, tracer, record, _ = runs
    files = {p.name for p in record.dir.iterdir()}
    assert {"spans.jsonl", "trace.json.gz", "record.json"} <= files and not any(f.endswith(".png") for f in files)
    rows = [json.loads(line) for line in (record.dir / "spans.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [r["step"] for r in tracer.steps]
    events = json.loads(gzip.decompress((record.dir / "trace.json.gz").read_bytes()))["traceEvents"]  # Perfetto's form
    assert {"generate", "old_logprob", "ref_logprob", "reward", "advantage", "actor_forward",
            "actor_backward", "optimizer", "GRPOTrainer._prepare_inputs"} <= {e["name"] for e in events}
    assert "GRPOTrainer.transformers.generate" in {e["args"].get("trl_name") for e in events if e["ph"] == "X"}
    from rlm_lab.record import RunRecord

    summary = RunRecord.load(record.dir).results["trace"]
    assert summary["steps"] == STEPS - 1 and summary["memory_kind"].startswith("cpu_rss")
    assert summary["stages"]["generate"]["calls"] == 1  # step 3 (step 1 is warm-up)


TRACER_MAX_SHARE = 0.03  # goal fixed in advance (chapter 2's claim): the tracer's share of the cpu-size GRPO step


@pytest.mark.slow
def test_tracer_costs_less_than_3_percent_of_a_step(runs):
    """The tracer's hooks timed as they fire during the real TRL GRPO steps above (no synthetic loop):
    every second spent inside them, per optimizer step, median over the steps after warm-up.

    Its cost is per span (~12 per step, whatever the model size), so it is set against the cpu-size
    traced GRPO step the chapter's claim is about (committed record, same stages and spans), scaled by
    that record's spans per step; a smoke step of the nano model (~10 ms) is below any real run.
    A/B wall-clock comparisons on 2 shared cores are too noisy for a test."""
    _, _, tracer, _, hooks = runs
    # the hooks fired as TRL ran: one open and one close per recorded span, one callback of each kind per step
    spans = sum(len(r["spans"]) for r in tracer.steps)
    derived = sum(1 for r in tracer.steps for s in r["spans"] if s["name"].startswith("derived:"))
    assert hooks["calls"]["_open"] == hooks["calls"]["_close"] == spans - derived
    assert all(hooks["calls"][h] == STEPS for h in ("on_step_begin", "on_step_end", "on_pre_optimizer_step"))
    assert len(hooks["per_step"]) == STEPS
    per_step = statistics.median(hooks["per_step"][1:])
    per_span = per_step / statistics.median(len(r["spans"]) for r in tracer.steps[1:])
    from rlm_lab.record import REPO_ROOT, read_jsonl

    cpu_rows = read_jsonl(REPO_ROOT / "data/runs/cpu/ch02_grpo/spans.jsonl")  # committed gzipped (.jsonl.gz)
    cpu_spans = max(len(r["spans"]) for r in cpu_rows)
    cpu_step = statistics.median(r["wall_s"] for r in cpu_rows[1:])
    smoke_step = statistics.median(r["wall_s"] for r in tracer.steps[1:])
    info = dict(per_step_s=per_step, per_span_s=per_span, cpu_step_s=cpu_step, smoke_step_s=smoke_step)
    # (measured once while writing this: 0.75 ms per step at load 15 on the 2 cores, 0.7 % of the cpu step; an
    # extra ~7 ms per step, e.g. a few fsyncs, fails it)
    assert per_span * cpu_spans < TRACER_MAX_SHARE * cpu_step, info
