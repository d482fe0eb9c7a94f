# Two commands for a fresh machine: `make run` and `make test`. Each creates .venv when it is
# missing and installs what it needs; nothing relies on anything installed by hand.
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

# The build for this machine, `cuda` where nvidia-smi lists a GPU, else `cpu` (infra/build-kind.sh,
# asked once): `cuda` installs the extra .[cuda] and runs on the JAX backend with jit. BUILD_KIND=cpu
# keeps a GPU machine on the base install and the profile's backend.
ifeq ($(origin BUILD_KIND),undefined)
BUILD_KIND := $(shell infra/build-kind.sh)
endif
INSTALLED_cpu := $(VENV)/.installed
INSTALLED_cuda := $(VENV)/.installed-cuda
INSTALLED := $(INSTALLED_$(BUILD_KIND))
ifeq ($(INSTALLED),)
$(error BUILD_KIND must be cpu or cuda, got '$(BUILD_KIND)')
endif
# Keras on JAX with jit is the fastest backend measured on a GPU (docs/performance.md). Left out when
# ARGS chooses a backend or resumes a run (which keeps its own); jit too when ARGS sets it.
ifeq ($(BUILD_KIND)$(findstring --resume,$(ARGS))$(findstring train.backend,$(ARGS)),cuda)
RUN_SETTINGS := --set train.backend=jax
RUN_SETTINGS += $(if $(findstring train.jit_compile,$(ARGS)),,--set train.jit_compile=true)
endif

export DO_NOT_TRACK := 1
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export TF_CPP_MIN_LOG_LEVEL := 2

.PHONY: run test test-fast lint serve install install-dev clean bench-scaling

# infra/install.sh: uv where it installs (pip's indexes and constraints, in parallel), else pip.
$(VENV)/.installed: pyproject.toml
	PYTHON=$(PYTHON) infra/install.sh $(VENV) .
	touch $@

$(VENV)/.installed-cuda: pyproject.toml
	PYTHON=$(PYTHON) infra/install.sh $(VENV) '.[cuda]'
	touch $@

$(VENV)/.installed-dev: pyproject.toml $(INSTALLED)
	PYTHON=$(PYTHON) infra/install.sh $(VENV) '.[dev]'
	touch $@

install: $(INSTALLED)
install-dev: $(VENV)/.installed-dev

## make run: the benchmark on the embedded default (profile quick, 3 minutes, ./aiperf.db); with a GPU,
##   the CUDA build on the JAX backend with jit, one worker per GPU
run: install
	$(VENV)/bin/aiperf run $(RUN_SETTINGS) $(ARGS)

## make serve: Prefect UI on 127.0.0.1:4200 with the aiperf work pool, deployments and a worker
##   (PREFECT_API_URL=http://host:4200/api make serve uses an existing server instead)
serve: install
	infra/prefect/serve.sh

## make test: every test, the slow integration tests included, with the services they need, on
##   TEST_WORKERS pytest-xdist workers (2: a test file, or the tests sharing one `make serve`, stays on
##   one worker; most slow tests wait on a service or a deadline half their time, so two overlap well)
TEST_WORKERS ?= 2
test: install-dev
	infra/with-services.sh $(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

## make test-fast: the unit tests only (no service, no real training run)
test-fast: install-dev
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup -m "not slow" $(PYTEST_ARGS)

## make lint: ruff (lint, import order, format), mypy, and the layers (import-linter), as CI runs them
lint: install-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache

## make bench-scaling: weak scaling (1 and 2 one-core workers, efficiency OPS(2) / (2 OPS(1))), then the
##   orchestration overhead per trial and database writes/s at 64, 256 and 1024 simulated workers
bench-scaling: install
	$(PY) benchmarks/bench_weak_scaling.py $(ARGS)
	$(PY) benchmarks/bench_simulated_scale.py

## make gpu-bundle: the wheels the GPU check needs on the H200 machine (Python 3.12, no registry),
##   in .gpu-bundle/, with their size (benchmarks/gpu_bundle.sh; docs/performance.md, "One GPU")
.PHONY: gpu-bundle
gpu-bundle:
	PYTHON=$(PYTHON) benchmarks/gpu_bundle.sh

clean:
	rm -rf aiperf-out .pytest_cache
