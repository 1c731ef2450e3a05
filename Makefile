# herald — developer entry points (GNU make).
#
#   make demo    create .venv if needed, install herald (the runtime only), run
#                `herald demo $(DEMO_ARGS)`
#   make test    install the dev extras too, run pytest against real Redis, PostgreSQL and
#                RabbitMQ (REDIS_URL / DATABASE_URL / RABBITMQ_URL when set, otherwise
#                throw-away local servers: see tests/support/services.py)
#   make lint    ruff, the layering contracts (import-linter) and the types (mypy), as
#                pyproject.toml configures them
#   make bench   the benchmark
#   make clean   remove local state and build artefacts (keeps .venv)

PYTHON ?= python3
VENV ?= .venv
PYTEST_ARGS ?= -q
DEMO_ARGS ?=

PY := $(VENV)/bin/python
# One stamp per install: the runtime (what `make demo` needs) and the runtime with the dev
# extras (what `make test`, `make lint` and `make bench` need). Installing the dev extras
# stamps both, so `make test` then `make demo` installs nothing more.
RUNTIME := $(VENV)/.installed-runtime
DEV := $(VENV)/.installed-dev

.DEFAULT_GOAL := help
.PHONY: help venv test demo lint bench clean

help:
	@sed -n 's/^#   //p' $(firstword $(MAKEFILE_LIST))

venv: $(RUNTIME)

# The interpreter itself: only created when missing (order-only below, so a new venv's
# timestamps never force a re-install). Debian ships venv's ensurepip separately
# (python3-venv): as root, install it when `python3 -m venv` fails for that reason.
$(PY):
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
	  || { echo "herald needs Python 3.11+; $(PYTHON) is $$($(PYTHON) -V 2>&1)" >&2; exit 1; }
	@echo "creating $(VENV) with $(PYTHON) ($$($(PYTHON) -V 2>&1))"
	@$(PYTHON) -m venv $(VENV) || { \
	  rm -rf $(VENV); \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    ver=$$($(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])'); \
	    echo "venv failed; installing python$$ver-venv with apt-get" >&2; \
	    apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y python$$ver-venv \
	      && $(PYTHON) -m venv $(VENV); \
	  else \
	    echo "'$(PYTHON) -m venv' failed: install the python3-venv package" >&2; exit 1; \
	  fi; }

# (Re-)install whenever pyproject.toml is newer than the last install.
$(RUNTIME): pyproject.toml | $(PY)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -e .
	@touch $@

$(DEV): pyproject.toml | $(PY)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -e '.[dev]'
	@touch $(RUNTIME) $@

test: $(DEV)
	$(PY) -m tests.support.services run -- $(PY) -m pytest $(PYTEST_ARGS)

demo: venv
	$(VENV)/bin/herald demo $(DEMO_ARGS)

lint: $(DEV)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

bench: $(DEV)
	$(PY) -m bench.run

clean:
	rm -rf .herald herald.db herald.db-* build dist *.egg-info .pytest_cache .ruff_cache .mypy_cache
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +
