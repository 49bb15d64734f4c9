# ptserve: make install | serve | test | lint | bench
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
REPO ?= examples/model_repository
HTTP_PORT ?= 8000
GRPC_PORT ?= 8001
METRICS_PORT ?= 8002

.PHONY: install install-test serve test lint typecheck examples bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# torch first, pinned, so the CPU build on this machine's disk is used instead of a CUDA download.
$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e .
	touch $@

install: $(VENV)/.installed

$(VENV)/.installed-test: $(VENV)/.installed pyproject.toml
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

# The Node client of tests/interop (@grpc/grpc-js), pinned by its package-lock.json; skipped
# where node or npm is missing (those tests then skip).
GRPC_JS := tests/interop/grpc_js
ifneq ($(and $(shell command -v node),$(shell command -v npm)),)
GRPC_JS_STAMP := $(GRPC_JS)/node_modules/.installed
endif

$(GRPC_JS)/node_modules/.installed: $(GRPC_JS)/package.json $(GRPC_JS)/package-lock.json
	npm ci --prefix $(GRPC_JS) --no-audit --no-fund --ignore-scripts
	touch $@

install-test: $(VENV)/.installed-test $(GRPC_JS_STAMP)

$(REPO)/.built: install
	$(BIN)/python -m ptserve.examples $(REPO)
	touch $@

examples: $(REPO)/.built

serve: install examples
	$(BIN)/ptserve --model-repository $(REPO) --http-port $(HTTP_PORT) \
		--grpc-port $(GRPC_PORT) --metrics-port $(METRICS_PORT)

test: install-test
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/pytest -q

lint: install-test
	$(BIN)/ruff check --fix src tests benchmarks
	$(BIN)/ruff format src tests benchmarks

bench: install-test examples
	$(BIN)/python -m benchmarks.serving --repository $(REPO)

clean:
	rm -rf $(VENV) $(REPO) build *.egg-info $(GRPC_JS)/node_modules
