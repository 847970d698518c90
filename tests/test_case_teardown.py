"""A training case that fails still destroys the process groups it made: its composed layout's
DeviceMesh (a group per mesh dimension slice) must not outlive it, whatever step raised, or
every later case in the same process runs beside the failed case's groups (and, on NCCL, their
communicators' buffers). Real gloo ranks (tests/conftest.py spawn), a real composed case."""

from types import SimpleNamespace

from bench.training.case import CaseSpec
from conftest import spawn

# pp1 x tp2 at world 2 (one rank holds both stages of Interleaved 1F1B): a composed layout at the
# smallest world; its mesh makes a group of its own.
PP_TP = CaseSpec(strategy="pp+tp", model="mlp-tiny", world=2, chunks=2, schedule="interleaved", batch=8, tp=2)


class _Boom(RuntimeError):
    pass


def _fail_in(where: str):
    """A REGISTRY whose trainers are the real ones, with `where` (setup's end, step, sync) raising."""
    from bench.training import REGISTRY  # lazy: in the spawned rank

    class Failing:
        def get(self, name):
            real = REGISTRY.get(name)

            def setup(ctx):
                trainer = real.setup(ctx)
                if where == "setup":
                    raise _Boom("the case failed after its mesh was built")

                def boom(*a, **k):
                    raise _Boom(f"the case failed in {where}")
                setattr(trainer, where, boom)
                return trainer
            return SimpleNamespace(setup=setup)
    return Failing()


def _groups_around_a_failing_case(info, where: str):
    """Every rank: live groups before, after a case that raises in `where`, and after a good case."""
    from bench.distributed.comm import Comm  # lazy: in the spawned rank
    from bench.training import measure  # lazy: in the spawned rank
    from bench.training.base import live_groups  # lazy: in the spawned rank

    cfg = SimpleNamespace(check=0, warmup=1, steps=1, seed=0, profile=0)
    live, real = [len(live_groups())], measure.REGISTRY
    measure.REGISTRY = _fail_in(where)
    try:
        measure.measure_case(PP_TP, cfg, Comm(info))
        raised = None
    except _Boom as e:
        raised = str(e)
    finally:
        measure.REGISTRY = real
    live.append(len(live_groups()))
    res = measure.measure_case(PP_TP, cfg, Comm(info))  # the next case builds its own mesh and runs
    live.append(len(live_groups()))
    return {"live": live, "raised": raised, "loss": res["loss"]}


def test_a_failing_composed_case_destroys_its_groups():
    """Before: a case that raised after building its mesh left its group alive (live groups
    [1, 2, 2]: the next case ran beside it)."""
    for where in ("setup", "step"):
        out = spawn(_groups_around_a_failing_case, 2, where, timeout_s=120.0)
        for r in (0, 1):
            assert out[r]["raised"], out[r]  # the case did fail, on every rank
            assert out[r]["live"] == [1, 1, 1], (where, out[r])
            assert out[r]["loss"] == out[r]["loss"]  # the next case ran (a number, not NaN)
