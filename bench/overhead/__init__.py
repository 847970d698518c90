"""`distbench telemetry-overhead`: a benchmark of the telemetry sampler itself (sampling on/off
interleaved on one all_reduce case). It sits above bench/telemetry, which only samples."""
