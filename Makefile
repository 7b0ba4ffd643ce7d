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
NODE_CLIENT := examples/node-client
NODE_CLIENT_DEPS := $(NODE_CLIENT)/node_modules/.ci-installed
APT_PACKAGES := docker.io debootstrap xz-utils openssl curl iproute2 busybox chromium chromium-driver \
	golang-go protoc-gen-go protoc-gen-go-grpc golang-google-grpc-dev golang-google-protobuf-dev golang-google-genproto-dev \
	golang-github-golang-protobuf-1-5-dev kubectl

.PHONY: demo test setup frameworks venv system-deps gen gen-check lint layers contract proto-baseline check capsule sdk-wheel dist dist-deps unit integration bench bench-ab soak clean web examples

demo: venv capsule web  ## a real training job, submitted with sf and followed to SUCCEEDED
	$(BIN)/python -m tools.demo

# The suite runs on TEST_WORKERS pytest-xdist workers: about half of a single worker's time is spent
# waiting on the processes a test starts. On our two cores, two workers left the CPU idle 22 % of
# the run; three keep it 92 % busy for the same CPU time (docs/ARCHITECTURE.md, "Real backends").
# Tests of one backend (dockerd, Slurm, the CRD server) stay on one worker, other modules
# whole (tests/xdist_groups.py). TEST_WORKERS=0 runs them in this process, as before.
TEST_WORKERS ?= 3
test: system-deps venv capsule frameworks web examples dist-deps lint  ## everything CI runs
	$(BIN)/python -m pytest -p no:cacheprovider -ra -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

setup: system-deps venv capsule frameworks

# Framework versions of the runtime matrix other than the installed one, for their config trees
# only (recipes/framework_keys.py, tests/unit/recipes/test_framework_configs.py).
FRAMEWORK_WHEELS := build/frameworks/verl-0.9.0-py3-none-any.whl build/frameworks/trl-1.15.0-py3-none-any.whl

frameworks: $(FRAMEWORK_WHEELS)  ## wheels of the other framework versions the tests compose

build/frameworks/verl-%-py3-none-any.whl:
	$(BIN)/pip download --quiet --no-deps --dest build/frameworks verl==$*

build/frameworks/trl-%-py3-none-any.whl:
	$(BIN)/pip download --quiet --no-deps --dest build/frameworks trl==$*

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

$(APT_STAMP): Makefile
	tools/install_system_deps.sh $(APT_PACKAGES)
	mkdir -p build && touch $@

gen: venv $(WEB_DEPS)  ## regenerate gen/ from proto/ (gen/ts with protoc-gen-es from web/node_modules), rebuild the UI
	buf generate
	$(BIN)/python -m tools.gen_python_package gen/python
	$(BIN)/python -m tools.api_reference
	npm run --prefix web build

# The web console: dependencies exactly as web/package-lock.json pins them (`npm ci`), then
# `tsc --noEmit` (strict) and the esbuild bundle into web/dist, which the control plane serves.

$(WEB_DEPS): web/package.json web/package-lock.json
	npm ci --prefix web
	touch $@

web: $(WEB_DEPS)  ## build the web console into web/dist
	npm run --prefix web build

# examples/: API clients without sf (tests/integration/clients runs them against a real console).
# The Node client bundles gen/ts with @connectrpc/connect-node, pinned by its package-lock.json.
$(NODE_CLIENT_DEPS): $(NODE_CLIENT)/package.json $(NODE_CLIENT)/package-lock.json
	npm ci --prefix $(NODE_CLIENT) --no-audit --no-fund
	touch $@

examples: $(NODE_CLIENT_DEPS)  ## build the API client examples (examples/node-client/dist)
	npm run --prefix $(NODE_CLIENT) build

# ruff, mypy --strict (sources and tests), the layering contracts and the proto contract.
lint: venv
	ruff check .
	ruff format --check .
	mypy .
	$(MAKE) --no-print-directory layers contract

# The import-linter contracts in pyproject.toml ([tool.importlinter]): who may import whom.
# tests/unit/test_lint_rules.py runs this target on a copy with a forbidden import and sees it fail.
layers:
	lint-imports

# The contract: buf lint (STANDARD + COMMENTS: every element commented) and buf breaking against
# the last release's contract, proto/release-baseline.binpb (a committed buf image: no network, no
# git history needed). tests/unit/test_lint_rules.py proves a breaking change and a missing
# comment fail it.
contract:
	buf lint
	buf breaking --against proto/release-baseline.binpb

# On a release (after its commit): the released contract becomes the baseline. Commit the file.
proto-baseline:
	buf build --exclude-source-info -o proto/release-baseline.binpb

capsule: venv  ## build the content-addressed runner.pex
	$(BIN)/python -m capsule.build --out build/capsule

sdk-wheel: venv  ## the `starforge` SDK as a wheel for images in external observability mode (build/sdk)
	$(BIN)/python -m capsule.sdk_wheel --out build/sdk

# The installable wheels (docs/deploy.md), built from a staged copy of the sources with the
# capsule (runner.pex, bootstrap.sh) and the web console as package data:
#   dist/starforge-<version>-py3-none-any.whl, dist/starforge_sdk-<sdk version>-py3-none-any.whl
dist: venv web  ## the platform and SDK wheels into dist/ (pip install dist/starforge-*.whl)
	$(BIN)/python -m tools.build_dist --out dist

# Every wheel `pip install 'dist/starforge-<version>-py3-none-any.whl[ui]'` needs, as requirements.lock
# pins them, so that the install test (tests/integration/deploy/test_wheels.py) runs offline
# (`pip install --no-index --find-links build/dist-deps`).
DIST_DEPS := build/dist-deps/.downloaded
$(DIST_DEPS): pyproject.toml requirements.lock | venv
	mkdir -p build/dist-deps
	$(BIN)/python -m tools.build_dist --print-requirements > build/dist-deps/requirements.txt
	$(BIN)/pip download --quiet --dest build/dist-deps -c requirements.lock -r build/dist-deps/requirements.txt
	touch $@

dist-deps: $(DIST_DEPS)

# The OCI images (deploy/images/<service>.Dockerfile): starforge-control, starforge-executor and
# starforge-forgelet, FROM $(IMAGE_BASE), pip-installing dist/'s wheel and a wheelhouse made here
# (no registry needed in the build; tools/build_images.sh). docs/deploy.md runs them.
.PHONY: images
IMAGE_BASE ?= python:3.11-slim-bookworm
images: dist  ## the service images on $$DOCKER_HOST's engine (IMAGE_BASE=..., IMAGE_TAG=...)
	IMAGE_BASE=$(IMAGE_BASE) PIP=$(BIN)/pip PYTHON=$(BIN)/python tools/build_images.sh

unit: venv frameworks
	$(BIN)/python -m pytest -p no:cacheprovider tests/unit

# The inner loop before a commit (under two minutes; .pre-commit-config.yaml runs the same): lint
# (ruff, format, mypy --strict, import-linter, buf lint + breaking) and the unit tests, which
# include the contract checks (gen/ fresh) and the proofs that the lint rules fail on violations.
# No sockets, no backends.
check: lint
	$(BIN)/python -m pytest -p no:cacheprovider -q tests/unit

bench: setup  ## benchmarks against peers (Ray, slurmrestd, MLflow), an hour or more (throughput: 1,000 jobs each side); table in docs/benchmarks.md
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
	rm -rf build dist .mypy_cache .ruff_cache .import_linter_cache
