"""The function every rank runs (under elastic_launch, torchrun or srun): the launch skeleton.

Set up the rank (device, threads, process group with a finite timeout), warm the group up,
record the launch in meta.json, then for every unit of the kind: measure it (every rank),
write its tables as one part and show it (rank 0). Telemetry samples every unit's window.

Faults: every unit runs under a wall-clock limit (a watchdog thread ends a hung rank with a
message naming the unit); each rank notes the unit it entered in <run>/.progress/ so the
launcher can say which ranks never arrived; an exception names the unit it happened in; a
rank dies with its launcher (PR_SET_PDEATHSIG), so `kill -9` of the launcher leaves no orphan;
Ctrl-C / SIGTERM end a rank at once, except that rank 0 first writes the case it holds (at most
STOP_GRACE_S).
"""

import ctypes
import functools
import gc
import json
import os
import signal
import sys
import threading
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from bench import telemetry
from bench.distributed import liveness
from bench.distributed.env import init_rank
from bench.errors import LaunchError
from bench.harness.session import Job, finish_meta, open_launch, start_meta
from bench.results.metadata import utc_now
from bench.results.rundir import RunDir
from bench.results.store import RunWriter, WriteError
from bench.timing import deadline
from bench.timing.progress import Progress

CASE_TIMEOUT_EXIT = 124  # a rank's exit code when its case exceeded the wall-clock limit
FLOOR_S = 60.0  # the least a derived limit allows, whatever the budget
MARGIN = 20.0  # derived limit = MARGIN x the unit's estimated seconds (at least FLOOR_S)
NO_ESTIMATE_S = 600.0  # derived limit where the kind cannot estimate a unit


class CaseError(LaunchError):
    """An exception inside a unit, with the unit named (its message reaches the launcher): one
    line, exit 1 (bench.cli)."""


def unit_key(unit) -> str:
    return unit.key


def case_limit_s(kind, cfg, unit) -> float:
    if cfg.case_timeout_s > 0:
        return cfg.case_timeout_s
    est = kind.estimate_s(cfg, unit)
    return max(FLOOR_S, MARGIN * est) if est else NO_ESTIMATE_S


def _die_with_parent():
    """Linux: SIGKILL this rank when its launcher dies (kill -9 leaves no orphan rank)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


class Watchdog:
    """Ends this rank (exit CASE_TIMEOUT_EXIT) when the armed unit outlives its limit. A derived
    limit follows what the measured loop says the unit still needs (bench.timing.deadline): it
    becomes at least now + NEED_MARGIN x that; a limit the user set stays as it is."""

    def __init__(self, rank: int, run_dir: Path | None = None, explain=None, on_fire=None):
        self.rank, self.deadline, self.what, self.run_dir = rank, None, "", run_dir
        self.extendable, self.started = False, 0.0
        self.explain = explain  # (own message) -> '' or who stopped answering (bench.distributed.liveness), asked on firing
        self.on_fire = on_fire  # (message) -> None: rank 0 under an external launcher keeps the run
        self._stopped = threading.Event()  # set when the launch ends: the thread never outlives it
        self._unwatch = deadline.watch(self.extend)
        self.thread = threading.Thread(target=self._watch, daemon=True, name="distbench-watchdog")
        self.thread.start()

    def arm(self, what: str, limit_s: float, extendable: bool = False):
        self.started = time.monotonic()
        self.what, self.limit_s, self.deadline, self.extendable = what, limit_s, self.started + limit_s, extendable

    def extend(self, seconds: float):
        d = self.deadline
        if d is None or not self.extendable:
            return
        want = time.monotonic() + deadline.NEED_MARGIN * seconds
        if want > d:
            self.deadline, self.limit_s = want, want - self.started

    def disarm(self):
        self.deadline = None

    def stop(self):
        self.deadline = None
        self._unwatch()
        self._stopped.set()

    def _watch(self):
        while not self._stopped.wait(0.2):  # an Event, not time.sleep: a test that fakes sleep sees none of ours
            d = self.deadline
            if d is not None and time.monotonic() > d:
                msg = f"case {self.what} exceeded its wall-clock limit of {round(self.limit_s, 1):g} s on rank {self.rank}"
                why = _ask(self.explain, msg)
                msg += f"; {why}" if why else ""
                print(f"distbench: {msg}", file=sys.stderr, flush=True)
                _write_error_file(msg)
                if self.run_dir:
                    _note_error(self.run_dir, self.rank, msg)
                _ask(self.on_fire, msg)
                os._exit(CASE_TIMEOUT_EXIT)


def _ask(fn, *args) -> str:
    """fn(*args) or '': asked in a thread of its own and left after liveness.ASK_S, so that a
    failing explanation (a store that never replies) never keeps a failing rank from ending."""
    if not fn:
        return ""
    out = [""]

    def call():
        try:
            out[0] = fn(*args) or ""
        except Exception:  # noqa: BLE001
            pass
    t = threading.Thread(target=call, daemon=True, name="distbench-ask")
    t.start()
    t.join(timeout=liveness.ASK_S)
    return out[0]


def _write_error_file(message: str):
    """torchelastic's error file, so the launcher reads our message instead of an exit code."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if path:
        try:
            Path(path).write_text(json.dumps({"message": {"message": message, "extraInfo": {
                "py_callstack": "", "timestamp": str(int(time.time()))}}}))
        except OSError:
            pass


def _note_progress(run_dir: Path, rank: int, index: int, key: str, state: str):
    try:
        d = run_dir / ".progress"
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f".rank{rank}.tmp"
        tmp.write_text(json.dumps({"rank": rank, "index": index, "unit": key, "state": state, "t": time.time()}))
        os.replace(tmp, d / f"rank{rank}.json")
    except OSError:
        pass


def _note_error(run_dir: Path, rank: int, message: str):
    """This rank's own cause of failure, timestamped: the launcher picks the earliest one that is not
    a consequence of another rank's death (elastic reports only the first process it notices)."""
    try:
        d = run_dir / ".progress"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"rank{rank}.error").write_text(json.dumps({"rank": rank, "t": time.time(), "message": message}))
    except OSError:
        pass


def _fault(index: int, rank: int, where: str = "enter"):
    """Test-only fault injection (see tests/test_faults.py): DISTBENCH_FAULT is a comma-separated
    list of <action>:<rank>:<unit index>. At a unit's start: sleep, exit, raise, kill, mismatch;
    between measuring a unit and writing it: slowwrite (2 s)."""
    for spec in filter(None, os.environ.get("DISTBENCH_FAULT", "").split(",")):
        action, r, i = spec.split(":")
        if int(r) != rank or int(i) != index or (action == "slowwrite") != (where == "write"):
            continue
        if action == "sleep":
            time.sleep(3600)
        elif action == "exit":
            os._exit(1)
        elif action == "raise":
            raise ValueError("injected fault")
        elif action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif action == "mismatch":  # a collective whose size differs from the other ranks'
            dist.all_reduce(torch.zeros(1000 + rank))
        elif action == "slowwrite":
            time.sleep(2.0)


def release_between_cases(device: torch.device):
    """Before each unit: what the previous one left behind is freed, so that the peaks a unit
    records are its own. gc.collect() frees reference cycles (a trainer's modules, activations and
    optimizer state can sit in one until the collector happens to run); empty_cache() gives the
    freed blocks back (reserved memory would otherwise carry over); reset_peak_memory_stats()
    starts the peaks at what is still allocated. Only this rank's own device is touched."""
    gc.collect()
    if device.type == "cuda" and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


STOP_GRACE_S = 5.0  # how long rank 0 may go on with the case it holds after Ctrl-C / SIGTERM
_stop = {"held": False, "signum": None}


def _quiet_stop(signum, frame):
    """Ctrl-C / SIGTERM reach the ranks through the launcher, which reports once: no traceback here.
    While rank 0 holds a case (measuring it or writing it), the stop waits until the case is on disk,
    at most STOP_GRACE_S: when one rank dies the launcher stops the others within its 0.1 s monitor
    interval, and a case every rank finished would otherwise be lost unwritten."""
    if not _stop["held"]:
        _exit_stopped(signum)
    if _stop["signum"] is None:
        _stop["signum"] = signum
        timer = threading.Timer(STOP_GRACE_S, _exit_stopped, (signum,))
        timer.daemon = True
        timer.start()


def _exit_stopped(signum: int):
    """Leave now, with 128 + signum. Under an external launcher (srun's scancel, torchrun's agent)
    rank 0 first marks its run interrupted and says how to resume it: no launcher of ours does."""
    hook = _stop.get("on_exit")
    if hook:
        try:
            hook(signum)
        except Exception:  # noqa: BLE001 - a failed note never keeps a stopped rank alive
            pass
    os._exit(128 + signum)


def _note_stopped(run_dir: Path, kind_name: str, run_id: str, signum: int):
    _note_end(run_dir, "interrupted", f"distbench: stopped by {signal.Signals(signum).name}; finished cases are kept "
              f"in {run_dir}; continue with: distbench {kind_name} --resume {run_id} (same options)")


def _note_failed(run_dir: Path, kind_name: str, run_id: str, message: str = ""):
    _note_end(run_dir, "failed", f"distbench: finished cases are kept in {run_dir}; after fixing the cause, continue "
              f"with: distbench {kind_name} --resume {run_id} (same options)")


def _note_end(run_dir: Path, state: str, line: str):
    """Rank 0 under an external launcher (no launcher of ours reports): the finished cases merged
    as after any early end (bench.harness.run._stop), the run's state, and how to go on."""
    w = RunWriter.at(run_dir)
    w.finalize()
    w.update_meta(lambda m: {**m, "state": state, "ended_utc": utc_now()})
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


@contextmanager
def _stops_held(held: bool):
    """A stop that arrives inside takes effect at the end, whatever happened after it (an error in
    a collective with a rank already gone is its consequence, not a cause to report)."""
    _stop["held"] = held
    try:
        yield
    finally:
        _stop["held"] = False
        if _stop["signum"] is not None:
            _exit_stopped(_stop["signum"])


@record
def worker_main(job: Job) -> dict:
    _die_with_parent()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _quiet_stop)
        signal.signal(signal.SIGTERM, _quiet_stop)
    warnings.filterwarnings("ignore", category=FutureWarning, module="torch")
    nccl_file = os.environ.get("NCCL_DEBUG_FILE", "")
    if "{run_dir}" in nccl_file:  # a plan's placeholder (allreduce NCCL variants): read before NCCL starts
        if job.run_id:
            nccl_file = nccl_file.replace("{run_dir}", str(RunDir.of(job.config, job.run_id).path))
            Path(nccl_file).parent.mkdir(parents=True, exist_ok=True)
            os.environ["NCCL_DEBUG_FILE"] = nccl_file
        else:
            os.environ.pop("NCCL_DEBUG_FILE")
    t0 = time.perf_counter()
    info = init_rank(job.backend, job.config.timeout_s)
    init_s = time.perf_counter() - t0
    try:
        return run_launch(job, info, init_s)
    except Exception as e:  # noqa: BLE001 - leave the cause where the launcher looks, then fail as before
        run_dir = RunDir.of(job.config, job.run_id or "").path
        if job.run_id:
            _note_error(run_dir, info.rank, f"{type(e).__name__}: {e}")
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _heartbeat(launch, info):
    """This rank's heartbeat in the launch's store, the question to ask when a case hangs or fails,
    and on rank 0 the stalls of a case (bench.distributed.liveness); Nones for one rank or without
    a store address."""
    if info.world < 2 or "MASTER_ADDR" not in os.environ:
        return None, None, None
    keys = [f"distbench/alive/{launch.run_id}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/{r}"
            for r in range(info.world)]
    beat = liveness.Heartbeat(keys[info.rank])

    def explain(own: str) -> str:
        beat.bye(own)  # before the question: a peer asking meanwhile knows this rank ended on its own error
        return liveness.explain(beat, keys, launch.hosts, info.rank)
    stalls = liveness.Stalls(beat, keys, lambda: launch.hosts) if info.rank == 0 else None
    return beat, explain, stalls


def _mark_degraded(tables: dict, note: str):
    """A case whose heartbeats stalled says so in its rows' `degraded` (kept with what it had)."""
    for row in tables.get("results", []) if note else []:
        row["degraded"] = "; ".join(x for x in (row.get("degraded") or "", note) if x)


def run_launch(job: Job, info, init_s: float) -> dict:
    """Every unit of one launch (one world size, one process group) not in job.skip. Returns
    {"run_id", "wrong" (summed over ranks), "dir" (rank 0; None elsewhere)}."""
    kind, cfg = job.kind, job.config
    launch = open_launch(job, info, init_s)
    units, notes = kind.units(cfg, info.world, job.meta)
    todo = [(i, u) for i, u in enumerate(units, 1) if unit_key(u) not in job.skip]  # i: index in the sweep
    if launch.oversubscribed:
        notes = [*notes, launch.oversubscribed_note]
    key = job.launch_key or str(info.world)
    run_dir = RunDir.of(cfg, launch.run_id).path
    writer = live = None
    if info.rank == 0:
        writer = RunWriter(cfg.out, cfg.name, launch.run_id, part_prefix=job.part_prefix or f"w{info.world}-")
        start_meta(writer, launch, key, {"cases": len(units), "notes": notes})
        live = kind.report.live()
        live.start(launch, [u for _, u in todo])
    external = job.meta.get("launcher", "self") != "self"  # srun / torchrun / mpirun: no launcher of ours reports
    if writer and external:
        _stop["on_exit"] = functools.partial(_note_stopped, writer.dir, kind.name, launch.run_id)
    launch.tel = telemetry.start(job, info, writer)
    beat, explain, stalls = _heartbeat(launch, info)
    failed = functools.partial(_note_failed, writer.dir, kind.name, launch.run_id) if writer and external else None
    dog = Watchdog(info.rank, run_dir if job.run_id else None, explain=explain, on_fire=failed)
    progress = Progress(len(todo)) if info.rank == 0 else None
    rows = wrong = 0

    def keep(tables: dict, done_key: str | None, seconds: float | None = None):
        nonlocal rows, wrong
        writer.write_case(tables, done=(key, done_key, seconds) if done_key else None)  # parts and mark: all or nothing
        live.done(tables)
        results = tables.get("results", [])
        rows += len(results)
        wrong += sum(int(r.get("wrong") or 0) for r in results)

    try:
        for n, (i, unit) in enumerate(todo, 1):
            k = unit_key(unit)
            _fault(i, info.rank)
            _note_progress(run_dir, info.rank, i, k, "entered")
            if live:
                live.unit(unit, n, len(todo))
            release_between_cases(info.device)
            started = time.perf_counter()  # the case's wall time, stored for --dry-run's estimates
            dog.arm(k, case_limit_s(kind, cfg, unit), extendable=cfg.case_timeout_s <= 0)
            if stalls:
                stalls.start()
            with _stops_held(writer is not None):
                try:
                    tables = kind.measure(unit, launch)
                except WriteError:
                    raise  # the store refused a write (a full disk): its own line names the path and what is kept
                except Exception as e:  # noqa: BLE001 - name the unit, keep the cause, say who stopped answering
                    msg = f"case {k} failed on rank {info.rank}: {type(e).__name__}: {e}"
                    why = _ask(explain, msg)
                    msg += f"; {why}" if why else ""
                    _ask(failed, msg)
                    raise CaseError(msg) from e
                dog.disarm()
                if stalls:
                    _mark_degraded(tables, stalls.note())
                _fault(i, info.rank, "write")
                if writer:
                    keep(tables, k, time.perf_counter() - started)
                    progress.tick(k)
        extra = kind.after_units(cfg, launch) if kind.after_units else None
        if writer and extra:
            keep(extra, None)
    finally:
        dog.stop()
        if beat:
            beat.stop()
        launch.tel.close()
    if writer:
        finish_meta(writer, key, rows=rows, wrong=wrong)
    wrong = launch.comm.reduce_sum(wrong)
    return {"run_id": launch.run_id, "wrong": wrong, "dir": str(writer.dir) if writer else None}
