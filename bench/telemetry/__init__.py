"""Telemetry sampled during every benchmark case (NVML + host). Contract used by every runner:

    tel = telemetry.start(job, info, writer)        # every rank; writer is None off rank 0
    with tel.case(case_id, size_bytes=..., placement=...) as tc:   # every rank, collectively
        ... timed work ...
    row.update(tc.summary)                           # on rank 0: per-case summary columns
    tel.close()                                      # every rank, at the end of the launch

This file is the no-op stand-in until the sampler lands: it keeps the contract so runners can
call it now.
"""

from contextlib import contextmanager


class _Case:
    def __init__(self):
        self.summary: dict = {}


class Telemetry:
    def __init__(self, job=None, info=None, writer=None):
        self.enabled = False

    @contextmanager
    def case(self, case_id: str, **keys):
        tc = _Case()
        yield tc

    def close(self):
        pass


def start(job, info, writer) -> Telemetry:
    return Telemetry(job, info, writer)
