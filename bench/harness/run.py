"""The launcher side of a run: every launch of the plan (one run id, one results directory),
then the kind's finishing step, the merge of the parts, and the closing summary, printed from
the stored run by the same code under elastic_launch, torchrun and srun.

Faults end as one message that names the rank, the signal or exception, and the case; the
finished cases stay on disk and `--resume RUN_ID` continues the run. Ctrl-C / SIGTERM: exit 130,
the run marked interrupted. `--keep-going`: after a failed case, a fresh launch from the next.
"""

import json
import logging
import os
import re
import shlex
import shutil
import signal
import sys
from contextlib import contextmanager
from pathlib import Path

import torch.distributed.elastic.agent.server.api  # noqa: F401  (creates its loggers: _quiet_torch_launcher_logs)
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

from bench.distributed.env import torch_env
from bench.distributed.provenance import launcher_facts, launcher_name
from bench.distributed.launch import launch, launched_externally
from bench.harness.session import Job, plain
from bench.errors import BenchError
from bench.kind import Kind, Plan
from bench.harness.rank import CASE_TIMEOUT_EXIT, worker_main
from bench.results import durations, fingerprint
from bench.results.metadata import git_info, new_run_id, utc_now
from bench.results.rundir import RESULTS_LINE, RunDir, WriteError
from bench.results.store import RunWriter, load_run

INTERRUPTED_EXIT = 130
RESUME_IGNORES = ("keep_going", "case_timeout_s")  # may change between a run and its resumption


@contextmanager
def env_changes(changes: dict):
    """os.environ updated by `changes` inside the block (the launcher's children inherit it)."""
    old = {k: os.environ.get(k) for k in changes}
    os.environ.update(changes)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def is_rank_zero(env=os.environ) -> bool:
    """This process is rank 0, or the launcher of a self-launched run (the one that prints)."""
    t = torch_env(env)
    return t is None or str(t.get("RANK", "0")) == "0"


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def meaningful_line(message: str) -> str:
    """The last line of a traceback that says what went wrong ('ValueError: ...'), else the first."""
    lines = [ln.strip() for ln in str(message).strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if not ln.startswith(("File ", "Traceback", "^", "~", "[")) and ":" in ln:
            return ln
    return lines[0] if lines else ""


def _progress(run_dir: Path | None) -> dict[int, dict]:
    out = {}
    for f in sorted((run_dir / ".progress").glob("rank*.json")) if run_dir else []:
        try:
            p = json.loads(f.read_text())
            out[int(p["rank"])] = p
        except (OSError, ValueError, KeyError):
            continue
    return out


def command_line(argv: list[str]) -> str:
    """The command as a user would type it again (`python -m bench` runs as bench/__main__.py)."""
    prog = os.path.basename(argv[0])
    prog = "python -m bench" if prog == "__main__.py" else prog
    return " ".join([prog, *(shlex.quote(a) for a in argv[1:])])


def failed_unit(run_dir: Path | None) -> str | None:
    prog = _progress(run_dir)
    return max(prog.values(), key=lambda p: p["index"])["unit"] if prog else None


PEER_FAILED = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "GLHF",
               "communicator was aborted", "has been aborted")  # how a rank fails when another died


def _message(f) -> str:
    return f.message.get("message", json.dumps(f.message)) if isinstance(f.message, dict) else str(f.message or "")


def rank_errors(run_dir: Path | None) -> list[dict]:
    """Every rank's own note of why it failed (bench.harness.rank._note_error), earliest first."""
    out = []
    for f in sorted((run_dir / ".progress").glob("rank*.error")) if run_dir else []:
        try:
            out.append(json.loads(f.read_text()))
        except (OSError, ValueError):
            continue
    return sorted(out, key=lambda x: (x.get("t", 0), x.get("rank", 0)))


def root_cause(e: ChildFailedError):
    """(rank, failure): the earliest failure that is not a consequence of another rank's death
    (a gloo 'connection closed by peer' on rank 0 after rank 1 raised names rank 1)."""
    order = sorted(e.failures.items(), key=lambda kv: (kv[1].timestamp, kv[0]))
    own = [(r, f) for r, f in order if not any(p in _message(f) for p in PEER_FAILED)]
    return (own or order)[0]


def describe_failure(e: BaseException, world: int, run_dir: Path | None) -> str:
    """One line: which rank, which signal or exception (its last meaningful line), in which case,
    and which ranks never arrived at that case."""
    prog = _progress(run_dir)
    where = ""
    if prog:
        last = max(prog.values(), key=lambda p: p["index"])
        behind = sorted(r for r in range(world) if prog.get(r, {}).get("index", 0) < last["index"])
        where = f" during case {last['unit']}"
        if behind:
            where += f"; rank(s) {', '.join(map(str, behind))} never arrived at it"
    notes = rank_errors(run_dir)
    own = [n for n in notes if not any(p in n["message"] for p in PEER_FAILED)]
    # A rank that died without a note (os._exit, a signal) is the cause of the peers' notes.
    if own or (notes and not isinstance(e, ChildFailedError)):
        n = (own or notes)[0]
        return f"rank {n['rank']} failed: {meaningful_line(n['message'])}{where}"
    if not isinstance(e, ChildFailedError):
        return f"{first_line(e)}{where}"
    rank, f = root_cause(e)
    if any(p in _message(f) for p in PEER_FAILED) and notes:  # every rank failed on a peer: say so
        return f"rank {notes[0]['rank']} failed: {meaningful_line(notes[0]['message'])}{where}"
    if f.exitcode < 0:
        try:
            sig = signal.Signals(-f.exitcode).name
        except ValueError:
            sig = f"signal {-f.exitcode}"
        what = f"was killed by {sig}"
        if sig == "SIGABRT":
            what += " (gloo aborts a process when ranks pass different sizes or the group breaks)"
        elif sig == "SIGKILL":
            what += " (killed from outside, e.g. the OOM killer)"
    else:
        msg = _message(f)
        reason = meaningful_line(msg) if msg and "To enable traceback" not in msg else ""
        what = f"exited with code {f.exitcode}" + (f": {reason}" if reason else "")
        if f.exitcode == CASE_TIMEOUT_EXIT:
            what = f"hung: {reason}" if reason else "hung (exceeded its case wall-clock limit)"
    return f"rank {rank} {what}{where}"


def _resume_state(kind: Kind, cfg, run_id: str) -> tuple[Path, frozenset, dict]:
    """(run dir, unit keys already done, its meta) for --resume; a changed config is refused."""
    rd = RunDir.of(cfg, run_id)
    if not rd.exists():
        raise BenchError(f"--resume {run_id}: no run '{run_id}' under {rd.suite_dir}; "
                         f"runs there: {', '.join(rd.siblings()[-5:]) or 'none'}")
    run_dir, meta = rd.path, rd.read_meta()
    if meta.get("kind") != kind.name:
        raise BenchError(f"--resume {run_id}: that run is of kind '{meta.get('kind')}', not '{kind.name}'")
    was, now = meta.get("config", {}), json.loads(json.dumps(plain(cfg)))
    diff = [f"{k}: was {was.get(k)!r}, now {now.get(k)!r}" for k in sorted(set(was) | set(now))
            if k not in RESUME_IGNORES and was.get(k) != now.get(k)]
    if diff:
        raise BenchError(f"--resume {run_id}: the configuration changed ({'; '.join(diff)}); "
                         "resume with the same options, or start a new run")
    done = frozenset(k for launch_ in meta.get("launches", {}).values() for k in launch_.get("done", []))
    return run_dir, done, meta


def _resumption(kind: Kind, cfg, run_id: str, meta: dict, record: bool) -> tuple[Path, frozenset, dict]:
    """(run dir, unit keys done, this launch's meta without the first launch's start) for --resume;
    with record=True the run is marked running again and the resumption (when, command, launcher,
    cases done before) appended to its `resumed` list."""
    run_dir, skip, _ = _resume_state(kind, cfg, run_id)
    meta = {k: v for k, v in meta.items() if k not in ("started_utc", "command_line")}
    if record:
        RunDir.at(run_dir).update_meta(lambda m: {**m, "state": "running", "resumed": [
            *m.get("resumed", []), {"utc": utc_now(), "command_line": command_line(sys.argv), "done_before": len(skip),
                                    "launcher": meta["launcher"], "launcher_facts": meta["launcher_facts"]}]})
    return run_dir, skip, meta


def run(kind: Kind, cfg, backend: str, plan: Plan, resume: str | None = None) -> int:
    """Exit code: 0 ok, 1 wrong results or a failed rank, 130 interrupted."""
    meta = {"command_line": command_line(sys.argv), "started_utc": utc_now(),
            "cwd": os.getcwd(), "launcher": launcher_name(), "launcher_facts": launcher_facts(), **git_info(), **plan.meta}
    if launched_externally():  # torchrun / srun / mpirun started the ranks: this process is one of them
        lp = plan.launches[0]
        run_id, skip, prefix = None, frozenset(), lp.part_prefix
        if resume:  # every rank reads the run (results on the shared filesystem) and skips what is done
            _, skip, meta = _resumption(kind, cfg, resume, meta, record=is_rank_zero())
            run_id, prefix = resume, lp.part_prefix + f"r{len(skip)}-"
        res = worker_main(Job(kind=kind, config=lp.config, backend=backend, world=lp.world, run_id=run_id, meta=meta,
                              launch_key=lp.key, part_prefix=prefix, skip=skip))
        if not is_rank_zero():
            return 1 if res["wrong"] else 0
        return close_run(kind, cfg, res["dir"], res["wrong"])
    _quiet_torch_launcher_logs()
    skip: frozenset = frozenset()
    if resume:
        run_dir, skip, meta = _resumption(kind, cfg, resume, meta, record=True)
        run_id = resume
    else:
        run_id = new_run_id()
        run_dir = RunDir.of(cfg, run_id).path
    wrong, out_dir = 0, None
    for lp in plan.launches:
        while True:
            job = Job(kind=kind, config=lp.config, backend=backend, world=lp.world, run_id=run_id, meta=meta,
                      launch_key=lp.key, part_prefix=lp.part_prefix + (f"r{len(skip)}-" if skip else ""), skip=skip)
            shutil.rmtree(run_dir / ".progress", ignore_errors=True)  # the ranks note this launch's progress
            try:
                with env_changes(lp.env):
                    results = launch(worker_main, (job,), nproc=lp.world)
            except (KeyboardInterrupt, SignalException):
                return _stop(kind, run_dir, "interrupted", f"distbench: interrupted; finished cases are kept in "
                             f"{run_dir}; continue with: distbench {kind.name} --resume {run_id} (same options)",
                             INTERRUPTED_EXIT)
            except Exception as e:  # noqa: BLE001 - a rank failed: say which and why, keep what was written
                refused = store_refused(e, run_dir)
                if refused:  # the disk filled (a quota, a read-only mount): the store's own line says it all
                    _stop(kind, run_dir, "failed", None, 2)
                    raise WriteError(refused) from None
                setting = f" with {lp.env}" if lp.env else ""
                print(f"distbench: a rank failed at world {lp.world}{setting}: {describe_failure(e, lp.world, run_dir)}",
                      file=sys.stderr)
                bad = failed_unit(run_dir)
                if cfg.keep_going and bad and bad not in skip:
                    RunDir.at(run_dir).update_meta(lambda m: {**m, "failed_units": [*m.get("failed_units", []), bad]})
                    skip = skip | {bad} | _done(run_dir)
                    print(f"distbench: --keep-going: skipping {bad}, continuing in a fresh launch", file=sys.stderr)
                    continue
                return _stop(kind, run_dir, "failed", f"distbench: finished cases are kept in {run_dir}; after fixing "
                             f"the cause, continue with: distbench {kind.name} --resume {run_id} (same options)", 1)
            break
        wrong += results[0]["wrong"]
        out_dir = results[0]["dir"]
    return close_run(kind, cfg, out_dir, wrong)


def _quiet_torch_launcher_logs():
    """The elastic agent logs each failure as a traceback banner; we report it ourselves, in one line."""
    names = [n for n in logging.root.manager.loggerDict if n.startswith(("torch.distributed.elastic",
                                                                         "torch.multiprocessing"))]
    for name in {"torch.distributed.elastic", "torch.multiprocessing", *names}:
        logging.getLogger(name).setLevel(logging.CRITICAL)


def _done(run_dir: Path) -> frozenset:
    meta = RunWriter.at(run_dir).read_meta()
    return frozenset(k for launch_ in meta.get("launches", {}).values() for k in launch_.get("done", []))


def _stop(kind: Kind, run_dir: Path, state: str, message: str | None, code: int) -> int:
    """A run that ends early: merge what finished, mark the state, say how to go on."""
    if (run_dir / "meta.json").exists():
        w = RunWriter.at(run_dir)
        try:
            w.finalize()
            w.update_meta(lambda m: {**m, "state": state, "ended_utc": utc_now()})
        except WriteError:  # the disk is still full: the parts stay whole and readable, unmerged
            pass
    if message:
        print(message, file=sys.stderr)
    return code


def store_refused(e: BaseException, run_dir: Path | None) -> str | None:
    """The store's one-line WriteError message (bench.results.rundir) when a rank ended on it."""
    texts = [n["message"] for n in rank_errors(run_dir)]
    if isinstance(e, ChildFailedError):
        texts += [_message(f) for f in e.failures.values()]
    for t in texts:
        m = re.search(r"\bWriteError: (.*)", meaningful_line(t))  # also inside a CaseError's message
        if m:
            return m.group(1)
    return None


def close_run(kind: Kind, cfg, out_dir, wrong: int) -> int:
    """After the last launch: the kind's finishing step, the merge, the summary, the exit code."""
    if not out_dir:
        return 1 if wrong else 0
    if kind.finish:
        kind.finish(out_dir, cfg)
    w = RunWriter.at(out_dir)
    w.finalize()
    w.update_meta(lambda m: {**m, "state": "complete", "ended_utc": utc_now()})
    shutil.rmtree(Path(out_dir) / ".progress", ignore_errors=True)
    run_ = load_run(out_dir)
    text = kind.report.summary(run_)
    if text:
        print(text, flush=True)
    print(f"{RESULTS_LINE}{out_dir}", flush=True)
    for p in run_.problems:
        print(f"distbench: warning: {p}", file=sys.stderr)
    failed = kind.acceptance(run_, cfg) if kind.acceptance else []
    for f in failed:
        print(f"distbench: {f}", file=sys.stderr)
    if wrong:
        print(f"distbench: {wrong} wrong element(s): results were written, but the check failed", file=sys.stderr)
    return 1 if wrong or failed else 0


def dry_run(kind: Kind, cfg, plan: Plan) -> int:
    """The planned launches, units and sizes, and an estimated duration; writes nothing. A case's
    estimate is the median of its wall times in the stored runs of this kind on this machine class
    under the results root (bench.results.durations), else the kind's own (its per-size budget)."""
    machine = fingerprint.of_this_machine([lp.world for lp in plan.launches], cfg.backend)
    stored = durations.stored_case_seconds(cfg.out, kind.name, machine)
    total, counts, unknown = 0.0, {"stored": 0, "budget": 0}, []
    for lp in plan.launches:
        with env_changes(lp.env):
            units, notes = kind.units(lp.config, lp.world, plan.meta)
        print(f"# launch: world {lp.world}{' ' + json.dumps(lp.env) if lp.env else ''}: {len(units)} case(s)")
        for u in units:
            seen = stored.get(u.key)
            est = durations.estimate_s(seen) if seen else kind.estimate_s(lp.config, u)
            if est is None:
                unknown.append(u.key)
                print(f"  {u.key}  (no estimate)")
                continue
            total += est
            counts["stored" if seen else "budget"] += 1
            how = f"median of {len(seen)} stored run(s)" if seen else "budget"
            print(f"  {u.key}  ~{est:.2f} s ({how})")
        for n in notes:
            print(f"# note: {n}")
    print(f"# estimated duration: {total:.1f} s ({counts['stored']} case(s) from stored runs on this machine "
          f"({machine.slug()}) under {cfg.out}, {counts['budget']} from the per-size budgets), plus start-up "
          "(a few seconds per launch); nothing was written")
    if unknown:
        print(f"# {len(unknown)} case(s) without an estimate (no stored run of the case on this machine): "
              + ", ".join(unknown))
    return 0
