# remat-bench: `make demo` and `make test` are all a new user needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The published graphs (paper:<name>) are found by remat_bench/app/datasets.py: $PAPER_GRAPHS,
# ../shared/graphs/paper beside the checkout, or the cache `remat-bench graphs fetch paper` fills.

.PHONY: install demo test bench lint clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m pip install --quiet -e '.[models]'
	@touch $(STAMP)

# Seven methods on ResNet-18 (a PyTorch import) at 80% and 60% of its peak, side by side; a second
# `make demo` resumes the same folder and prints the table again.
demo: install
	$(BIN)/remat-bench sweep configs/demo.yaml --resume
	$(BIN)/remat-bench report results/demo -o results/demo/report.md

test: install
	$(BIN)/ruff check .
	$(BIN)/mypy remat_bench
	$(BIN)/python -m pytest -q -n auto

bench: install
	$(BIN)/python -m benchmarks $(BENCH)

lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy remat_bench

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache .hypothesis
