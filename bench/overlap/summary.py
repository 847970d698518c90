"""What a person reads of an overlap run (the live run, `distbench show` and the report say the
same: every line is a function of the stored rows)."""

import math

import pandas as pd

from bench.report.terminal import Printer


def _f(x, fmt: str) -> str:
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, fmt)


def _ms(x) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x * 1e3:.3f}"


def pair_table(res: pd.DataFrame) -> pd.DataFrame:
    if res is None or res.empty or "overlap_test" not in res:
        return pd.DataFrame()
    return res[res["overlap_test"] == "pair"].sort_values(["collective", "size_bytes"])


def training_table(res: pd.DataFrame) -> pd.DataFrame:
    if res is None or res.empty or "overlap_test" not in res:
        return pd.DataFrame()
    return res[res["overlap_test"].isin(["ddp", "fsdp"])].sort_values(["overlap_test", "case_id"])


def pair_lines(pairs: pd.DataFrame) -> list[str]:
    if pairs.empty:
        return []
    out = ["#  collective        size(B)   comm(ms)  compute(ms)  both(ms)  hidden  ideal  effic.  comm x  comp x"]
    for r in pairs.itertuples():
        out.append(f"#  {r.collective:<15}{r.size_bytes:>10}  {_ms(r.overlap_comm_s):>9}  {_ms(r.overlap_compute_s):>11}  "
                   f"{_ms(r.overlap_both_s):>8}  {_f(r.hidden_share, '6.2f'):>6}  {_f(r.ideal_hidden_share, '5.2f'):>5}  "
                   f"{_f(r.overlap_efficiency, '6.2f'):>6}  {_f(r.comm_slowdown, '6.2f'):>6}  "
                   f"{_f(r.compute_slowdown, '6.2f'):>6}")
    return out


def training_lines(tr: pd.DataFrame) -> list[str]:
    if tr.empty:
        return []
    out = ["#  variant                      step(ms)  no-comm(ms)  exposed(ms)  comm alone(ms)  hidden"]
    for r in tr.itertuples():
        name = (f"ddp bucket {r.bucket_cap_mb:g} MB ({int(r.buckets)} buckets)" if r.overlap_test == "ddp"
                else f"fsdp prefetch {r.prefetch}")
        out.append(f"#  {name:<28}{_ms(r.overlap_both_s):>9}  {_ms(r.overlap_compute_s):>11}  "
                   f"{_ms(r.overlap_exposed_s):>11}  {_ms(r.overlap_comm_s):>14}  {_f(r.hidden_share, '6.2f'):>6}")
    return out


def overlap_summary(run) -> str:
    res = run.tables.get("results")
    pairs, tr = pair_table(res), training_table(res)
    out = ["# overlap: medians over repetitions of the max over ranks; hidden = (comm + compute - both) / comm, "
           "ideal = min(comm, compute) / comm, effic. = (comm + compute - both) / min(comm, compute), "
           "comm x / comp x = each side's time beside the other / alone (docs/overlap.md)"]
    if not pairs.empty:
        first = pairs.iloc[0]
        what = (f"gemm {int(first['gemm_n'])}^2 x {int(first['gemm_iters'])}" if first["overlap_compute"] == "gemm"
                else f"sleep {first['compute_target_s'] * 1e3:g} ms")
        threads = first.get("compute_threads")
        out.append(f"# compute action: {what}" + (f", {int(threads)} thread(s) in its own thread" if pd.notna(threads) else
                                                   ", on its own CUDA stream"))
    out += pair_lines(pairs)
    if not tr.empty:
        out.append("# training: exposed = step - step without communication (DDP: no_sync; FSDP: the unsharded "
                   "model); hidden = 1 - exposed / the step's collectives alone")
    out += training_lines(tr)
    degraded = sorted({d for d in (res["degraded"] if res is not None and "degraded" in res else []) if d})
    out += [f"#  degraded: {d}" for d in degraded]
    return "\n".join(out)


class OverlapLive(Printer):
    """One line as the launch starts and one per finished unit."""

    def start(self, launch, units):
        self.communicator(launch, "overlap: ")

    def unit(self, unit, index: int, total: int):
        self.p(f"# [{index}/{total}] {unit.label} ...")

    def done(self, tables: dict):
        for r in tables.get("results", []):
            if r.get("overlap_test") == "pair":
                self.p(f"#   comm {_ms(r['overlap_comm_s'])} ms, compute {_ms(r['overlap_compute_s'])} ms, both "
                       f"{_ms(r['overlap_both_s'])} ms: hidden {_f(r['hidden_share'], '.2f')}")
            else:
                self.p(f"#   step {_ms(r['overlap_both_s'])} ms, exposed {_ms(r['overlap_exposed_s'])} ms, "
                       f"hidden {_f(r['hidden_share'], '.2f')}")
