# StarForge: `make demo` runs a real training job end to end; `make test` runs the whole suite.
# Both set up everything they need on a fresh machine of ours (Debian, root, package registries).

SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
export PATH := $(BIN):$(PATH)
STAMP := $(VENV)/.installed
APT_STAMP := build/.apt-installed
WEB_DEPS := web/node_modules/.ci-installed
APT_PACKAGES := docker.io debootstrap xz-utils openssl curl iproute2 busybox chromium chromium-driver

.PHONY: demo test setup venv system-deps gen gen-check lint check capsule sdk-wheel unit integration bench bench-ab soak clean web

demo: venv capsule web  ## a real training job, submitted with sf and followed to SUCCEEDED
	$(BIN)/python -m tools.demo

test: system-deps venv capsule web lint  ## everything CI runs
	$(BIN)/python -m pytest -p no:cacheprovider -ra $(PYTEST_ARGS)

setup: system-deps venv capsule

$(STAMP): pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c requirements.lock -e '.[dev,ml]'
	# verl only for its Hydra config tree (tests/unit/recipes/test_framework_configs.py): without
	# its dependencies (ray, vllm, ...), which the tests never import.
	$(BIN)/pip install --quiet --no-deps -c requirements.lock verl
	$(BIN)/python tools/install_pth.py
	touch $@

venv: $(STAMP)

system-deps: $(APT_STAMP)

$(APT_STAMP):
	tools/install_system_deps.sh $(APT_PACKAGES)
	mkdir -p build && touch $@

gen: venv $(WEB_DEPS)  ## regenerate gen/ from proto/ (gen/ts with protoc-gen-es from web/node_modules), rebuild the UI
	buf generate
	npm run --prefix web build

# The web console: dependencies exactly as web/package-lock.json pins them (`npm ci`), then
# `tsc --noEmit` (strict) and the esbuild bundle into web/dist, which the control plane serves.

$(WEB_DEPS): web/package.json web/package-lock.json
	npm ci --prefix web
	touch $@

web: $(WEB_DEPS)  ## build the web console into web/dist
	npm run --prefix web build

lint: venv
	ruff check .
	ruff format --check .
	mypy .
	buf lint

capsule: venv  ## build the content-addressed runner.pex
	$(BIN)/python -m capsule.build --out build/capsule

sdk-wheel: venv  ## the `starforge` SDK as a wheel for images in external observability mode (build/sdk)
	$(BIN)/python -m capsule.sdk_wheel --out build/sdk

unit: venv
	$(BIN)/python -m pytest -p no:cacheprovider tests/unit

# The inner loop before a commit (under two minutes; .pre-commit-config.yaml runs the same): lint
# (ruff, format, mypy --strict, buf lint) and the unit tests, which include the contract checks
# (gen/ fresh, every proto element commented). No sockets, no backends.
check: lint
	$(BIN)/python -m pytest -p no:cacheprovider -q tests/unit

bench: setup  ## benchmarks against peers (Ray, slurmrestd, MLflow), ~20 min; table in docs/benchmarks.md
	$(BIN)/pip install --quiet -c requirements.lock -e '.[bench]'
	$(BIN)/python -m bench

# Our side of the admission and ingest rows, this tree against BASE, alternating in one run (no
# peers): how a change that must not make them slower is checked. Default base: the last landed
# release before the trust-boundary work.
BENCH_BASE ?= 16ce730
bench-ab: setup
	$(BIN)/python -m bench.ab --base $(BENCH_BASE) admission ingest

soak: setup  ## 1,000 log followers + 100 reporting runs on one console for 10 min (SF_SOAK_SECONDS=...); figures in docs/reliability.md
	$(BIN)/python -m pytest -p no:cacheprovider -s tests/reliability -m soak --run-soak

clean:
	rm -rf build .mypy_cache .ruff_cache
