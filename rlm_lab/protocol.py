"""The measurement protocol: how two arms are compared on a shared machine so that the verdict holds.

:func:`compare` measures arm A against arm B (two commands the caller gives) and returns the median of the
paired ratios A_i / B_i with its bootstrap 95 % interval and the verdict word (:mod:`rlm_lab.evidence`):

1. **Fresh processes.** Every repeat is a new process (``subprocess.Popen`` of the arm's argv, e.g.
   ``python -m ...``). Steps within one process agree with each other, while the same workload in fresh
   processes minutes apart took up to 1.73x as long (median 1.20x) on the 2-core machine of the cpu records:
   the process, not the step, is the unit that repeats.
2. **Paired and interleaved, ABBA.** Pair i runs A then B when i is even and B then A when i is odd
   (A B B A A B B A ...). Pairing puts a slow minute of the machine into both members of a pair; alternating
   the order cancels, to first order, a drift across the session (a neighbour's job ending, a machine warming
   up) and any advantage of running second in a pair (files cached by the first), which the plain A B A B
   order would hand to B in every pair and so bias every ratio the same way (tests/test_protocol.py shows
   both on a command whose time drifts). An even repeat count balances the two orders.
3. **A load gate** before every repeat: wait until the 1-minute load average per core is at most
   :data:`GATE_LOAD_PER_CORE`, at most :data:`GATE_TIMEOUT_S` seconds; a repeat started after the gate
   timed out runs anyway and is marked ``gate: timeout`` (the result counts them). Why 0.75, not the
   calibration's 0.5: the load average is an exponential average over one minute, so the previous repeat of
   this same session (two busy cores for a minute: about 0.6 per core when it ends) would hold every gate
   for most of a minute; 0.75 lets this session's own tail pass and stops for anyone else's work on top of it.
   The load before and after each repeat is in the record.
4. **Repeats fixed in advance**: the size's ``protocol_repeats`` (:mod:`rlm_lab.sizes`), never "until it
   looks decided".
5. **Window and machine**: every repeat's environment carries ``$RLM_WINDOW`` (the window id), so every run
   record a child writes holds it in its provenance next to the machine key (:mod:`rlm_lab.records.provenance`);
   the protocol's own record holds both, and every repeat row the window again.

How a child reports its value: it writes one JSON object to the file named by ``$RLM_PROTOCOL_RESULT``
(:func:`report` does that, and nothing outside the protocol); ``metric`` names the key read. The protocol also
times each child's whole life (``wall_s``, usable as the metric).

Stops: Ctrl-C or SIGTERM ends the running child (SIGTERM to its process group, SIGKILL after
:data:`STOP_WAIT_S`, 5 s more for the SIGKILL to land: 15 s at most for the child, plus the interpreter's exit, which
a loaded machine delays: 19-23 s from SIGINT to exit were measured at load 6-16 on 2 cores), marks the record
``interrupted`` with the repeats done so far, and re-raises; a
SIGKILLed protocol ends its child through ``PR_SET_PDEATHSIG`` (SIGTERM, so the child can stop what it started)
and leaves its record ``running`` with the lock free, which readers refuse. Bad input is one
:class:`RlmLabError` line before any repeat runs.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .errors import RlmLabError
from .evidence import Interval, ratio_interval, ratio_word
from .host import die_with_parent, key_slug, machine_key, machine_load
from .record import RunRecord, atomic_write_json
from .records.lifecycle import interruptible, restore_handlers
from .sizes import get

GATE_LOAD_PER_CORE = 0.75
GATE_TIMEOUT_S = 300.0
GATE_POLL_S = 2.0
RUN_TIMEOUT_S = 1800.0
STOP_WAIT_S = 10.0
ORDER = "ABBA"
RESULT_ENV = "RLM_PROTOCOL_RESULT"
WINDOW_ENV = "RLM_WINDOW"  # the same variable rlm_lab.records.provenance reads


@dataclass(frozen=True)
class Arm:
    """One side of a comparison: a name and the argv of one repeat (run afresh for every repeat); ``{pair}`` in an
    argument becomes the pair's index (e.g. ``--seed {pair}``: both members of a pair train the same seed)."""

    name: str
    command: tuple

    def __post_init__(self):
        object.__setattr__(self, "command", tuple(str(c) for c in self.command))


@dataclass(frozen=True)
class Reference:
    """One committed reference of a chapter (a comparison whose records the chapter's page reads for a verdict),
    as ``rlm-lab reference`` re-measures it: the same shape in every chapter's ``cases.REFERENCES``.

    ``arms``: the names of arm A and arm B (the ratio is A / B); ``run``: ``"module:function"``, the function
    that runs ONE repeat of one arm in the calling process, ``f(arm, size, out) -> dict`` holding ``metric``
    (each repeat is a fresh ``python -m rlm_lab.cli _reference-arm ...`` process that calls it);
    ``higher_is_better``: True for a rate; ``replaces``: the committed folders under ``data/runs/<size>/``
    whose verdict this comparison re-measures; ``cpu_run_s``: the estimated seconds of one repeat at ``cpu``
    size on 2 cores (from the committed records' own times), for the chapter's budget; ``predict``:
    ``"module:function"``, ``f(arm, size, profile) -> float``, the chapter's prediction of one arm's ``metric``
    from a hardware profile (a name or a path), which ``rlm-lab reference`` asks with the window's in-situ
    profile before the window's first repeat ("": the chapter predicts no number for this comparison)."""

    name: str
    arms: tuple
    run: str
    metric: str
    higher_is_better: bool
    replaces: tuple
    cpu_run_s: float
    predict: str = ""

    def __post_init__(self):
        if len(self.arms) != 2 or self.arms[0] == self.arms[1]:
            raise RlmLabError(f"reference {self.name!r}: two arms with different names, not {self.arms!r}")
        if ":" not in self.run:
            raise RlmLabError(f"reference {self.name!r}: run must be 'module:function', not {self.run!r}")
        if self.predict and ":" not in self.predict:
            raise RlmLabError(f"reference {self.name!r}: predict must be 'module:function' or '', not {self.predict!r}")


def report(**values) -> Path | None:
    """In a child of :func:`compare`: write ``values`` (a JSON object) where the protocol reads them; outside
    the protocol (no ``$RLM_PROTOCOL_RESULT``) do nothing. Returns the file written, if any."""
    target = os.environ.get(RESULT_ENV)
    if not target:
        return None

    return atomic_write_json(target, values)


def child_main(work, say) -> int:
    """The body of a protocol child's ``main``: ``work()`` with Ctrl-C and SIGTERM ending it cleanly; an
    :class:`RlmLabError` is one ``rlm-lab: error:`` line (exit 2), an interrupt one line (exit 130). ``work``
    returns an exit code, or one run's results: those are handed to the protocol (:func:`report`), then to
    ``say`` (its summary line), and the exit code is 0."""
    interruptible()
    try:
        out = work()
    except RlmLabError as e:
        print(f"rlm-lab: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rlm-lab: interrupted", file=sys.stderr)
        return 130
    if isinstance(out, int):
        return out
    report(**out)
    say(out)
    return 0


def new_window() -> str:
    """A window id: ``$RLM_WINDOW`` when a caller opened one (e.g. a chapter's whole re-measurement), else the
    UTC time now and this machine key's short hash."""
    if os.environ.get(WINDOW_ENV):
        return os.environ[WINDOW_ENV]

    return f"w{_dt.datetime.now(_dt.timezone.utc).strftime('%Y%m%dT%H%M%SZ')}-{key_slug(machine_key())[-6:]}"


def order(pairs: int) -> list[tuple[int, str]]:
    """``[(pair, "A" | "B"), ...]`` in ABBA order: pair i runs A first when i is even, B first when odd."""
    out = []
    for i in range(pairs):
        out += [(i, "A"), (i, "B")] if i % 2 == 0 else [(i, "B"), (i, "A")]
    return out


def gate(max_per_core: float = GATE_LOAD_PER_CORE, timeout_s: float = GATE_TIMEOUT_S, poll_s: float = GATE_POLL_S,
         loadavg=os.getloadavg, sleep=time.sleep, clock=time.monotonic) -> dict:
    """Wait until the 1-minute load per core is at most ``max_per_core`` (at most ``timeout_s``). Returns
    ``{"passed", "waited_s", "load": machine_load when it passed or gave up}``."""
    t0 = clock()
    while True:
        load = machine_load(None, loadavg)
        if load["per_core"] <= max_per_core:
            return {"passed": True, "waited_s": round(clock() - t0, 3), "load": load}
        if clock() - t0 >= timeout_s:
            return {"passed": False, "waited_s": round(clock() - t0, 3), "load": load}
        sleep(poll_s)


def _check(a: Arm, b: Arm, metric: str, repeats: int, gate_load: float, gate_timeout_s: float,
           run_timeout_s: float) -> None:
    for arm in (a, b):
        if not arm.name or not arm.command:
            raise RlmLabError(f"protocol: arm {arm.name or '?'!r} needs a name and a command")
        exe = arm.command[0]
        if not (shutil.which(exe) or (os.sep in exe and os.access(exe, os.X_OK))):
            raise RlmLabError(f"protocol: arm {arm.name!r}: {exe!r} is not an executable")
    if a.name == b.name:
        raise RlmLabError(f"protocol: both arms are named {a.name!r}; the ratio needs two")
    if not metric or not isinstance(metric, str):
        raise RlmLabError("protocol: name the metric to compare (a key of the child's report, or wall_s)")
    if not isinstance(repeats, int) or repeats < 2:
        raise RlmLabError(f"protocol: {repeats!r} repeats; an interval needs at least 2 pairs")
    for what, v in (("gate load per core", gate_load), ("gate timeout", gate_timeout_s),
                    ("run timeout", run_timeout_s)):
        if not (isinstance(v, (int, float)) and v > 0):
            raise RlmLabError(f"protocol: the {what} must be a positive number, not {v!r}")


def stop(proc: subprocess.Popen, wait_s: float = STOP_WAIT_S) -> None:
    """End ``proc`` and its process group: SIGTERM, then SIGKILL after ``wait_s``."""
    for sig, wait in ((signal.SIGTERM, wait_s), (signal.SIGKILL, 5.0)):
        if proc.poll() is not None:
            break
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
    try:  # what the child left in its group after it exited (its own children)
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _last_line(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][:200] if lines else ""


def run_once(arm: Arm, folder: Path, tag: str, env: dict, timeout_s: float) -> dict:
    """One repeat of ``arm`` in a fresh process: its own session (so a stop reaches its whole group), ended by
    the kernel if this process dies (PR_SET_PDEATHSIG); stdout and stderr to ``<folder>/<tag>.log``.
    Returns ``{"wall_s", "returncode", "report", "log"}``; a child that fails or overruns is one error line."""
    log_path, result_path = folder / f"{tag}.log", folder / f"{tag}.json"
    me = os.getpid()
    env = dict(env, **{RESULT_ENV: str(result_path)})
    with open(log_path, "wb") as log:
        t0 = time.perf_counter()
        argv = [c.replace("{pair}", env.get("RLM_PROTOCOL_PAIR", "")) for c in arm.command]
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True,
                                preexec_fn=lambda: die_with_parent(signal.SIGTERM, me))
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            stop(proc)
            raise RlmLabError(f"protocol: arm {arm.name!r} ({tag}) ran past {timeout_s:g} s and was stopped") from None
        except BaseException:  # Ctrl-C, SIGTERM: the child goes with us
            stop(proc)
            raise
        wall = time.perf_counter() - t0
    stop(proc, 0.0)  # anything it left in its group
    if rc != 0:
        raise RlmLabError(f"protocol: arm {arm.name!r} ({tag}) exited {rc}: {_last_line(log_path) or 'no output'}")
    try:
        rep = json.loads(result_path.read_text()) if result_path.exists() else {}
    except ValueError:
        raise RlmLabError(f"protocol: arm {arm.name!r} ({tag}) wrote an unreadable report {result_path}") from None
    return {"wall_s": round(wall, 4), "returncode": rc, "report": rep, "log": log_path.name}


def _value(arm: Arm, tag: str, out: dict, metric: str) -> float:
    v = out["wall_s"] if metric == "wall_s" else out["report"].get(metric)
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
        raise RlmLabError(f"protocol: arm {arm.name!r} ({tag}) reported no positive {metric!r} "
                          f"(its report: {sorted(out['report'])})")
    return float(v)


def summarize(a_values, b_values, names=("A", "B"), higher_is_better: bool = False) -> dict:
    """Per-arm values, the paired ratios A_i / B_i, their estimate with its 95 % interval (the method chosen by n,
    :func:`rlm_lab.evidence.repeat_interval`; two pairs have none) and the word, said of A against B
    (``faster`` / ``slower`` when the interval excludes 1, else ``undecided``)."""
    iv: Interval = ratio_interval(a_values, b_values)
    above, below = ("faster", "slower") if higher_is_better else ("slower", "faster")
    word = ratio_word(iv, above=above, below=below)
    return {"values": {names[0]: list(a_values), names[1]: list(b_values)},
            "ratios": [x / y for x, y in zip(a_values, b_values)],
            "ratio": {"estimate": iv.estimate, "lo": iv.lo, "hi": iv.hi, "n": iv.n, "method": iv.method}, "word": word,
            "statement": f"{names[0]} / {names[1]} = {iv.text()}: "
                         + (f"{names[0]} is {word} than {names[1]}" if word != "undecided" else "undecided")}


def compare(a: Arm, b: Arm, metric: str, out: str | os.PathLike, *, size: str | None = None,
            repeats: int | None = None, higher_is_better: bool = False, gate_load: float = GATE_LOAD_PER_CORE,
            gate_timeout_s: float = GATE_TIMEOUT_S, run_timeout_s: float = RUN_TIMEOUT_S, window: str | None = None,
            env: dict | None = None, loadavg=os.getloadavg, sleep=time.sleep, say=print) -> dict:
    """Measure arm ``a`` against arm ``b`` under the protocol (module docstring); the record goes to ``out``.

    ``metric``: the key of each child's :func:`report` (or ``wall_s``); ``higher_is_better``: True for a rate
    (tokens/s), False for a time. ``repeats``: pairs, default the size's ``protocol_repeats``. Returns the
    record's results: ``repeats`` (one row per run), ``summary`` (:func:`summarize`), ``gate_timeouts``."""
    if repeats is None:
        if size is None:
            raise RlmLabError("protocol: give the size (its repeat count is fixed in rlm_lab.sizes) or repeats")
        repeats = get(size).protocol_repeats
    _check(a, b, metric, repeats, gate_load, gate_timeout_s, run_timeout_s)

    window = window or new_window()
    key = machine_key()
    config = {"arms": {"A": {"name": a.name, "command": list(a.command)},
                       "B": {"name": b.name, "command": list(b.command)}},
              "metric": metric, "higher_is_better": higher_is_better, "repeats": repeats, "size": size,
              "order": ORDER, "fresh_process": True, "window": window, "machine_key": key,
              "gate": {"max_load_per_core": gate_load, "timeout_s": gate_timeout_s, "poll_s": GATE_POLL_S},
              "run_timeout_s": run_timeout_s}
    record = RunRecord(out, config, command=None)
    folder = Path(record.dir)
    child_env = dict(os.environ if env is None else env, **{WINDOW_ENV: window})
    arms = {"A": a, "B": b}
    rows: list[dict] = []
    values = {"A": [None] * repeats, "B": [None] * repeats}
    handlers = interruptible()
    try:
        with record:
            for pair, side in order(repeats):
                arm = arms[side]
                tag = f"pair{pair:02d}-{side}"
                g = gate(gate_load, gate_timeout_s, GATE_POLL_S, loadavg=loadavg, sleep=sleep)
                started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
                res = run_once(arm, folder, tag, dict(child_env, RLM_PROTOCOL_ARM=arm.name,
                                                      RLM_PROTOCOL_PAIR=str(pair)), run_timeout_s)
                v = _value(arm, tag, res, metric)
                values[side][pair] = v
                rows.append({"pair": pair, "arm": side, "name": arm.name, "position": len(rows), "value": v,
                             "wall_s": res["wall_s"], "started": started, "window": window,
                             "gate": "ok" if g["passed"] else "timeout", "gate_waited_s": g["waited_s"],
                             "load_before": g["load"], "load_after": machine_load(None, loadavg),
                             "report": res["report"], "log": res["log"]})
                record.update(repeats=rows)
                say(f"protocol {tag} {arm.name}: {metric} {v:.4g} (load/core {g['load']['per_core']:.2f}"
                    f"{', gate timed out' if not g['passed'] else ''})")
            summary = summarize(values["A"], values["B"], (a.name, b.name), higher_is_better)
            timeouts = sum(1 for r in rows if r["gate"] == "timeout")
            record.update(summary=summary, gate_timeouts=timeouts, window=window, machine_key=key)
        say(f"protocol: {summary['statement']}" + (f" ({timeouts} repeats started over the load gate)"
                                                   if timeouts else ""))
        return record.results | {"dir": str(folder)}
    finally:
        restore_handlers(handlers)
