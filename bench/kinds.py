"""Every benchmark kind, registered: importing this module fills bench.harness.KINDS. The CLI,
`distbench show` and the report look kinds up here, by the one name each kind has."""

# isort: off  (registration order is the order of `distbench --help` and `distbench list`)
from bench.collectives.kind import KIND as COLLECTIVES  # noqa: F401
from bench.allreduce.kind import KIND as ALLREDUCE  # noqa: F401
from bench.pipeline.kind import KIND as PIPELINE  # noqa: F401
from bench.strategies.kind import KIND as STRATEGIES  # noqa: F401
# isort: on
from bench.harness.kind import KINDS


def render_run(run) -> str:
    """A stored run's closing summary, as the live run printed it (`distbench show`)."""
    return KINDS.get(run.meta.get("kind", "")).summary(run)
