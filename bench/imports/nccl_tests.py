"""nccl-tests output -> distbench result rows: the text table `all_reduce_perf` & co print, and the
`-J FILE.json` file of recent versions.

Formats, from NVIDIA/nccl-tests at a0b82b2 (NCCL_TESTS_VERSION 2.19.6):
- src/util.cu writeDeviceReport: `# nccl-tests version V nccl-headers=H nccl-library=L`, `# Collective
  test starting: PROGRAM`, `# nThread T nGpus G minBytes .. iters: N agg iters: A ...`, one
  `#  Rank R Group G Pid P on HOST device D [BUS] NAME` line per rank;
- writeResultHeader: `#  size count type redop root  time algbw busbw #wrong  time algbw busbw #wrong`
  (out-of-place, then in-place; `cputime` with -C 1; per-iteration columns i_min .. i_cv% with -I 1;
  a timestamp with -S 1); writeBenchmarkLineBody prints `N/A` for #wrong without validation (-c 0);
- writeResultFooter: `# Out of bounds values : E OK|FAILED`, `# Avg bus bandwidth : B`;
- the JSON (jsonOutputInit .. jsonOutputFinalize, JSON_FILE_VERSION 3): {version, start_time, args,
  env, nccl_version, config: {nthreads, ngpus, .., iterations, devices: [..]}, results: [{size, count,
  type, redop, root, out_of_place: {time|cpu_time, alg_bw, bus_bw, nwrong} | null, in_place: {..}}],
  out_of_bounds, average_bus_bandwidth, errors, end_time}. A killed run leaves it cut off: the
  complete result objects are kept.
Older versions (before 2.13, 2022): no root column for most collectives, and `error` (the largest
deviation from the expected value, a float) where #wrong is now: it is not a count, so `wrong`
stays null, `max_error` holds it and the file's note says so. No `# nccl-tests version` line
before 2.13 either. Logs as people publish them (docs/imports.md lists each variant): launcher
prefixes, the program echoed after a shell prompt or not at all (then inferred from the table,
bench.imports.infer), several runs in one file, columns left blank (rows are mapped
to header columns by position: nccl-tests right-aligns each value under its label), size-0 rows,
rccl-tests, runs that aborted before their last size (their failure line is the error) and runs
that finished and then failed their own check (imported, flagged: bench.imports.cli exits 1), logs
without `#  Rank` lines (bench.imports.nccl_world), the options that change a figure
(bench.imports.nccl_options), alltoallv.

What the columns mean (doc/PERFORMANCE.md): time = the average time of one op over the timed
iterations (host timer around `iters` ops launched back to back, one synchronisation), averaged
over ranks by default (-a 1; -a 0/2/3: rank 0 / min / max); algbw = S / time; busbw = algbw x the
collective's factor. Stored as mode `nccl-tests` (distbench's own mode of that definition) with
rank_reduce from -a and tool_options from -z -G -C -m -I -R -D -u, so `distbench collectives --mode
nccl-tests` rows are the like-for-like peer of an import whose tool_options is ''.
"""

from bench.imports import Parsed, read_input
from bench.imports.nccl_json import parse_json
from bench.imports.nccl_names import distbench_name
from bench.imports.nccl_options import MEANING
from bench.imports.nccl_text import parse_text, parse_text_runs  # noqa: F401  (the readers' entries)
from bench.errors import BenchError

TOOL = "nccl-tests"

DEFINITIONS = {
    "time_median_s": "nccl-tests time (us -> s): the mean time of one op over the timed iterations (a host timer "
                     "around iters ops launched back to back, one synchronisation), reduced over ranks as -a says "
                     "(default 1: the average); not a median over samples: one figure per size",
    "algbw_gbps": "nccl-tests algbw: S / time, GB/s (1e9 B/s), as printed",
    "busbw_gbps": "nccl-tests busbw: algbw x the collective's bus factor (doc/PERFORMANCE.md), as printed",
    "bus_factor": "busbw / algbw of the tool's own numbers",
    "wrong": "nccl-tests #wrong: wrong elements summed over ranks (null with -c 0, 'N/A', and for older versions "
             "whose 'error' column is the largest deviation, not a count)",
    "max_error": "nccl-tests before 2.13: its 'error' column, the largest deviation from the expected value over "
                 "ranks, as printed (%5.0le); a row above nccl-tests' tolerance (DeltaMaxValue(type) x (ranks - 1)) "
                 "is degraded 'wrong results'",
    "size_bytes": "nccl-tests size (B): S, max(send, receive bytes)", "count": "nccl-tests count (elements per call)",
    "iters": "iters x agg iters of the header (with -G N each of the N graph launches replays them)",
    "mode": "nccl-tests", "blocking": "true, as distbench's --mode nccl-tests rows store it (nccl-tests' -z: tool_options)",
    "rank_reduce": "from -a: 0 rank0, 1 avg, 2 min, 3 max (src/common.cu Allreduce; the average is over processes x "
                   "threads); nccl-tests never prints -a: with no command line in the log, avg (its default) is "
                   "assumed and source.files[].options says so",
    "time_min_s": "-I 1: i_min / min_us, the fastest iteration's CUDA-event time (max over every GPU), after -K skipped",
    "time_max_s": "-I 1: i_max / max_us, the slowest iteration's, likewise",
    "time_cv": "-I 1: i_cv% / 100 (stdev over n iterations / their mean), likewise",
    "time_mean_s": "-J with -I 1: avg_us", "time_p95_s": "-J with -I 1: p95_us (nearest rank)",
    "time_stdev_s": "-J with -I 1: stdev_us (over n, not n - 1)",
    "samples": "-J with -I 1: the iterations in times_us; the samples table holds each (rank null: nccl-tests' max "
               "over every GPU of every process)",
    **MEANING,
}


def parse_runs(path, collective: str | None = None, world: int | None = None) -> list[Parsed]:
    """Every run a file holds (a text log may hold several, one per collective); either format, told
    apart by the first character."""
    collective = distbench_name(collective)
    text = read_input(path)
    if text.lstrip().startswith("{"):
        return [parse_json(text, str(path), collective, world)]
    return parse_text_runs(text, str(path), collective, world)


def parse(path, collective: str | None = None, world: int | None = None) -> Parsed:
    """The one run of a file (a file of several runs: parse_runs)."""
    runs = parse_runs(path, collective, world)
    if len(runs) > 1:
        raise BenchError(f"'{path}' holds {len(runs)} runs; read it with parse_runs")
    return runs[0]
