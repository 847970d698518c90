"""The collectives kind's own results columns (Kind.columns; bench.results.schema merges them with
the message-size sweep columns every sized kind shares, bench.results.schema.COLLECTIVE)."""

COLLECTIVES = {
    "group_size": "Int64",  # ranks per communicator (the n of busbw); the world when one group holds every rank
    "groups": "Int64",  # communicators running the collective at once (world / group_size; --group-size)
    "group_scope": "string",  # intra (every group inside one node) | inter (every group spans nodes) | mixed; decided per group at measure time
    "max_error": "float64",  # imported nccl-tests before 2.13: its `error` column (the largest deviation), as printed
    "time_p50_s": "float64",  # imported nccl-tests -J with -I 1: p50_us, its per-iteration median (sorted[n / 2], CUDA events); time_median_s holds its printed mean
    "tool_options": "string",  # imported runs: the tool's options that change what its time means (nccl-tests `-z 1 -G 10`); '' its defaults; null (distbench) read as ''
}

COLUMNS = {"results": COLLECTIVES}
