"""How stored collectives rows are read (the Kind's `read` table); allreduce reads the same way."""

import pandas as pd

from bench.kind import Metric

# time: nccl-tests' figure (docs/schema.md says which mode and rank reduction); busbw and the energy
# over the timed span (docs/telemetry.md, "Energy": null where the counter is missing or too coarse) shown only
COMM_METRICS = (Metric("time_median_s", True, True), Metric("busbw_gbps", False, False),
                Metric("energy_per_op_j", True, False), Metric("energy_per_gb_j", True, False))
# what changes a collective's numbers beside its key (a baseline must agree on each)
COMM_SETTINGS = ("mode", "blocking", "rank_reduce", "dtype", "op", "warmup_iters", "threads_per_rank", "device_type")


def narrow_sized(flag: str, column: str):
    """A re-run of some cases of a size sweep: `flag` with the rows' `column` values, and --sizes."""
    def narrow(rows: pd.DataFrame) -> list[str]:
        args = []
        if column in rows and len(rows):
            args += [flag, ",".join(sorted(set(rows[column].dropna().astype(str))))]
        sizes = sorted({int(s) for s in pd.to_numeric(rows.get("size_bytes"), errors="coerce").dropna()}) if len(rows) else []
        if sizes and min(sizes) > 0:
            args += ["--sizes", ",".join(str(s) for s in sizes)]
        return args

    return narrow
