# Two entry points: `make demo` and `make test`. Both build .venv from nothing. `make demo-k8s` runs LeNet on
# the Kubernetes + Nuclio stack, all of it on loopback (fake kube-apiserver and dashboard, moto S3, coach scheduler).
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo demo-k8s test venv kubectl chromium clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

venv: $(VENV)/.installed

demo: venv
	$(BIN)/coach run jobs/*.yaml

demo-k8s: venv
	$(BIN)/python -m tests.fakes.stack jobs/lenet-mnist.yaml

test: venv kubectl chromium
	$(BIN)/python -m pytest --durations=25  # the slowest tests: the suite must stay under 15 min on 2 cores

# tests/integration/test_kubectl.py runs kubectl against the fake apiserver: Debian's kubernetes-client (kubectl
# 1.20) unless a kubectl is already on PATH (its package would clash with another package's /usr/bin/kubectl).
kubectl:
	@command -v kubectl >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then sudo=; elif command -v sudo >/dev/null; then sudo=sudo; \
	  else echo "error: kubectl is missing and installing it needs root or sudo"; exit 1; fi; \
	  $$sudo apt-get update && $$sudo apt-get install -y kubernetes-client; }

# tests/integration/test_serve.py drives `coach serve`'s page in Debian's Chromium through Playwright (no browser
# download: Playwright launches /usr/bin/chromium).
chromium:
	@command -v chromium >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then sudo=; elif command -v sudo >/dev/null; then sudo=sudo; \
	  else echo "error: chromium is missing and installing it needs root or sudo"; exit 1; fi; \
	  $$sudo apt-get update && $$sudo apt-get install -y chromium; }

clean:
	rm -rf $(VENV) results/*/
