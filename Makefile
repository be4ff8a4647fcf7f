# Two commands on a fresh machine:  `make demo`  and  `make test`  (`make test-fast` for everyday work).
# Both create .venv with python3 and install tokembed with the pins in constraints.txt
# (torch 2.13.0: the CPU wheel this machine kind has on disk).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt
# Compiled bytecode is cached (__pycache__/, git-ignored) even where the environment says otherwise: without it
# every test run, and every `python -m tokembed` a test starts, compiles tokembed and the tests again (pytest's
# assertion rewriting too): 3-4 s of the fast tier's collection alone.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo test test-fast lint setup setup-dev bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: $(BIN)/python pyproject.toml constraints.txt
	$(PIP) -e .
	@touch $@

$(VENV)/.installed-dev: $(BIN)/python pyproject.toml constraints.txt scripts/system-deps.sh
	$(PIP) -e '.[dev]'
	bash scripts/system-deps.sh
	@touch $(VENV)/.installed $@

setup: $(VENV)/.installed
setup-dev: $(VENV)/.installed-dev

demo: $(VENV)/.installed
	$(BIN)/tokembed demo

# Tests run in parallel processes (pytest-xdist), one per core up to 4, each with one torch thread (torch would
# otherwise start a thread per core in every process: 2 processes x 2 threads on 2 cores ran no faster than one).
# TEST_WORKERS=0 runs them in this process (for pdb, or to see a test's output as it runs).
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ $$n -gt 4 ] && n=4; echo $$n)
PYTEST := OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n $(TEST_WORKERS)

# The whole suite (CI: .ci/run).
test: $(VENV)/.installed-dev lint
	$(PYTEST) -q --durations=15

# Everyday work: every test not marked slow (torchrun, Ray, Chromium, kill -9, long training; see
# tests/conftest.py), under 90 s on the 2-core development machine. Extra pytest options: make test-fast ARGS="-x".
test-fast: $(VENV)/.installed-dev lint
	$(PYTEST) -q -m "not slow" $(ARGS)

# ruff (lint + format), then mypy over src/tokembed ([tool.mypy] in pyproject.toml; its cache is .mypy_cache/).
lint: $(VENV)/.installed-dev
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy

bench: $(VENV)/.installed-dev
	for b in benchmarks/bench_*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .mypy_cache
