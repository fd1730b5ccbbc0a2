"""The options the `mor` subcommands share, declared once (argparse parents), and what the
commands make of them: key=value pairs, the Spark session, a Spark action's failure as one line.

Used by mor/cli.py and mor/shell.py; imports neither.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

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

    conf = pairs(args.conf, "--conf")
    remote = getattr(args, "remote", None) or os.environ.get("SPARK_REMOTE")
    if remote:
        if args.master:
            raise UsageError("give either --remote (Spark Connect) or --master, not both")
        return remote_session(remote, conf)
    return local_session(args.master, conf, s3a=s3a)


def run_spark(fn: Any, plan: Any = None) -> Any:
    """Run a Spark action; its failure becomes one MorError line
    (physical/spark/spark_errors.py)."""
    try:
        return fn()
    except MorError:
        raise
    except Exception as e:  # noqa: BLE001 - Spark errors arrive as Py4J/Analysis/gRPC exceptions
        from mor.physical.spark.spark_errors import spark_failure

        raise spark_failure(e, plan) from e
