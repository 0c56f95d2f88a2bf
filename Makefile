# Heddle: the quick start and the developer loop. Only python3 and make are needed.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
RUNNERS ?= 4
PORT ?= 8080
# Test worker processes (pytest-xdist): most of a test is waiting for processes and timers,
# so three share two cores well (the suite uses about 1.4 of them); four made the fault
# tests' timing flaky on two cores. TEST_WORKERS=0 runs the suite in one process.
TEST_WORKERS ?= 3

.PHONY: install test-tools up test test-unit test-containers test-upgrade lint format schema bench bench-full bench-floor clean

$(BIN)/heddle: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip 'setuptools>=77'
	$(BIN)/pip install --quiet -e '.[dev]'
	# The type checker reads the code under the name it installs as (pyproject.toml, [tool.mypy]).
	mkdir -p $(VENV)/typecheck/heddle
	ln -sfn $(CURDIR)/shared $(VENV)/typecheck/heddle/shared
	ln -sfn $(CURDIR)/services $(VENV)/typecheck/heddle/services
	touch $@

install: $(BIN)/heddle

up: install  ## install, then start NATS, the four services and $(RUNNERS) runners
	$(BIN)/heddle up --port $(PORT) --runners $(RUNNERS)

# Debian packages the tests use: the clock-skew test runs a runner under faketime; the web
# page's tests drive Chromium (/usr/bin/chromium) through Playwright, with no browser download.
TEST_TOOLS := faketime chromium

test-tools:
	@missing=""; for tool in $(TEST_TOOLS); do \
	  command -v $$tool >/dev/null 2>&1 || missing="$$missing $$tool"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get install -y -q $$missing >/dev/null || \
	      { apt-get update -q >/dev/null && apt-get install -y -q $$missing >/dev/null; }; \
	  else echo "please install$$missing (apt-get install$$missing, as root)"; exit 1; fi; fi

test: install test-tools  ## install, then run the whole test suite
	$(BIN)/ruff check shared services tests bench
	MYPYPATH=$(VENV)/typecheck $(BIN)/mypy
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --durations=15

# The pure tests alone (tests/unit, and tests/compat's golden samples: no server, no
# process, no network), in one process.
test-unit: install  ## install, then run the pure tests alone (seconds)
	$(BIN)/python -m pytest -q tests/unit tests/compat

# Heddle in a real container engine (tests/containers): a Docker engine (started here as root
# where none runs, stopped after), the image on a base made offline where no registry answers,
# docker-compose.yml as written, the chart's runner security context. Minutes; not in `test`.
test-containers: install
	$(BIN)/python -m pytest -q -p no:xdist -p no:cacheprovider tests/containers --timeout=1800

# A rolling upgrade from the last release (its git tag, in a worktree and a virtualenv of its
# own) to this checkout, with runs in flight (tests/upgrade). Minutes; not in `test`.
test-upgrade: install
	$(BIN)/python -m pytest -q -p no:xdist tests/upgrade --timeout=600

lint: install
	$(BIN)/ruff check shared services tests bench
	$(BIN)/ruff format --check shared services tests bench
	MYPYPATH=$(VENV)/typecheck $(BIN)/mypy

format: install
	$(BIN)/ruff format shared services tests bench
	$(BIN)/ruff check --fix shared services tests bench

# The JSON Schema of a workflow file, for editors, as GET /schema/workflow.json serves it:
# generated from the types the gateway decodes; tests/unit/gateway/test_workflow_schema.py
# fails while the copy is stale.
schema: install  ## write docs/workflow.schema.json
	$(BIN)/python -m heddle.services.gateway.openapi.workflow_schema > docs/workflow.schema.json.new
	mv docs/workflow.schema.json.new docs/workflow.schema.json

bench: install  ## quick benchmark profile (under 3 minutes)
	$(BIN)/python -m bench --profile quick

bench-full: install
	$(BIN)/python -m bench --profile full

bench-floor: install  ## the least CPU a fan-out step can cost, part by part (under a minute)
	$(BIN)/python -m bench.floor

clean:
	rm -rf $(VENV) .heddle bench/results .pytest_cache .mypy_cache
