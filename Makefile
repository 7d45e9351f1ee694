# linc: one entry point per task. `make setup` is idempotent; every other target depends on it.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup test test-all faults lint format demo bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: setup
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# The default run: lint, then every test not marked slow (about a few minutes on 2 CPUs).
test: lint
	$(BIN)/pytest -m "not slow" -q

test-all: lint
	$(BIN)/pytest -q

# The whole fault matrix (faults/): real servers on loopback, one sweep per fault (~30 minutes).
faults: setup
	$(BIN)/python -m faults

demo: setup
	$(BIN)/python -m sweeps.demo

# Side-by-side benchmarks against peers (rl4co is installed here only, never a dependency).
bench: setup
	$(BIN)/pip install --quiet -e '.[bench]'
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m bench

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .ruff_cache .hypothesis
