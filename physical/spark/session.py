"""Spark sessions: the one mor starts when the caller gives none (local or `--master`, with
Hadoop's s3a connector when a query reads s3a:// paths), a Spark Connect session from a URL,
and a user's own session, used as it is (classic or Connect: `is_connect`)."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from mor.physical.spark.processes import alive
from mor.physical.spark.s3a import (
    HADOOP_AWS,
    S3aConnector,
    s3a_connector,
    s3a_for,
    s3a_from_environment,
    what_starts_get,
    with_packages,
)
from mor.planner.errors import ConfigError, MorError, UnsupportedError
from mor.planner.settings import current, user_config


def is_connect(spark: object) -> bool:
    """A Spark Connect session (no JVM in this process: pyspark.sql.connect)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def session_of(spark: Any) -> SparkSession:
    """`spark`: a session, a function making one, or None (mor's local one, `local_session`);
    called only when there is something for Spark to do."""
    if spark is None:
        return local_session()
    return spark() if callable(spark) else prepare_session(spark)


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
    return active if active is not None else connect_session_held()


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


def connect_session_held() -> Any:
    """The Connect session this process already has (None: none): the one `remote_session`
    would return. No Connect session exists without its module imported, and importing it
    to ask (pandas, grpc) would cost a classic command's first call a quarter of a second."""
    connect = sys.modules.get("pyspark.sql.connect.session")
    try:
        return None if connect is None else connect.SparkSession.active()
    except Exception:  # noqa: BLE001 - none
        return None


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


@dataclass(frozen=True)
class Started:
    """The session mor started in this process (the CLI's, `mor_sql` without `spark=`), what
    it added for s3a and why: for EXPLAIN, `mor config` and a later query that needs s3a."""

    session: Any
    s3a: S3aConnector | None  # None: started without s3a (no query read s3a:// paths)
    log: str | None = None  # where the JVM's output goes (None: this process's stderr)


STARTED: Started | None = None


def _mine(session: Any) -> Started | None:
    return STARTED if STARTED is not None and STARTED.session is session else None


def s3a_status(session: Any) -> str:
    """One line on how `session` reads `s3a://` paths, for EXPLAIN."""
    if is_connect(session):
        return (
            "the Spark Connect server reads them with its own jars (started with --packages "
            f"{HADOOP_AWS}:<its Hadoop version>)"
        )
    mine = _mine(session)
    if mine is None:
        return (
            "the session given is used as it is (mor adds nothing): it needs "
            f"{HADOOP_AWS}:<its Hadoop version> in spark.jars.packages"
        )
    if mine.s3a is not None:
        return "session mor started: " + mine.s3a.why
    # started for a query that read no s3a:// path (or for EXPLAIN's analysis alone)
    return what_starts_get(s3a_for()) + " (not the session started here without it)"


def check_s3a(session: Any, conf: Mapping[str, str] | None = None) -> None:
    """Refuse, naming what to add, a query that reads s3a:// paths on a session mor started
    without the connector (for earlier queries): a running JVM takes no packages. Any other
    session (the user's, a Spark Connect one) is not mor's to judge: Spark's own error, made
    one line by physical/spark/spark_errors.py, names the coordinates there."""
    mine = _mine(session)
    if mine is None or mine.s3a is not None:
        return
    wanted = s3a_for(conf)
    if wanted.coordinates is not None:
        raise ConfigError(
            "this query reads s3a:// paths, but the Spark session mor started in this process "
            "(for an earlier query) has no s3a connector, and a running JVM takes no packages: "
            f"start the process's session with spark.jars.packages={wanted.coordinates} (the "
            "config file's [spark], --conf, or a session of your own), or run this query first"
        )


def early_start() -> str | None:
    """How a command may start its session while it plans (the `early_session` setting):
    None (not early), "always", or "on" (when the plan cannot change the session). `auto`
    is on with 4 cores or more: with 2, the JVM's start and the planning share them, and
    `mor run` measured no faster."""
    mode = current().early_session
    if mode == "off" or (mode == "auto" and (os.cpu_count() or 1) < 4):
        return None
    return "always" if mode == "always" else "on"


def server_wanted() -> bool:
    """Whether a command that names no Spark runs on the server `mor server start` started,
    while it runs (the `server` setting)."""
    return current().server != "off"


def local_session(
    master: str | None = None, conf: dict[str, str] | None = None, s3a: bool = False
) -> SparkSession:
    """The active session if there is one, else a local session with quiet, sensible defaults.

    `master` and `conf` (the CLI's --master and --conf) start the session with them; on an
    active session, `conf` is applied as runtime settings and `master` must be its own.
    `s3a`: the queries read `s3a://` paths, so a session started here gets Hadoop's s3a
    connector (physical/spark/s3a.py) unless the `s3a_packages` setting is off."""
    global STARTED
    active = active_session()
    if active is not None:
        if master and is_connect(active):
            raise ConfigError(f"--master {master}: this process already runs on Spark Connect")
        if master and active.sparkContext.master != master:
            raise ConfigError(
                f"--master {master}: this process already runs Spark on "
                f"{active.sparkContext.master}"
            )
        if s3a:
            check_s3a(active, conf)
        for k, v in (conf or {}).items():
            active.conf.set(k, v)
        return prepare_session(active)
    settings = current()
    options, connector = start_options(master, conf, s3a)
    master = options["spark.master"]
    if master.startswith("local") and "spark.pyspark.python" not in options:
        # Python tasks (compaction's pyarrow writer) run this interpreter, whose environment
        # has mor's dependencies, rather than whatever `python3` is first on the PATH (pyspark
        # takes the workers' Python from PYSPARK_PYTHON alone)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder
    for k, v in options.items():
        builder = builder.config(k, v)
    packages = options.get("spark.jars.packages", "").strip()
    # the JVM's own output never reaches this process's stdout (results go there): Ivy's
    # resolution report, Spark 4.1's start-up warning about incubator modules. At mor's quiet
    # log levels it goes to a log file of this process (named when the JVM does not start),
    # else to stderr
    quiet = settings.spark_log_level.upper() in ("OFF", "FATAL", "ERROR")
    log = _launcher_log() if quiet else None
    try:
        _launch_jvm(options, log)
        spark = builder.getOrCreate()
    except Exception as e:  # noqa: BLE001 - the JVM did not start: say so in one line
        raise _start_failure(e, packages, log) from e
    spark.sparkContext.setLogLevel(settings.spark_log_level.upper())
    STARTED = Started(spark, connector, log)
    return spark


def start_options(
    master: str | None = None, conf: Mapping[str, str] | None = None, s3a: bool = False
) -> tuple[dict[str, str], S3aConnector | None]:
    """The settings of a Spark driver mor starts, in this process or as a Connect server
    (mor/server.py): mor's defaults (the `master`, shuffle partitions, driver memory and time
    zone settings, no UI, quiet logs), then the config file's [spark] table, then `conf`;
    `s3a`: with Hadoop's s3a connector (unless the `s3a_packages` setting is off). Returns
    them and the connector added (None: not asked for)."""
    settings = current()
    merged = {**s3a_from_environment(), **user_config().spark, **(conf or {})}
    connector = s3a_connector(merged, settings.s3a_packages) if s3a else None
    if connector is not None and connector.coordinates is not None:
        merged = with_packages(merged, connector.coordinates)
    options = {
        "spark.master": master or settings.master,
        "spark.app.name": "mor",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
        "spark.driver.memory": settings.driver_memory,
        "spark.sql.session.timeZone": settings.timezone,
        "spark.driver.extraJavaOptions": f"-Dlog4j.configurationFile=file:{log_config()}",
        **merged,  # after mor's defaults: the user's settings win
    }
    return options, connector


def log_config() -> str:
    """The log4j2 configuration of a driver mor starts (quiet: warnings and errors)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")


_LOGS: set[str] = set()  # the logs whose removal at exit is registered


def _launcher_log() -> str:
    """`mor-<uid>/spark-<pid>.log` in the temporary folder, removed when this process ends;
    logs of processes that are gone are removed here."""
    import atexit
    import tempfile

    folder = os.path.join(tempfile.gettempdir(), f"mor-{os.getuid()}")
    os.makedirs(folder, exist_ok=True)
    for name in os.listdir(folder):
        m = re.fullmatch(r"spark-(\d+)\.log", name)
        if m and int(m.group(1)) != os.getpid() and not alive(int(m.group(1))):
            try:
                os.remove(os.path.join(folder, name))
            except OSError:
                pass
    path = os.path.join(folder, f"spark-{os.getpid()}.log")
    if path not in _LOGS:
        _LOGS.add(path)
        atexit.register(lambda: os.path.exists(path) and os.remove(path))
    return path


def _launch_jvm(options: Mapping[str, str], log: str | None) -> None:
    """Launch this process's JVM (Spark's driver) with `options` as pyspark would, its
    standard output and error going to `log` (None: to this process's stderr). The JVM
    alone is redirected, never this process's own output: a session may start on a thread
    while the main thread plans and reports (the CLI's early start). Nothing is launched
    when this process already has a JVM (an earlier session, or a `spark-submit` driver)."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None or os.environ.get("PYSPARK_GATEWAY_PORT"):
        return
    conf = SparkConf(loadDefaults=False)
    conf.setAll(list(options.items()))
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600) if log else os.dup(2)
    try:
        gateway = launch_gateway(conf, popen_kwargs={"stdout": fd, "stderr": fd})
    finally:
        os.close(fd)
    SparkContext._ensure_initialized(gateway=gateway)


def stop_started() -> None:
    """Stop the session mor started in this process and its JVM, so that the next one
    starts a new JVM (with other packages: the CLI's early start guessed wrong about s3a).
    The JVM ends when its standard input closes, as pyspark's gateway server is made to."""
    global STARTED
    if STARTED is None:
        return
    from pyspark import SparkContext

    STARTED.session.stop()
    STARTED = None
    with SparkContext._lock:
        gateway = SparkContext._gateway
        SparkContext._gateway = None
        SparkContext._jvm = None
    if gateway is None:
        return
    proc = getattr(gateway, "proc", None)
    try:
        gateway.shutdown()
    finally:
        if proc is not None:
            if proc.stdin is not None:
                proc.stdin.close()
            try:
                proc.wait(timeout=60)
            except Exception:  # noqa: BLE001 - a JVM that will not end is ended
                proc.kill()


def _start_failure(e: BaseException, packages: str, log: str | None) -> MorError:
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    text = ""
    if log is not None:
        try:
            with open(log, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            pass
    m = re.search(r"unresolved dependency: ([^\]\n]+)|(Server access error[^\n]*)", text)
    if packages and m:
        what = (m.group(1) or m.group(2)).strip()
        return ConfigError(
            f"cannot start a local Spark session with spark.jars.packages={packages}: "
            f"Spark's Ivy could not resolve {what} (Maven Central unreachable? set "
            "spark.jars.repositories to a mirror, or --set s3a_packages=false and give "
            "the jars yourself)"
        )
    # the JVM's last words (e.g. "Error: ..." from java itself) say more than pyspark's
    said = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("\t")]
    reason = said[-1][:300] if said else first
    where = f"; log: {log}" if log else ""
    return MorError(f"cannot start a local Spark session (Java 17+ needed): {reason}{where}")
