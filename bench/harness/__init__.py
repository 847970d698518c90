"""The one harness every benchmark kind plugs into (nccl-tests' common.cu, one level up).

A kind (bench.kind.Kind) supplies only what is its own: config, CLI options, the units
one launch measures, measure(unit, launch) -> {table: rows}, and a summary of a loaded run.
The harness owns the rest: the launches (run.py, launcher side), the rank skeleton (rank.py:
process group, warm-up, run id, meta.json, telemetry, one part per finished unit) and the
measured-row builder shared by the timed kinds (rows.py).
"""

from bench.kind import KINDS, Kind, LaunchPlan, Plan

__all__ = ["KINDS", "Kind", "LaunchPlan", "Plan"]
