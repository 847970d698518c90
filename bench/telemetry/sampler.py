"""One background thread per node that samples every probe at a fixed interval.

start() takes a sample at once (in the caller's thread), then the thread samples every
`interval_s` on a fixed schedule (a slow sample delays the next, never causes a burst);
stop() ends the thread and takes a last sample, so even a case shorter than one interval has
a first and a last value (what the energy counter difference needs). All timestamps come
from `clock` (time.time: Unix seconds, the clock the case boundaries use).

Samples are plain tuples (t, device_uuid, rank, core, metric, value), turned into rows only
after stop(), outside the timed region. NVML calls are ctypes calls, which release the GIL.
"""

import threading
import time


class Sampler:
    def __init__(self, gpus: list, host, interval_s: float, clock=time.time):
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.gpus, self.host, self.interval_s, self.clock = gpus, host, interval_s, clock
        self.samples: list[tuple] = []
        self.ticks = 0  # sampling instants of the current case
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def _take(self, first: bool = False):
        t = self.clock()
        for g in self.gpus:
            g.read(t, self.samples, static=first)
        if self.host is not None:
            if first:
                self.host.prime()
            self.host.read(t, self.samples, cpu=not first)
        self.ticks += 1

    def _loop(self):
        due = time.monotonic() + self.interval_s
        while not self._stop.wait(max(0.0, due - time.monotonic())):
            self._take()
            due += self.interval_s
            now = time.monotonic()
            if due < now:  # fell behind: skip the missed instants
                due = now + self.interval_s

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self):
        if self.running:
            raise RuntimeError("sampler already running")
        self.samples, self.ticks = [], 0
        self._stop.clear()
        self._take(first=True)
        self._thread = threading.Thread(target=self._loop, name="distbench-telemetry", daemon=True)
        self._thread.start()

    def stop(self) -> list[tuple]:
        """End the thread, take the last sample, return this case's samples."""
        if self._thread is None:
            return []
        self._stop.set()
        self._thread.join()
        self._thread = None
        self._take()
        return self.samples
