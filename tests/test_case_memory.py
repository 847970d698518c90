"""Per-GPU memory of a training case (issue 31 item 2): the peaks a case reports cover its measured
steps only, not the correctness check before them (the reference model on rank 0, the gathered
gradients and global batch), and the results row carries the CUDA allocator's peak allocated and
peak reserved bytes as two columns. torch.cuda is faked (tests/conftest.py FakeCuda): every GPU
branch runs on CPU."""

from types import SimpleNamespace

import torch

from bench.training import measure
from bench.training.base import Clock
from bench.training.case import CaseSpec
from bench.training.replay import gpipe_order
from conftest import FakeCuda

MiB = 2**20
MODEL, STEP, GRADS, BATCH, REFERENCE = 100 * MiB, 10 * MiB, 400 * MiB, 50 * MiB, 1000 * MiB


class _Block:
    """Bytes on the fake GPU for as long as the object lives (a tensor's storage)."""

    def __init__(self, cuda: FakeCuda, nbytes: int):
        self.cuda, self.nbytes = cuda, nbytes
        cuda.malloc(0, nbytes)

    def __del__(self):
        self.cuda.free(0, self.nbytes)


class _Trainer:
    """A trainer on cuda:0 whose model holds MODEL bytes and whose every step allocates STEP bytes
    of activations and frees them; its check hands out GRADS bytes of gathered gradients and a
    BATCH-byte global batch (what pp's all_gather_object and a composed layout's gather do)."""

    role, degraded, devices, comm_in_compute = "r0", "", 1, False

    def __init__(self, cuda: FakeCuda, ctx):
        self.cuda, self.ctx = cuda, ctx
        self.model = _Block(cuda, MODEL)
        self.clock = Clock(torch.device("cpu"))
        self.opt = SimpleNamespace(zero_grad=lambda set_to_none=True: None)

    def step(self, check=False):
        acts = _Block(self.cuda, STEP)
        del acts

    def prefetch(self):
        pass

    def sync(self):
        pass

    def device_list(self):
        return [self.ctx.device]

    def loss(self):
        return 1.0

    def grads(self):
        return {"w": _Block(self.cuda, GRADS)}

    def global_batch(self):
        return (_Block(self.cuda, BATCH), None)

    def solo(self):
        return None


def _measure(monkeypatch, check: int):
    cuda = FakeCuda(n=1).install(monkeypatch)
    cuda.current = 0

    def reference(trainer, loss, grads, batch):
        ref = _Block(cuda, REFERENCE)  # the single-process model, its activations and gradients
        del ref
        return {"wrong": 0, "max_abs_diff": 0.0}

    monkeypatch.setattr(measure, "reference_check", reference)
    monkeypatch.setattr(measure, "REGISTRY", SimpleNamespace(
        get=lambda name: SimpleNamespace(setup=lambda ctx: _Trainer(cuda, ctx))))
    info = SimpleNamespace(rank=0, world=1, device=torch.device("cuda", 0))
    comm = SimpleNamespace(info=info, barrier=lambda: None, gather_object=lambda x: [x])
    cfg = SimpleNamespace(check=check, warmup=1, steps=5, seed=0, profile=0)
    case = CaseSpec(strategy="ddp", model="mlp-tiny", world=1, batch=8)
    return measure.measure_case(case, cfg, comm)["facts"][0]["mem"], cuda


def test_the_peak_covers_the_measured_steps_not_the_check(monkeypatch):
    """The check's reference (freed, its blocks kept by the caching allocator) and the gathered
    gradients and batch (held until the case ended) landed in the peaks: allocated was
    model + gradients + batch + step = 560 MiB and reserved 1550 MiB. The measured steps need the
    model and one step's activations: 110 MiB, allocated and reserved alike."""
    mem, cuda = _measure(monkeypatch, check=1)
    assert mem["memory_kind"] == "cuda"
    assert (mem["peak_allocated_bytes"], mem["peak_reserved_bytes"]) == (MODEL + STEP, MODEL + STEP)
    assert ("empty_cache", None) in cuda.calls
    unchecked, _ = _measure(monkeypatch, check=0)
    assert (unchecked["peak_allocated_bytes"], unchecked["peak_reserved_bytes"]) == (MODEL + STEP, MODEL + STEP)


def test_results_row_names_peak_allocated_and_peak_reserved():
    """The row: peak_allocated_bytes and peak_reserved_bytes, each the max over ranks of the
    rank's CUDA allocator peak; peak_memory_bytes stays the max over ranks of peak reserved (host:
    peak RSS, and the two CUDA columns null)."""
    def mem(alloc, reserved, kind="cuda"):
        cuda = kind == "cuda"
        return {"memory_kind": kind, "peak_allocated_bytes": alloc if cuda else None, "peak_active_bytes": alloc if cuda else None,
                "peak_reserved_bytes": reserved if cuda else None, "device_used_bytes": 1 if cuda else None,
                "device_total_bytes": 2 if cuda else None, "host_peak_rss_bytes": 7, "host_peak_is_lifetime": False}

    def rec(r):
        spans = [("fwd", 0, 0, 0.0, 1.0), ("bwd", 0, -1, 3.0, 4.0)] if r == 0 else \
            [("fwd", 1, 0, 1.0, 2.0), ("bwd", 1, -1, 2.0, 3.0)]
        return {"span": (0.0, 4.0), "spans": spans, "waits": []}

    def facts(mems):
        return [{"recs": [rec(r)] * 5, "mem": m, "solo_s": float("nan"), "role": f"stages {r}", "degraded": "",
                 "devices": 1, "comm_in_compute": False, "order": gpipe_order(2, 1) if r == 0 else None,
                 "params": 10} for r, m in enumerate(mems)]

    case = CaseSpec(strategy="pp", model="mlp-pipe", world=2, chunks=1, schedule="gpipe", batch=8)
    base_row = {"run_id": "r", "suite": "s", "kind": "pipeline", "world": 2, "nodes": 1, "backend": "nccl",
                "device_type": "cuda", "threads_per_rank": 1, "oversubscribed": False, "degraded": ""}
    res = {"facts": facts([mem(30, 40), mem(50, 45)]), "check": None, "loss": 1.0}
    row = measure.build_tables(case, res, base_row, ["h", "h"], 1)["results"][0]
    assert (row["peak_allocated_bytes"], row["peak_reserved_bytes"], row["peak_memory_bytes"]) == (50, 45, 45)
    host = {"facts": facts([mem(0, 0, "host"), mem(0, 0, "host")]), "check": None, "loss": 1.0}
    row = measure.build_tables(case, host, {**base_row, "device_type": "cpu"}, ["h", "h"], 1)["results"][0]
    assert (row["peak_allocated_bytes"], row["peak_reserved_bytes"], row["peak_memory_bytes"]) == (None, None, 7)
