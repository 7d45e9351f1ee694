# linc: one entry point per task. `make setup` is idempotent; every other target depends on it.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup test test-all faults lint format docs docs-serve demo bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,docs]'
	touch $(STAMP)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: setup
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# The documentation site, strict: a warning, a broken link or a tutorial that raises fails it
# (the tutorials in docs/tutorials/ execute as it builds: about 4 minutes on 2 CPUs).
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# The site on http://127.0.0.1:8000, rebuilt as its files change.
docs-serve: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --dev-addr 127.0.0.1:8000

# The default run: lint, the docs, then every test not marked slow (bench's peer tests run in
# make bench, which installs that peer). The tests run on TEST_WORKERS processes (pytest-xdist;
# 0: one process): two take 14 minutes on 2 CPUs where one took 23. Servers and Ray start per
# test or per worker (session fixtures) on free loopback ports: workers share only the CPUs.
TEST_WORKERS ?= 2

test: lint docs
	$(BIN)/pytest -m "not slow and not bench" -q -n $(TEST_WORKERS)

test-all: lint
	$(BIN)/pytest -m "not bench" -q -n $(TEST_WORKERS)

# The whole fault matrix (faults/): real servers on loopback, one sweep per fault (~30 minutes).
faults: setup
	$(BIN)/python -m faults

demo: setup
	$(BIN)/python -m sweeps.demo

# Side-by-side benchmarks against peers (rl4co is installed here only, never a dependency).
bench: setup
	$(BIN)/pip install --quiet -e '.[bench]'
	$(BIN)/pytest -q -m bench tests/bench
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m bench

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .ruff_cache .hypothesis site
