"""The doctor's compute probe: a fixed matmul timed on every rank (a slow device, a throttled GPU,
a rank with less CPU than the others), and on a GPU its NVML clocks and clock-event reasons."""

import torch

from bench.telemetry import nvml
from bench.timing.timers import make_timer

CPU_N, GPU_N = 512, 8192  # matmul sides when compute_n = 0: fp32 on CPU (one thread), bf16 on GPU
CPU_ITERS, GPU_ITERS = 32, 50  # matmuls per timed repetition when compute_iters = 0


def probe_shape(device, n: int = 0, iters: int = 0) -> tuple[int, torch.dtype, int]:
    """(side, dtype, matmuls per repetition) of the probe's square matmul on this device."""
    if device.type == "cuda":
        return n or GPU_N, torch.bfloat16, iters or GPU_ITERS
    return n or CPU_N, torch.float32, iters or CPU_ITERS


def flops(n: int) -> float:
    """Floating-point operations of one n x n by n x n matmul: 2 n^3 (a multiply and an add each)."""
    return 2.0 * n ** 3


class Matmul:
    """The probe's fixed work: `iters` n x n matmuls of fixed inputs per repetition."""

    def __init__(self, device, n: int, dtype, iters: int):
        gen = torch.Generator(device="cpu").manual_seed(0)
        self.a = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
        self.b = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
        self.out = torch.empty(n, n, device=device, dtype=dtype)
        self.device, self.iters = device, iters
        self.timer = make_timer(device)

    def rep(self) -> float:
        """Seconds per matmul of one repetition (CUDA events on GPU; on CPU one thread, the thread
        count restored after: the same work on every rank, whatever its thread count)."""
        threads = torch.get_num_threads()
        if self.device.type != "cuda":
            torch.set_num_threads(1)
        try:
            self.timer.start()
            for _ in range(self.iters):
                torch.mm(self.a, self.b, out=self.out)
            return self.timer.stop() / self.iters
        finally:
            torch.set_num_threads(threads)


def gpu_clocks(device, module=None) -> dict:
    """This rank's GPU as NVML sees it right after the probe: SM clock, application SM clock and the
    clock-event reasons (names); {} on CPU; each value None (and `gpu_clock_note` why) where NVML
    cannot say."""
    if device.type != "cuda":
        return {}
    out = {"gpu_sm_clock_mhz": None, "gpu_app_clock_mhz": None, "gpu_clock_reasons": None, "gpu_clock_note": ""}
    nv, why = nvml.load(module)
    if nv is None:
        return {**out, "gpu_clock_note": why}
    try:
        dev, how = nvml.resolve(nvml.cuda_identity(device), nvml.nvml_devices(nv))
        if dev is None:
            return {**out, "gpu_clock_note": how}
        h = dev["handle"]
        out["gpu_sm_clock_mhz"] = float(nv.nvmlDeviceGetClockInfo(h, nvml.CLOCK_SM))
        out["gpu_app_clock_mhz"] = float(nv.nvmlDeviceGetApplicationsClock(h, nvml.CLOCK_SM))
        fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            nv.nvmlDeviceGetCurrentClocksThrottleReasons  # older drivers' name
        mask = int(fn(h))
        out["gpu_clock_reasons"] = ",".join(name for bit, name in nvml.REASON_BITS.items() if mask & bit)
        out["gpu_throttled"] = nvml.throttled(mask, out["gpu_sm_clock_mhz"], out["gpu_app_clock_mhz"])
    except Exception as e:  # noqa: BLE001 - a call this GPU or driver does not support: say which
        out["gpu_clock_note"] = nvml.reason(e)
    finally:
        nvml.shutdown(nv)
    return out
