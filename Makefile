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
#   make lock    pin every dependency anew, with hashes: constraints.txt (what make test and
#                CI install) and requirements.txt (the runtime: make demo, Heroku's build)
#   make floors  check the lowest versions pyproject.toml allows: every module imported and
#                the core tests run against them, in a virtualenv of their own
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
.PHONY: help venv test demo lint bench lock floors clean

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

# (Re-)install whenever a lock or pyproject.toml is newer than the last install. The
# dependencies come from a lock, each file checked against its hashes (what CI tested is
# what a deploy builds); herald itself is then installed on top, with no dependency of its
# own resolved and the locked setuptools as its build backend.
$(RUNTIME): requirements.txt pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --require-hashes -r requirements.txt
	$(PY) -m pip install --no-deps --no-build-isolation -e .
	@touch $@

$(DEV): constraints.txt pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --require-hashes -r constraints.txt
	$(PY) -m pip install --no-deps --no-build-isolation -e .
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

# Python 3.11.7 is what the locks are resolved for: the oldest Python herald supports
# (.python-version), and past 3.11.3, where no backport is needed.
LOCK := $(VENV)/bin/uv pip compile --quiet --generate-hashes --python-version 3.11.7 --no-header

# (uv alone is needed: a clone with no lock yet can make one)
lock: | $(PY)
	@test -x $(VENV)/bin/uv || $(PY) -m pip install 'uv>=0.13,<0.14'
	$(LOCK) pyproject.toml --extra dev --extra s3 -o constraints.txt
	printf 'setuptools>=77\nwheel>=0.40\n' | $(LOCK) pyproject.toml - -c constraints.txt \
	  -o requirements.txt

FLOORS := .venv-floors

floors: $(DEV)
	rm -rf $(FLOORS) && $(PYTHON) -m venv $(FLOORS)
	$(VENV)/bin/uv pip compile --quiet --resolution lowest-direct --python-version 3.11.7 \
	  pyproject.toml -o $(FLOORS)/floors.txt
	$(FLOORS)/bin/python -m pip install --quiet --no-deps -r $(FLOORS)/floors.txt
	$(FLOORS)/bin/python -m pip install --quiet --no-deps -e .
	@# the test tools come from .venv, behind the floors
	$(PY) -c 'import site; print(site.getsitepackages()[0])' \
	  > $$($(FLOORS)/bin/python -c 'import site; print(site.getsitepackages()[0])')/zz-dev.pth
	PYTHONPATH=$(CURDIR) $(FLOORS)/bin/python -m tests.support.floors
	PYTHONPATH=$(CURDIR) $(PY) -m tests.support.services run -- $(FLOORS)/bin/python -m pytest \
	  -q -p no:cacheprovider tests/db tests/web tests/pipeline tests/store tests/payments \
	  tests/webhooks tests/providers tests/queue

clean:
	rm -rf .herald herald.db herald.db-* .venv-floors build dist *.egg-info .pytest_cache .ruff_cache .mypy_cache
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +
