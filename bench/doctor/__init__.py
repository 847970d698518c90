"""`distbench doctor`: find the slow link, rank or node of a cluster, with evidence (docs/doctor.md).

schedule.py (pure): which ranks talk in which round; probe.py: the point-to-point rounds and the
group all_reduces; compute.py: the per-rank matmul probe; verdict.py (pure): robust statistics
and the ranked suspects; kind.py: the registered kind; summary.py and plots.py: what a person sees.
"""
