"""bench.timing.alphabeta, the Hockney fit every kind shares: one convention, alpha in seconds
per step and beta in seconds per byte (the bandwidth is 1 / beta), for the allreduce algorithms'
(a, b) and for one point-to-point message alike."""

import pytest

from bench.plan import model as pl
from bench.timing import alphabeta


def test_one_message_is_alpha_plus_bytes_times_beta():
    assert alphabeta.one_message(2) == (1.0, 1.0)
    assert alphabeta.predict(alphabeta.one_message, 2, 1e6, 30e-6, 1 / 2e9) == pytest.approx(30e-6 + 1e6 / 2e9)


def test_the_fit_returns_beta_in_seconds_per_byte_and_the_bandwidth_as_its_inverse():
    sizes = [2**k for k in range(10, 27, 2)]
    got = alphabeta.fit(alphabeta.one_message, [2] * len(sizes), sizes, [30e-6 + n / 2e9 for n in sizes])
    assert got.alpha_s == pytest.approx(30e-6, rel=1e-6) and got.beta_s_per_byte == pytest.approx(0.5e-9, rel=1e-6)
    assert got.bandwidth_gbps == pytest.approx(2.0, rel=1e-6) and got.max_abs_rel_residual < 1e-9


def test_the_planners_link_keeps_the_same_convention():
    link = pl.Link(alpha_s=30e-6, beta_s_per_byte=0.5e-9, source="r", sizes=(1024, 2**26))
    assert link.seconds(1e6) == pytest.approx(alphabeta.predict(alphabeta.one_message, 2, 1e6, 30e-6, 0.5e-9))
    assert link.bandwidth_bytes_per_s == pytest.approx(2e9)
    assert link.label() == "alpha 30.0 us, beta 2.00 GB/s (r)"  # printed: the bandwidth, 1 / beta
