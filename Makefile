# The two commands a newcomer types: `make bench` and `make test`.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SPEC ?= suite/specs/quick.yaml
DB ?= sqlite:///results.db
REPORT_DIR ?= report
# test-gpu runs where the GPU is: inside .venv when there is one, else the system python
GPU_PY := $(shell [ -x $(PY) ] && echo $(PY) || echo python3)

.PHONY: bench test test-gpu lint venv clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@bash scripts/bootstrap.sh $(VENV)
	@touch $(STAMP)

bench: $(STAMP)
	$(VENV)/bin/rooflab run $(SPEC) --db $(DB)
	$(VENV)/bin/rooflab report --db $(DB) --out $(REPORT_DIR)
	@echo "results: $(DB)   report: $(REPORT_DIR)/index.html"

# `make test`: the tests on every core (pytest-xdist; PYTEST_WORKERS=0 runs them in this one process)
# while lint runs beside them, its output and verdict printed after theirs; either failing fails it.
# The workers take one test at a time, or a whole module where its tests share a fixture, the slowest
# modules first (tests/scheduling.py); --no-loadscope-reorder keeps that order.
# The sources are compiled once first: the run starts about 250 Pythons, and where the environment
# says PYTHONDONTWRITEBYTECODE each would otherwise compile every module it imports again.
PYTEST_WORKERS ?= auto
test: $(STAMP)
	@mkdir -p build
	@$(PY) -m compileall -q -j 0 suite runners db reports rooflab tests scripts > /dev/null
	@$(MAKE) --no-print-directory -o $(STAMP) lint > build/lint.log 2>&1 & lint=$$!; \
	  $(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadscope --no-loadscope-reorder; tests=$$?; \
	  wait $$lint; linted=$$?; \
	  echo "--- make lint (run beside the tests)"; cat build/lint.log; \
	  [ $$linted -eq 0 ] || echo "make test: lint failed (its output above)" >&2; \
	  [ $$tests -eq 0 ] && [ $$linted -eq 0 ]

# ruff (lint and import order) and mypy over the four packages, tests/ and scripts/; settings in
# pyproject.toml. mypy reads the packages through build/typecheck/rooflab, links that place the
# top-level folders under `rooflab` as the installed wheel does (mypy does not follow
# rooflab/__init__.py's __path__), the tests through build/typecheck/tests, a link to tests/, and each
# script as the top-level module it is when run (`python scripts/NAME.py`: its siblings import by
# name), found through MYPYPATH=scripts.
LINT_PATHS := suite runners db reports rooflab tests scripts
TYPECHECK := build/typecheck
SCRIPT_MODULES := $(patsubst scripts/%.py,-m %,$(sort $(wildcard scripts/*.py)))
# mypy's cache lives with the environment: most of a first check is the libraries' code (torch, numpy,
# SQLAlchemy, matplotlib), which depends on what .venv holds, not on the checkout; mypy checks every
# cached file against its source's hash, so a new clone re-checks only the files that differ. flock
# (where the system has it) keeps two checkouts sharing the environment from writing it at once.
MYPY_CACHE := $(abspath $(VENV))/mypy-cache
MYPY_LOCK = $(shell command -v flock > /dev/null 2>&1 && echo flock $(MYPY_CACHE).lock)
lint: $(STAMP)
	@for tool in ruff mypy; do [ -x $(VENV)/bin/$$tool ] || { echo "lint: $(VENV)/bin/$$tool is missing; it comes with the dev extras: $(VENV)/bin/pip install -e '.[dev]'" >&2; exit 1; }; done
	@rm -rf $(TYPECHECK)/rooflab && mkdir -p $(TYPECHECK)/rooflab
	@for p in suite runners db reports; do ln -s ../../../$$p $(TYPECHECK)/rooflab/$$p; done
	@for f in rooflab/*.py; do ln -s ../../../$$f $(TYPECHECK)/rooflab/; done
	@rm -rf $(TYPECHECK)/tests && ln -s ../../tests $(TYPECHECK)/tests
	@# both checkers run and report before the target fails
	@status=0; \
	  echo "ruff check $(LINT_PATHS)"; $(VENV)/bin/ruff check $(LINT_PATHS) || status=1; \
	  echo "mypy -p rooflab -p tests, scripts/"; (cd $(TYPECHECK) && MYPYPATH=$(CURDIR)/scripts $(MYPY_LOCK) $(abspath $(VENV))/bin/mypy --config-file $(CURDIR)/pyproject.toml --cache-dir $(MYPY_CACHE) -p rooflab -p tests $(SCRIPT_MODULES)) || status=1; \
	  exit $$status

# GPU_TESTS narrows it (test files or node ids; default: every gpu-marked test); PYTEST_ADDOPTS is read as usual
GPU_TESTS ?=
test-gpu:
	$(GPU_PY) -m pytest -q -m gpu -o addopts='-ra --durations=10' -W default $(GPU_TESTS)

clean:
	rm -rf $(VENV) report results.db results.db-wal results.db-shm build/typecheck
