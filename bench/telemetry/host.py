"""Host side of the sampler: per-core CPU utilization, each local rank's RSS (psutil, imported
lazily) and the 1-minute load average (os.getloadavg, no psutil needed)."""

import os


def load_psutil(module=None):
    """(psutil or None, why)."""
    if module is not None:
        return module, ""
    try:
        import psutil  # lazy: optional here: without psutil the host metrics are recorded as missing
    except ImportError:
        return None, "psutil not installed"
    return psutil, ""


class HostProbe:
    def __init__(self, rank_pids: dict[int, int], psutil_module=None, use_psutil: bool = True):
        ps, why = load_psutil(psutil_module) if use_psutil else (None, "psutil disabled")
        self.ps = ps
        self.missing: dict[str, str] = {}
        self.procs = {}
        if ps is None:
            self.missing["cpu_util_pct"] = self.missing["rss_bytes"] = why
        else:
            for rank, pid in rank_pids.items():
                try:
                    self.procs[rank] = ps.Process(pid)
                except Exception as e:  # noqa: BLE001 - a rank already gone, or not visible
                    self.missing[f"rss_bytes[rank {rank}]"] = f"{type(e).__name__}: {e}"
        if not hasattr(os, "getloadavg"):
            self.missing["load1"] = "os.getloadavg not available"

    def prime(self):
        """Start the per-core CPU window: cpu_percent() reports the time since its last call."""
        if self.ps is not None and "cpu_util_pct" not in self.missing:
            try:
                self.ps.cpu_percent(percpu=True)
            except Exception as e:  # noqa: BLE001
                self.missing["cpu_util_pct"] = f"{type(e).__name__}: {e}"

    def read(self, t: float, out: list, cpu: bool = True):
        """Append (t, None, rank, core, metric, value); cpu=False skips the CPU window (start)."""
        if cpu and self.ps is not None and "cpu_util_pct" not in self.missing:
            try:
                for core, pct in enumerate(self.ps.cpu_percent(percpu=True)):
                    out.append((t, None, None, core, "cpu_util_pct", float(pct)))
            except Exception as e:  # noqa: BLE001
                self.missing["cpu_util_pct"] = f"{type(e).__name__}: {e}"
        for rank, proc in list(self.procs.items()):
            try:
                out.append((t, None, rank, None, "rss_bytes", float(proc.memory_info().rss)))
            except Exception as e:  # noqa: BLE001 - the rank exited: stop asking
                self.missing[f"rss_bytes[rank {rank}]"] = f"{type(e).__name__}: {e}"
                del self.procs[rank]
        if "load1" not in self.missing:
            try:
                out.append((t, None, None, None, "load1", float(os.getloadavg()[0])))
            except OSError as e:
                self.missing["load1"] = str(e)
