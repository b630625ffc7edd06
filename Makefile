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
# xdist workers for make test (0: one process, e.g. to debug with pdb)
PYTEST_WORKERS ?= 2

.PHONY: help venv test test-unit test-fast demo lint bench dist clean airflow-up airflow-down spark-up spark-down redis-up redis-down

help:
	@echo "make demo   - simulate a world and run SOLARIS end to end (prints the summary)"
	@echo "make test   - run the full test suite"
	@echo "make test-unit - the unit tests alone (no Redis, Spark or Airflow)"
	@echo "make lint   - ruff"
	@echo "make bench  - run the benchmarks in benchmarks/"
	@echo "make airflow-up|airflow-down  - local Airflow UI + scheduler on 127.0.0.1"
	@echo "make spark-up|spark-down      - Spark standalone master + worker on 127.0.0.1"
	@echo "make redis-up|redis-down      - a private Redis on 127.0.0.1:6380"

venv:
	@PYTHON=$(PYTHON) infra/venv.sh

test: venv
	@infra/services.sh $(PY) -m pytest -n $(PYTEST_WORKERS) $(PYTEST_ARGS)

# unit tests only: no Redis, Spark or Airflow needed
test-unit: venv
	@$(PY) -m pytest -n $(PYTEST_WORKERS) tests/unit $(PYTEST_ARGS)

test-fast: venv
	@infra/services.sh $(PY) -m pytest -n $(PYTEST_WORKERS) -m "not slow" $(PYTEST_ARGS)

demo: venv
	@infra/services.sh $(PY) -m solaris_lib.demo

lint: venv
	@.venv/bin/ruff check solaris_lib jobs dags tests benchmarks

bench: venv
	@for b in benchmarks/*.py; do echo "== $$b"; infra/services.sh $(PY) $$b || exit 1; done

airflow-up: venv
	@infra/airflow.sh up

airflow-down:
	@infra/airflow.sh down

spark-up: venv
	@infra/spark-standalone.sh up

spark-down:
	@infra/spark-standalone.sh down

redis-up:
	@infra/redis.sh up

redis-down:
	@infra/redis.sh down

dist: venv
	@rm -rf dist build && mkdir -p dist  # build/lib keeps deleted modules
	@.venv/bin/python -m pip wheel --quiet --no-deps -w dist . 2>&1 | grep -v "is ignored" || true
	@.venv/bin/python -m zipfile -c dist/solaris_lib.zip solaris_lib
	@ls -l dist

clean:
	rm -rf var .solaris .pytest_cache build dist
