"""Hadoop's s3a connector for a Spark session mor starts: its settings from the AWS
environment, and its jars, added as `spark-submit --packages` adds them: the Maven coordinates
of `hadoop-aws` at the version of the Hadoop that Spark ships (pyspark 3.5: 3.3.4; 4.0 and 4.1:
3.4.x; 4.2 and later: 3.5.x), in `spark.jars.packages`. Spark's Ivy resolves them from Maven
Central (or the repositories the session names) together with the AWS SDK bundle that
hadoop-aws version was built against (v1 for Hadoop 3.3, v2 from 3.4): a mismatched pair fails
at the first read, so the version is never guessed.

Only a session mor starts is given them, only when a query reads `s3a://` paths, and never
when the session's settings or Spark's own jars already hold hadoop-aws; the `s3a_packages`
setting turns it off. A user's own session is used as it is: when it has no connector, the
error names these coordinates (physical/spark/spark_errors.py).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from mor.planner.nodes import EqDeleteScan, IcebergScan, Plan
from mor.planner.settings import current, user_config
from mor.rules.physical.counts import counted_from_metadata

HADOOP_AWS = "org.apache.hadoop:hadoop-aws"
_HADOOP_JAR = re.compile(r"hadoop-(?:client-api|common)-(\d+\.\d+\.\d+)\.jar")


def spark_jars() -> Path | None:
    """The jars folder of the Spark that pyspark starts: $SPARK_HOME's, else pyspark's own;
    None without pyspark (a Spark Connect client alone has no jars)."""
    home = os.environ.get("SPARK_HOME")
    if not home:
        try:
            import pyspark
        except ImportError:
            return None
        home = os.path.dirname(os.path.abspath(pyspark.__file__))
    return Path(home) / "jars"


@lru_cache(maxsize=8)
def _listing(jars: Path) -> tuple[str, ...]:
    try:
        return tuple(sorted(os.listdir(jars)))
    except OSError:
        return ()


def hadoop_version(jars: Path) -> str | None:
    """The Hadoop version Spark ships, from its jar names (no JVM started)."""
    for name in _listing(jars):
        m = _HADOOP_JAR.fullmatch(name)
        if m:
            return m.group(1)
    return None


def s3a_coordinates(hadoop: str) -> str:
    return f"{HADOOP_AWS}:{hadoop}"


@dataclass(frozen=True)
class S3aConnector:
    """What a session mor starts gets for `s3a://` paths: `coordinates` to add to
    `spark.jars.packages` (None: nothing added), and `why`, one line for `mor config` and
    EXPLAIN."""

    coordinates: str | None
    why: str


def s3a_connector(conf: Mapping[str, str], enabled: bool, jars: Path | None = None) -> S3aConnector:
    """For a session about to start with `conf`; `enabled`: the `s3a_packages` setting."""
    jars = jars or spark_jars()
    if jars is None:
        return S3aConnector(None, "no local Spark here (pyspark is not installed)")
    version = hadoop_version(jars)
    wanted = s3a_coordinates(version) if version else None
    if not enabled:
        hint = f" (add {wanted} yourself where needed)" if wanted else ""
        return S3aConnector(None, f"not added: the s3a_packages setting is off{hint}")
    for key in ("spark.jars.packages", "spark.jars"):
        given = [p.strip() for p in conf.get(key, "").split(",") if "hadoop-aws" in p]
        if given:
            return S3aConnector(None, f"given in {key}: {given[0]}")
    own = [n for n in _listing(jars) if n.startswith("hadoop-aws-")]
    if own:
        return S3aConnector(None, f"Spark's own jars hold {own[0]} ({jars})")
    if wanted is None:
        return S3aConnector(
            None,
            f"not added: no Hadoop jar in {jars} tells Spark's Hadoop version; add "
            f"{HADOOP_AWS}:<that version> to spark.jars.packages",
        )
    return S3aConnector(
        wanted,
        f"{wanted} in spark.jars.packages (Spark's Hadoop {version}; fetched with its AWS SDK "
        "bundle from Maven Central once)",
    )


def what_starts_get(connector: S3aConnector, purpose: str = "to run it") -> str:
    """One line: what a session mor starts `purpose` (for a query reading s3a:// paths) gets."""
    if connector.coordinates is None:
        return f"a session mor starts {purpose}: {connector.why}"
    return f"a session mor starts {purpose} gets {connector.why}"


def with_packages(conf: Mapping[str, str], coordinates: str) -> dict[str, str]:
    """`conf` with `coordinates` appended to its `spark.jars.packages`."""
    out = dict(conf)
    given = [p for p in out.get("spark.jars.packages", "").split(",") if p.strip()]
    out["spark.jars.packages"] = ",".join([*given, coordinates])
    return out


def s3a_from_environment() -> dict[str, str]:
    """Settings for Hadoop's s3a connector from the AWS SDKs' environment, for a session mor
    starts (a user's own session is never changed): the endpoint s3a's SDK does not read from
    `AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL`, path-style requests as pyarrow makes them to
    an endpoint given so, plain HTTP for an http:// one. Keys, session token and region s3a
    takes from the environment itself."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if not endpoint:
        return {}
    return {
        "spark.hadoop.fs.s3a.endpoint": endpoint,
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": str(endpoint.startswith("https:")).lower(),
    }


def s3a_for(conf: Mapping[str, str] | None = None) -> S3aConnector:
    """What a session mor starts with `conf` (over the config file's [spark] table) gets for
    `s3a://` paths."""
    config = user_config()
    merged = {**s3a_from_environment(), **config.spark, **(conf or {})}
    return s3a_connector(merged, current().s3a_packages)


def reads_s3a(plan: Plan, counts: bool = False) -> bool:
    """Spark reads some of the plan's files through Hadoop's s3a connector (`s3a://` paths:
    recorded `s3://` ones are read as `s3a://`, planner/sources.PathMap). A count answered
    from metadata reads no data file in Spark (its position deletes are read on the driver):
    such a scan counts only with `counts` (a session kept for later queries, as the shell's,
    will read the table's files next)."""
    for node in plan.walk():
        if isinstance(node, IcebergScan):
            tasks = node.data_files()
            deletes = node.deletes_by_id()
            if (
                not tasks
                or not counts
                and counted_from_metadata(
                    len(node.fields),
                    len(node.hidden),
                    len(node.meta),
                    len(node.pushed),
                    len(node.eq_sets),
                    tasks,
                    deletes,
                )
            ):
                continue
            files: tuple = (*tasks, *deletes.values())
        elif isinstance(node, EqDeleteScan):
            files = node.files
        else:
            continue
        if any(f.read_path.startswith("s3a://") for f in files):
            return True
    return False
