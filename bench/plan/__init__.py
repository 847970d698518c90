"""The planner (`distbench plan`): which layout, and how fast, from calibration runs of the
pipeline kind and a collectives run of the target (docs/plan.md). A room of its own above the
kinds: it reads their stored runs; the pipeline kind draws the predictions it stores."""
