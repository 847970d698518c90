"""A training case's memory peaks in its results row: each the max over ranks, beside the rank it
came from (bench/training/columns.py: `*_rank`). The ranks peak on different things (a pipeline's
first stage holds the most activations, another the most reserved blocks), so peak allocated and
peak reserved of one row may be two ranks' figures: the rank columns say which."""

# (results column, its rank column, the strategy_ranks key it is the max of)
PEAKS = (("peak_memory_bytes", "peak_memory_rank", "peak_bytes"),
         ("peak_allocated_bytes", "peak_allocated_rank", "peak_allocated_bytes"),
         ("peak_reserved_bytes", "peak_reserved_rank", "peak_reserved_bytes"),
         ("host_peak_rss_bytes", "host_peak_rss_rank", "host_peak_rss_bytes"))


def peak_columns(ranks: list[dict]) -> dict:
    """Every PEAKS column and its rank from the per-rank rows (`rank` and the key): the largest
    value that is not None and the lowest rank holding it; both None when no rank has one (the
    CUDA allocator's columns on host ranks)."""
    out = {}
    for col, rank_col, key in PEAKS:
        known = [(x[key], x["rank"]) for x in ranks if x.get(key) is not None]
        value, rank = max(known, key=lambda p: (p[0], -p[1])) if known else (None, None)
        out[col], out[rank_col] = value, rank
    return out
