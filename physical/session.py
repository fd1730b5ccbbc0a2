"""Spark session set-up: a local default; a user's session is used as it is."""

from __future__ import annotations

import os
import re

from pyspark.sql import SparkSession

from mor.planner.errors import ConfigError, MorError
from mor.planner.settings import env_int, user_config


def prepare_session(spark: SparkSession) -> SparkSession:
    """A session given by the user is used as it is: mor changes none of its settings (every
    column is read by name, so no Parquet field-id setting is needed)."""
    return spark


def local_session(master: str | None = None, conf: dict[str, str] | None = None) -> SparkSession:
    """The active session if there is one, else a local session with quiet, sensible defaults.

    `master` and `conf` (the CLI's --master and --conf) start the session with them; on an
    active session, `conf` is applied as runtime settings and `master` must be its own."""
    active = SparkSession.getActiveSession()
    if active is not None:
        if master and active.sparkContext.master != master:
            raise ConfigError(
                f"--master {master}: this process already runs Spark on "
                f"{active.sparkContext.master}"
            )
        for k, v in (conf or {}).items():
            active.conf.set(k, v)
        return prepare_session(active)
    config = user_config()  # for a session mor starts; an active one is the user's own
    master = master or os.environ.get("MOR_SPARK_MASTER") or config.master
    conf = {**config.spark, **(conf or {})}
    partitions = env_int("MOR_SHUFFLE_PARTITIONS", 8, minimum=1)
    log_conf = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")
    builder = (
        SparkSession.builder.master(master or "local[*]")
        .appName("mor")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(partitions))
        .config("spark.driver.memory", os.environ.get("MOR_DRIVER_MEMORY", "4g"))
        .config("spark.sql.session.timeZone", os.environ.get("MOR_TIMEZONE", "UTC"))
        .config("spark.driver.extraJavaOptions", f"-Dlog4j.configurationFile=file:{log_conf}")
    )
    for k, v in (conf or {}).items():  # after mor's defaults: the user's settings win
        builder = builder.config(k, v)
    memory = os.environ.get("MOR_DRIVER_MEMORY", "4g")
    if not re.fullmatch(r"\d+[kmgtKMGT]?", memory.strip()):
        raise ConfigError(f"MOR_DRIVER_MEMORY must be a size like 4g or 2048m, got {memory!r}")
    try:
        spark = builder.getOrCreate()
    except Exception as e:  # noqa: BLE001 - the JVM did not start: say so in one line
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise MorError(f"cannot start a local Spark session (Java 17+ needed): {first}") from e
    spark.sparkContext.setLogLevel(os.environ.get("MOR_SPARK_LOG_LEVEL", "FATAL"))
    return spark
