"""One CUDA stream and the host that drives it, on one simulated clock: enough of torch.cuda for
bench.timing.loop to run its CUDA latency loop as it would on a GPU, with every cost known.

Host calls cost host time (`cost`); kernels queue on the stream and run after whatever is ahead of
them. torch.cuda._sleep(cycles) is a kernel of cycles / CLOCK_HZ seconds. An event fires when the
stream reaches it; query() says whether it has; synchronize() moves the host to it. An op (`op`)
costs its dispatch on the host, then queues a kernel; its Work's wait() returns at once (NCCL's
collectives: the current stream waits, not the host) or, for an op whose wait blocks the host
(NCCL's barrier synchronizes the stream it holds: WorkNCCL::synchronizeInternal; gloo with CUDA
tensors), moves the host to the end of the stream. `now` is the host's time; `t()` reads it for
time.perf_counter."""

from dataclasses import dataclass, field

CLOCK_HZ = 2e9  # SM clock of the simulated GPU: torch.cuda._sleep spins this many cycles per second


@dataclass
class Costs:
    launch_s: float = 5e-6  # a kernel launch or event record on the host
    dispatch_s: float = 20e-6  # an op's host-side dispatch (a collective's enqueue)
    kernel_s: float = 10e-6  # the op's kernel on the stream
    barrier_s: float = 30e-6  # the ranks' barrier (host time)
    agree_s: float = 20e-6  # one agreement all-reduce (host time, with its sync)
    blocking_wait: bool = False  # does the op's wait() block the host until the stream is done?
    slow_dispatches: list = field(default_factory=list)  # the first ops' dispatch seconds, then dispatch_s


class Stream:
    def __init__(self, costs: Costs):
        self.c = costs
        self.now = 0.0  # host time
        self.free_at = 0.0  # when the stream will have finished what is queued
        self.spins: list[int] = []
        self.ops = 0
        self.barriers = 0

    def t(self) -> float:
        return self.now

    def host(self, seconds: float):
        self.now += seconds

    def queue(self, seconds: float) -> float:
        """A kernel of `seconds` on the stream; returns when it ends."""
        self.free_at = max(self.free_at, self.now) + seconds
        return self.free_at

    # torch.cuda
    def _sleep(self, cycles: int):
        self.spins.append(int(cycles))
        self.host(self.c.launch_s)
        self.queue(cycles / CLOCK_HZ)

    def synchronize(self, device=None):
        self.now = max(self.now, self.free_at)

    def event_class(self):
        stream = self

        class Event:
            def __init__(self, enable_timing=False):
                self.at = None

            def record(self, s=None):
                stream.host(stream.c.launch_s)
                self.at = max(stream.free_at, stream.now)  # fires when the stream reaches it

            def query(self) -> bool:
                return self.at is not None and self.at <= stream.now

            def synchronize(self):
                stream.now = max(stream.now, self.at)

            def elapsed_time(self, end) -> float:
                return (end.at - self.at) * 1e3  # ms

        return Event

    # the distributed side
    def op(self, async_op: bool):
        self.ops += 1
        slow = self.c.slow_dispatches
        self.host(slow.pop(0) if slow else self.c.dispatch_s)
        self.queue(self.c.kernel_s)
        stream = self

        class Work:
            def wait(self):
                if stream.c.blocking_wait:
                    stream.synchronize()

        if async_op:
            return Work()
        Work().wait()
        return None

    def barrier(self):
        self.barriers += 1
        self.synchronize()
        self.host(self.c.barrier_s)

    def agree_max(self, x: float) -> float:
        self.synchronize()
        self.host(self.c.agree_s)
        return x

    def install(self, monkeypatch, loop_module):
        import torch

        monkeypatch.setattr(torch.cuda, "_sleep", self._sleep)
        monkeypatch.setattr(torch.cuda, "Event", self.event_class())
        monkeypatch.setattr(torch.cuda, "synchronize", self.synchronize)
        clock = type("Clock", (), {"perf_counter": staticmethod(self.t),
                                   "perf_counter_ns": staticmethod(lambda: int(self.t() * 1e9))})
        monkeypatch.setattr(loop_module, "time", clock)
        from bench.timing import timers

        monkeypatch.setattr(timers, "time", clock)
        return self
