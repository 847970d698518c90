"""Every benchmark kind, registered: importing this module fills bench.harness.KINDS. The CLI,
`distbench show` and the report look kinds up here, by the one name each kind has."""

# isort: off  (registration order is the order of `distbench --help` and `distbench list`)
from bench.collectives.kind import KIND as COLLECTIVES  # noqa: F401
from bench.allreduce.kind import KIND as ALLREDUCE  # noqa: F401
from bench.pipeline.kind import KIND as PIPELINE  # noqa: F401
from bench.strategies.kind import KIND as STRATEGIES  # noqa: F401
from bench.doctor.kind import KIND as DOCTOR  # noqa: F401
from bench.overlap.kind import KIND as OVERLAP  # noqa: F401
# isort: on
from bench.kind import KINDS, render_run  # noqa: F401  (the registry, filled; render_run for older callers)
