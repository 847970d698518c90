# distbench: `make bench-collectives` and `make test` work on a fresh clone (the venv is made
# on first use). GPU hosts: TORCH_SPEC / TORCH_INDEX choose another torch build, or
# PYTHON_BIN=/path/to/python uses an existing environment as it is (no venv, no installs).

PY          ?= python3
VENV        ?= .venv
TORCH_SPEC  ?= torch==2.13.0
TORCH_INDEX ?=
PYTHON_BIN  ?=

ifeq ($(strip $(PYTHON_BIN)),)
PYTHON := $(VENV)/bin/python
DEPS   := $(VENV)/.installed
else
PYTHON := $(PYTHON_BIN)
DEPS   :=
endif

DISTBENCH := $(PYTHON) -m bench

# Optional overrides, passed on only when given.
SUITE       ?=
WORLD       ?=
SIZES       ?=
CHUNKS      ?=
SCHEDULE    ?=
STAGES      ?=
CHECKPOINT  ?=
MICRO_BATCH ?=
ARGS        ?=
opt = $(if $(strip $(2)),$(1) $(2))

.PHONY: help install-slurm bench report bench-collectives bench-allreduce bench-pipeline bench-strategies bench-overlap gpu-smoke test test-slow perf clean

help:
	@echo "make bench                 the quick suite of every kind, then one report of the four runs"
	@echo "make bench-collectives     [SUITE=suites/x.toml WORLD=2 SIZES=4K,1M ARGS=...]"
	@echo "make bench-allreduce       [SUITE=... WORLD=... SIZES=... ARGS=...]"
	@echo "make bench-pipeline        [CHUNKS=1,4,8 SCHEDULE=... STAGES=... CHECKPOINT=... MICRO_BATCH=... TP=2 DP=2 FSDP=2 ARGS=...]"
	@echo "make bench-strategies      [SUITE=... WORLD=... ARGS=...]"
	@echo "make bench-overlap         [SUITE=... WORLD=... SIZES=... ARGS=...]  communication hidden behind compute"
	@echo "make report                [ARGS='RUN_DIR... --baseline DIR --output-dir DIR']  HTML + PNG report (default: latest run of each kind)"
	@echo "make gpu-smoke             [ARGS='--checks ... --out DIR']  the GPU smoke checks (tools/gpu_smoke.py)"
	@echo "make test                  [ARGS=pytest options]  the test suite without the slow set"
	@echo "make test-slow             [ARGS=...]  the slow end-to-end tests"
	@echo "make perf                  [ARGS=...]  distbench's own hot paths under pytest-benchmark"
	@echo "make gate                  [SUITE=... BASELINES=results/baselines ARGS=...]  judge against the stored baseline"
	@echo "make gate-ab AGAINST=REV   [PAIRS=5 SUITE=... ARGS=...]  same-machine A/B against a git revision"
	@echo "make install-slurm         (root, Debian) Slurm, munge and Open MPI for distbench simcluster --scheduler slurm / --launcher mpirun"
	@echo "make clean                 remove results/*/, reports/*/ and .pytest_cache"

$(VENV)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q "$(TORCH_SPEC)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(VENV)/bin/python -m pip install -q -e ".[dev]"
	@touch $@

# The quick defaults of every kind, one after the other (never in parallel: they would time each
# other), then one report of the four runs (the latest of each kind under results/); prints its path.
bench: $(DEPS)
	$(MAKE) --no-print-directory bench-collectives
	$(MAKE) --no-print-directory bench-allreduce
	$(MAKE) --no-print-directory bench-pipeline
	$(MAKE) --no-print-directory bench-strategies
	$(DISTBENCH) report --out results

# HTML + PNG report: the latest run of each kind under results/, or ARGS="RUN_DIR... [--baseline DIR] [--output-dir DIR]".
report: $(DEPS)
	$(DISTBENCH) report $(ARGS)

bench-collectives: $(DEPS)
	$(DISTBENCH) collectives --suite $(or $(SUITE),suites/collectives.toml) $(call opt,--nproc,$(WORLD)) $(call opt,--sizes,$(SIZES)) $(ARGS)

bench-allreduce: $(DEPS)
	$(DISTBENCH) allreduce --suite $(or $(SUITE),suites/allreduce.toml) $(call opt,--nproc,$(WORLD)) $(call opt,--sizes,$(SIZES)) $(ARGS)

bench-pipeline: $(DEPS)
	$(DISTBENCH) pipeline --suite $(or $(SUITE),suites/pipeline.toml) $(call opt,--chunks,$(CHUNKS)) $(call opt,--schedule,$(SCHEDULE)) $(call opt,--stages,$(STAGES)) $(call opt,--checkpoint,$(CHECKPOINT)) $(call opt,--micro-batch,$(MICRO_BATCH)) $(call opt,--tp,$(TP)) $(call opt,--dp,$(DP)) $(call opt,--fsdp,$(FSDP)) $(ARGS)

bench-strategies: $(DEPS)
	$(DISTBENCH) strategies --suite $(or $(SUITE),suites/strategies.toml) $(call opt,--nproc,$(WORLD)) $(ARGS)

bench-overlap: $(DEPS)
	$(DISTBENCH) overlap --suite $(or $(SUITE),suites/overlap.toml) $(call opt,--nproc,$(WORLD)) $(call opt,--sizes,$(SIZES)) $(ARGS)

gpu-smoke: $(DEPS)
	$(PYTHON) tools/gpu_smoke.py $(ARGS)

# make test: the suite without the slow end-to-end set (< 10 min on 2 cores); make test-slow: that set
# (real launches of tens of seconds each: faults, resume, the make targets end to end); CI runs both.
test: $(DEPS)
	$(PYTHON) -m pytest -q -m "not slow" $(ARGS)

test-slow: $(DEPS)
	$(PYTHON) -m pytest -q -m slow $(ARGS)

# Regression gate (docs/gate.md): the smoke suite, then judged against the committed baseline of this
# machine's fingerprint. distbench exits 0 pass, 1 confirmed regression, 3 no comparable baseline; make
# itself can only exit 2 on failure, so the real code is also written to $(GATE_EXIT).
BASELINES ?= results/baselines
GATE_EXIT ?= results/gate.exit
gate: $(DEPS)
	@mkdir -p $(dir $(GATE_EXIT)); rc=0; $(DISTBENCH) gate --suite $(or $(SUITE),suites/smoke.toml) --baseline $(BASELINES) $(ARGS) || rc=$$?; echo $$rc > $(GATE_EXIT); exit $$rc

# Same-machine A/B gate (docs/gate.md, CI's gate): the suite for git revision $(AGAINST) (a temporary
# worktree) and for the working tree, interleaved over $(PAIRS) pairs of fresh launches on this machine.
# Exit code also written to $(GATE_AB_EXIT): 0 pass, 1 regression, 3 nothing to compare (REV not found).
.PHONY: gate gate-ab
GATE_AB_EXIT ?= results/gate-ab.exit
PAIRS ?= 5
gate-ab: $(DEPS)
	@test -n "$(AGAINST)" || { echo "make gate-ab: give AGAINST=REV (e.g. AGAINST=HEAD~1)" >&2; exit 2; }
	@mkdir -p $(dir $(GATE_AB_EXIT)); rc=0; $(DISTBENCH) gate --against $(AGAINST) --pairs $(PAIRS) --suite $(or $(SUITE),suites/smoke.toml) $(ARGS) || rc=$$?; echo $$rc > $(GATE_AB_EXIT); exit $$rc

# distbench's own hot paths under pytest-benchmark (not part of `make test`).
perf: $(DEPS)
	$(PYTHON) -m pytest -q tests/perf -o python_files='perf_*.py' -p no:cacheprovider --benchmark-only $(ARGS)

# Debian's Slurm (slurmctld, slurmd, the clients), munge and Open MPI: what `distbench simcluster
# --scheduler slurm` and `--launcher mpirun` run (docs/simcluster.md); root, apt. Nothing is started or enabled.
install-slurm:
	@command -v apt-get >/dev/null || { echo "make install-slurm: needs apt-get (Debian/Ubuntu); install slurm-wlm, munge and openmpi-bin with your package manager" >&2; exit 2; }
	apt-get install -y slurm-wlm munge openmpi-bin || { apt-get update && apt-get install -y slurm-wlm munge openmpi-bin; }

clean:
	rm -rf results/*/ reports/*/ .pytest_cache
