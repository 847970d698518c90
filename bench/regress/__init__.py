"""Judging stored runs: compare (case by case), baselines, the stored-baseline gate, the same-machine
A/B gate, history and bisect (docs/gate.md, docs/history.md). Reads what bench.results stores;
launches suites only through bench.regress.launch. The report (bench.report) draws from it; it
draws nothing itself but the history plot."""
