"""Chapter 5's report: what the notebook prints, draws and glues, from the records: timelines of every actor,
the comparison and sync tables, LoRA, the hybrid engine, PPO split (each section returns its text, figures and
``{glue name: text}`` where the prose quotes a number)."""

from __future__ import annotations

import re
import shutil
import statistics
from pathlib import Path

from ...cost.placement import predict_placement
from ...cost.placement_spec import Cluster, get_placement
from ...cost.workload import algorithm
from ...errors import RlmLabError
from ...placement.runtime import algo_roles, check_placement, local_cpus
from ...record import RunRecord, read_trace, reference_root, repo_root
from ...tables import text
from ...trace_merge import gantt
from ...validate import published_report as published  # noqa: F401  (the published-cases table, section 5.x)
from ...validate.published_report import BARS, FRESH_SOURCES
from .cases import KEYS, PPO_KEYS, cluster, run_config
from .compare import GOAL, comparison, formula_sync_bytes, step_word
from .run import latest, measure, measure_reshard, predicted_memory, workload


def representative_window(durations: list[float], steps: int) -> int:
    """The first index of the ``steps`` consecutive steps whose total is closest to ``steps`` x the median
    step (the earliest such run of steps on a tie): the steps a timeline shows beside a table of median step
    times, so that a warm-up or a final checkpoint's step does not stand for the run."""
    if len(durations) <= steps:
        return 0
    target = steps * statistics.median(durations)
    sums = [sum(durations[i:i + steps]) for i in range(len(durations) - steps + 1)]
    return min(range(len(sums)), key=lambda i: (abs(sums[i] - target), i))


def timeline(record, steps: int = 3, title: str | None = None):
    """The merged Gantt (every actor of the run) of the record's trace (``trace.json.gz``), over ``steps`` consecutive steps
    chosen by :func:`representative_window` (their numbers are in the title)."""
    trace = read_trace(record.dir)
    spans = sorted((e for e in trace["traceEvents"] if e.get("cat") == "step"), key=lambda e: e["ts"])
    window, shown = None, ""
    if len(spans) > steps:
        i = representative_window([e["dur"] for e in spans], steps)
        sel = spans[i:i + steps]
        window = (sel[0]["ts"] / 1e6, (sel[-1]["ts"] + sel[-1]["dur"]) / 1e6)
        shown = f" (steps {i + 1}-{i + steps} of {len(spans)}: the {steps} closest to the median step)"
    return gantt(trace, title=(title or record.results.get("describe") or "") + shown, window=window)


# ---- the notebook's sections -------------------------------------------------------------------------------

NA = "n/a (no committed run)"


def rel(path) -> str:
    """``path`` relative to the repository, never a machine's absolute or temporary path."""
    return re.sub(r"/tmp/\S+", "<tmp>", str(path).replace(f"{repo_root()}/", ""))


def placements_text(chosen: dict, cfg) -> str:
    """Each placement of ``chosen`` in words, then a placement asking for more cores than this machine has:
    one error before Ray starts."""
    lines = [f"{key:28s} {p.describe()}" for key, p in chosen.items()]
    try:
        check_placement(get_placement("disaggregated", Cluster(local_cpus() + 6), algo_roles(cfg)), cfg)
    except RlmLabError as e:
        lines.append(f"error: {e}")
    return "\n".join(lines)


def live_runs(size: str) -> tuple[dict, str]:
    """At smoke size, this build's own runs of ``colocated`` and ``disaggregated`` (``_build/runs/smoke-ch05``,
    emptied first: each build makes its own runs; the committed ones are in ``data/``): key -> results, and a line
    each (rewards, sync, folder). At other sizes nothing runs here."""
    if size != "smoke":
        return {}, ""
    here = repo_root() / "_build" / "runs" / "smoke-ch05"
    shutil.rmtree(here, ignore_errors=True)  # each build makes its own runs (the committed ones are in data/)
    live = measure(size, here, keys=("colocated", "disaggregated"))
    return live, "\n".join(f"{key:14s} rewards {[round(r, 4) for r in res['rewards']]}  sync {res['sync']}  -> "
                           f"{rel(res['dir'])}" for key, res in live.items())


# a placement's run -> the results ledger's item for its step (``ch05.<item>.measured``: the current value)
LEDGER_ITEM = {"colocated": "colocated", "disaggregated": "disaggregated", "disaggregated_lora": "lora",
               "hybrid": "hybrid", "ppo_split": "ppo_split"}


def comparison_section(live: dict, size: str, entries=None) -> tuple[dict, list, object, list, str]:
    """The committed cpu records of every GRPO placement (this build's own ``live`` runs where none is committed)
    and the hybrid engine's: ``(records, rows, hybrid record or None, hybrid rows, text)``, the rows predicted
    against measured (:func:`.compare.comparison`) with the load at the start and end of each run. With the
    results ledger's ``entries``, a run a reference window replaced is labelled history and the ledger's current
    value of the same step (``ch05.<item>.measured``, the window's paired repeats) is printed under it."""
    d = {e.id: e for e in entries or ()}
    lines = []
    try:
        records = {key: latest(reference_root("cpu"), key) for key in KEYS}
        source = "committed cpu-size records"
    except RlmLabError as e:  # no committed runs (yet): show this build's own runs
        lines.append(str(e))
        records = {key: RunRecord.load(res["dir"]) for key, res in live.items()}
        source = f"this build's {size}-size runs"
    rows = comparison(records)
    try:  # the hybrid engine: GRPO under DeepSpeed ZeRO-3 (its own section below); committed at cpu size only
        hyb_rec = latest(reference_root("cpu"), "hybrid")
    except RlmLabError as e:
        hyb_rec = None
        lines.append(str(e))
    hyb_rows = comparison({"hybrid": hyb_rec}) if hyb_rec is not None else []
    lines.append(source)
    lines.append(f"{'placement':28s} {'predicted s':>11s} {'measured s':>10s} {'error':>7s} {'load':>10s}")
    for r in rows + hyb_rows:
        lines.append(f"{r['placement']:28s} {r['predicted_s']:11.4f} {r['measured_s']:10.4f} {100 * r['rel_error']:+6.1f}% "
                     f"{str(r['load_start']):>5} {str(r['load_end']):>5}   {rel(r['dir'])}")
        now = d.get(f"ch05.{LEDGER_ITEM.get(r['placement'], '-')}.measured")
        if now is not None and now.current and rel(r["dir"]) not in now.records:
            lines.append(f"{'':28s} history; current (ledger ch05.{LEDGER_ITEM[r['placement']]}): "
                         f"{_ledger_text(now)[:-1]}, {', '.join(now.records)})")
    return records, rows, hyb_rec, hyb_rows, "\n".join(lines)


def sync_bytes_section(records: dict, rows: list[dict]) -> tuple[str, bool]:
    """Per placement: one sync's bytes by the formula (a fresh model, PEFT-wrapped for LoRA), the predictor's, the
    shipped and the counted ones, and the sync time measured and predicted; and whether every shipped count
    equals the formula."""
    lines, equal = [], True
    for key, r in zip(records, rows):
        if not r["sync_bytes_measured"]:
            lines.append(f"{key:28s} no sync (the rollout uses the trainer's own weights)")
            continue
        formula = formula_sync_bytes(records[key])
        lines.append(f"{key:28s} formula {formula:,} B; predicted {r['sync_bytes_predicted']:,.0f}; "
                     f"shipped {r['sync_bytes_measured']:,}; counted on the wire {r['sync_bytes_counted']}; "
                     f"{r['sync_s_measured'] * 1e3:.2f} ms per sync (predicted {r['sync_s_predicted'] * 1e3:.2f} ms)")
        equal = equal and r["sync_bytes_measured"] == formula
    return "\n".join(lines), equal


def sync_calibration_section(records: dict, rows: list[dict]) -> str:
    """The weight-sync calibration (:mod:`.sync_calibration`, never fitted on the placement runs): its fit, and
    each collective row's measured sync against the prediction without and with its fixed cost t0."""
    try:
        cal = latest(reference_root("cpu"), "sync_calibration")
    except RlmLabError as e:
        return str(e)
    f = cal.results["fit"]
    lines = [f"calibration: t0 {f['t0_s'] * 1e3:.2f} ms per sync, bandwidth {f['bandwidth_Bps'] / 1e9:.2f} GB/s, "
             f"residual RMS {f['residual_rms_s'] * 1e3:.2f} ms, load {cal.results['load_average_start'][0]} -> "
             f"{cal.results['load_average_end'][0]}  ({rel(cal.dir)})"]
    closes = []
    for key, r in zip(records, rows):
        if r["sync_bytes_counted"]:  # a collective ran
            with_t0 = r["sync_s_predicted"] + f["t0_s"]
            closes.append(abs(with_t0 / r["sync_s_measured"] - 1) <= GOAL)
            lines.append(f"{key:28s} sync measured {r['sync_s_measured'] * 1e3:.2f} ms; predicted "
                         f"{r['sync_s_predicted'] * 1e3:.2f} ms without t0 "
                         f"({100 * (r['sync_s_predicted'] / r['sync_s_measured'] - 1):+.0f} %), {with_t0 * 1e3:.2f} ms "
                         f"with it ({100 * (with_t0 / r['sync_s_measured'] - 1):+.0f} %)")
    lines.append(f"a fixed cost per sync brings every collective row within the {100 * GOAL:.0f} % goal: "
                 f"{'yes: the term is justified' if closes and all(closes) else 'no: not added to the cost model'}")
    return "\n".join(lines)


def _ledger_text(e, ms: bool = True) -> str:
    """One ledger entry (:class:`rlm_lab.ledger.Entry`) as chapter 5 prints it: the value (ms for seconds), its
    interval with method and n where it has one, and "history" with the record that replaced it."""
    if e is None or e.value is None:
        return "not in the ledger"
    f = (lambda v: f"{v * 1e3:.2f} ms") if ms else (lambda v: f"{v:.3g}")
    hist = "" if e.current else ", history"
    iv = f" [{f(e.lo)}, {f(e.hi)}] ({e.method}, n = {e.n} {e.counts}{hist})" if e.lo is not None else \
        f" ({e.counts}{hist})"
    return f"{f(e.value)}{iv}"


def lora_sync_text(records: dict, entries) -> str:
    """Full fine-tuning against LoRA, disaggregated: trainable parameters and bytes per sync (exact counts of the
    records), and the seconds per sync and the step as the results ledger holds them (``entries``, from
    ``rlm_lab.ledger.build``): one value per quantity, so this page, chapter 8 and the results page agree. The
    single runs' values are labelled history where the reference window replaced them, and the window's paired
    repeats of the step (``ch05.window.<arm>.measured``, over every reference that ran the arm) and LoRA / full paired
    within ``lora_vs_full`` are printed beside them as the current value."""
    d = {e.id: e for e in entries}
    full, lora = records["disaggregated"], records["disaggregated_lora"]
    f, lo = full.results, lora.results
    ids = {k: f"ch05.run.{Path(rel(r.dir)).parts[3]}" for k, r in (("full", full), ("lora", lora))}
    lines = [f"trainable parameters: full {f['trainable_parameters']:,}, LoRA {lo['trainable_parameters']:,} "
             f"of {lo['parameters']:,}",
             f"bytes per sync (exact): full {f['sync']['bytes_per_sync']:,} B, LoRA {lo['sync']['bytes_per_sync']:,} B "
             f"({f['sync']['bytes_per_sync'] / lo['sync']['bytes_per_sync']:.0f}x less)"]
    for what, key in (("seconds per sync call", "sync.seconds_mean"), ("step (median of steps)", "step_seconds_median")):
        a, b = d.get(f"{ids['full']}.{key}"), d.get(f"{ids['lora']}.{key}")
        lines.append(f"{what}: full {_ledger_text(a)}; LoRA {_ledger_text(b)}   (ledger {ids['full']}.{key}, ...)")
        old = next((e.superseded_by for e in (a, b) if e is not None and not e.current), "")
        if old:
            lines.append(f"  history: {old} replaced these single runs"
                         + ("; it re-measured the step, below" if "step" in key else "; it did not re-measure the sync"))
    w = "ch05.window.lora_vs_full"
    if f"{w}.ratio" in d:   # each arm's step over all its repeats in the window (one value: ledger ch05.window.<arm>)
        lines.append(f"step, the window's repeats (current): full {_ledger_text(d.get('ch05.window.disaggregated.measured'))}"
                     f"; LoRA {_ledger_text(d.get('ch05.window.disaggregated_lora.measured'))}   "
                     "(ledger ch05.window.<arm>.measured)")
        lines.append(f"LoRA / full, paired within {w.split('.')[-1]}: {_ledger_text(d[w + '.ratio'], ms=False)}: "
                     f"{d[w + '.ratio'].verdict}   (ledger {w}.ratio)")
    return "\n".join(lines)


def full_and_lora(stem: str) -> tuple[dict, str | None]:
    """``({"full": record, "lora": record}, None)``: the newest completed committed cpu records
    ``ch05_<stem>_full`` and ``ch05_<stem>_lora``; or ``({}, why)`` when either is missing."""
    try:
        return {k: latest(reference_root("cpu"), f"{stem}_{k}") for k in ("full", "lora")}, None
    except RlmLabError as e:
        return {}, str(e)


def lora_accuracy_text() -> str:
    """Full fine-tuning against LoRA, both disaggregated, the size's full GRPO run: held-out accuracy before and
    after, the sync per step, the step and the trainer's peak RSS (``ch05_accuracy_{full,lora}``)."""
    acc, why = full_and_lora("accuracy")
    return why or "\n".join(_accuracy_line(k, rec) for k, rec in acc.items())


def _accuracy_line(k: str, rec) -> str:
    r, c = rec.results, rec.config["run"]
    return (f"{k:5s} lr {c['rl_lr']:g}, {r['steps']} steps: held-out accuracy {r['accuracy_before']:.3f} -> "
            f"{r['accuracy_after']:.3f}; sync {r['sync']['bytes_per_sync']:,} B/step; step "
            f"{r['step_seconds_median']:.4f} s; trainer peak RSS {r['trainer_peak_rss_bytes'] / 2**20:.0f} MiB"
            f"  ({rel(rec.dir)})")


def reshard_section(cfg, size: str) -> tuple[str, bool]:
    """The hybrid engine's reshard on two gloo ranks (the committed record, else measured now): bytes received
    per device against HybridFlow's formula and the predictor, the collectives, memory of each layout; and
    whether the measured bytes equal the formula."""
    lines = []
    try:
        reshard = latest(reference_root("cpu"), "hybrid_reshard")
    except RlmLabError as e:
        lines.append(str(e))
        reshard = measure_reshard(size, repo_root() / "_build" / "runs" / f"{size}-ch05")
    rr = reshard.results
    hyb = get_placement("hybrid", cluster(rr["world"]), algo_roles(cfg), gen_tp=1)
    pp = predict_placement(hyb, rr["model"], algorithm("grpo", 0), workload(run_config("cpu")), "cpu-2core-epyc",
                           cluster(rr["world"]))
    lines += [f"model {rr['model']}: M = {rr['param_bytes']:,} B of parameters; s = {rr['world']}, t_g = 1",
              f"received per device: measured {rr['measured_received_per_device']:,.0f} B, formula "
              f"{rr['formula_received_per_device']:,.0f} B; predictor (all devices) {pp.reshard_bytes:,.0f} B",
              f"all-gather calls {rr['allgather']['calls']}, message {rr['allgather']['bytes']:,} B; back to training: "
              f"{rr['back_bytes']} B; during generation: {rr['generate_comm_bytes']} B",
              f"peak RSS of a rank: training layout {rr['train_peak_bytes'] / 2**20:.0f} MiB, generation layout "
              f"{rr['generate_peak_bytes'] / 2**20:.0f} MiB  ({rel(reshard.dir)})"]
    return "\n".join(lines), rr["measured_received_per_device"] == rr["formula_received_per_device"]


HYB_KEYS = ("measured", "predicted", "error", "met", "first", "later", "persist", "model_mib", "gen_peak", "train_peak")


def hybrid_section(hyb_rec, hyb_rows: list[dict], records: dict) -> tuple[str, object, dict]:
    """The hybrid engine end to end (GRPO under DeepSpeed ZeRO-3, ``ch05_hybrid``): the step measured and
    predicted, the gathers and the bytes each rank received against the formula, the peaks of both layouts,
    the stage times beside the colocated run's; its timeline; and every ``ch05_hyb_*`` value of the prose."""
    if hyb_rec is None:
        return "", None, {f"ch05_hyb_{name}": NA for name in HYB_KEYS}
    hr, hrow = hyb_rec.results, hyb_rows[0]
    rs, err = hr["reshard"], hyb_rows[0]["rel_error"]
    each = rs["per_rank"][0]["allgather_bytes_each_gather"]
    first_equal = rs["first_gather_received_per_device"] == rs["formula_received_per_device"]
    later_gap = rs["measured_received_per_device"] / rs["formula_received_per_device"] - 1
    lines = [
        f"{hr['describe']}: {hr['parallelism']['wrapped']}, ZeRO stage {hr['parallelism']['zero_stage']}, "
        f"{hr['world']} ranks x {hr['trainer_threads']} thread, {hr['steps']} steps; load {hrow['load_start']} -> "
        f"{hrow['load_end']}  ({rel(hyb_rec.dir)})",
        f"step: measured {hrow['measured_s']:.4f} s, predicted {hrow['predicted_s']:.4f} s ({100 * err:+.1f} %)",
        f"gathers per rank: {len(each)} (one per generation); all-gather messages {each[0]:,} B in the first, "
        f"{', '.join(f'{b:,}' for b in sorted(set(each[1:])))} B in each later one; the release sent "
        f"{rs['per_rank'][0]['release_bytes']} B",
        f"received per device: first gather {rs['first_gather_received_per_device']:,.0f} B, later ones "
        f"{rs['measured_received_per_device']:,.0f} B; formula M (s - t_g) / (t_g s) = "
        f"{rs['formula_received_per_device']:,.0f} B with M = {rs['param_bytes']:,} B",
        f"first gather equal to the formula: {first_equal}; later ones {100 * later_gap:+.2f} %: "
        f"{rs['persistent_param_bytes']:,} B of small parameters stay replicated after their first gather",
        f"gather {rs['gather_seconds_mean'] * 1e3:.1f} ms and release {rs['release_seconds_mean'] * 1e3:.1f} ms "
        f"per generation; predicted reshard {hr['prediction']['phases']['reshard'] * 1e3:.2f} ms"]
    for pr_ in rs["per_rank"]:
        lines.append(f"rank {pr_['rank']}: peak RSS generation layout {pr_['generate_peak_rss_bytes'] / 2**20:.0f} MiB, "
                     f"training layout {pr_['train_peak_rss_bytes'] / 2**20:.0f} MiB; its shard {pr_['shard_bytes']:,} B")
    col = records["colocated"].results["stage_seconds_mean"] if "colocated" in records else {}
    lines.append(f"{'stage (mean s)':16s} {'colocated':>10s} {'hybrid':>10s}")
    for st, t in hr["stage_seconds_mean"].items():
        lines.append(f"{st:16s} {col.get(st, float('nan')):10.4f} {t:10.4f}")
    values = {"ch05_hyb_measured": text(hrow["measured_s"], ".3f"), "ch05_hyb_predicted": text(hrow["predicted_s"], ".3f"),
              "ch05_hyb_error": text(err, "+.0%"), "ch05_hyb_met": step_word(hrow),
              "ch05_goal": text(GOAL, ".0%"), "ch05_hyb_first": "equal to" if first_equal else "not equal to",
              "ch05_hyb_later": text(later_gap, "+.2%"),
              "ch05_hyb_persist": f"{rs['persistent_param_bytes']:,}".replace(",", "\u2009"),  # thin-space thousands
              "ch05_hyb_model_mib": text(rs["param_bytes"] / 2**20, ".1f"),
              "ch05_hyb_gen_peak": text(rs["per_rank"][0]["generate_peak_rss_bytes"] / 2**20, ".0f"),
              "ch05_hyb_train_peak": text(rs["per_rank"][0]["train_peak_rss_bytes"] / 2**20, ".0f")}
    return "\n".join(lines), timeline(hyb_rec, steps=3, title=f"hybrid: {hr['describe']}"), values


def hybrid_memory_section() -> tuple[str, dict]:
    """The hybrid placement's peaks on the ``small`` model (``ch05_hybrid_memory``) beside the cost model's memory
    per device for its training layout, and the ``ch05_hybm_*`` values of the prose."""
    try:
        hm = latest(reference_root("cpu"), "hybrid_memory")
    except RlmLabError as e:
        return str(e), {f"ch05_hybm_{name}": NA for name in ("model", "gen", "train", "cmp", "verdict")}
    mr = hm.results
    lines = [f"rank {pr_['rank']}: peak RSS generation layout {pr_['generate_peak_rss_bytes'] / 2**20:.0f} MiB, "
             f"training layout {pr_['train_peak_rss_bytes'] / 2**20:.0f} MiB; its shard {pr_['shard_bytes'] / 2**20:.1f} MiB"
             for pr_ in mr["reshard"]["per_rank"]]
    m_mib = mr["reshard"]["param_bytes"] / 2**20
    lines.append(f"{hm.config['run']['model']}: M = {m_mib:.1f} MiB of parameters, {mr['steps']} steps, load "
                 f"{mr['load_average_start'][0]} -> {mr['load_average_end'][0]}  ({rel(hm.dir)})")
    pm = predicted_memory(hm)["all"]
    lines.append("predicted per device, training layout: " + ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in pm.items()))
    r0 = mr["reshard"]["per_rank"][0]
    diff = (r0["train_peak_rss_bytes"] - r0["generate_peak_rss_bytes"]) / 2**20
    return "\n".join(lines), {
        "ch05_hybm_model": text(m_mib, ".0f"), "ch05_hybm_gen": text(r0["generate_peak_rss_bytes"] / 2**20, ".0f"),
        "ch05_hybm_train": text(r0["train_peak_rss_bytes"] / 2**20, ".0f"),
        "ch05_hybm_cmp": f"{abs(diff):.0f} MiB {'below' if diff > 0 else 'above'}",
        "ch05_hybm_verdict": "the gathered copy fit within the room the training step needs anyway (activations, "
        "gradients, the per-layer gathers), so generating from a full copy raised no peak here: the hybrid "
        "engine's premise (HybridFlow §5.4)" if diff > 0 else
        "the gathered copy raised the peak above the training step's, so here the reshard costs memory"}


def ppo_split_section() -> tuple[str, list, list[dict]]:
    """PPO colocated against split (the critic on its own core): predicted and measured steps, the critic's
    stages on the trainer, whether both placements got the same rewards; their timelines; and the rows."""
    lines = []
    try:
        ppo_records = {key: latest(reference_root("cpu"), key) for key in PPO_KEYS}
    except RlmLabError as e:
        ppo_records = {}
        lines.append(str(e))
    ppo_rows = comparison(ppo_records)
    for key, r in zip(ppo_records, ppo_rows):
        res = ppo_records[key].results
        stages = res["stage_seconds_mean"]
        lines.append(f"{key:14s} {res['describe']:42s} predicted {r['predicted_s']:.4f} s, measured {r['measured_s']:.4f} s "
                     f"({100 * r['rel_error']:+.1f} %); values {stages.get('values', 0) * 1e3:.1f} ms, critic_update "
                     f"{stages.get('critic_update', 0) * 1e3:.1f} ms on the trainer; load {r['load_start']} -> "
                     f"{r['load_end']}  ({rel(r['dir'])})")
    figures = []
    if len(ppo_records) == 2:
        a, b = (ppo_records[k].results["rewards"] for k in PPO_KEYS)
        lines.append(f"same rewards in both placements ({len(a)} steps): {a == b}")
        figures = [timeline(rec, steps=3, title=f"{key}: {rec.results.get('describe')}") for key, rec in ppo_records.items()]
    return "\n".join(lines), figures, ppo_rows


def lora_memory_section() -> tuple[str, dict]:
    """Full fine-tuning against LoRA with a reference model (beta > 0), colocated: the state counted in the live
    trainer (reference, trainable, AdamW, actor) and the trainer's peak RSS, and what LoRA saves; and the
    records (``ch05_memory_{full,lora}``, empty in a checkout without them)."""
    mem, why = full_and_lora("memory")
    if why:
        return why, {}
    lines = [_state_line(k, rec) for k, rec in mem.items()]
    f, l = (mem[k].results for k in ("full", "lora"))

    def held(sb):  # the actor (base + adapters), the reference copy, AdamW's state
        return sb["actor_parameters"] + sb["reference_parameters"] + sb["optimizer_state"]

    lines.append(f"LoRA saves {(held(f['state_bytes']) - held(l['state_bytes'])) / 2**20:.0f} MiB of state and "
                 f"{(f['trainer_peak_rss_bytes'] - l['trainer_peak_rss_bytes']) / 2**20:.0f} MiB of peak RSS")
    return "\n".join(lines), mem


def _state_line(k: str, rec) -> str:
    sb = rec.results["state_bytes"]
    return (f"{k:5s} {rec.config['run']['model']}: reference {sb['reference_parameters'] / 2**20:6.1f} MiB, "
            f"trainable {sb['actor_trainable'] / 2**20:6.2f} MiB, AdamW state {sb['optimizer_state'] / 2**20:6.2f} "
            f"MiB, actor {sb['actor_parameters'] / 2**20:6.1f} MiB; trainer peak RSS "
            f"{rec.results['trainer_peak_rss_bytes'] / 2**20:.0f} MiB  ({rel(rec.dir)})")


def predicted_memory_text(mem: dict) -> str:
    """The cost model's memory for the two LoRA-memory configurations, from the config alone, against the state
    counted in the live trainer (weights: actor + reference; optimizer)."""
    lines = []
    for k, rec in mem.items():
        pm, sb = predicted_memory(rec)["all"], rec.results["state_bytes"]
        counted = {"weights": sb["actor_parameters"] + sb["reference_parameters"], "optimizer": sb["optimizer_state"]}
        for part in ("weights", "optimizer"):
            lines.append(f"{k:5s} {part:9s} predicted {pm[part]:>13,} B, counted {counted[part]:>13,} B "
                         f"({'equal' if pm[part] == counted[part] else f'{100 * (pm[part] / counted[part] - 1):+.2f} %'})")
    return "\n".join(lines)


def published_figure(rep: dict):
    """Predicted against published for the registry's cases under a bar (from the committed prediction record):
    ratios (speed-ups and generation shares) on the left, absolute step times on the right, both on log axes with
    the line of equality and the bar's band (|error| <= 25 % and 50 %); calibration cases grey, validation cases
    blue, the fresh rounds' validation cases orange. Cases the predictor does not price are left out."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4.4))
    for ax, group, bar, unit in ((axes[0], "ratio", BARS["ratio_median"], "speed-up or share"),
                                 (axes[1], "step", BARS["step_median"], "step time (s)")):
        rows = [r for r in rep["rows"] if r["group"] == group and r["error_value"] is not None]
        kinds = (("calibration", "0.6", "o", lambda r: r["split"] == "calibration"),
                 ("validation", "tab:blue", "o", lambda r: r["split"] == "validation" and r["source"] not in FRESH_SOURCES),
                 ("validation, fresh rounds", "tab:orange", "D",
                  lambda r: r["split"] == "validation" and r["source"] in FRESH_SOURCES))
        for label, colour, marker, pick in kinds:
            pts = [(r["published_value"], r["published_value"] * (1 + r["error_value"])) for r in rows if pick(r)]
            if pts:
                ax.scatter(*zip(*pts), c=colour, marker=marker, s=28, label=f"{label} ({len(pts)})", zorder=3)
        vals = [v for r in rows for v in (r["published_value"], r["published_value"] * (1 + r["error_value"]))]
        lo, hi = min(vals) / 1.5, max(vals) * 1.5
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
        ax.fill_between([lo, hi], [lo * (1 - bar), hi * (1 - bar)], [lo * (1 + bar), hi * (1 + bar)], color="0.9",
                        zorder=0, label=f"|error| <= {bar:.0%}")
        ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel=f"published {unit}",
               ylabel=f"predicted {unit}", title=f"{'ratios' if group == 'ratio' else 'absolute step times'}")
        if group == "ratio":
            ticks = [t for t in (0.25, 0.5, 1, 2, 3) if lo <= t <= hi]
            ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
            ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
        ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    plt.close(fig)
    return fig
