"""Spark session set-up: a local default; a user's session is used as it is."""

from __future__ import annotations

import os

from pyspark.sql import SparkSession

from mor.planner.errors import ConfigError, MorError, UnsupportedError
from mor.planner.settings import current, user_config


def is_connect(spark: object) -> bool:
    """A Spark Connect session (no JVM in this process: pyspark.sql.connect)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def prepare_session(spark: SparkSession) -> SparkSession:
    """A session given by the user is used as it is: mor changes none of its settings (every
    column is read by name, so no Parquet field-id setting is needed)."""
    if is_connect(spark):
        connect_supported()
    return spark


def connect_supported() -> None:
    """Spark Connect needs a pyspark 4 client: mor sends each query with its scans as one SQL
    relation over named sub-relations (WithRelations), which the 3.5 client cannot build."""
    import pyspark

    if int(pyspark.__version__.split(".")[0]) < 4:
        raise UnsupportedError(
            f"Spark Connect needs pyspark 4.0 or later in this Python (installed: pyspark "
            f"{pyspark.__version__}, whose Connect client cannot send a query with its scans): "
            "use a classic session, or install 'mor[connect]' (pyspark-client 4.x)"
        )


def active_session() -> SparkSession | None:
    """The session this process is using: a classic one, or a Spark Connect one."""
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    try:
        from pyspark.sql.connect.session import SparkSession as ConnectSession
    except ImportError:  # pyspark without the Connect client's dependencies
        return None
    return ConnectSession.getActiveSession()


def remote_session(url: str, conf: dict[str, str] | None = None) -> SparkSession:
    """A Spark Connect session to `url` (sc://host:port): no JVM in this process."""
    connect_supported()
    _reachable(url)
    try:
        builder = SparkSession.builder.remote(url)
        for k, v in (conf or {}).items():
            builder = builder.config(k, v)
        return builder.getOrCreate()
    except Exception as e:  # noqa: BLE001 - missing client packages, unreachable server
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise MorError(f"cannot connect to Spark Connect at {url}: {first}") from e


def _reachable(url: str, timeout: float = 10.0) -> None:
    """Fail at once, naming the address, when nothing listens at a Connect URL: the Connect
    client would retry with backoff for many minutes before giving up."""
    import re
    import socket

    m = re.match(r"^sc://(\[[^\]]+\]|[^:/;]+)(?::(\d+))?", url)
    if m is None:
        raise ConfigError(f"not a Spark Connect URL: {url!r} (expected sc://host:port)")
    host, port = m.group(1).strip("[]"), int(m.group(2) or 15002)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as e:
        raise MorError(
            f"cannot connect to Spark Connect at {url}: nothing answers at {host}:{port} "
            f"({e.strerror or e})"
        ) from e


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


def local_session(master: str | None = None, conf: dict[str, str] | None = None) -> SparkSession:
    """The active session if there is one, else a local session with quiet, sensible defaults.

    `master` and `conf` (the CLI's --master and --conf) start the session with them; on an
    active session, `conf` is applied as runtime settings and `master` must be its own."""
    active = active_session()
    if active is not None:
        if master and is_connect(active):
            raise ConfigError(f"--master {master}: this process already runs on Spark Connect")
        if master and active.sparkContext.master != master:
            raise ConfigError(
                f"--master {master}: this process already runs Spark on "
                f"{active.sparkContext.master}"
            )
        for k, v in (conf or {}).items():
            active.conf.set(k, v)
        return prepare_session(active)
    config = user_config()  # for a session mor starts; an active one is the user's own
    settings = current()
    master = master or settings.master
    conf = {**s3a_from_environment(), **config.spark, **(conf or {})}
    log_conf = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")
    builder = (
        SparkSession.builder.master(master)
        .appName("mor")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(settings.shuffle_partitions))
        .config("spark.driver.memory", settings.driver_memory)
        .config("spark.sql.session.timeZone", settings.timezone)
        .config("spark.driver.extraJavaOptions", f"-Dlog4j.configurationFile=file:{log_conf}")
    )
    for k, v in (conf or {}).items():  # after mor's defaults: the user's settings win
        builder = builder.config(k, v)
    try:
        spark = builder.getOrCreate()
    except Exception as e:  # noqa: BLE001 - the JVM did not start: say so in one line
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise MorError(f"cannot start a local Spark session (Java 17+ needed): {first}") from e
    spark.sparkContext.setLogLevel(settings.spark_log_level.upper())
    return spark
