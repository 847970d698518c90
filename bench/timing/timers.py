"""Timers: CUDA events on GPU (device time of the stream), perf_counter_ns on CPU (host time
around the blocking call or work.wait())."""

import time

import torch


class HostTimer:
    def start(self):
        self._t0 = time.perf_counter_ns()

    def stop(self) -> float:
        """Seconds since start()."""
        return (time.perf_counter_ns() - self._t0) * 1e-9


class CudaTimer:
    def __init__(self, device: torch.device):
        self.device = device
        self._a = torch.cuda.Event(enable_timing=True)
        self._b = torch.cuda.Event(enable_timing=True)

    def start(self):
        self._a.record()

    def started(self) -> bool:
        """Has the start event been reached on the device already?"""
        return self._a.query()

    def mark(self):
        """Record the end event without waiting for it (elapsed() waits)."""
        self._b.record()

    def ended(self) -> bool:
        """Has the end event (mark) been reached on the device already?"""
        return self._b.query()

    def elapsed(self) -> float:
        """Seconds from the start event to the end event, once the end event has fired."""
        self._b.synchronize()
        return self._a.elapsed_time(self._b) * 1e-3  # ms -> s

    def stop(self) -> float:
        self.mark()
        return self.elapsed()


def make_timer(device: torch.device):
    return CudaTimer(device) if device.type == "cuda" else HostTimer()


def sync(device: torch.device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)
