# remat-bench: `make demo` and `make test` are all a new user needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The published graphs (paper:<name>) are found by remat_bench/datasets.py: $PAPER_GRAPHS,
# ../shared/graphs/paper beside the checkout, or the cache `remat-bench graphs fetch paper` fills.

.PHONY: install demo test bench lint clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m pip install --quiet 'torch==2.13.0'
	@touch $(STAMP)

demo: install
	$(BIN)/remat-bench solve graphs/chain-16-train.json --method chen --budget 0.7
	$(BIN)/remat-bench solve graphs/resnet18-b8-r64-train.json --method greedy --budget 0.9

test: install
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

bench: install
	$(BIN)/python -m benchmarks $(BENCH)

lint: install
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache .hypothesis
