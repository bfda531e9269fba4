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

.PHONY: bench test test-gpu venv clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@bash scripts/bootstrap.sh $(VENV)
	@touch $(STAMP)

bench: $(STAMP)
	$(VENV)/bin/rooflab run $(SPEC) --db $(DB)
	$(VENV)/bin/rooflab report --db $(DB) --out $(REPORT_DIR)
	@echo "results: $(DB)   report: $(REPORT_DIR)/index.html"

test: $(STAMP)
	$(PY) -m pytest -q

test-gpu:
	$(GPU_PY) -m pytest -q -m gpu -o addopts='-ra'

clean:
	rm -rf $(VENV) report results.db results.db-wal results.db-shm
