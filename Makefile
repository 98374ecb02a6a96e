# The two commands: `make serve` runs the service, `make test` runs the whole suite.
# Each creates .venv and installs everything on first use (torch pinned to the CPU build).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: serve test lint bench reliability eval-scifact eval-locomo clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[server,dev]'
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

reliability: $(STAMP)
	$(PY) -m evaluation.reliability --out evaluation/results/reliability.json

clean:
	rm -rf $(VENV) dmf-data
