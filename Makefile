# ptserve: make install | serve | test | lint | bench | image | test-image
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
REPO ?= examples/model_repository
HTTP_PORT ?= 8000
GRPC_PORT ?= 8001
METRICS_PORT ?= 8002

.PHONY: browser-tools test-browser
.PHONY: install install-test serve test lint typecheck examples bench bench-tools clean system-tools image \
	image-tools test-image

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# torch first, pinned, so the CPU build on this machine's disk is used instead of a CUDA download.
# The editable install itself compiles nothing; $(VENV)/.native below does, in place.
$(VENV)/.installed: $(BIN)/python pyproject.toml setup.py
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet $(BUILD_TOOLS)
	PTSERVE_PURE_PYTHON=1 $(BIN)/pip install --quiet --no-build-isolation -e .
	touch $@

# The request path compiled to C (pyproject.toml's [tool.ptserve] native-modules, see setup.py)
# as extension modules beside their sources, which Python imports in their place: rebuilt whenever
# one of their sources changes, so that a stale module never shadows an edit (tests/conftest.py refuses to run against one).
# PURE=1 removes them and serves the same code interpreted.
BUILD_TOOLS := 'setuptools>=77' wheel 'mypy>=1.15' 'types-protobuf>=5'
NATIVE_SOURCES := $(shell $(PYTHON) -c 'import tomllib; print(*("src/" + m.replace(".", "/") + ".py" for m in tomllib.load(open("pyproject.toml", "rb"))["tool"]["ptserve"]["native-modules"]))')
PURE ?=
ifeq ($(PURE),1)
export PTSERVE_PURE_PYTHON := 1
$(VENV)/.native: $(VENV)/.installed FORCE
	find src -name '*.so' -delete
	rm -f $@
else
$(VENV)/.native: $(VENV)/.installed $(NATIVE_SOURCES)
	$(BIN)/python setup.py --quiet build_ext --inplace --parallel 2
	@# An unchanged module's C code is not rebuilt: the build has checked it against its source.
	find src -name '*.so' -exec touch {} +
	touch $@
endif

.PHONY: FORCE
FORCE:

install: $(VENV)/.installed $(VENV)/.native

$(VENV)/.installed-test: $(VENV)/.installed pyproject.toml
	PTSERVE_PURE_PYTHON=1 $(BIN)/pip install --quiet --no-build-isolation -e '.[test]'
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

# Programs from Debian that the tests run: HAProxy (tests/deploy/test_load_balancer.py) and
# kubectl (renders deploy/kubernetes with kustomize). Installed with apt-get where missing.
APT_INSTALL := DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends
# The end of a recipe line that collected the packages to install in $$missing.
APT_MISSING = if [ -n "$$missing" ]; then \
	echo "installing$$missing"; apt-get update -q && $(APT_INSTALL) $$missing; \
	fi

system-tools:
	@missing=""; \
	[ -x /usr/sbin/haproxy ] || command -v haproxy >/dev/null || missing="$$missing haproxy"; \
	command -v kubectl >/dev/null || missing="$$missing kubernetes-client"; \
	$(APT_MISSING)

# The load generators of benchmarks.scheduling besides perf_analyzer: wrk (HTTP/1.1) and
# h2load (HTTP/2, from nghttp2-client), installed with apt-get where missing.
bench-tools:
	@missing=""; \
	command -v wrk >/dev/null || missing="$$missing wrk"; \
	command -v h2load >/dev/null || missing="$$missing nghttp2-client"; \
	$(APT_MISSING)

install-test: install $(VENV)/.installed-test $(GRPC_JS_STAMP) system-tools

$(REPO)/.built: install
	$(BIN)/python -m ptserve.examples $(REPO)
	touch $@

examples: $(REPO)/.built

serve: install examples
	$(BIN)/ptserve --model-repository $(REPO) --http-port $(HTTP_PORT) \
		--grpc-port $(GRPC_PORT) --metrics-port $(METRICS_PORT)

test: install-test
	$(BIN)/ruff check src tests benchmarks deploy
	$(BIN)/ruff format --check src tests benchmarks deploy
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/pytest -q

lint: install-test
	$(BIN)/ruff check --fix src tests benchmarks deploy
	$(BIN)/ruff format src tests benchmarks deploy

bench: install-test examples
	$(BIN)/python -m benchmarks.serving --repository $(REPO)

# The web console in a real browser: Debian's Chromium (installed where missing) driven by
# Playwright for Python. `make test` runs the same tests where Chromium is present (they skip,
# saying so, where it is not). Screenshots of every page: build/console-screenshots/.
browser-tools:
	@command -v chromium >/dev/null || { echo "installing chromium"; apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium fonts-dejavu-core; }

test-browser: install-test browser-tools
	$(BIN)/pytest -q -m browser tests/frontends/console

# The CPU container image, built with buildah (no Docker daemon): deploy/image/build.sh says how
# (BASE=local makes the base from the Debian mirror with mmdebstrap). runc: see containers.conf.
IMAGE ?= localhost/ptserve:cpu
IMAGE_BASE ?= local

image-tools:
	@missing=""; \
	for tool in buildah podman mmdebstrap runc; do \
		command -v $$tool >/dev/null || missing="$$missing $$tool"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "installing$$missing"; apt-get update -q && $(APT_INSTALL) $$missing uidmap; \
	fi

image: image-tools
	IMAGE=$(IMAGE) BASE=$(IMAGE_BASE) deploy/image/build.sh

# Runs the image: serves the example repository and the KServe layout, asked with tritonclient.
test-image: image install-test
	IMAGE=$(IMAGE) $(BIN)/python -m pytest -q -p no:cacheprovider deploy/image/test_image.py

clean:
	rm -rf $(VENV) $(REPO) build *.egg-info $(GRPC_JS)/node_modules
	find src -name "*.so" -delete
