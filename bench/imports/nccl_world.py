"""How many ranks an nccl-tests log ran, and whether its figures agree.

nccl-tests prints one `#  Rank` line per rank (src/util.cu writeDeviceReport; under MPI rank 0
gathers every process's lines). A log without them (cut before, or an excerpt) says its world
only indirectly, and nThread x nGpus is the ranks of ONE process: under mpirun or srun the world
is processes x nThread x nGpus (src/common.cu: nranks = nProcs x nThreads x nGpus). In order:

1. the `#  Rank` lines, or --world;
2. the launcher in front of the program on the echoed command line: `mpirun -np N` / `-n N` /
   `--np N` / `-c N` (OpenMPI and MPICH), `-H h1:8,h2:8` (slots), `-N n` / `--npernode n` with
   `-H h1,h2`; `srun -n N` / `--ntasks=N`, `-N nodes --ntasks-per-node=M`; x nThread x nGpus;
3. the table: size = count x bytes x ranks for all_gather, reduce_scatter, alltoall, gather and
   scatter (each src/<coll>.cu GetCollByteCount; exact);
4. busbw / algbw: the world whose bus factor (doc/PERFORMANCE.md) fits the row with the largest
   algbw, when exactly one does (a factor of 1, broadcast or reduce, never decides);
5. a command line naming the program with no launcher in front: one process.
Otherwise the import is refused, naming what was tried. Whatever the source, busbw / algbw must
then fit the collective's factor at that world (the figures' own check): a world of 1 for a run
of many ranks cannot pass it.
"""

import re
from pathlib import Path

from bench.errors import BenchError
from bench.imports.infer import PRINTED, REDUCING_OPS, SIGNATURES, WORD_BYTES
from bench.imports.nccl_options import program_index
from bench.timing.busbw import FACTORS

_MPI = ("mpirun", "mpiexec", "orterun", "prterun", "mpiexec.hydra")
MAX_WORLD = 1 << 17  # the largest world the ratio is tried at


def factor(program: str, n: int) -> float | None:
    return FACTORS[program](n) if program in FACTORS else None


def _flag(args: list[str], names: tuple[str, ...]) -> str | None:
    """The value of the first of `names` (`-n 8`, `-n8` for one-letter flags, `--ntasks=8`)."""
    for i, a in enumerate(args):
        for n in names:
            if a == n and i + 1 < len(args):
                return args[i + 1]
            if n.startswith("--") and a.startswith(n + "="):
                return a.split("=", 1)[1]
            if len(n) == 2 and a.startswith(n) and a[2:].isdigit():
                return a[2:]
    return None


def _int(text) -> int | None:
    return int(text) if text is not None and str(text).isdigit() else None


def launcher_processes(argv: list[str]) -> tuple[int | None, str, bool]:
    """(processes, what said it, a launcher was in front) from the command line that names the program."""
    at = program_index(argv)
    if at is None:
        return None, "no command line naming the program", False
    before = argv[:at]
    where = next((i for i, a in enumerate(before) if Path(a).name in (*_MPI, "srun")), None)
    if where is None:
        return 1, f"'{Path(argv[at]).name}' with no mpirun or srun in front of it", False
    name, args = Path(before[where]).name, before[where + 1:]
    if name == "srun":
        n = _int(_flag(args, ("-n", "--ntasks")))
        if n:
            return n, f"srun -n {n}", True
        nodes, per = _int(_flag(args, ("-N", "--nodes"))), _int(_flag(args, ("--ntasks-per-node",)))
        if nodes and per:
            return nodes * per, f"srun -N {nodes} --ntasks-per-node {per}", True
        return None, "srun without -n / --ntasks or -N with --ntasks-per-node", True
    n = _int(_flag(args, ("-np", "--np", "-n", "--n", "-c")))
    if n:
        return n, f"{name} -np {n}", True
    hosts = _flag(args, ("-H", "--host", "-host"))
    if hosts:
        slots = [h.rpartition(":")[2] for h in hosts.split(",")]
        if all(s.isdigit() for s in slots) and all(":" in h for h in hosts.split(",")):
            return sum(map(int, slots)), f"{name} -H {hosts} (slots)", True
        per = _int(_flag(args, ("-N", "--npernode", "-npernode")))
        if per:
            return per * len(hosts.split(",")), f"{name} -H {hosts} -N {per}", True
    return None, f"{name} without -np / -n (a hostfile's slots are not in the log)", True


def _sized(rows) -> list:
    return [r for r in rows if r["count"] and r["type"] in WORD_BYTES]


def size_world(program: str, rows) -> int | None:
    """size / (count x bytes) of a collective whose size counts every rank's part (exact)."""
    if program not in SIGNATURES or not SIGNATURES[program][2]:
        return None
    r = next(iter(_sized(rows)), None)
    if r is None:
        return None
    k = r["size"] / (r["count"] * WORD_BYTES[r["type"]])
    return int(k) if k == int(k) and k >= 1 else None


def _resolved(rows):
    """The row whose busbw / algbw is best resolved (the largest algbw), or None when every algbw < 1."""
    big = max(rows, key=lambda r: r["algbw"], default=None)
    return big if big and big["algbw"] >= 1.0 else None


def fits(program: str, n: int, rows) -> bool:
    big, f = _resolved(rows), factor(program, n)
    return big is None or f is None or abs(big["busbw"] - f * big["algbw"]) <= PRINTED * (1 + f) + 1e-9


def ratio_worlds(program: str, rows, step: int, least: int) -> list[int] | None:
    """The worlds (multiples of `step`, >= least) whose bus factor fits; None: no resolved row or no factor."""
    if _resolved(rows) is None or program not in FACTORS:
        return None
    return [n for n in range(max(step, least), MAX_WORLD + 1, step) if fits(program, n, rows)]


def _facts_fit(program: str, rows) -> bool:
    """redop and root as `program` prints them (bench.imports.infer), before any world is known."""
    reduces, rooted = SIGNATURES[program][:2]
    return (reduces == any(r["redop"] in REDUCING_OPS for r in rows)
            and rooted == any(r["root"] >= 0 for r in rows))


def _from_table(program: str | None, rows, step: int, least: int) -> tuple[int | None, str]:
    """3. and 4.: (world, how) from the figures, or (None, what was found)."""
    programs = [program] if program else [p for p in SIGNATURES if _facts_fit(p, rows)]
    exact = {p: w for p in programs if (w := size_world(p, rows))}
    if exact and (program or min(exact.values()) > 1):  # k > 1: only a collective whose size counts every rank
        w = max(exact.values())
        return w, f"size / (count x bytes) = {w} ({'/'.join(exact)}: its size counts every rank's part)"
    found = {p: ratio_worlds(p, rows, step, least) for p in programs}
    found = {p: ws for p, ws in found.items() if ws}
    worlds = {w for ws in found.values() for w in ws}
    big = _resolved(rows)
    if big is None:
        return None, "busbw / algbw (no row with algbw >= 1 GB/s to read it from)"
    ratio = f"busbw / algbw = {big['busbw'] / big['algbw']:.4f} at {big['size']} B"
    if len(worlds) == 1 and found:
        w = worlds.pop()
        return w, f"{ratio}: {'/'.join(found)}'s bus factor fits {w} ranks only"
    shown = ", ".join(map(str, sorted(worlds)[:4])) + (", ..." if len(worlds) > 4 else "")
    return None, f"{ratio} (fits {shown or 'no world'}{' of ' + '/'.join(found) if found else ''})"


def resolve(*, path: str, given: int | None, ranks: int, argv: list[str], per_proc: int, program: str | None,
            rows, tagged: int) -> tuple[int, str]:
    """(world, how it was read); one BenchError naming everything tried when nothing says."""
    if ranks:
        if given and given != ranks:
            raise BenchError(f"'{path}' lists {ranks} ranks ('#  Rank' lines); --world {given} disagrees")
        return ranks, "'#  Rank' lines"
    if given:
        return given, "--world"
    procs, said, launched = launcher_processes(argv)
    world, how = None, ""
    if procs and launched:
        world, how = procs * per_proc, f"the command line ({said}) x {per_proc} rank(s) per process (nThread x nGpus)"
    else:
        world, how = _from_table(program, rows, per_proc, max(1, tagged) * per_proc)
        if not world and procs:  # a command line with no launcher in front of the program
            world, how = procs * per_proc, f"the command line ({said}: one process) x nThread x nGpus {per_proc}"
    if world and world < tagged * per_proc:
        raise BenchError(f"'{path}': world {world} from {how}, but launcher prefixes ([1,N]<stdout>) show at least "
                         f"{tagged} process(es) of {per_proc} rank(s); give --world N")
    if world:
        return world, how
    seen = f"; launcher prefixes show at least {tagged} process(es)" if tagged > 1 else ""
    raise BenchError(f"'{path}': does not say how many ranks ran; tried: '#  Rank' lines (none), the command "
                     f"line ({said}), {how}{seen}; nThread x nGpus ({per_proc}) counts one process only; give "
                     "--world N")


def check(*, path: str, program: str, world: int, how: str, rows, groups: int = 1) -> None:
    """busbw / algbw must be the collective's bus factor at the world found (per group under
    NCCL_TESTS_SPLIT): else the world, or the figures, are not what the log says."""
    n = world // groups if groups > 1 and world % groups == 0 else world
    if fits(program, n, rows):
        return
    big = _resolved(rows)
    ok = ratio_worlds(program, rows, 1, 1) or []
    shown = ", ".join(map(str, ok[:4])) + (", ..." if len(ok) > 4 else "")
    raise BenchError(f"'{path}': busbw / algbw = {big['busbw'] / big['algbw']:.4f} at {big['size']} B is not "
                     f"{program}'s bus factor at {n} ranks ({factor(program, n):.4f}; world {world} from {how}): "
                     f"it fits {shown or 'no world'}; give --world N if the log's figures are right")


def tagged_processes(text: str) -> int:
    """The processes OpenMPI's --tag-output prefixes (`[1,15]<stdout>:`) show at least."""
    found = [int(m.group(1)) for m in re.finditer(r"^\[\d+,(\d+)\]<std(?:out|err)>:", text, re.M)]
    return max(found) + 1 if found else 0
