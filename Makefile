# SOLARIS: two commands on a fresh machine.
#   make demo   simulate a world and run the precompute cycle end to end on embedded defaults
#   make test   run the whole test suite (unit + integration against real Redis/Spark/Airflow)
# Both create .venv when missing, install the pinned requirements, and make sure Java and a
# Redis server are there (a private one is started when none answers).

SHELL := /bin/bash
.DEFAULT_GOAL := help
PYTHON ?= python3
PY := .venv/bin/python
PYTEST_ARGS ?=

.PHONY: help venv test test-fast demo lint bench clean

help:
	@echo "make demo   - simulate a world and run SOLARIS end to end (prints the summary)"
	@echo "make test   - run the full test suite"
	@echo "make lint   - ruff"
	@echo "make bench  - run the benchmarks in benchmarks/"

venv:
	@PYTHON=$(PYTHON) infra/venv.sh

test: venv
	@infra/services.sh $(PY) -m pytest $(PYTEST_ARGS)

test-fast: venv
	@infra/services.sh $(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

demo: venv
	@infra/services.sh $(PY) -m solaris_lib.demo

lint: venv
	@.venv/bin/ruff check solaris_lib jobs dags tests benchmarks

bench: venv
	@for b in benchmarks/*.py; do echo "== $$b"; infra/services.sh $(PY) $$b || exit 1; done

clean:
	rm -rf var .solaris .pytest_cache
