# scaletax: two commands on a fresh machine.
#   make book   -> .venv from requirements.lock, TeX if missing (root on Debian), the default book
#   make test   -> .venv, TeX + Chromium + poppler if missing (root on Debian), then pytest
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
ARGS   ?=
PYTEST_ARGS ?=

.PHONY: venv book test test-fast tex clean bench lock help

help:
	@echo "make book    build the default book into _build/default/ (ARGS='--set k=v ...' for more)"
	@echo "make test    run the test suite"
	@echo "make test-fast  the unit tests only (no book, browser, PDF or CLI build), about a minute"
	@echo "make venv    create .venv from requirements.lock only"
	@echo "make bench   run the benchmarks, write benchmarks/results/latest.json"
	@echo "make clean   remove _build/ (books, cache, logs)"
	@echo "make lock    re-resolve requirements.in into requirements.lock"

venv: $(STAMP)

$(STAMP): requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --no-deps -r requirements.lock
	$(BIN)/python -m pip install --quiet --no-deps -e .
	@touch $@

tex:
	@bash .ci/install-system-deps tex || true

book: venv tex
	$(BIN)/scaletax build $(ARGS)

# The browser and PDF tests need chromium, poppler-utils and TeX: installed here when missing and
# root on Debian; otherwise install-system-deps prints the command and those tests are skipped,
# each with the reason (SCALETAX_REQUIRE_SYSTEM_DEPS=1, as in .ci/run, makes that a failure).
test: venv
	@bash .ci/install-system-deps tex browser pdf || echo "make test: continuing; the tests that need them will be SKIPPED" >&2
	$(BIN)/python -m pytest $(PYTEST_ARGS)

FAST_K := not book and not browser and not pdf and not failures and not determinism and not cli and not kernels

test-fast: venv
	$(BIN)/python -m pytest -q -x -p no:cacheprovider -k "$(FAST_K)" $(PYTEST_ARGS)

bench: venv
	$(BIN)/python benchmarks/run.py --readme

clean:
	rm -rf _build

lock:
	rm -rf .lock-venv
	$(PYTHON) -m venv .lock-venv
	.lock-venv/bin/python -m pip install --quiet --upgrade pip
	.lock-venv/bin/python -m pip install --quiet -r requirements.in
	.lock-venv/bin/python -m pip freeze --exclude-editable | grep -v '^scaletax' > requirements.lock
	rm -rf .lock-venv
