"""nccl-tests' `-J FILE.json` output (src/util.cu jsonOutputInit .. jsonOutputFinalize, JSON_FILE_VERSION
3, at NVIDIA/nccl-tests a0b82b2) -> distbench rows; a file cut off mid-run keeps its complete result
objects. The options come from `args` (the program's argv) and `config` (graph, aggregated_iterations,
per_iter_timing, blocking_collectives: a bool, so -z's value only from args); with -I 1 each result
carries `out_of_place_per_iter` / `in_place_per_iter` {skipped_iterations, min_us .. cv_pct, times_us:
[every iteration], per_process_max_times_us} (writePerIterReport): times_us become the samples table."""

import json
import re
import shlex
from pathlib import Path

from bench.imports import Parsed, result_row
from bench.imports.nccl_names import OPS, PROGRAMS, TYPES, collective_of, nccl_version_text
from bench.imports.nccl_options import Options, from_argv
from bench.imports.nccl_world import check
from bench.errors import BenchError


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


_JSON_TYPES = {dict: "object", list: "array", str: "string", int: "number", float: "number", bool: "boolean"}


def _bad(path: str, where: str, v, want: str) -> BenchError:
    shown = f"a JSON {_JSON_TYPES.get(type(v), type(v).__name__)}" if isinstance(v, (dict, list, bool)) or v is None \
        else repr(v)
    return BenchError(f"'{path}': {where} is {shown}, not {want}: not an nccl-tests -J file, or a damaged one")


def _int(v, where: str, path: str, least: int = 0) -> int:
    """An integer field (util.cu writes a JSON number; a number in a string is read too), or one BenchError."""
    n = None
    if isinstance(v, float) and v.is_integer():
        n = int(v)
    elif isinstance(v, (int, str)) and not isinstance(v, bool):
        try:
            n = int(str(v).strip())
        except ValueError:
            pass
    if n is None or n < least:
        raise _bad(path, where, v, f"an integer >= {least}")
    return n


def _fig(v, where: str = "", path: str = ""):
    """A figure (us, GB/s, a count) as a float; None for null and "nan" (what util.cu writes for NaN)."""
    if v is None or v == "nan":
        return None
    if isinstance(v, (int, float, str)) and not isinstance(v, bool):
        try:
            return float(v)
        except ValueError:
            pass
    raise _bad(path, where, v, "a number")


def _of(v, kind: type, where: str, path: str):
    """`v` when it is a `kind` (dict, list); None stays None."""
    if v is not None and not isinstance(v, kind):
        raise _bad(path, where, v, f"a JSON {_JSON_TYPES[kind]}")
    return v


def _machine(doc: dict, out: Parsed, path: str, world: int | None) -> tuple[dict, int]:
    """config and its devices -> out.world, hosts, devices, device ids; (config, NCCL_TESTS_SPLIT groups).
    One device record per process (util.cu parses each process's first '#  Rank' line), its `group` the
    process's colour (src/common.cu main: NCCL_TESTS_SPLIT)."""
    cfg = _of(doc.get("config"), dict, "config", path) or {}
    devs = _of(cfg.get("devices"), list, "config.devices", path) or []
    for i, d in enumerate(devs):
        _of(d, dict, f"config.devices[{i}]", path)
    per_proc = 1
    for key in ("nthreads", "ngpus"):
        if cfg.get(key) is not None:
            per_proc *= _int(cfg[key], f"config.{key}", path, least=1)
    if world and devs and world != len(devs) * per_proc:
        raise BenchError(f"'{path}' lists {len(devs) * per_proc} ranks (config.devices x nthreads x ngpus); "
                         f"--world {world} disagrees")
    out.world = world or (len(devs) * per_proc if devs else None)
    if not out.world:
        raise BenchError(f"'{path}': no config.devices: cannot tell how many ranks ran; give --world N")
    out.hosts = [str(d.get("hostname", "")) for d in devs for _ in range(per_proc)]
    out.devices = [str(d.get("device_info", "")) for d in devs for _ in range(per_proc)]
    out.device_ids = [_int(d.get("device", 0), f"config.devices[{i}].device", path) + k
                      for i, d in enumerate(devs) for k in range(per_proc)]
    colours = {_int(d.get("group", 0), f"config.devices[{i}].group", path) for i, d in enumerate(devs)}
    return cfg, len(colours) or 1


def parse_json(text: str, path: str, collective: str | None = None, world: int | None = None) -> Parsed:
    doc, cut = _salvage(text, path)
    if "results" not in doc or not isinstance(doc["results"], list):
        raise BenchError(f"'{path}': JSON without a 'results' list: not an nccl-tests -J file")
    out = Parsed(file=path, format="json")
    args = [str(a) for a in _of(doc.get("args"), list, "args", path) or []]
    out.command = shlex.join(args) if args else ""
    out.version = f"unknown (JSON file version {doc.get('version', '?')})"
    out.nccl_version = nccl_version_text(doc.get("nccl_version"))
    cfg, groups = _machine(doc, out, path, world)
    prog = args[0] if args else ""
    name = collective_of(prog) if prog else collective
    if name is None:
        raise BenchError(f"'{path}': no args: does not say which collective it ran; give --collective NAME")
    opts = _options(doc, cfg, args, path)
    figures = _rows(doc, cfg, out, path, name, opts, groups)
    if not out.rows:
        raise BenchError(f"'{path}': no complete result in its 'results' list" + (" (cut off)" if cut else ""))
    base = re.sub(r"_perf.*$", "", Path(prog).name) if prog else next(p for p, c in PROGRAMS.items() if c == name)
    check(path=path, program=base, world=out.world, how="config.devices x nthreads x ngpus", rows=figures,
          groups=groups)
    _footer(doc, out, opts, path)
    if groups > 1:
        out.notes.append(f"NCCL_TESTS_SPLIT: {groups} groups of {out.world // groups} ranks ran at once (config."
                         "devices[].group); the figures are one group's (group_size, groups)")
    if cut:
        out.notes.append(f"cut off: the JSON ends early; its {len(doc['results'])} complete result(s) were kept")
    return out


def _rows(doc: dict, cfg: dict, out: Parsed, path: str, name: str, opts: Options, groups: int) -> list[dict]:
    """Each result object's figures -> out.rows (and the samples of -I 1); the figures check() reads."""
    iters = cfg.get("iterations")
    iters = (_int(iters, "config.iterations", path) * _int(cfg.get("aggregated_iterations") or 1,
                                                           "config.aggregated_iterations", path, least=1)
             if iters is not None else None)
    warmup = _int(cfg["warmup_iters"], "config.warmup_iters", path) if cfg.get("warmup_iters") is not None else None
    group = {"group_size": out.world // groups, "groups": groups} if groups > 1 else {}
    figures = []
    for k, r in enumerate(doc["results"]):
        if not isinstance(r, dict) or "size" not in r:
            raise BenchError(f"'{path}': results[{k}] is not an nccl-tests result object (no 'size')")
        root = str(r.get("root", "-1")).strip()
        size, count = _int(r["size"], f"results[{k}].size", path), _int(r.get("count") or 0, f"results[{k}].count", path)
        for placement, key in (("out-of-place", "out_of_place"), ("in-place", "in_place")):
            fig = _of(r.get(key), dict, f"results[{k}].{key}", path)
            at = f"results[{k}].{key}"
            t = _fig(fig.get("time", fig.get("cpu_time")), f"{at}.time", path) if fig else None
            if t is None:
                continue
            wrong, per_iter = _fig(fig.get("nwrong"), f"{at}.nwrong", path), r.get(f"{key}_per_iter")
            row = result_row(
                collective=name, size_bytes=size, count=count,
                dtype=TYPES.get(str(r.get("type")), str(r.get("type"))), op=OPS.get(str(r.get("redop")), str(r.get("redop"))),
                root=int(root) if root.lstrip("-").isdigit() else -1, placement=placement, world=out.world,
                mode="nccl-tests", rank_reduce=opts.rank_reduce, blocking=True, time_s=t * 1e-6,
                algbw_gbps=_fig(fig.get("alg_bw"), f"{at}.alg_bw", path),
                busbw_gbps=_fig(fig.get("bus_bw"), f"{at}.bus_bw", path),
                wrong=None if wrong is None else int(wrong), warmup_iters=warmup, iters=iters,
                extra={"tool_options": opts.tool_options, **group})
            row.update(_per_iter(_of(per_iter, dict, f"results[{k}].{key}_per_iter", path), out, row, path))
            out.rows.append(row)
            figures.append({"size": row["size_bytes"], "count": row["count"], "type": str(r.get("type")),
                            "algbw": row["algbw_gbps"] or 0.0, "busbw": row["busbw_gbps"] or 0.0})
    return figures


def _options(doc: dict, cfg: dict, args: list[str], path: str) -> Options:
    """The command line (args), then what config and the results say (they win: they are what ran)."""
    opts = Options()
    from_argv(args, opts, path)
    for key, flag in (("graph", "G"), ("aggregated_iterations", "m"), ("validation", "c"), ("per_iter_skip", "K")):
        if str(cfg.get(key, "")).isdigit():
            opts.put(flag, int(cfg[key]), f"config.{key}")
    if str(cfg.get("per_iter_timing")) == "true":
        opts.put("I", 1, "config.per_iter_timing")
    if str(cfg.get("blocking_collectives")) == "true" and not opts.value("z"):
        opts.put("z", 1, "config.blocking_collectives (true: -z 1, 2 or 3; the file does not say which)")
    if any(isinstance(r, dict) and isinstance(r.get("out_of_place") or r.get("in_place"), dict)
           and "cpu_time" in (r.get("out_of_place") or r.get("in_place")) for r in doc["results"]):
        opts.put("C", 1, "results[].cpu_time")
    return opts


def _per_iter(per_iter, out: Parsed, row: dict, path: str) -> dict:
    """-I 1 (util.cu writePerIterReport): every iteration's CUDA-event time (max over every GPU of
    every process) -> the samples table; the tool's summary over the iterations after -K -> columns
    (p50_us, sorted[n / 2] of computeIterStats, as time_p50_s: time_median_s stays the printed mean)."""
    if not isinstance(per_iter, dict):
        return {}
    where = f"{row['size_bytes']} B {row['placement']} per_iter"
    times = [_fig(x, f"{where}.times_us[{i}]", path)
             for i, x in enumerate(_of(per_iter.get("times_us"), list, f"{where}.times_us", path) or [])]
    key = {"case_id": row["case_id"], "size_bytes": row["size_bytes"], "placement": row["placement"]}
    out.samples += [{**key, "rank": None, "iteration": i, "seconds": x * 1e-6} for i, x in enumerate(times)
                    if x is not None]
    cols = {"samples": len(times)}
    for src, col in (("min_us", "time_min_s"), ("max_us", "time_max_s"), ("avg_us", "time_mean_s"),
                     ("p50_us", "time_p50_s"), ("p95_us", "time_p95_s"), ("stdev_us", "time_stdev_s")):
        if (v := _fig(per_iter.get(src), f"{where}.{src}", path)) is not None:
            cols[col] = v * 1e-6
    if (cv := _fig(per_iter.get("cv_pct"), f"{where}.cv_pct", path)) is not None:
        cols["time_cv"] = cv / 100
    return cols


def _footer(doc: dict, out: Parsed, opts: Options, path: str) -> None:
    """The file's options, and nccl-tests' own verdicts: out_of_bounds, average_bus_bandwidth, errors."""
    out.options = opts.record()
    out.notes += opts.notes
    if opts.tool_options:
        out.notes.append(f"nccl-tests options that change what its time means: {opts.tool_options} (column "
                         "tool_options: compare and the report pair these rows only with rows measured alike)")
    oob = doc.get("out_of_bounds")
    if isinstance(oob, dict) and _int(oob.get("count") or 0, "out_of_bounds.count", path):
        out.failed.append(f"out_of_bounds.count {oob['count']}")
    bw = doc.get("average_bus_bandwidth") or doc.get("average_bus_bandwidith")  # 2.17.6 spelled it so
    if isinstance(bw, dict) and str(bw.get("okay")) == "false":
        out.failed.append("average_bus_bandwidth below NCCL_TESTS_MIN_BW x 0.9")
    for e in _of(doc.get("errors"), list, "errors", path) or []:
        out.notes.append(f"nccl-tests' errors: {e}")
