"""What NCCL really ran in the allreduce kind's NCCL_ALGO / NCCL_PROTO variant launches.

NCCL falls back silently when a forced algorithm or protocol cannot run (PAT has no all_reduce,
NVLS needs NVSwitch, CollNet needs SHARP ...). Logging must not run during timed calls, and NCCL
reads NCCL_DEBUG once per process, so each variant gets two launches: a probe launch (key
"<world>:<variant>:probe") that calls native all_reduce once per size, untimed and without rows,
then the timed launch with the same NCCL_ALGO / NCCL_PROTO and no logging of ours (a user's own
NCCL_DEBUG stays, and the rows' nccl_env shows it). The probe launch runs with
NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=TUNING (a value the user set is kept; TUNING is added to a
user's subsystem list) and NCCL_DEBUG_FILE=<run dir>/nccl/<launch>/%h.%p.log (unless the user set
a file: then nothing is read back and the summary says so). The rank puts the run directory into
the path before init_process_group (bench.harness.rank.worker_main: the "{run_dir}" placeholder).
After the last launch the allreduce kind's `finish` parses the logs into the `nccl_tuning` table.

Names: NCCL_ALGO / NCCL_PROTO accept ncclAlgoStr / ncclProtoStr (NCCL src/init.cc:53-55: Tree, Ring,
CollNetDirect, CollNetChain, NVLS, NVLSTree, PAT; LL, LL128, Simple, compared without case), while
the TUNING line of NCCL >= 2.23 prints ncclAlgoToString / ncclProtoToString (src/enqueue.cc:822,
src/collectives.cc:95-127: TREE, RING, COLLNET_DIRECT, COLLNET_CHAIN, NVLS, NVLS_TREE, PAT; LL,
LL128, SIMPLE; "Unknown" otherwise). Both map to ncclAlgoStr's spelling; anything else (NCCL's
"Unknown", an id out of range, a name a later NCCL adds) is reported as "unknown", never guessed.

Log lines accepted (anything before "NCCL INFO" -- host:pid:tid [dev] -- is ignored, case of the
names too):
  NCCL INFO 1048576 Bytes -> Algo 1 proto 2 time 25.600000                    (NCCL <= 2.18: ids,
                                                                               rank 0 only, no function)
  NCCL INFO AllReduce: 1048576 Bytes -> Algo 1 proto 2 time 25.600000         (ids with the function)
  NCCL INFO AllReduce: 4096 Bytes -> Algo TREE proto LL channel{Lo..Hi}={0..1} (NCCL >= 2.19: names)
  NCCL INFO AllReduce: 4096 Bytes -> Algo NVLS_TREE proto SIMPLE channel{Lo..Hi}={0..1}
  NCCL INFO AllReduce: opCount 3 sendbuff 0x... recvbuff 0x... count 262144 datatype 7 op 0 ...
                                                    (NCCL_DEBUG_SUBSYS=COLL: names the function of
                                                     the tuning lines that follow it in the same file)
Algorithm ids: 0 Tree, 1 Ring, 2 CollNetDirect, 3 CollNetChain, 4 NVLS, 5 NVLSTree, 6 PAT;
protocol ids: 0 LL, 1 LL128, 2 Simple. Only all_reduce lines are kept (a line without a
function counts as one), and only at sizes the launch measured (the process group's own
warm-up and the gathers of samples run other sizes).
"""

import re
from collections import Counter
from pathlib import Path

from bench.results.store import RunWriter, load_run

ALGOS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")  # NCCL src/init.cc:53, id order
PROTOS = ("LL", "LL128", "Simple")  # NCCL src/init.cc:55, id order
UNKNOWN = "unknown"  # a name or id this table does not know (reported, never mapped to a guess)
PROBE = ":probe"  # launch-key suffix of a variant's probe launch (its logs go under the timed launch's key)
RUN_DIR = "{run_dir}"  # placeholder in NCCL_DEBUG_FILE, replaced on each rank before init_process_group

TUNING = re.compile(r"NCCL INFO\s+(?:(?P<func>[A-Za-z]+):\s*)?(?P<bytes>\d+)\s+Bytes\s*->\s*Algo\s+(?P<algo>\w+)"
                    r"\s+proto\s+(?P<proto>\w+)", re.I)
OPCOUNT = re.compile(r"NCCL INFO\s+(?P<func>[A-Za-z]+):\s*opCount\s+[0-9a-fA-Fx]+", re.I)


def _key(name: str) -> str:
    return name.strip().lower().replace("_", "")


def _name(value: str, names: tuple[str, ...]) -> str:
    """An id ('1'), an ncclAlgoStr name in any case ('RING') or an ncclAlgoToString one
    ('COLLNET_DIRECT') -> ncclAlgoStr's spelling; anything else -> UNKNOWN."""
    v = str(value).strip()
    if v.isdigit():
        return names[int(v)] if int(v) < len(names) else UNKNOWN
    return {_key(n): n for n in names}.get(_key(v), UNKNOWN)


def algo_name(value) -> str:
    return _name(value, ALGOS)


def proto_name(value) -> str:
    return _name(value, PROTOS)


def parse(text: str) -> list[dict]:
    """Every tuning line of one log: {"func" (None: not named), "size_bytes", "algorithm", "protocol"}."""
    out, func = [], None
    for line in text.splitlines():
        m = OPCOUNT.search(line)
        if m:
            func = m.group("func")
            continue
        m = TUNING.search(line)
        if m:
            out.append({"func": m.group("func") or func, "size_bytes": int(m.group("bytes")),
                        "algorithm": algo_name(m.group("algo")), "protocol": proto_name(m.group("proto"))})
    return out


def allowed(chosen: str, asked: str, names: tuple[str, ...]) -> bool:
    """Is `chosen` within an NCCL_ALGO / NCCL_PROTO value ('Tree', 'Ring,Tree', '^NVLS',
    'allreduce:tree;broadcast:ring')? An empty value allows anything."""
    asked = (asked or "").strip()
    if not asked:
        return True
    parts = [p for p in asked.split(";") if p.strip()]
    spec = next((p.split(":", 1)[1] for p in parts if p.lower().startswith("allreduce:")),
                next((p for p in parts if ":" not in p), ""))
    if not spec:
        return True  # set for other functions only
    exclude = spec.startswith("^")
    if chosen == UNKNOWN:
        return False  # nothing proves that an unknown choice is what was asked
    items = {_name(x, names).lower() for x in spec.lstrip("^").split(",") if x.strip()}
    return (chosen.lower() not in items) if exclude else (chosen.lower() in items)


def safe_key(launch_key: str) -> str:
    """A launch key as a directory name: '2:NCCL_ALGO=Tree' -> '2_NCCL_ALGO_Tree'."""
    return re.sub(r"[^A-Za-z0-9]+", "_", launch_key).strip("_")


def log_env(launch_key: str, environ) -> dict:
    """Environment additions for one variant launch (the user's own NCCL_DEBUG* values are kept)."""
    out = {}
    if not environ.get("NCCL_DEBUG"):
        out["NCCL_DEBUG"] = "INFO"
    sub = environ.get("NCCL_DEBUG_SUBSYS", "")
    if not sub:
        out["NCCL_DEBUG_SUBSYS"] = "TUNING"
    elif not sub.startswith("^") and not {"TUNING", "ALL"} & {s.strip().upper() for s in sub.split(",")}:
        out["NCCL_DEBUG_SUBSYS"] = f"{sub},TUNING"
    if not environ.get("NCCL_DEBUG_FILE"):
        out["NCCL_DEBUG_FILE"] = f"{RUN_DIR}/nccl/{safe_key(launch_key)}/%h.%p.log"
    return out


def _variant_env(variant: str) -> dict:
    """'NCCL_ALGO=Tree,NCCL_PROTO=LL' -> {"NCCL_ALGO": "Tree", "NCCL_PROTO": "LL"}."""
    out = {}
    for m in re.finditer(r"(NCCL_ALGO|NCCL_PROTO)=([^,]*(?:,(?!NCCL_)[^,]*)*)", variant or ""):
        out[m.group(1)] = m.group(2)
    return out


def tuning_rows(run_id: str, launch_key: str, texts: list[str], sizes=None) -> list[dict]:
    """nccl_tuning rows of one variant launch from its log files' texts; `sizes`: the sizes it
    measured (None: keep every size)."""
    variant = launch_key.split(":", 1)[1] if ":" in launch_key else ""
    env = _variant_env(variant)
    algo_asked, proto_asked = env.get("NCCL_ALGO", ""), env.get("NCCL_PROTO", "")
    seen: Counter = Counter()
    for text in texts:
        for t in parse(text):
            if t["func"] is not None and t["func"].lower() != "allreduce":
                continue
            if sizes is not None and t["size_bytes"] not in sizes:
                continue
            seen[(t["size_bytes"], t["algorithm"], t["protocol"])] += 1
    return [{"run_id": run_id, "launch": launch_key, "variant": variant, "size_bytes": size,
             "algorithm_asked": algo_asked, "algorithm_chosen": algo, "protocol_asked": proto_asked,
             "protocol_chosen": proto, "matches_asked": allowed(algo, algo_asked, ALGOS) and allowed(proto, proto_asked, PROTOS),
             "calls": n, "log_files": len(texts)}
            for (size, algo, proto), n in sorted(seen.items())]


def read_logs(run_dir, meta: dict, results: list[dict]) -> list[dict]:
    """Every variant launch's rows: logs under <run dir>/nccl/<safe launch key>/."""
    run_dir = Path(run_dir)
    out = []
    for key in meta.get("launches", {}):
        if ":" not in key or key.endswith(PROBE):
            continue
        d = run_dir / "nccl" / safe_key(key)
        files = sorted(d.glob("*.log")) if d.is_dir() else []
        if not files:
            continue
        variant = key.split(":", 1)[1]
        world = int(key.split(":", 1)[0]) if key.split(":", 1)[0].isdigit() else None
        sizes = {int(r["size_bytes"]) for r in results if (r.get("variant") or "") == variant
                 and (world is None or int(r["world"]) == world)} or None
        texts = [f.read_text(errors="replace") for f in files]
        out += tuning_rows(meta.get("run_id") or run_dir.name, key, texts, sizes)
    return out


def write_nccl_tuning(run_dir) -> list[dict]:
    """After the last launch: the nccl_tuning table as a part of the run (nothing when no logs)."""
    run = load_run(run_dir)
    results = []
    if "results" in run.tables and not run["results"].empty:
        df = run["results"]
        results = df.astype(object).where(df.notna(), None).to_dict("records")
    rows = read_logs(run_dir, run.meta, results)
    if rows:
        RunWriter.at(run_dir, part_prefix="nccl-").write_case({"nccl_tuning": rows})
    return rows
