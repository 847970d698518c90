"""The collectives kind's own results columns (Kind.columns; bench.results.schema merges them with
the message-size sweep columns every sized kind shares, bench.results.schema.COLLECTIVE)."""

COLLECTIVES = {
    "max_error": "float64",  # imported nccl-tests before 2.13: its `error` column (the largest deviation), as printed
}

COLUMNS = {"results": COLLECTIVES}
