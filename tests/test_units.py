import pytest
import torch

from bench.errors import BenchError
from bench.units import format_size, parse_dtype, parse_op, parse_size, parse_size_list, size_sweep


@pytest.mark.parametrize("text,want", [("0", 0), ("8", 8), ("1K", 1024), ("4k", 4096), ("1M", 1 << 20),
                                       ("64M", 64 << 20), ("8G", 8 << 30), ("2KiB", 2048), ("3MB", 3 << 20)])
def test_parse_size(text, want):
    assert parse_size(text) == want


@pytest.mark.parametrize("bad", ["1X", "K", "-1", "1.5M", "", "1KK"])
def test_parse_size_bad_suffix(bad):
    with pytest.raises(BenchError, match="bad size"):
        parse_size(bad)


def test_sweep_is_geometric_and_inclusive():
    assert size_sweep(1024, 16384, 2) == [1024, 2048, 4096, 8192, 16384]
    assert size_sweep(1024, 1024, 2) == [1024]
    assert size_sweep(8, 100, 4) == [8, 32]


def test_sweep_errors():
    with pytest.raises(BenchError, match="min bytes 2048 > max bytes 1024"):
        size_sweep(2048, 1024, 2)
    with pytest.raises(BenchError, match="step factor 1.0 must be > 1"):
        size_sweep(1024, 2048, 1.0)


def test_size_list_and_format():
    assert parse_size_list("4K,1M") == [4096, 1 << 20]
    assert format_size(4096) == "4K" and format_size(1000) == "1000"


def test_dtype_and_op_names():
    assert parse_dtype("bf16") is torch.bfloat16
    assert parse_op("prod") == "product"
    with pytest.raises(BenchError, match="unknown dtype 'flaot32' \\(did you mean 'float32'\\?\\)"):
        parse_dtype("flaot32")
