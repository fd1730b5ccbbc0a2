# The two commands a newcomer needs: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test java venv dev clean golden soak

java:
	@command -v java >/dev/null 2>&1 || { echo "mor needs Java 17 or newer (for Spark): install a JDK, e.g. 'apt-get install openjdk-17-jre-headless'" >&2; exit 1; }
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1); \
	  if [ -z "$$v" ] || [ "$$v" -lt 17 ]; then echo "mor needs Java 17 or newer (found: $${v:-unknown}); install a JDK 17+" >&2; exit 1; fi

$(BIN)/python:
	$(PY) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml $(VENV)/.installed
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

venv: $(VENV)/.installed
dev: $(VENV)/.installed-dev

demo: java venv
	$(BIN)/mor demo

test: java dev
	$(BIN)/ruff check planner rules physical mor tests bench
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) warehouse .pytest_cache .hypothesis

# the long differential run against Iceberg's own reader: HISTORIES=200 by default
HISTORIES ?= 200
soak: java dev
	$(BIN)/python -m tests.oracle.run --histories $(HISTORIES) --seed 1000

golden: dev
	$(BIN)/python tests/test_golden.py
