# Two entry points: `make demo` and `make test`. Both build .venv from nothing.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test venv clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

venv: $(VENV)/.installed

demo: venv
	$(BIN)/coach run jobs/*.yaml

test: venv
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) results/*/
