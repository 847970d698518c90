"""nccl-tests' options that change what a printed figure means, read from the log's own lines and
from the program's command line, and what each changes.

Sources (NVIDIA/nccl-tests at a0b82b2, NCCL_TESTS_VERSION 2.19.6, unless said):
- src/common.cu main: getopt_long("t:g:b:e:i:f:n:m:w:N:p:I:K:c:o:d:r:z:y:T:hG:C:a:R:x:D:V:J:S:M:u:"):
  every option takes a value (strtol base 0 for the numbers), `-a3`, `-a 3`, `--average=3` and
  `--average 3` alike; README.md "Arguments" says what each does;
- src/common.cu BenchTime: -z blocks after each op (1: wait + barrier, 2: wait, 3: wait + barrier
  per outer iteration, the barrier left out of the time), -G replays the captured ops as a CUDA
  graph and divides by the launches, -C reports the host time to launch the ops (`cputime`; algbw
  and busbw still come from the synchronised time), -m groups that many ops per iteration, -I
  records a CUDA event per iteration inside the timed loop; Allreduce(.., average): -a 0 rank 0's
  time, 1 the average over processes x threads, 2 the minimum, 3 the maximum;
- src/util.cu writeDeviceReport: `# nThread T nGpus G minBytes .. warmup iters: W iters: N agg iters:
  M validation: V graph: G unalign: U` (agg iters and graph from 2.13, src/common.cu at 51af557;
  unalign from eb0d3d2, 2026), `# Blocking Enabled: ...` (one sentence per -z value; before
  c78b8bf, 2026, one sentence for any -z), `# Per-Iteration Report: ...[; summary skips first K
  iterations]` (-I 1, -K); writeResultHeader: `cputime` for -C 1, `i_min .. i_cv%` for -I 1,
  `timestamp` for -S 1 (a62c975, 2.17.6; -T is the timeout, not the timestamp).
What the log prints wins over its command line (nccl-tests ignores an option its build does not
support and says so); a command line fills in what the log does not print, -a above all (never
printed). Where neither says, nccl-tests' default is assumed and the file's note says so.
"""

import re
import shlex
from dataclasses import dataclass, field

from bench.errors import BenchError

# -a: how the ranks' times make the figure (src/common.cu Allreduce; the help text "<0=RANK0/1=AVG/2=MIN/3=MAX>")
AVERAGE = {0: "rank0", 1: "avg", 2: "min", 3: "max"}
# short flag -> long name, for the command line; every nccl-tests option takes a value
LONG = {"t": "nthreads", "g": "ngpus", "b": "minbytes", "e": "maxbytes", "i": "stepbytes", "f": "stepfactor",
        "n": "iters", "m": "agg_iters", "w": "warmup_iters", "N": "run_cycles", "p": "parallel_init", "c": "check",
        "o": "op", "d": "datatype", "r": "root", "z": "blocking", "y": "stream_null", "T": "timeout",
        "G": "cudagraph", "C": "report_cputime", "S": "report_timestamps", "J": "output_file", "a": "average",
        "R": "local_register", "x": "cta_policy", "D": "device_implementation", "V": "device_cta_count",
        "M": "memory", "u": "unalign", "I": "per_iter_timing", "K": "per_iter_skip"}
SHORT = {v: k for k, v in LONG.items()}
# the options that change what the time figure measures, in the order tool_options spells them,
# with nccl-tests' default (README.md "Arguments")
DEFINING = {"z": 0, "G": 0, "C": 0, "m": 1, "I": 0, "R": 0, "D": 0, "u": 0}
DEFAULTS = {**DEFINING, "a": 1, "c": 1, "S": 0, "K": 0, "d": "float", "o": "sum", "t": 1, "g": 1, "N": 1}
# `# Blocking Enabled: ...` sentences -> -z (util.cu at a0b82b2; common.cu at c78b8bf and before)
_BLOCKING = (("wait and barrier after each outer iteration", 3), ("wait after each inner iteration", 2),
             ("wait and barrier after each inner iteration", 1), ("(no barrier)", 2),
             ("wait for completion and barrier after each collective", 1))
_NTHREAD = {"agg iters": "m", "validation": "c", "graph": "G", "unalign": "u"}


@dataclass(kw_only=True)
class Options:
    """Each option's value and where it was read: {flag: (value, 'line 4: ...' | 'the command line' |
    'nccl-tests' default ...')}."""

    said: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    command: bool = False  # whether the log records the program's command line

    def value(self, flag: str):
        return self.said[flag][0] if flag in self.said else DEFAULTS.get(flag)

    def put(self, flag: str, value, where: str):
        """A value the log's own lines print: it wins over the command line's, and a conflict is noted."""
        old = self.said.get(flag)
        if old is not None and old[1] == "the command line" and old[0] != value:
            self.notes.append(f"-{flag} {old[0]} on the command line, but {where} says {value}: the log's value is "
                              "kept (nccl-tests ignores an option its build does not support)")
        self.said[flag] = (value, where)

    def from_command(self, flag: str, value):
        """A value the command line gives: the log's own line, where it printed one, is kept."""
        old = self.said.get(flag)
        if old is None or old[1] == "the command line":
            self.said[flag] = (value, "the command line")
        elif old[0] != value:
            self.notes.append(f"-{flag} {value} on the command line, but {old[1]} says {old[0]}: the log's value is "
                              "kept (nccl-tests ignores an option its build does not support)")

    @property
    def rank_reduce(self) -> str:
        return AVERAGE[self.value("a")]

    @property
    def tool_options(self) -> str:
        """The options that change what the figure means, where not nccl-tests' default: '-z 1 -G 10'
        ('' = the defaults; the row column tool_options)."""
        return " ".join(f"-{f} {self.value(f)}" for f, d in DEFINING.items() if self.value(f) != d)

    def record(self) -> dict:
        """meta.json source.files[].options: every option read and where from, and the figure's options."""
        out = {f"-{f}": {"value": v, "from": w} for f, (v, w) in sorted(self.said.items())}
        if "-a" not in out:
            out["-a"] = {"value": 1, "from": "nccl-tests' default: its command line has no -a" if self.command else
                         "assumed: nccl-tests' default (the log records no command line, and nccl-tests never "
                         "prints -a)"}
        return out


def program_index(argv: list[str]) -> int | None:
    """Where the nccl-tests program is on a command line (`./build/all_reduce_perf`, `alltoall_perf_mpi`)."""
    for i, a in enumerate(argv):
        if re.search(r"(?:^|/)[a-z0-9_]+_perf(?:_mpi)?$", a):
            return i
    return None


def from_argv(argv: list[str], opts: Options, path: str) -> None:
    """The program's own options (what follows the program on its command line)."""
    at = program_index(argv)
    opts.command = at is not None
    args = argv[at + 1:] if at is not None else []
    i = 0
    while i < len(args):
        a, flag, val = args[i], None, None
        if a.startswith("--") and a[2:].split("=", 1)[0] in SHORT:
            name, _, val = a[2:].partition("=")
            flag, val = SHORT[name], (val if "=" in a else None)
        elif re.fullmatch(r"-[A-Za-z].*", a) and a[1] in LONG:
            flag, val = a[1], (a[2:] or None)
        if flag is not None and val is None and i + 1 < len(args):
            i += 1
            val = args[i]
        if flag is not None and val is not None:
            opts.from_command(flag, _value(flag, val))
        i += 1
    a = opts.value("a")
    if a not in AVERAGE:
        raise BenchError(f"'{path}': -a {a} on its command line: nccl-tests documents -a 0 (rank 0), 1 (average), "
                         "2 (min), 3 (max) only: what its figures are is unknown")


def _value(flag: str, text: str):
    if flag in ("d", "o", "J", "b", "e", "i"):  # names and sizes (1M, 8G): kept as written
        return text
    m = re.match(r"\s*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)", text)  # strtol(optarg, NULL, 0)
    if m is None:
        return 0  # strtol reads no digits: 0, as nccl-tests takes it
    return int(m.group(1) + m.group(2), 16 if m.group(2)[:2].lower() == "0x" else 8 if m.group(2)[:1] == "0" else 10)


def from_nthread_line(body: str, where: str, opts: Options) -> None:
    """`... agg iters: 1 validation: 1 graph: 0 unalign: 0` (which of them the version prints)."""
    for label, flag in _NTHREAD.items():
        if m := re.search(rf"\b{label}: (\d+)", body):
            opts.put(flag, int(m.group(1)), where)


def from_comment(body: str, where: str, opts: Options) -> bool:
    """A `# Blocking Enabled` or `# Per-Iteration Report` line; True when it was one."""
    if body.startswith("Blocking Enabled"):
        z = next((v for text, v in _BLOCKING if text in body), 1)
        opts.put("z", z, where)
        return True
    if body.startswith("Per-Iteration Report"):
        opts.put("I", 1, where)
        if m := re.search(r"skips first (\d+) iterations", body):
            opts.put("K", int(m.group(1)), where)
        return True
    return False


def from_header(labels: list[str], where: str, opts: Options) -> None:
    if "cputime" in labels:
        opts.put("C", 1, where)
    if "i_min" in labels:
        opts.put("I", 1, where)
    if labels and labels[-1] == "timestamp":
        opts.put("S", 1, where)


def argv_of(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError:  # an unbalanced quote in an echoed shell line
        return command.split()


MEANING = {
    "tool_options": "nccl-tests' options that change what its time means, where not its default ('' = none): -z N "
                    "(1: wait and barrier after each op, 2: wait, 3: wait and barrier per iteration, barrier not "
                    "timed), -G N (ops replayed as a CUDA graph N times, time / N), -C 1 (the host time to launch "
                    "the ops, `cputime`; algbw and busbw still from the synchronised time), -m N (N ops grouped per "
                    "iteration), -I 1 (a CUDA event recorded per iteration inside the timed loop), -R N (registered "
                    "buffers), -D N (device-API implementation), -u N (misaligned buffers); compare and the report "
                    "pair only rows whose tool_options agree (null, distbench's own rows, as '')",
}
