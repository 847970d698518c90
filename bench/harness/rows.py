"""The measured-row builder shared by every timed kind: from every rank's per-iteration
seconds to the statistics columns, the bandwidths (nccl-tests' definitions) and the
`ranks` / `samples` tables that keep the raw data."""

import numpy as np

from bench.timing.stats import algbw_gbps, busbw_gbps, reduce_ranks, summarize


def timed_tables(key: dict, per_rank: np.ndarray, size_bytes: int, bus_factor: float, hosts: list[str],
                 node_ranks: list[int], rank_reduce: str = "max") -> tuple[dict, list[dict], list[dict]]:
    """key: the columns naming the case in every table (run_id, case_id, size_bytes, placement).
    per_rank: [world, iterations] seconds. Returns (results columns, ranks rows, samples rows).

    Time is the median over iterations of the iteration's time reduced over ranks (`rank_reduce`:
    max = the slowest rank, avg = nccl-tests' default; bench.timing.stats.RANK_REDUCTIONS);
    algbw = S / t and busbw = algbw x bus factor (nccl-tests doc/PERFORMANCE.md)."""
    st = summarize(reduce_ranks(per_rank, rank_reduce))
    medians = np.median(per_rank, axis=1)
    cols = {"samples": st.n, "rank_reduce": rank_reduce, **st.columns(), "algbw_gbps": algbw_gbps(size_bytes, st.median_s),
            "busbw_gbps": busbw_gbps(size_bytes, st.median_s, bus_factor), "bus_factor": bus_factor,
            "rank_median_min_s": float(medians.min()), "rank_median_max_s": float(medians.max()),
            "rank_skew_s": float(medians.max() - medians.min()), "slowest_rank": int(medians.argmax())}
    ranks, samples = [], []
    for r in range(per_rank.shape[0]):
        ranks.append({**key, "rank": r, "node_rank": node_ranks[r], "host": hosts[r], "median_s": float(medians[r])})
        samples.extend({**key, "rank": r, "iteration": i, "seconds": float(s)} for i, s in enumerate(per_rank[r]))
    return cols, ranks, samples
