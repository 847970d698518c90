"""nccl-tests' `-J FILE.json` output (jsonOutputInit .. jsonOutputFinalize, JSON_FILE_VERSION 3) ->
distbench rows; a file cut off mid-run keeps its complete result objects."""

import json
import re
import shlex

from bench.imports import Parsed, result_row
from bench.imports.nccl_names import OPS, TYPES, average_of, collective_of, nccl_version_text
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
    reduce_ = average_of(args)
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
