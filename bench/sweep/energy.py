"""The timed span of a message-size sweep's measured loop, for its energy (bench.telemetry.energy).

bench.timing.loop.measure runs the warm-up, synchronises the device, then asks agree_max for the
iteration count every rank will time (its first agree_max), then times. So the span starts when
that first agree_max returns (every rank is past its warm-up, its device idle) and ends when the
loop returns (its last sample synchronised); the ops it holds are the op calls made in between:
the timed ops, and in CUDA latency mode the samples taken again with a longer hold (issued, so
paid for). The loop's barriers and, in latency mode, its spin-kernel holds are inside the span:
throughput mode is the one whose J/op is the op's own. Only the two callables the loop already
takes are wrapped; the loop itself is unchanged.
"""


class TimedSpan:
    """op and agree_max for bench.timing.loop.measure that mark the energy span of `span`
    (a case's tc.energy) around the timed ops; stop(bus_bytes_per_op) after the loop."""

    def __init__(self, span, op, agree_max, devices):
        self.span, self._op, self._agree, self.devices = span, op, agree_max, list(devices)
        self.started, self.ops = False, 0

    def op(self, async_op):
        if self.started:
            self.ops += 1
        return self._op(async_op)

    def agree_max(self, x: float) -> float:
        v = self._agree(x)
        if not self.started:  # the iteration count: the warm-up is over on every rank
            self.started = True
            self.span.start(self.devices)
        return v

    def stop(self, bus_bytes_per_op: float):
        """bus_bytes_per_op: one op's bus bytes summed over every rank (size x bus factor x ranks)."""
        if self.started:
            self.span.stop(ops=self.ops, bus_bytes_per_op=bus_bytes_per_op)
