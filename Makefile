# Two entry points a new user needs: `make simulate` (the main job: the simulator on
# the bundled trace, printing a report) and `make test`.
# Both create the virtual environment at .venv/ on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: simulate simulate-dra demo test lint typecheck unit bench fmt clean lock helm

# The image's packages are installed at their pinned versions (requirements.lock as pip
# constraints): the tests then run what the image runs, and a release upstream changes
# nothing until the lock is moved (tests/deploy/test_lockfile.py compares the two).
# To move the pins to newer releases: rm -rf .venv && make CONSTRAINTS= lock
CONSTRAINTS ?= -c requirements.lock

$(BIN)/gang-scheduler: pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(CONSTRAINTS) -e '.[dev,agent,plot]'
	touch $@

simulate: $(BIN)/gang-scheduler
	$(BIN)/gang-scheduler simulate

# The same replay with the GPUs through DRA devices (docs/simulator.md).
simulate-dra: $(BIN)/gang-scheduler
	$(BIN)/gang-scheduler simulate --dra

demo: $(BIN)/gang-scheduler
	$(BIN)/gang-scheduler demo

lint: $(BIN)/gang-scheduler
	$(BIN)/ruff check cache policies scheduler tests bench
	$(BIN)/ruff format --check cache policies scheduler tests bench

typecheck: $(BIN)/gang-scheduler
	$(BIN)/mypy

unit: $(BIN)/gang-scheduler
	$(BIN)/pytest

test: lint typecheck unit

bench: $(BIN)/gang-scheduler
	$(BIN)/python bench/planner.py
	$(BIN)/python bench/simulate.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache

fmt: $(BIN)/gang-scheduler
	$(BIN)/ruff format cache policies scheduler tests bench
	$(BIN)/ruff check --fix cache policies scheduler tests bench

# The image's pinned packages (requirements.lock), from what this venv installed; run it
# after changing a dependency, on the image's Python minor version.
lock: $(BIN)/gang-scheduler
	$(BIN)/python scripts/lock.py > requirements.lock

# The Helm chart deploy/helm/gang-scheduler, generated from the kustomize base (deploy/):
# run it after changing deploy/; tests/deploy/test_helm.py fails while the chart differs.
helm: $(BIN)/gang-scheduler
	$(BIN)/python scripts/helm_chart.py
