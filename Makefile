# Two entry points: `make demo` and `make test`. Both build .venv from nothing. `make demo-k8s` runs LeNet on
# the Kubernetes + Nuclio stack, all of it on loopback (a real etcd, kube-apiserver and kube-scheduler built
# from source, the test double of Nuclio's dashboard, moto's S3, coach scheduler). `make check` is the fast loop to
# run before every commit (lint, types, import contracts and the tests not marked slow).
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo demo-k8s test check venv web controlplane chromium clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet -e '.[run,test]'
	touch $@

venv: $(VENV)/.installed

demo: venv web
	$(BIN)/coach run jobs/*.yaml

demo-k8s: venv controlplane
	$(BIN)/python -m tests.fakes.stack jobs/lenet-mnist.yaml

test: venv web chromium controlplane
	$(BIN)/python -m pytest --durations=25  # the slowest tests: the suite must stay under 15 min on 2 cores

# Before every commit, in well under 2 minutes on 2 cores: lint (ruff), types (mypy), the import contracts, the
# complexity bound and the unit tests not marked `slow` (tests/conftest.py marks them). Needs no control plane, no
# Chromium, no apt. `pytest -m "not slow"` adds the fast contract and service tests; `make test` runs everything.
check: venv
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(MAKE) complexity
	$(BIN)/python -m pytest -q -m "not slow" tests/unit

# No function above cyclomatic complexity 20 (xenon's grade C) in the product: past that, a function is hard to
# change safely. `.venv/bin/radon cc -s -n D coach coach_functions scheduler_fork` lists the offenders.
.PHONY: complexity
complexity: venv
	$(BIN)/xenon --max-absolute C coach coach_functions scheduler_fork

# The libraries `coach serve`'s page ships (uPlot, Swagger UI) and axe-core for its browser test, pinned in
# web/package-lock.json, from the npm registry; web/vendor.mjs copies the page's into coach/service/page/vendor/
# (git-ignored, in the wheel). Redone only when the lock file changes.
web: coach/service/page/vendor/.copied

coach/service/page/vendor/.copied: web/package-lock.json web/vendor.mjs
	cd web && npm ci --no-audit --no-fund --ignore-scripts
	node web/vendor.mjs
	touch $@

# The suite's Kubernetes control plane (etcd, kube-apiserver, kube-scheduler, kubectl of one release), built
# with the machine's Go from tests/controlplane/go.mod through the Go module proxy; cached per pinned version
# under ~/.cache/coach/controlplane (minutes the first time, benchmarks/results.md has the figure; nothing after).
controlplane: venv
	$(BIN)/python -m tests.controlplane.build

# tests/integration/test_serve.py drives `coach serve`'s page in Debian's Chromium through Playwright (no browser
# download: Playwright launches /usr/bin/chromium).
chromium:
	@command -v chromium >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then sudo=; elif command -v sudo >/dev/null; then sudo=sudo; \
	  else echo "error: chromium is missing and installing it needs root or sudo"; exit 1; fi; \
	  $$sudo apt-get update && $$sudo apt-get install -y chromium; }

clean:
	rm -rf $(VENV) results/*/
