"""The two sides of an overlap measurement, each on its own track, and the timing of one part.

Compute: `gemm` (gemm_iters matmuls of gemm_n x gemm_n) or `sleep` (compute of known duration: a
host sleep on CPU, which leaves the cores to the collective, a spin kernel on CUDA).
- CPU: the compute runs in a thread of its own (one per rank, started once, woken per action;
  torch releases the GIL in a matmul), with compute_threads intra-op threads; the collective is
  issued from the rank's main thread with async_op=True and gloo runs it in its own threads.
- CUDA: the compute runs on a side stream of its own; the collective on the current stream (NCCL
  on its internal stream, which the current stream waits for). Times are CUDA events: start on
  the current stream, the side stream waits for it, each side's end event on its own stream.

One part (`timed`): comm (the collective alone), compute (the compute alone, on its track), both
(started together: the compute is woken first, then the collective issued; each side's own end
and the time until both ended). Seconds from the common start.
"""

import threading
import time

import torch

from bench.workloads import spin


class HostCompute:
    """CPU: the compute action in a thread of its own."""

    def __init__(self, action, threads: int):
        self.action, self.threads = action, threads
        self._go, self._done = threading.Event(), threading.Event()
        self._t0 = self._t1 = 0.0
        self._stop = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name="distbench-overlap-compute", daemon=True)
        self._thread.start()

    def _loop(self):
        torch.set_num_threads(self.threads)  # this thread's intra-op pool is the process's; set once here
        while True:
            self._go.wait()
            self._go.clear()
            if self._stop:
                return
            try:
                self._t0 = time.perf_counter()
                self.action()
                self._t1 = time.perf_counter()
            except BaseException as e:  # noqa: BLE001 - handed to the rank's thread by wait()
                self._error = e
            self._done.set()

    def start(self):
        self._done.clear()
        self._go.set()

    def wait(self) -> tuple[float, float]:
        """(start, end) of the action, perf_counter seconds; raises what the action raised."""
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._t0, self._t1

    def close(self):
        self._stop = True
        self._go.set()
        self._thread.join(timeout=5)


def host_part(part: str, comm, compute: HostCompute) -> dict:
    """One part on CPU: {seconds of each side, from the common start}."""
    t0 = time.perf_counter()
    if part == "compute":
        compute.start()
        _, end = compute.wait()
        return {"compute": end - t0}
    if part == "comm":
        w = comm(True)
        if w is not None:
            w.wait()
        return {"comm": time.perf_counter() - t0}
    compute.start()
    w = comm(True)
    if w is not None:
        w.wait()
    comm_end = time.perf_counter()
    c0, c1 = compute.wait()
    return {"both": max(comm_end, c1) - t0, "both.comm": comm_end - t0, "both.compute": c1 - c0}


def cuda_part(part: str, comm, action, side) -> dict:
    """One part on CUDA: CUDA events, the compute on `side` (a torch.cuda.Stream)."""
    ev = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
    start, comm_end, comp_end = ev(), ev(), ev()
    start.record()
    if part in ("compute", "both"):
        side.wait_event(start)
        with torch.cuda.stream(side):
            action()
            comp_end.record(side)
    if part in ("comm", "both"):
        w = comm(True)
        if w is not None:
            w.wait()  # the current stream waits for the collective (NCCL: not the host)
        comm_end.record()
    torch.cuda.synchronize()
    el = lambda e: start.elapsed_time(e) / 1e3  # noqa: E731
    if part == "compute":
        return {"compute": el(comp_end)}
    if part == "comm":
        return {"comm": el(comm_end)}
    return {"both": max(el(comm_end), el(comp_end)), "both.comm": el(comm_end), "both.compute": el(comp_end)}


def make_action(kind: str, device: torch.device, n: int, iters: int, seconds: float, dtype: torch.dtype):
    """The compute action: a function of no argument."""
    if kind == "sleep":
        if device.type == "cuda":
            index = device.index if device.index is not None else torch.cuda.current_device()
            return lambda: spin.spin(seconds, index)
        return lambda: time.sleep(seconds)
    a = torch.randn(n, n, device=device, dtype=dtype if device.type == "cuda" else torch.float32)
    b, c = torch.randn_like(a), torch.empty_like(a)

    def gemm():
        for _ in range(iters):
            torch.mm(a, b, out=c)

    return gemm
