"""PyTorch's flight recorder dumps -> the collectives each rank ran, with size, dtype, process group
and, where recorded, duration.

A dump (one per rank; TORCH_FR_DUMP_TEMP_FILE + rank, e.g. nccl_trace_rank_3, as
torch/distributed/flight_recorder/components/loader.py read_dump reads them: the rank is the
file name's trailing number) is a pickled dict, or the JSON of `_dump_nccl_trace_json` /
`_dump_fr_trace_json`, with the keys of torch/csrc/distributed/c10d/FlightRecorder.hpp:
`version`, `pg_config` {pg name: {name, desc, ranks: "[0, 1]"}}, `comm_lib_version` and `entries`,
each entry {record_id, pg_id, process_group: (name, desc), collective_seq_id, p2p_seq_id, op_id,
profiling_name ("nccl:all_reduce", "gloo:all_gather"), time_created_ns, input_sizes, input_dtypes,
output_sizes, output_dtypes, state (scheduled | started | completed), time_discovered_started_ns,
time_discovered_completed_ns, retired, timeout_ms, is_p2p, frames} and `duration_ms` only when the
process group timed it (FlightRecorderDetail.hpp retire_id: the CUDA events around the collective on
its stream, with TORCH_NCCL_ENABLE_TIMING=1; gloo and untimed NCCL entries have none).

The recorder is a ring buffer (TORCH_FR_BUFFER_SIZE entries): a dump holds the last calls only.
Pickles are read with an unpickler that loads no class: a dump holds dicts, lists, tuples, strings
and numbers only, and a file that asks for anything else is refused.
"""

import io
import json
import pickle
import re
from pathlib import Path

from bench.errors import BenchError
from bench.imports.injob import (ELEMENT_BYTES, Call, Read, collective_of, counted, dtype_of, size_of, total_numel,
                                 unknown_groups)

SOURCE = "flight-recorder"
TIMING = ("the flight recorder's duration_ms: CUDA events recorded before and after the collective on its "
          "stream (TORCH_NCCL_ENABLE_TIMING=1), which include the stream's wait for the other ranks")


class _DataOnly(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"the dump asks for {module}.{name}; a flight recorder dump holds plain data only")


def looks_like(data: bytes) -> bool:
    if data[:1] == b"\x80":  # a pickle (protocol 2+)
        return b"entries" in data or b"pg_config" in data
    head = data[:65536].lstrip()
    return head[:1] == b"{" and b'"pg_config"' in data[:1 << 20] and b'"version"' in data[:1 << 20]


def _load(path, data: bytes) -> dict:
    try:
        doc = _DataOnly(io.BytesIO(data)).load() if data[:1] == b"\x80" else json.loads(data)
    except (pickle.UnpicklingError, EOFError, ValueError, UnicodeDecodeError, IndexError) as e:
        raise BenchError(f"'{path}': not a flight recorder dump ({type(e).__name__}: {e})") from None
    if isinstance(doc, (bytes, str)):  # the JSON dump as torch returns it, written as a JSON string
        doc = json.loads(doc)
    if not isinstance(doc, dict) or "version" not in doc:
        raise BenchError(f"'{path}': not a flight recorder dump (no 'version' key)")
    return doc


def _rank_of(path, index: int) -> tuple[str, list[str]]:
    m = re.search(r"(\d+)$", Path(path).name.split(".")[0])
    if m:
        return m.group(1), []
    return str(index), [f"no rank in the file name: called rank {index} (its place among the files)"]


def _group(entry: dict, pg_config: dict, world) -> tuple[str, int]:
    pg = entry.get("process_group") or ("", "")
    name, desc = (pg[0], pg[1]) if isinstance(pg, (list, tuple)) and len(pg) > 1 else (str(pg), "")
    cfg = pg_config.get(name) or {}
    n = len(re.findall(r"-?\d+", str(cfg.get("ranks", "")))) or int(world or 0)
    return str(desc or cfg.get("desc") or name or "?"), n


def read(path, data: bytes, index: int = 0) -> Read:
    doc = _load(path, data)
    rank, notes = _rank_of(path, index)
    pg_config = doc.get("pg_config") if isinstance(doc.get("pg_config"), dict) else {}
    r = Read(file=str(path), source=SOURCE, timing=TIMING, rank=rank, notes=notes,
             nccl_version=str(doc.get("comm_lib_version") or ""))
    entries = doc.get("entries") or []
    untimed, unfinished, p2p, other, backends = 0, 0, 0, {}, set()
    for e in entries:
        name = str(e.get("profiling_name", ""))
        backends.add(name.split(":", 1)[0] if ":" in name else "")
        coll = collective_of(name)
        if e.get("is_p2p") or coll is None:
            p2p += bool(e.get("is_p2p"))
            if not e.get("is_p2p"):
                other[name] = other.get(name, 0) + 1
            continue
        if e.get("duration_ms") is None:
            untimed += 1
            continue
        if e.get("state") != "completed":
            unfinished += 1
            continue
        group, n = _group(e, pg_config, None)
        dtype = dtype_of((e.get("input_dtypes") or e.get("output_dtypes") or [""])[0])
        if dtype not in ELEMENT_BYTES:
            other[f"{name} ({dtype or 'no dtype'})"] = other.get(f"{name} ({dtype or 'no dtype'})", 0) + 1
            continue
        size = size_of(coll, total_numel(e.get("input_sizes")), total_numel(e.get("output_sizes")), n,
                       ELEMENT_BYTES[dtype])
        r.calls.append(Call(rank=rank, collective=coll, size_bytes=size, dtype=dtype, group=group, group_size=n,
                            duration_s=float(e["duration_ms"]) / 1e3))
    r.backend = "+".join(sorted(backends - {""}))
    r.notes += counted("entries", untimed, "no duration_ms (the flight recorder times NCCL collectives only with "
                       "TORCH_NCCL_ENABLE_TIMING=1; gloo's entries carry none)")
    r.notes += counted("entries", unfinished, "not completed when dumped (scheduled or started)")
    r.notes += counted("point-to-point entries", p2p, "not one collective of a size")
    r.notes += [f"{n} '{k}' entries not compared: not one collective of a size" for k, n in sorted(other.items())]
    r.notes += unknown_groups(r.calls, "the dump's pg_config lists no ranks for its process group")
    if not entries:
        raise BenchError(f"'{path}': a flight recorder dump with no entries (TORCH_FR_BUFFER_SIZE=0, or nothing ran)")
    return r
