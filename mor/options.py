"""The options the `mor` subcommands share, declared once (argparse parents), and what the
commands make of them: key=value pairs, the Spark session, a Spark action's failure as one line.

Used by mor/cli.py and mor/shell.py; imports neither.
"""

from __future__ import annotations

import argparse
import contextvars
import os
import re
import sys
import threading
from typing import Any

from mor import interrupts
from mor.planner.errors import MorError


class UsageError(Exception):
    """A command line that cannot be run as given (exit code 2)."""


def _parent() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(add_help=False)


# --debug on a subcommand: SUPPRESS keeps `mor --debug run ...` from being reset to False by
# the subcommand's default (main() also reads it from argv before parsing)
DEBUG = _parent()
DEBUG.add_argument(
    "--debug", action="store_true", default=argparse.SUPPRESS, help="show Python tracebacks"
)

WAREHOUSE = _parent()
WAREHOUSE.add_argument(
    "--warehouse", help="warehouse of the embedded catalog (default ./warehouse)"
)

CATALOG = argparse.ArgumentParser(add_help=False, parents=[WAREHOUSE])
CATALOG.add_argument("--catalog", help="a catalog name from pyiceberg's configuration")

FILES = _parent()
FILES.add_argument(
    "--path-map",
    action="append",
    default=[],
    metavar="OLD=NEW",
    help="read files recorded under OLD from NEW (repeatable)",
)
FILES.add_argument(
    "--io",
    action="append",
    default=[],
    metavar="KEY=VALUE",
    help="a pyiceberg FileIO property for tables named by path, e.g. "
    "s3.endpoint=http://host:port (repeatable; also over a catalog's)",
)

SPARK = _parent()
SPARK.add_argument("--master", help="Spark master URL (default: setting master, local[*])")
SPARK.add_argument(
    "--remote",
    metavar="sc://HOST:PORT",
    help="run on a Spark Connect server (default: $SPARK_REMOTE; no JVM needed here)",
)
SPARK.add_argument(
    "--conf",
    action="append",
    default=[],
    metavar="KEY=VALUE",
    help="a Spark setting for the session (repeatable)",
)

WRITES = _parent()
WRITES.add_argument(
    "--branch",
    default="main",
    help="the branch DELETE, UPDATE and MERGE statements commit to (default main)",
)
WRITES.add_argument(
    "--dry-run",
    action="store_true",
    help="DELETE, UPDATE and MERGE statements report the rows they would change and commit nothing",
)

SETTINGS = _parent()
SETTINGS.add_argument(
    "--set",
    action="append",
    default=[],
    metavar="NAME=VALUE",
    help="a mor setting for this command, e.g. position_bitmap_bytes=0 (repeatable; "
    "`mor config` lists them)",
)


def pairs(items: list[str], flag: str, form: str = "KEY=VALUE") -> dict[str, str]:
    """`--flag K=V` options as a dict (a later K wins); one without `=` is a usage error.
    Keys are stripped, except path prefixes (OLD=NEW), which are taken exactly."""
    out = {}
    for item in items:
        if "=" not in item:
            raise UsageError(f"{flag} needs {form}, got {item!r}")
        k, v = item.split("=", 1)
        out[k if form == "OLD=NEW" else k.strip()] = v
    return out


def path_map(args: argparse.Namespace) -> dict[str, str]:
    return pairs(getattr(args, "path_map", None) or [], "--path-map", "OLD=NEW")


def file_io(args: argparse.Namespace) -> dict[str, str]:
    return pairs(getattr(args, "io", None) or [], "--io", "KEY=VALUE")


def spark_session(args: argparse.Namespace, s3a: bool = False) -> Any:
    """The Spark session of a command: Spark Connect with --remote (or $SPARK_REMOTE), else
    a local or --master session, with --conf applied; `s3a`: its queries read s3a:// paths
    (a session started here gets Hadoop's s3a connector: physical/spark/s3a.py)."""
    from mor.physical import local_session, remote_session
    from mor.physical.spark.session import connect_session_held

    conf = pairs(args.conf, "--conf")
    remote = remote_url(args)
    if remote:
        before = connect_session_held()
        spark = remote_session(remote, conf)
        if spark is not before:  # a session of the caller's (a test's, a notebook's) is theirs
            _CONNECTED.append(spark)
        return interrupts.watch(spark)
    return interrupts.watch(local_session(args.master, conf, s3a=s3a))


_CONNECTED: list[Any] = []  # the Connect sessions this command opened (release_sessions)


def remote_url(args: argparse.Namespace) -> str | None:
    """The Spark Connect server a command runs on: --remote, else $SPARK_REMOTE, else (with
    no --master, the `server` setting auto) the server `mor server start` started while it
    runs and this Python can be its client (pyspark 4.x); None: a session of its own.
    Decided once per command: its early session and its session ask the same question."""
    if "_remote_url" not in vars(args):
        args._remote_url = _remote_url(args)
    return args._remote_url


def _remote_url(args: argparse.Namespace) -> str | None:
    remote = getattr(args, "remote", None) or os.environ.get("SPARK_REMOTE")
    master = getattr(args, "master", None)
    if remote:
        if master:
            raise UsageError("give either --remote (Spark Connect) or --master, not both")
        return str(remote)
    if master:
        return None
    from mor.physical.spark.session import server_wanted

    if not server_wanted():
        return None
    from mor.server import running

    state = running()
    if state is None or not connect_client():
        return None
    return state.url


def connect_client() -> bool:
    """This Python's pyspark can be a Connect client (4.x), known without importing it."""
    from importlib import metadata

    for dist in ("pyspark", "pyspark-client", "pyspark-connect"):
        try:
            return int(metadata.version(dist).split(".")[0]) >= 4
        except metadata.PackageNotFoundError:
            continue
        except ValueError:
            return False
    return False


def release_sessions() -> None:
    """Release the Connect sessions the command opened: the server drops what they held
    (cached delete sides, temporary views) now rather than at its idle timeout."""
    while _CONNECTED:
        spark = _CONNECTED.pop()
        try:
            spark.stop()
        except Exception:  # noqa: BLE001 - best effort, as pyspark's own stop()
            pass


_S3 = re.compile(r"(?i)\bs3[an]?://")


def session_may_need_s3a(args: argparse.Namespace, sql: str) -> bool:
    """Whether the command's queries might read s3a:// paths, known before planning (from
    the options and the config file, without importing the planner): a path on S3 in the
    SQL, a named catalog (it may keep its tables anywhere), a warehouse or a path map
    pointing to S3. False says the embedded catalog over a local warehouse, which keeps its
    tables there; a table registered there from S3 is still found after planning
    (`EarlySession.session`)."""
    from mor.planner.settings import default_catalog_name, effective_path_map, user_config

    if _S3.search(sql) or getattr(args, "catalog", None) or default_catalog_name(args.warehouse):
        return True
    # the warehouse as given (warehouse_dir makes a local path of it)
    named = args.warehouse or os.environ.get("MOR_WAREHOUSE") or user_config().warehouse or ""
    return any(_S3.match(p) for p in [named, *effective_path_map(path_map(args)).values()])


class EarlySession:
    """The command's Spark session, started on a thread while its statements are planned
    (`mor run`): a JVM takes seconds to start, planning a fraction of one, and neither needs
    the other. Started only when the session cannot depend on the plan: on Spark Connect, or
    when a local session would get no s3a connector whatever the plan reads (`s3a_packages`
    off, hadoop-aws already in the session's jars) or the queries name nothing on S3
    (`session_may_need_s3a`). If the plan reads s3a:// paths after all, the session started
    without the connector is stopped with its JVM and a new one starts with it."""

    def __init__(self, args: argparse.Namespace) -> None:
        self._args = args
        self._done: dict[str, Any] = {}
        run = contextvars.copy_context().run  # the command's settings (--set) on the thread
        self._thread = threading.Thread(
            target=run, args=(self._start,), name="mor-early-session", daemon=True
        )
        self._thread.start()

    @staticmethod
    def wanted(args: argparse.Namespace, sql: str) -> bool:
        """Whether to start early (the `early_session` setting)."""
        from mor.physical.spark.session import early_start

        mode = early_start()
        if mode is None:
            return False
        if "pyspark" in sys.modules:  # a session of this process is used as it is
            from mor.physical.spark.session import active_session

            if active_session() is not None:
                return False
        if mode == "always" or remote_url(args):
            return True
        from mor.physical.spark.s3a import s3a_for

        if s3a_for(pairs(args.conf, "--conf")).coordinates is None:
            return True  # the session gets nothing for s3a either way
        return not session_may_need_s3a(args, sql)

    def _start(self) -> None:
        try:
            self._done["spark"] = spark_session(self._args, s3a=False)
        except BaseException as e:  # noqa: BLE001 - raised on the main thread by session()
            self._done["error"] = e

    def session(self, s3a: bool) -> Any:
        """The session, once started; `s3a`: the planned queries read s3a:// paths."""
        self._thread.join()
        if "error" in self._done:
            raise self._done["error"]
        spark = self._done["spark"]
        from mor.physical.spark.session import check_s3a, is_connect, stop_started

        if is_connect(spark):
            return spark
        if s3a:
            try:
                check_s3a(spark, pairs(self._args.conf, "--conf"))
            except MorError:  # started without the connector these queries need
                stop_started()
                return spark_session(self._args, s3a=True)
        return spark


def run_spark(fn: Any, plan: Any = None) -> Any:
    """Run a Spark action; its failure becomes one MorError line
    (physical/spark/spark_errors.py)."""
    try:
        with interrupts.spark_action():
            return fn()
    except MorError:
        raise
    except Exception as e:  # noqa: BLE001 - Spark errors arrive as Py4J/Analysis/gRPC exceptions
        from mor.physical.spark.spark_errors import spark_failure

        raise spark_failure(e, plan) from e
