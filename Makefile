# tubeless developer commands. `make run` and `make test` are the two that matter; each creates
# .venv on first use and reinstalls only when pyproject.toml changes (tracked by stamp files).

PYTHON ?= python3
PROJECT ?= projects/scripted-agent.yaml
ARGS ?= --question "hello tubeless"
PLAN_ARGS ?=

# make passes a variable it does not use silently, so `make run EXAMPLE=...` ran the default
# project: refuse that one (given on the command line) with the forms that work.
ifeq ($(origin EXAMPLE),command line)
$(error EXAMPLE= is not a variable of this Makefile: run a project with PROJECT=projects/<name>.yaml (make run PROJECT=projects/text-pipeline.yaml), or a Python example with .venv/bin/python -m examples.<name>)
endif

VENV := .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
PIP := $(PY) -m pip --quiet --disable-pip-version-check

.DEFAULT_GOAL := help
# A recipe that fails part-way leaves no target behind (a half-made venv is rebuilt next time).
.DELETE_ON_ERROR:
.PHONY: help run plan test test-fast lint bench schema check-python clean

help:
	@echo "make run [PROJECT=file] [ARGS='...']  tubeless run a project (default $(PROJECT))"
	@echo "make plan [PROJECT=file]              print that project's plan without running it"
	@echo "make test                             ruff (check, format), mypy, import contracts, pytest"
	@echo "make test-fast                        the same checks, then the tests not marked slow"
	@echo "make lint                             ruff (check, format), mypy, import contracts"
	@echo "make bench                            on-demand benchmarks (never part of test)"
	@echo "make schema                           regenerate schemas/project.schema.json, cases.schema.json"
	@echo "PYTHON=$(PYTHON) creates .venv (needs Python >= 3.11)"

# Fails with one clear line when $(PYTHON) is missing or older than 3.11. It runs only when .venv
# is created, so later runs do not need PYTHON set again.
define check_python
	@command -v $(PYTHON) >/dev/null 2>&1 || { \
		echo "error: tubeless needs Python >= 3.11 ($(PYTHON) not found); set PYTHON=/path/to/python3.11" >&2; \
		exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null || { \
		found=$$($(PYTHON) -c 'import platform; print(platform.python_version())' 2>/dev/null || echo unknown); \
		echo "error: tubeless needs Python >= 3.11 (found $$found at $$(command -v $(PYTHON))); set PYTHON=/path/to/python3.11" >&2; \
		exit 1; }
endef

check-python:
	$(check_python)

# The interpreter itself: created once, with pip upgraded quietly.
$(PY):
	$(check_python)
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip

# Stamps are real files: they are newer than pyproject.toml until it changes, so pip is skipped.
$(VENV)/.stamp-run: pyproject.toml | $(PY)
	$(PIP) install -e .
	@touch $@

$(VENV)/.stamp-dev: pyproject.toml | $(PY)
	$(PIP) install -e '.[dev]'
	@touch $@

run: $(VENV)/.stamp-run
	$(BIN)/tubeless run $(PROJECT) $(ARGS)

plan: $(VENV)/.stamp-run
	$(BIN)/tubeless plan $(PROJECT) $(PLAN_ARGS)

test: $(VENV)/.stamp-dev
	$(BIN)/ruff check tubeless tests tools
	$(BIN)/ruff format --check tubeless tests benchmarks examples tools
	$(BIN)/mypy tubeless
	$(BIN)/lint-imports
	$(BIN)/pytest -n 2

# The loop while working: the static checks of `lint`, then the tests not marked slow (about 5 s or
# more each: real processes killed and restarted, signals, Ray, memory bounds). `make test` runs all.
test-fast: lint
	$(BIN)/pytest -n 2 -m "not slow"

lint: $(VENV)/.stamp-dev
	$(BIN)/ruff check tubeless tests tools
	$(BIN)/ruff format --check tubeless tests benchmarks examples tools
	$(BIN)/mypy tubeless
	$(BIN)/lint-imports

bench: $(VENV)/.stamp-dev
	@if [ -f benchmarks/__main__.py ]; then \
		$(PY) -m benchmarks; \
	else \
		echo "note: no benchmarks yet (benchmarks/__main__.py does not exist)"; \
	fi

schema: $(VENV)/.stamp-run
	$(PY) -m tubeless.project.metaschema

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis .import_linter_cache
