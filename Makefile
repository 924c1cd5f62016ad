# remat-bench: `make demo` and `make test` are all a new user needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The published graphs (paper:<name>) are found by remat_bench/app/datasets.py: $PAPER_GRAPHS,
# ../shared/graphs/paper beside the checkout, or the cache `remat-bench graphs fetch paper` fills.

.PHONY: install demo test bench lint clean gpu-check gpu-wheels

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

# The one prepared check a session with a GPU runs (docs/pytorch.md, "Checking on a GPU"): no `make install` and
# no network there, the Python that has torch, this repository on PYTHONPATH. GPU_CHECK passes more options
# (--small, --time-budget S, --out DIR, --methods NAMES).
GPU_PYTHON ?= python3
GPU_CHECK ?=
define GPU_PREFLIGHT
import importlib.util, sys
if sys.version_info < (3, 11):
    sys.exit(f"make gpu-check needs Python 3.11 or later (the project's requires-python); {sys.executable} is {sys.version.split()[0]}")
missing = [m for m in ("torch", "numpy", "yaml", "jsonschema") if importlib.util.find_spec(m) is None]
if missing:
    numpy = " numpy" if "numpy" in missing else ""
    sys.exit(f"make gpu-check needs {', '.join(missing)} in {sys.executable}: copy wheels/gpu here (make gpu-wheels{' GPU_WHEELS_EXTRA=numpy==2.4.6' if numpy else ''}) and run `{sys.executable} -m pip install --no-index --find-links wheels/gpu pyyaml jsonschema transformers{numpy}`")
endef
export GPU_PREFLIGHT

gpu-check:
	@$(GPU_PYTHON) -c "$$GPU_PREFLIGHT"
	PYTHONPATH="$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH}" $(GPU_PYTHON) -m benchmarks.gpu_check $(GPU_CHECK)

# The wheels gpu-check needs beyond torch and numpy (PyYAML, jsonschema, and transformers for `hf:llama`, with
# their dependencies), for a GPU machine without network: pure-Python or manylinux x86_64, one binary wheel per
# Python of GPU_PYTHONS, into wheels/gpu (git-ignored). GPU_WHEELS_EXTRA adds more (numpy==2.4.6 when the machine
# has none: 16 MiB per Python; torchvision built for the machine's torch).
GPU_PYTHONS ?= 3.11 3.12
GPU_WHEELS_EXTRA ?=
GPU_WHEELS := pyyaml==6.0.4 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 \
	rpds-py==2026.9.1 attrs==26.1.0 typing-extensions==4.16.0 \
	transformers==5.18.0 huggingface-hub==2.4.0 tokenizers==0.23.3 safetensors==0.8.0 regex==2026.11.19 \
	hf-xet==1.8.0 tqdm==4.70.1 packaging==26.4 filelock==4.3.1 fsspec==2026.9.0 httpx2==2.16.2 httpcore2==2.16.2 \
	anyio==4.16.0 h11==0.16.0 idna==3.20 truststore==0.10.5 click==8.5.1 typer==0.29.2 annotated-doc==0.0.7 \
	pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 rich==15.0.0 \
	pygments==2.21.0 markdown-it-py==4.3.0 mdurl==0.1.2 shellingham==1.5.4 $(GPU_WHEELS_EXTRA)
GPU_WHEELS_MIB ?= 40

gpu-wheels:
	@mkdir -p wheels/gpu
	@for version in $(GPU_PYTHONS); do \
		echo "wheels for Python $$version"; \
		$(PYTHON) -m pip download --quiet --disable-pip-version-check --only-binary=:all: --no-deps \
			--python-version $$version --implementation cp --platform manylinux2014_x86_64 \
			--platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 -d wheels/gpu $(GPU_WHEELS) || exit 1; \
	done
	@$(PYTHON) -c "import pathlib, sys; w = sorted(pathlib.Path('wheels/gpu').glob('*.whl')); mib = sum(f.stat().st_size for f in w) / 2**20; print(f'wheels/gpu: {len(w)} wheels, {mib:.1f} MiB'); sys.exit(0 if mib < $(GPU_WHEELS_MIB) else f'wheels/gpu holds {mib:.1f} MiB, over the {$(GPU_WHEELS_MIB)} MiB a GPU session carries: leave GPU_WHEELS_EXTRA out or name fewer GPU_PYTHONS')"

lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy remat_bench

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache .hypothesis
