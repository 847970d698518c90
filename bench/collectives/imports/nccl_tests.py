"""nccl-tests output -> distbench result rows: the text table `all_reduce_perf` & co print, and the
`-J FILE.json` file of recent versions.

Formats, from NVIDIA/nccl-tests at a0b82b2 (NCCL_TESTS_VERSION 2.19.6):
- src/util.cu writeDeviceReport: `# nccl-tests version V nccl-headers=H nccl-library=L`, `# Collective
  test starting: PROGRAM`, `# nThread T nGpus G minBytes .. iters: N agg iters: A ...`, one
  `#  Rank R Group G Pid P on HOST device D [BUS] NAME` line per rank;
- writeResultHeader: `#  size count type redop root  time algbw busbw #wrong  time algbw busbw #wrong`
  (out-of-place, then in-place; `cputime` with -C; per-iteration columns i_min .. i_cv% with -I 1;
  a timestamp with -T); writeBenchmarkLineBody prints `N/A` for #wrong without validation (-c 0);
- writeResultFooter: `# Out of bounds values : E OK|FAILED`, `# Avg bus bandwidth : B`;
- the JSON (jsonOutputInit .. jsonOutputFinalize, JSON_FILE_VERSION 3): {version, start_time, args,
  env, nccl_version, config: {nthreads, ngpus, .., iterations, devices: [..]}, results: [{size, count,
  type, redop, root, out_of_place: {time|cpu_time, alg_bw, bus_bw, nwrong} | null, in_place: {..}}],
  out_of_bounds, average_bus_bandwidth, errors, end_time}. A killed run leaves it cut off: the
  complete result objects are kept.
Older versions (before 2.13, 2022): no root column for most collectives, and `error` (the largest
deviation from the expected value, a float) where #wrong is now: it is not a count, so `wrong`
stays null and the file's note says so. No `# nccl-tests version` line before 2.13 either.

What the columns mean (doc/PERFORMANCE.md): time = the average time of one op over the timed
iterations (host timer around `iters` ops launched back to back, one synchronisation), averaged
over ranks by default (-a 1; -a 0/2/3: rank 0 / min / max); algbw = S / time; busbw = algbw x the
collective's factor. Stored as mode `nccl-tests` (distbench's own mode of that definition) with
rank_reduce from -a, so `distbench collectives --mode nccl-tests` rows are the like-for-like peer.
"""

import json
import re
import shlex
from pathlib import Path

from bench.collectives import REGISTRY
from bench.collectives.imports import Parsed, read_input, result_row
from bench.errors import BenchError, unknown

TOOL = "nccl-tests"
# nccl-tests program -> distbench collective (the contiguous-buffer forms nccl-tests times)
PROGRAMS = {"all_reduce": "all_reduce", "all_gather": "all_gather_single", "reduce_scatter": "reduce_scatter_single",
            "alltoall": "all_to_all_single", "broadcast": "broadcast", "reduce": "reduce", "gather": "gather",
            "scatter": "scatter", "sendrecv": "sendrecv"}
TYPES = {"float": "float32", "half": "float16", "double": "float64", "bfloat16": "bfloat16", "int8": "int8",
         "uint8": "uint8", "int32": "int32", "uint32": "uint32", "int64": "int64", "uint64": "uint64",
         "int": "int32", "char": "int8", "f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2"}
OPS = {"sum": "sum", "prod": "product", "max": "max", "min": "min", "avg": "avg", "none": "", "premulsum": "premulsum"}
AVERAGE = {0: "rank0", 1: "avg", 2: "min", 3: "max"}  # -a (src/common.cu: 0=RANK0, 1=AVG, 2=MIN, 3=MAX)

DEFINITIONS = {
    "time_median_s": "nccl-tests time (us -> s): the mean time of one op over the timed iterations (a host timer "
                     "around iters ops launched back to back, one synchronisation), reduced over ranks as -a says "
                     "(default 1: the average); not a median over samples: one figure per size",
    "algbw_gbps": "nccl-tests algbw: S / time, GB/s (1e9 B/s), as printed",
    "busbw_gbps": "nccl-tests busbw: algbw x the collective's bus factor (doc/PERFORMANCE.md), as printed",
    "bus_factor": "busbw / algbw of the tool's own numbers",
    "wrong": "nccl-tests #wrong: wrong elements summed over ranks (null with -c 0, 'N/A', and for older versions "
             "whose 'error' column is the largest deviation, not a count)",
    "size_bytes": "nccl-tests size (B): S, the total array bytes", "count": "nccl-tests count (elements)",
    "iters": "iters x agg iters of the header", "mode": "nccl-tests", "rank_reduce": "from -a (default avg)",
}

_PREFIX = re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:")  # mpirun --tag-output
_RANK = re.compile(r"^#\s+Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?(?:Pid\s+\d+\s+)?on\s+(\S+)\s+device\s+(\d+)\s+\[[^\]]*\]\s*(.*)$")
_VERSION = re.compile(r"^#\s*nccl-tests version (\S+)(?:.*nccl-library=(\d+))?")
_PARAMS = re.compile(r"nThread (\d+) nGpus (\d+) minBytes (\d+) maxBytes (\d+).*?warmup iters: (\d+) iters: (\d+)"
                     r"(?: agg iters: (\d+))?")


def collective_of(program: str) -> str:
    """'./build/all_reduce_perf_mpi' -> 'all_reduce'."""
    name = Path(str(program)).name
    name = re.sub(r"_perf.*$", "", name)
    if name not in PROGRAMS:
        raise unknown("nccl-tests program", Path(str(program)).name, [f"{p}_perf" for p in PROGRAMS])
    return PROGRAMS[name]


def nccl_version_text(code) -> str:
    """NCCL_VERSION_CODE -> 'X.Y.Z' (2.9 on: X*10000 + Y*100 + Z; before: X*1000 + Y*100 + Z)."""
    try:
        c = int(code)
    except (TypeError, ValueError):
        return ""
    if c >= 20900:
        return f"{c // 10000}.{c // 100 % 100}.{c % 100}"
    return f"{c // 1000}.{c // 100 % 10}.{c % 100}" if c > 0 else ""


def _average_of(argv: list[str]) -> str:
    for i, a in enumerate(argv):
        for flag in ("-a", "--average"):
            if a == flag and i + 1 < len(argv):
                return AVERAGE.get(int(argv[i + 1]) if argv[i + 1].isdigit() else 1, "avg")
            if a.startswith(flag + "=") and a.split("=", 1)[1].isdigit():
                return AVERAGE.get(int(a.split("=", 1)[1]), "avg")
    return "avg"


def _num(text: str, what: str, path: str, line: int) -> float:
    try:
        return float(text)
    except ValueError:
        raise BenchError(f"'{path}' line {line}: {what} '{text}' is not a number") from None


def distbench_name(name: str | None) -> str | None:
    """--collective as nccl-tests names it (all_gather, alltoall) or as distbench does."""
    if name is None:
        return None
    base = re.sub(r"_perf.*$", "", str(name))
    if base in PROGRAMS:
        return PROGRAMS[base]
    return REGISTRY.get(base).name  # unknown: a did-you-mean BenchError


def parse(path, collective: str | None = None, world: int | None = None) -> Parsed:
    """Either format, told apart by the first character."""
    collective = distbench_name(collective)
    text = read_input(path)
    if text.lstrip().startswith("{"):
        return parse_json(text, str(path), collective, world)
    return parse_text(text, str(path), collective, world)


# ----------------------------------------------------------------------------- text

def parse_text(text: str, path: str, collective: str | None = None, world: int | None = None) -> Parsed:
    out = Parsed(file=path, format="text")
    program, params, ranks, header, footer = "", None, [], None, False
    lines = [_PREFIX.sub("", ln.rstrip("\r\n")) for ln in text.splitlines()]
    data: list[tuple[int, list[str]]] = []
    for no, ln in enumerate(lines, 1):
        s = ln.strip()
        if not s:
            continue
        if s.startswith("#"):
            body = s.lstrip("#").strip()
            if m := _VERSION.match(s):
                out.version, out.nccl_version = m.group(1), nccl_version_text(m.group(2))
            elif body.startswith("Collective test starting:"):
                program = body.split(":", 1)[1].strip()
            elif m := _PARAMS.search(body):
                params = m
            elif m := _RANK.match(s):
                ranks.append((int(m.group(1)), m.group(2), m.group(4).strip(), int(m.group(3))))
            elif "size" in body.split() and "count" in body.split() and ("time" in body.split() or "cputime" in body.split()):
                header = body.split()
            elif body.startswith("Avg bus bandwidth"):
                footer = True
            continue
        if s.startswith(("$ ", "+ ")) and "_perf" in s:  # the command line, as a log that echoes it shows it
            out.command = s[2:].strip()
            continue
        first = s.split()[0]
        if first.isdigit() and header:
            data.append((no, s.split()))
    if header is None:
        raise BenchError(f"'{path}': not nccl-tests output (no results header '#  size  count  type  redop ...  "
                         "time  algbw  busbw  #wrong' found)")
    argv = shlex.split(out.command) if out.command else []
    prog = next((a for a in argv if "_perf" in a), program)
    name = collective_of(prog) if prog else collective  # the file's own word first; --collective fills a gap
    if name is None:
        raise BenchError(f"'{path}': does not say which collective it ran (no '# Collective test starting' line "
                         "and no command line); give --collective NAME (e.g. all_reduce)")
    if world and ranks and world != len(ranks):
        raise BenchError(f"'{path}' lists {len(ranks)} ranks ('#  Rank' lines); --world {world} disagrees")
    out.world = world or (len(ranks) if ranks else None)
    if out.world is None and params:
        out.world = int(params.group(1)) * int(params.group(2))
        out.notes.append(f"world {out.world} from nThread x nGpus (no '#  Rank' lines): one process assumed")
    if not out.world:
        raise BenchError(f"'{path}': does not say how many ranks ran (no '#  Rank' lines); give --world N")
    ranks.sort()
    out.hosts = [r[1] for r in ranks]
    out.devices = [r[2] for r in ranks]
    out.device_ids = [r[3] for r in ranks]
    if not out.command:
        out.command = (f"{program or name + '_perf'} -b {params.group(3)} -e {params.group(4)} -w {params.group(5)} "
                       f"-n {params.group(6)} -t {params.group(1)} -g {params.group(2)}  "
                       "(reconstructed from the header)" if params else (program or ""))
    warmup = int(params.group(5)) if params else None
    iters = int(params.group(6)) * int(params.group(7) or 1) if params else None
    reduce_ = _average_of(argv)
    lead = header[:next(i for i, t in enumerate(header) if t in ("time", "cputime"))]
    per = (len(header) - len(lead)) // 2
    if header[-1] == "timestamp":
        per = (len(header) - 1 - len(lead)) // 2
    if per < 4 or not {"size", "count", "type", "redop"} <= set(lead):
        raise BenchError(f"'{path}': unknown nccl-tests column layout: {' '.join(header)}")
    old = "error" in header
    if old:
        out.notes.append("older nccl-tests layout: its 'error' column is the largest deviation, not a count of "
                         "wrong elements, so wrong is null")
    for i, (no, tok) in enumerate(data):
        if len(tok) < len(lead) + 2 * per and len(tok) != len(lead) + per:  # neither both placements nor in-place only
            if i == len(data) - 1:
                out.notes.append(f"cut off: the last row (line {no}) is incomplete and was left out")
                break
            raise BenchError(f"'{path}' line {no}: {len(tok)} columns, expected {len(lead) + 2 * per} "
                             f"({' '.join(header)})")
        f = dict(zip(lead, tok))
        places = [("out-of-place", tok[len(lead):len(lead) + per]), ("in-place", tok[len(lead) + per:len(lead) + 2 * per])]
        if len(tok) < len(lead) + 2 * per:  # no out-of-place figures (trace replay prints in-place only)
            places = [("in-place", tok[len(lead):len(lead) + per])]
        dtype = TYPES.get(f["type"], f["type"])
        op = OPS.get(f["redop"], f["redop"])
        root = int(f["root"]) if "root" in f and f["root"].lstrip("-").isdigit() else -1
        for placement, cols in places:
            t, alg, bus, wr = cols[:4]
            wrong = None if old or wr == "N/A" else int(_num(wr, "#wrong", path, no))
            out.rows.append(result_row(
                collective=name, size_bytes=int(f["size"]), count=int(f["count"]), dtype=dtype, op=op, root=root,
                placement=placement, world=out.world, mode="nccl-tests", rank_reduce=reduce_, blocking=True,
                time_s=_num(t, "time", path, no) * 1e-6, algbw_gbps=_num(alg, "algbw", path, no),
                busbw_gbps=_num(bus, "busbw", path, no), wrong=wrong, warmup_iters=warmup, iters=iters))
    if not out.rows:
        raise BenchError(f"'{path}': nccl-tests header found but no result row (the run stopped before its first size)")
    if not footer and not any(n.startswith("cut off") for n in out.notes):
        out.notes.append(f"cut off: no '# Avg bus bandwidth' footer, the run ended after {len(data)} size(s)")
    return out


# ----------------------------------------------------------------------------- JSON (-J)

def _salvage(text: str, path: str) -> tuple[dict, bool]:
    """A complete JSON document, or what a cut-off one holds: its top-level fields before `results`
    and every complete result object. (doc, cut_off)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        pass
    else:
        if not isinstance(doc, dict):
            raise BenchError(f"'{path}': a JSON {type(doc).__name__}, not an nccl-tests -J object")
        return doc, False
    dec = json.JSONDecoder()
    doc: dict = {}
    for key in ("version", "start_time", "args", "nccl_version", "config"):
        m = re.search(r'"%s"\s*:\s*' % key, text)
        if m:
            try:
                doc[key] = dec.raw_decode(text, m.end())[0]
            except json.JSONDecodeError:
                pass
    m = re.search(r'"results"\s*:\s*\[', text)
    if not m:
        raise BenchError(f"'{path}': not valid JSON and no nccl-tests 'results' list in it (line "
                         f"{text.count(chr(10), 0, len(text)) + 1}): not an nccl-tests -J file, or cut off before "
                         "its first result")
    i, results = m.end(), []
    while True:
        while i < len(text) and text[i] in " \t\r\n,":
            i += 1
        if i >= len(text) or text[i] != "{":
            break
        try:
            obj, i = dec.raw_decode(text, i)
        except json.JSONDecodeError:
            break
        results.append(obj)
    doc["results"] = results
    return doc, True


def _fig(v):
    return None if v is None or v == "nan" else float(v)


def parse_json(text: str, path: str, collective: str | None = None, world: int | None = None) -> Parsed:
    doc, cut = _salvage(text, path)
    if "results" not in doc or not isinstance(doc["results"], list):
        raise BenchError(f"'{path}': JSON without a 'results' list: not an nccl-tests -J file")
    out = Parsed(file=path, format="json")
    args = [str(a) for a in doc.get("args") or []]
    out.command = shlex.join(args) if args else ""
    out.version = f"unknown (JSON file version {doc.get('version', '?')})"
    out.nccl_version = nccl_version_text(doc.get("nccl_version"))
    cfg = doc.get("config") or {}
    devs = cfg.get("devices") or []
    # one device record per process (util.cu parses each process's first '#  Rank' line)
    per_proc = int(cfg.get("nthreads") or 1) * int(cfg.get("ngpus") or 1)
    if world and devs and world != len(devs) * per_proc:
        raise BenchError(f"'{path}' lists {len(devs) * per_proc} ranks (config.devices x nthreads x ngpus); "
                         f"--world {world} disagrees")
    out.world = world or (len(devs) * per_proc if devs else None)
    if not out.world:
        raise BenchError(f"'{path}': no config.devices: cannot tell how many ranks ran; give --world N")
    out.hosts = [str(d.get("hostname", "")) for d in devs for _ in range(per_proc)]
    out.devices = [str(d.get("device_info", "")) for d in devs for _ in range(per_proc)]
    out.device_ids = [int(d.get("device") or 0) + k for d in devs for k in range(per_proc)]
    prog = args[0] if args else ""
    name = collective_of(prog) if prog else collective
    if name is None:
        raise BenchError(f"'{path}': no args: does not say which collective it ran; give --collective NAME")
    reduce_ = _average_of(args)
    iters = cfg.get("iterations")
    iters = int(iters) * int(cfg.get("aggregated_iterations") or 1) if iters is not None else None
    for k, r in enumerate(doc["results"]):
        if not isinstance(r, dict) or "size" not in r:
            raise BenchError(f"'{path}': results[{k}] is not an nccl-tests result object (no 'size')")
        root = str(r.get("root", "-1")).strip()
        for placement, key in (("out-of-place", "out_of_place"), ("in-place", "in_place")):
            fig = r.get(key)
            if not isinstance(fig, dict):
                continue
            t = _fig(fig.get("time", fig.get("cpu_time")))
            if t is None:
                continue
            wrong = fig.get("nwrong")
            out.rows.append(result_row(
                collective=name, size_bytes=int(r["size"]), count=int(r.get("count") or 0),
                dtype=TYPES.get(str(r.get("type")), str(r.get("type"))), op=OPS.get(str(r.get("redop")), str(r.get("redop"))),
                root=int(root) if root.lstrip("-").isdigit() else -1, placement=placement, world=out.world,
                mode="nccl-tests", rank_reduce=reduce_, blocking=True, time_s=t * 1e-6,
                algbw_gbps=_fig(fig.get("alg_bw")), busbw_gbps=_fig(fig.get("bus_bw")),
                wrong=None if wrong in (None, "nan") else int(float(wrong)),
                warmup_iters=cfg.get("warmup_iters"), iters=iters))
    if not out.rows:
        raise BenchError(f"'{path}': no complete result in its 'results' list" + (" (cut off)" if cut else ""))
    if cut:
        out.notes.append(f"cut off: the JSON ends early; its {len(doc['results'])} complete result(s) were kept")
    return out
