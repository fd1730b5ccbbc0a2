"""Apache Iceberg's Spark runtime, the oracle and the benchmarks' peer, as Spark users add it:
`spark.jars.packages` with Maven coordinates, resolved by Spark's own Ivy from Maven Central.

The Ivy folder is Spark's default (`spark.jars.ivy` unset: `~/.ivy2` for Spark 3.5,
`~/.ivy2.5.2` for Spark 4), outside the clone as for any Spark user: the first session on a
machine downloads the jars, later ones (and later clones) resolve from that cache without a
download. Iceberg ships a runtime per Spark line; for a pyspark without one,
`RuntimeUnavailable` says which lines exist.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
ICEBERG = "1.12.0"
# the Spark lines Iceberg 1.12.0 publishes a runtime for on Maven Central (org.apache.iceberg:
# iceberg-spark-runtime-<line>_<scala>); 4.0's newest is 1.11.0 and 4.2 and later have none
RUNTIMES = {"3.5": "iceberg-spark-runtime-3.5_2.12", "4.1": "iceberg-spark-runtime-4.1_2.13"}


class RuntimeUnavailable(Exception):
    """The Iceberg runtime cannot be used here: the reason is the message."""


def spark_line() -> str:
    import pyspark

    return ".".join(pyspark.__version__.split(".")[:2])


def ivy_home() -> Path:
    """Spark's default Ivy folder for the pyspark installed here (Spark 4 moved it, for Ivy
    2.5.2's incompatible cache layout)."""
    return Path.home() / (".ivy2" if spark_line().startswith("3.") else ".ivy2.5.2")


def iceberg_coordinates() -> str:
    """Maven coordinates of Iceberg's Spark runtime for the pyspark installed here."""
    line = spark_line()
    if line not in RUNTIMES:
        import pyspark

        raise RuntimeUnavailable(
            f"Iceberg {ICEBERG} publishes no Spark runtime for pyspark {pyspark.__version__} "
            f"(it has {', '.join(sorted(RUNTIMES))}): the Iceberg oracle runs on those"
        )
    return f"org.apache.iceberg:{RUNTIMES[line]}:{ICEBERG}"


def iceberg_aws_coordinates() -> str:
    """Iceberg's AWS bundle (S3FileIO and the AWS SDK), which its REST catalog needs to read
    tables with the credentials the catalog vends, as users add it beside the runtime."""
    return f"org.apache.iceberg:iceberg-aws-bundle:{ICEBERG}"


def s3a_coordinates() -> str:
    """hadoop-aws of the Hadoop this pyspark ships, as a session mor starts would add it."""
    from mor.physical.spark.s3a import hadoop_version, s3a_coordinates, spark_jars

    version = hadoop_version(spark_jars())
    if version is None:
        raise RuntimeUnavailable(f"no Hadoop jar in {spark_jars()}: cannot choose hadoop-aws")
    return s3a_coordinates(version)


def packages_conf(*coordinates: str) -> dict[str, str]:
    """Spark settings that add `coordinates` (and what they depend on) through Spark's own Ivy
    cache."""
    return {"spark.jars.packages": ",".join(coordinates)}


def merged(conf: dict[str, str], more: dict[str, str]) -> dict[str, str]:
    """`conf` with `more` on top; `spark.jars.packages` and `spark.jars` lists are joined."""
    out = dict(conf)
    for k, v in more.items():
        if k in ("spark.jars.packages", "spark.jars") and out.get(k):
            out[k] = ",".join(dict.fromkeys(out[k].split(",") + v.split(",")))
        else:
            out[k] = v
    return out


def iceberg_session(
    warehouse: Path | str,
    small_data: bool = False,
    conf: dict[str, str] | None = None,
) -> Any:
    """A local Spark session with Iceberg's runtime and a Hadoop catalog named `local`.

    `small_data` (the differential tests) turns off whole-stage code generation and adaptive
    execution: on tiny tables compiling and re-planning cost more than they save. Never for
    benchmarks: Spark's vectorized Parquet reader needs whole-stage code generation.
    `conf`: more settings (`spark.jars.packages` entries are added to the runtime's), e.g.
    s3a's.
    """
    import os
    import sys

    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # its Python tasks: this one's
    settings = merged(packages_conf(iceberg_coordinates()), conf or {})
    log_conf = ROOT / "physical" / "spark" / "log4j2.properties"
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("mor-oracle")
        .config(
            "spark.sql.extensions",
            "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        )
        .config("spark.sql.catalog.local", "org.apache.iceberg.spark.SparkCatalog")
        .config("spark.sql.catalog.local.type", "hadoop")
        .config("spark.sql.catalog.local.warehouse", str(warehouse))
        .config("spark.sql.catalog.local.cache-enabled", "false")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2" if small_data else "8")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j.configurationFile=file:{log_conf}")
    )
    for k, v in settings.items():
        builder = builder.config(k, v)
    if small_data:
        builder = builder.config("spark.sql.codegen.wholeStage", "false").config(
            "spark.sql.adaptive.enabled", "false"
        )
    try:
        spark = builder.getOrCreate()
    except Exception as e:  # noqa: BLE001 - Ivy could not resolve, or the JVM did not start
        raise RuntimeUnavailable(
            f"a Spark session with {settings['spark.jars.packages']} did not start "
            f"(Maven Central unreachable? Ivy cache {ivy_home()}): {str(e).strip()[:300]}"
        ) from e
    spark.sparkContext.setLogLevel("FATAL")
    return spark


def main() -> int:
    """`python -m tests.oracle.runtime`: resolve this pyspark's jars into the Ivy cache now
    (what `make dev` does once per environment), printing the coordinates."""
    import time

    started = time.monotonic()
    coords = [s3a_coordinates()]
    try:
        coords[:0] = [iceberg_coordinates(), iceberg_aws_coordinates()]
    except RuntimeUnavailable as e:
        print(f"(no Iceberg runtime: {e})")
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[1]")
        .appName("mor-resolve-jars")
        .config("spark.ui.enabled", "false")
        .config("spark.jars.packages", ",".join(coords))
        .getOrCreate()
    )
    jars = spark.sparkContext._jsc.sc().listJars().size()
    spark.stop()
    took = time.monotonic() - started
    print(f"resolved {', '.join(coords)}: {jars} jars in {ivy_home()} ({took:.0f}s)")
    return 0


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(ROOT))
    sys.exit(main())
