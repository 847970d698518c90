"""distbench's own hot paths under pytest-benchmark (`make perf`; not part of `make test`).

Files here are named perf_*.py so the default test collection (test_*.py) never picks them up;
`make perf` collects them with -o python_files=perf_*.py. Compare with a saved run:
    make perf ARGS="--benchmark-autosave"
    make perf ARGS="--benchmark-compare --benchmark-compare-fail=median:25%"
"""

import numpy as np
import pandas as pd
import pytest

from bench.results.schema import conform
from bench.results.store import RunWriter, load_run
from bench.timing.alphabeta import fit
from bench.timing.stats import summarize

N_SAMPLES = 10**6
N_ROWS = 10**5


@pytest.fixture(scope="module")
def samples():
    return np.random.default_rng(0).lognormal(mean=-7, sigma=0.3, size=N_SAMPLES)


def _rows(n=N_ROWS):
    rng = np.random.default_rng(1)
    return pd.DataFrame({"run_id": "perf", "case_id": [f"all_reduce.float32.sum.root-1.latency.w2.{i % 97}" for i in range(n)],
                         "size_bytes": rng.integers(1, 1 << 26, n), "placement": "in-place", "rank": rng.integers(0, 8, n),
                         "iteration": np.arange(n), "seconds": rng.lognormal(-7, 0.3, n)})


def test_summarize_1e6_samples(benchmark, samples):
    stats = benchmark(summarize, samples)
    assert stats.n == N_SAMPLES


def test_write_1e5_row_run(benchmark, tmp_path):
    rows = _rows().to_dict("records")  # runners hand write_case lists of row dicts
    counter = iter(range(10**6))

    def write():
        w = RunWriter(tmp_path, "perf", f"run{next(counter)}")
        w.write_case({"samples": rows})
        w.finalize()
        return w.dir

    d = benchmark(write)
    assert (d / "samples.parquet").exists()


def test_load_1e5_row_run(benchmark, tmp_path):
    w = RunWriter(tmp_path, "perf", "run")
    w.write_case({"samples": _rows().to_dict("records")})
    w.finalize()
    run = benchmark(load_run, w.dir)
    assert len(run["samples"]) == N_ROWS


def test_conform_1e5_rows(benchmark):
    df = _rows()
    out = benchmark(conform, df, "samples")
    assert len(out) == N_ROWS


def test_alpha_beta_fit(benchmark):
    def ring(n):
        return 2 * (n - 1), 2 * (n - 1) / n

    worlds = [2, 4, 8] * 20
    sizes = [float(1 << (10 + i % 17)) for i in range(len(worlds))]
    times = [2 * (n - 1) * 5e-6 + 2 * (n - 1) / n * s / 10e9 for n, s in zip(worlds, sizes)]
    f = benchmark(fit, ring, worlds, sizes, times)
    assert f is not None and f.alpha_s == pytest.approx(5e-6, rel=1e-3)
