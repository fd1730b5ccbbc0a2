"""The `mor` command: `run` and `explain` SQL (a file or -e) against an Iceberg catalog,
`shell` (a prompt over a warm Spark session), `tables` and `describe` (metadata only), `health`
(delete files and what to compact), `changes` (row-level changes consumed once, with a
checkpoint), `config` (the settings in effect and the caches) and `demo` (builds a table and
queries it). Options shared by subcommands are declared once in mor/options.py; output
formats are in mor/output.py.

Exit codes: 0 success, 1 query or data error, 2 usage error. `--debug` shows tracebacks.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from mor import progress
from mor.options import (
    CATALOG,
    DEBUG,
    FILES,
    SETTINGS,
    SPARK,
    WAREHOUSE,
    WRITES,
    EarlySession,
    UsageError,
    file_io,
    pairs,
    path_map,
    remote_url,
    run_spark,
    spark_session,
)
from mor.output import format_rows, replace_atomically, write_text
from mor.planner.errors import MorError, SqlSyntaxError

if TYPE_CHECKING:  # the SQL parser is imported once a command reads SQL, after Spark starts
    from mor.statements import StatementExecution


def _parser() -> argparse.ArgumentParser:
    """Each subcommand declares only its own options; the shared ones come from
    mor/options.py's parents (debug, catalog, files, Spark, settings)."""
    p = argparse.ArgumentParser(prog="mor", description="SQL over Iceberg merge-on-read tables")
    p.add_argument("--debug", action="store_true", help="show Python tracebacks")
    p.add_argument("--version", action="version", version=_version())
    sub = p.add_subparsers(dest="cmd", required=True)
    _query_commands(sub)
    _table_commands(sub)
    _maintenance_commands(sub)
    _procedure_commands(sub)
    _server_command(sub)
    sub.add_parser(
        "config",
        parents=[DEBUG, WAREHOUSE, SETTINGS],
        help="show the settings in effect and where each comes from",
    )
    sub.add_parser(
        "demo",
        parents=[DEBUG, WAREHOUSE],
        help="create demo.orders in the embedded catalog and query it",
    )
    return p


def _procedure_commands(sub: Any) -> None:
    """Iceberg's procedures mor runs (planner/procedures.py), by their names (and with dashes):
    `mor rollback_to_snapshot db.t 123` runs `CALL system.rollback_to_snapshot(table =>
    'db.t', snapshot_id => 123)` as `mor run -e` would (dry run, formats, Ctrl-C the same)."""
    from mor.planner.procedures import PROCEDURES

    for proc in PROCEDURES.values():
        sp = sub.add_parser(
            proc.name,
            aliases=[proc.name.replace("_", "-")],
            parents=[DEBUG, CATALOG, FILES, SPARK, SETTINGS],
            help=f"Iceberg's {proc.name} procedure: CALL system.{proc.name}(...)",
        )
        sp.set_defaults(cmd="procedure", procedure=proc.name)
        for param in proc.params:
            if param.name == "dry_run":
                continue  # the command's own --dry-run (below) is that argument
            kind = int if param.kind == "long" else str
            what = {"long": "a whole number", "timestamp": "e.g. '2026-12-01 10:00:00' (UTC)"}
            dest = f"arg_{param.name}"  # apart from the options' (`--branch` is not `branch`)
            flag = f"--{param.name.replace('_', '-')}"
            if param.required:
                sp.add_argument(dest, metavar=param.name, type=kind, help=what.get(param.kind))
            elif param.kind == "boolean":
                sp.add_argument(flag, dest=dest, action="store_const", const=True)
            elif param.kind == "longs":
                sp.add_argument(flag, dest=dest, type=int, nargs="+", metavar="ID")
            elif param.kind == "map":
                sp.add_argument(
                    flag,
                    dest=dest,
                    action="append",
                    metavar="KEYS=VALUE",
                    help=(
                        "e.g. min-input-files=2" if param.name == "options" else "e.g. s3a,s3n=s3"
                    )
                    + " (repeat for more)",
                )
            else:
                sp.add_argument(
                    flag,
                    dest=dest,
                    type=kind,
                    metavar=param.name.upper(),
                    help=what.get(param.kind),
                )
        sp.add_argument("--format", choices=["table", "csv", "json"], default="table")
        sp.add_argument(
            "--dry-run", action="store_true", help="say what it would do; change nothing"
        )


def _procedure_sql(args: argparse.Namespace) -> str:
    """The CALL statement a procedure command runs, every argument by name."""
    from mor.planner.procedures import PROCEDURES

    given = []
    for param in PROCEDURES[args.procedure].params:
        value = getattr(args, f"arg_{param.name}", None)
        if value is None:
            continue
        if param.kind == "long":
            text = str(int(value))
        elif param.kind == "boolean":
            text = "true" if value else "false"
        elif param.kind == "longs":
            text = f"ARRAY({', '.join(str(int(v)) for v in value)})"
        elif param.kind == "map":
            pairs = []
            for item in value:
                key, eq, val = item.partition("=")
                if not eq:
                    raise MorError(f"--{param.name.replace('_', '-')} {item}: expected KEYS=VALUE")
                pairs += [_quoted(key), _quoted(val)]
            text = f"map({', '.join(pairs)})"
        else:
            quoted = _quoted(str(value))
            text = f"TIMESTAMP {quoted}" if param.kind == "timestamp" else quoted
        given.append(f"{param.name} => {text}")
    return f"CALL system.{args.procedure}({', '.join(given)})"


def _quoted(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def cmd_procedure(args: argparse.Namespace) -> int:
    args.sql, args.file = _procedure_sql(args), None
    args.output, args.limit, args.overwrite, args.branch = None, None, False, "main"
    return _run(args)


def _server_command(sub: Any) -> None:
    """server start|status|stop (mor/server.py)."""
    sp = sub.add_parser(
        "server",
        parents=[DEBUG],
        help="a Spark Connect server on this machine that later commands use (no JVM start each)",
    )
    actions = sp.add_subparsers(dest="action", required=True)
    st = actions.add_parser(
        "start",
        parents=[DEBUG, CATALOG, SETTINGS],
        help="start it with the settings a command's own session gets, and wait until it serves",
    )
    st.add_argument("--port", type=int, default=15002, help="its port on 127.0.0.1 (default 15002)")
    st.add_argument("--master", help="Spark master URL (default: setting master, local[*])")
    st.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting for the server (repeatable)",
    )
    st.add_argument(
        "--s3a",
        action="store_true",
        help="add Hadoop's s3a connector (added anyway when a catalog is named, or the "
        "warehouse or a path map is on S3)",
    )
    st.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="how long to wait for it to serve (its first start may download jars; default 300)",
    )
    status = actions.add_parser(
        "status", parents=[DEBUG], help="whether it runs, where, since when (exit 3: it does not)"
    )
    status.add_argument("--format", choices=["table", "json"], default="table")
    actions.add_parser("stop", parents=[DEBUG], help="stop it")


def _query_commands(sub: Any) -> None:
    """run, explain, shell."""
    query = [DEBUG, CATALOG, FILES, SPARK, SETTINGS, WRITES]

    def statements(sp: argparse.ArgumentParser) -> argparse.ArgumentParser:
        sp.add_argument("file", nargs="?", help="a .sql file of ;-separated statements")
        sp.add_argument("-e", dest="sql", help="SQL text instead of a file")
        return sp

    run = statements(
        sub.add_parser("run", parents=query, help="run the statements and print their results")
    )
    run.add_argument("--format", choices=["table", "csv", "json", "parquet"], default="table")
    run.add_argument("--output", help="write results here (required for parquet)")
    run.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing --output (never done without it)",
    )
    run.add_argument("--limit", type=int, help="print at most N rows of each result")
    ex = statements(
        sub.add_parser(
            "explain", parents=query, help="print the query plan and its merge-on-read scans"
        )
    )
    ex.add_argument("--verbose", action="store_true", help="add the rule trace")
    ex.add_argument("--physical", action="store_true", help="add the DataFrame operations")
    ex.add_argument(
        "--no-check",
        action="store_true",
        help="do not have Spark check the query around the scans (starts no JVM)",
    )
    ex.add_argument(
        "--analyze",
        action="store_true",
        help="add merge-on-read metrics and count the rows each delete kind removes (runs Spark)",
    )
    sub.add_parser(
        "shell",
        parents=query,
        help="an interactive prompt; Spark stays warm between queries",
    )


def _table_commands(sub: Any) -> None:
    """tables, describe, health, changes."""
    tables = sub.add_parser(
        "tables", parents=[DEBUG, CATALOG], help="list the tables of a catalog (metadata only)"
    )
    tables.add_argument("namespace", nargs="?", help="only this namespace")
    describe = sub.add_parser(
        "describe",
        parents=[DEBUG, CATALOG, FILES],
        help="schema, partitioning, snapshots of a table",
    )
    describe.add_argument("table", help="ns.table, catalog.ns.table, or a table's path")
    hp = sub.add_parser(
        "health",
        parents=[DEBUG, CATALOG, FILES, SPARK],
        help="delete files, delete ratio and read cost per partition; what to compact "
        "(Spark only for --exact)",
    )
    hp.add_argument("table", help="ns.table, catalog.ns.table, or a table's path")
    hp.add_argument("--format", choices=["table", "json"], default="table")
    hp.add_argument("--snapshot", type=int, help="report on this snapshot (default: the current)")
    hp.add_argument(
        "--exact",
        action="store_true",
        help="count the rows equality deletes remove by running the anti-joins (runs Spark)",
    )
    hp.add_argument(
        "--orphans",
        action="store_true",
        help="list the table's location for files nothing references (remove-orphan-files' "
        "dry run; lists the store)",
    )
    hp.add_argument("--plot", metavar="FILE.png", help="write a chart of the report (matplotlib)")
    hp.add_argument(
        "--delete-ratio-threshold", type=float, default=0.3, help="advise a rewrite from here"
    )
    hp.add_argument(
        "--delete-file-threshold",
        type=int,
        default=5,
        help="advise a rewrite of data files with this many delete files applying",
    )
    ch = sub.add_parser(
        "changes",
        parents=[DEBUG, CATALOG, FILES, SPARK, SETTINGS],
        help="the changes since a checkpoint, each commit once: write them, then move it",
    )
    ch.add_argument("table", help="ns.table, catalog.ns.table, or a table's path")
    ch.add_argument(
        "--checkpoint",
        required=True,
        metavar="FILE",
        help="where the last snapshot consumed is recorded (made on the first run)",
    )
    ch.add_argument(
        "--output",
        metavar="DIR",
        help="write the batch to DIR/batch-<id>.<format> (default: print it)",
    )
    ch.add_argument("--format", choices=["table", "csv", "json", "parquet"], default=None)
    ch.add_argument("--max-commits", type=int, metavar="N", help="at most N commits a run")
    ch.add_argument(
        "--start-snapshot",
        type=int,
        metavar="ID",
        help="a new checkpoint starts after this snapshot (default: the first commit); "
        "ignored once the checkpoint exists",
    )


def _maintenance_commands(sub: Any) -> None:
    """convert-equality-deletes, compact: they commit through the catalog."""
    cv = sub.add_parser(
        "convert-equality-deletes",
        parents=[DEBUG, CATALOG, SPARK, SETTINGS],
        help="write the rows equality deletes remove as position deletes and remove the "
        "equality delete files no data file needs, in one atomic commit",
    )
    cv.add_argument("table", help="ns.table in the catalog (the commit goes through it)")
    cv.add_argument("--where", metavar="SQL", help="only the data files of the partitions it keeps")
    cv.add_argument("--branch", default="main", help="the branch to convert (default main)")
    cv.add_argument(
        "--dry-run", action="store_true", help="report what would be read, written and removed"
    )
    cv.add_argument("--format", choices=["table", "json"], default="table")
    cp = sub.add_parser(
        "compact",
        parents=[DEBUG, CATALOG, SPARK, SETTINGS],
        help="rewrite data files that deletes weigh on or whose size is off the target, "
        "every delete applied, in one atomic commit",
    )
    cp.add_argument("table", help="ns.table in the catalog (the commit goes through it)")
    cp.add_argument("--where", metavar="SQL", help="only the data files of the partitions it keeps")
    cp.add_argument("--branch", default="main", help="the branch to compact (default main)")
    cp.add_argument(
        "--target-file-size",
        type=int,
        metavar="BYTES",
        help="size of the files written (default: the table's write.target-file-size-bytes, "
        "else 512 MiB); files under 75%% or over 180%% of it are rewritten",
    )
    cp.add_argument(
        "--delete-ratio-threshold",
        type=float,
        default=0.3,
        metavar="R",
        help="rewrite a data file when file-scoped position deletes remove this share of its "
        "rows or more (default 0.3, as Iceberg's rewrite_data_files)",
    )
    cp.add_argument(
        "--delete-file-threshold",
        type=int,
        metavar="N",
        help="rewrite a data file when N or more delete files apply to it (1: every data file "
        "any delete applies to, equality deletes included)",
    )
    cp.add_argument(
        "--min-input-files",
        type=int,
        default=5,
        metavar="N",
        help="rewrite a partition's small files when there are N or more (default 5)",
    )
    cp.add_argument(
        "--dry-run", action="store_true", help="report what would be read, written and removed"
    )
    cp.add_argument("--format", choices=["table", "json"], default="table")
    op = sub.add_parser(
        "orphans",
        parents=[DEBUG, CATALOG],
        help="list the files mor wrote into a table that no snapshot references (what a "
        "killed write command leaves); --delete removes them",
    )
    op.add_argument("table", help="ns.table in the catalog")
    op.add_argument(
        "--delete",
        action="store_true",
        help="delete those older than --older-than (never a file mor did not write)",
    )
    op.add_argument(
        "--older-than",
        type=float,
        default=72.0,
        metavar="HOURS",
        help="only files written this many hours ago or more are deleted (default 72: a "
        "write command running now has files no snapshot references yet)",
    )
    op.add_argument("--format", choices=["table", "json"], default="table")


def _statements(args: argparse.Namespace, text: str | None = None) -> list[StatementExecution]:
    """One execution per statement of the command's SQL (`text`: as `_sql_text` read it),
    each with the command's options; a statement mor does not run is refused before any
    runs."""
    from mor.planner.sql import split_statements
    from mor.statements import StatementExecution

    stmts = split_statements(_sql_text(args) if text is None else text)
    if not stmts:
        raise SqlSyntaxError("empty statement: the input holds no SQL")
    cat = _catalog(args)
    names = _names(args)
    return [
        StatementExecution(
            s,
            catalog=cat,
            path_map=path_map(args),
            io_properties=file_io(args),
            warehouse=args.warehouse,
            branch=getattr(args, "branch", "main"),
            dry_run=getattr(args, "dry_run", False),
            progress=progress.note,
            names=names,
        )
        for s in stmts
    ]


def _names(args: argparse.Namespace) -> Any:
    """What Spark's session will hold under a statement's names: a Spark Connect server's
    session is asked (made when a name needs it); a session the command starts holds none
    but the catalogs its configuration names (physical/spark/names.py)."""
    from mor.planning import Names

    if remote_url(args):
        from mor.physical.spark.names import LazyNames

        return Names(spark=LazyNames(lambda: spark_session(args)))
    return None


def _run_in_turn(args: argparse.Namespace, runs: list[StatementExecution]) -> int:
    """`mor run` of statements among which commands (writes, DDL, SHOW, EXPLAIN, Spark's
    own): every statement is checked first (its SQL, tables, columns, types, a write's
    clauses: `StatementExecution.check`, against the catalog as the statements before it
    leave it), and an error in any runs none; then each runs in turn (a query sees what the
    statements before it committed); a command prints one line of what it did (a JSON
    object with --format json), an EXPLAIN its plan, a query and SHOW/DESCRIBE their rows.
    A failure only running finds (a conflict, a store error, an interrupt) stops the script
    there, and its line names the statements that committed before it."""
    from mor import interrupts
    from mor.planner.nodes import line_col
    from mor.planner.pending import Pending

    if args.format == "parquet" or args.output:
        raise UsageError(
            "--output and --format parquet write query results: run statements that change "
            "tables, and EXPLAIN, apart"
        )
    on_s3 = any(_writes_on_s3(args, r) for r in runs if not r.is_query)
    sessions: list[Any] = []

    def session() -> Any:
        if not sessions:
            progress.note("starting Spark ...")
            sessions.append(spark_session(args, s3a=on_s3))
        return sessions[0]

    for r in runs:
        r.spark = session
    if len(runs) > 1:
        progress.note(f"checking {len(runs)} statements ...")
        pending = Pending()
        for r in runs:
            r.check(pending)
    committed: list[str] = []
    try:
        for i, r in enumerate(runs, start=1):
            out = r.run()
            progress.clear()
            if out.snapshot is not None and not r.dry_run:
                line = line_col(r.source.source, r.source.offset)[0]
                committed.append(
                    f"statement {i} ({out.kind} at line {line}, snapshot {out.snapshot})"
                )
            if r.is_explain:
                sys.stdout.write(out.line)
            elif out.df is not None:
                df = out.df if args.limit is None else out.df.limit(args.limit)
                plan = r.query.plan if r.is_query else None
                with progress.spark_stages(session(), f"statement {i}/{len(runs)}"):
                    cols, rows = run_spark(lambda df=df: (df.columns, df.collect()), plan)
                sys.stdout.write(format_rows(cols, rows, args.format))
            elif out.rows is not None:
                sys.stdout.write(format_rows(out.columns or [], out.rows, args.format))
            else:
                text = json.dumps(out.report, default=str) if args.format == "json" else out.line
                sys.stdout.write(text + "\n")
            sys.stdout.flush()
    except (MorError, KeyboardInterrupt) as e:
        if not committed:
            raise
        before = "; committed before it: " + ", ".join(committed)
        if isinstance(e, KeyboardInterrupt) or interrupts.interrupted():
            detail = interrupts.detail_of(e)
            raise interrupts.Interrupted((detail or "the script stopped") + before) from e
        e.args = (f"{e}{before}",)
        raise
    return 0


def _writes_on_s3(args: argparse.Namespace, run: StatementExecution) -> bool:
    """Whether a statement writes a table on S3 (its session needs Hadoop's s3a connector):
    a row-level write's or an INSERT's table, a new table of a catalog whose warehouse is on
    S3."""
    from mor.catalogs import resolve_catalog
    from mor.planner.row_writes import parse_row_write
    from mor.planner.statement_plans import CreateTable, InsertRows

    plan = run.plan
    try:
        cat = resolve_catalog(args.catalog, args.warehouse)
    except MorError:
        return False  # no catalog yet: an embedded one is made locally
    if run.is_write:
        rw = parse_row_write(run.statement, run.branch, cat.table_exists)
        return _table_on_s3(args, rw.name, cat)
    if isinstance(plan, InsertRows):
        try:
            return _table_on_s3(args, plan.target.name, cat)
        except MorError:
            return False  # created by an earlier statement: its catalog's warehouse says
    if isinstance(plan, (InsertRows, CreateTable)):
        where = plan.location or str(cat.properties.get("warehouse", ""))
        return where.startswith(("s3://", "s3a://", "s3n://"))
    return False


def _sql_text(args: argparse.Namespace) -> str:
    if args.sql is not None and args.file is not None:
        raise UsageError("give either a .sql file or -e SQL, not both")
    if args.sql is not None:
        text = args.sql
    elif args.file is not None:
        if not os.path.isfile(args.file):
            raise UsageError(f"no such SQL file: {args.file}")
        with open(args.file, encoding="utf-8") as f:
            text = f.read()
    else:
        raise UsageError("give a .sql file or -e SQL")
    return text


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    def v(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    return (
        f"mor {v('mor')} (pyspark {v('pyspark')}, pyiceberg {v('pyiceberg')}, "
        f"sqlglot {v('sqlglot')})"
    )


def _table_on_s3(args: argparse.Namespace, table: str, catalog: Any = None) -> bool:
    """The table's files are read through s3a (its location, after the path map)."""
    from mor.api import effective_path_map, resolve_catalog
    from mor.planner.sources import PathMap, Resolver

    resolver = Resolver(
        catalog if catalog is not None else lambda: resolve_catalog(args.catalog, args.warehouse),
        PathMap.of(effective_path_map(path_map(args))),
        file_io(args),
    )
    src = resolver.by_text(table)
    return src.read_path(src.metadata.location).startswith("s3a://")


def _catalog(args: argparse.Namespace) -> Any:
    """A named catalog is loaded now (an unknown name fails at once); the embedded one only
    when a statement names a table (a query of iceberg_scan(...) alone needs none)."""
    from mor.api import resolve_catalog

    return resolve_catalog(args.catalog, args.warehouse) if args.catalog else None


@contextmanager
def _named_file(args: argparse.Namespace) -> Iterator[None]:
    """An error in a .sql file's statements names the file (its line and column are in it)."""
    try:
        yield
    except MorError as e:
        if getattr(args, "file", None) and not str(e).startswith(f"{args.file}: "):
            e.args = (f"{args.file}: {e}",)
        raise


def cmd_explain(args: argparse.Namespace) -> int:
    with _named_file(args):
        return _explain(args)


def _explain(args: argparse.Namespace) -> int:
    runs = _statements(args)
    if args.analyze or not args.no_check:
        # one session for every statement, with s3a when ANALYZE's counts read s3a:// paths
        s3a = args.analyze and any(r.query.reads_s3a for r in runs)
        spark = spark_session(args, s3a=s3a)
        for r in runs:
            r.spark = spark
    if not args.no_check:
        # a statement other than a query or a row-level write (DDL, INSERT, SHOW, ...)
        # checked as `mor run` checks it (an INSERT's columns and types too), against the
        # catalog as the statements before it leave it
        from mor.planner.pending import Pending
        from mor.planner.statement_plans import Query, RowLevelWrite

        pending = Pending()
        for r in runs:
            if not isinstance(r.inner, (Query, RowLevelWrite)):
                r.check(pending)
    texts = [
        r.explain(
            verbose=args.verbose,
            physical=args.physical,
            analyze=args.analyze,
            check=not args.no_check,
        )
        for r in runs
    ]
    sys.stdout.write("\n".join(texts))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    with _named_file(args):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    text = _sql_text(args)
    if args.format == "parquet" and not args.output:
        raise UsageError("--format parquet needs --output PATH")
    if args.limit is not None and args.limit < 0:
        raise UsageError(f"--limit needs a number of rows, 0 or more, not {args.limit}")
    # Spark starts while the statements are parsed and planned, when the plan cannot change
    # the session: the JVM's start takes seconds, parsing and planning a fraction of one
    early = EarlySession(args) if EarlySession.wanted(args, text) else None
    statements = _statements(args, text)
    if not all(r.is_query for r in statements):
        return _run_in_turn(args, statements)
    targets = _targets(args, len(statements))  # checked before any query runs
    runs = [r.query for r in statements]
    progress.note("planning ...")
    for r in runs:  # all planned before any output
        r.planned  # noqa: B018
    progress.note("starting Spark ...")
    s3a = any(r.reads_s3a for r in runs)
    spark = early.session(s3a) if early is not None else spark_session(args, s3a=s3a)
    progress.clear()
    for r in runs:
        r.use(spark)
    if args.format == "parquet":
        results = []
        for r in runs:
            df = r.dataframe
            results.append((df.limit(args.limit) if args.limit is not None else df, r.plan))
        for (df, plan), out in zip(results, targets):
            with progress.spark_stages(spark, f"writing {out}"):
                replace_atomically(
                    out,
                    args.overwrite,
                    lambda tmp, df=df, plan=plan: run_spark(lambda: df.write.parquet(tmp), plan),
                )
        return 0
    if len(runs) > 1:  # every statement checked by Spark before the first one runs
        for r in runs:
            r.dataframe  # noqa: B018
    collected = []
    for i, r in enumerate(runs, start=1):
        with progress.spark_stages(spark, f"statement {i}/{len(runs)}"):
            collected.append(run_spark(lambda r=r: r.rows(args.limit), r.plan))
    texts = [format_rows(cols, rows, args.format) for cols, rows in collected]
    if args.output:  # one file per statement (PATH.N when there are several)
        for text, out in zip(texts, targets):
            replace_atomically(out, args.overwrite, lambda tmp, text=text: write_text(tmp, text))
    else:
        # tables are separated by a blank line; CSV and JSON Lines follow each other directly
        sys.stdout.write(("\n" if args.format == "table" else "").join(texts))
    return 0


def _targets(args: argparse.Namespace, n: int) -> list[str]:
    """Where results go, checked before any query runs: the folder must exist, and an existing
    file or non-empty folder is replaced only with --overwrite (never emptied unasked)."""
    if not args.output:
        return []
    outs = [args.output] if n == 1 else [f"{args.output}.{i}" for i in range(n)]
    for out in outs:
        parent = os.path.dirname(os.path.abspath(out))
        if not os.path.isdir(parent):
            raise UsageError(f"--output {out}: the folder {parent} does not exist")
        if not os.access(parent, os.W_OK):
            raise UsageError(f"--output {out}: the folder {parent} is not writable")
        taken = os.path.isfile(out) or (os.path.isdir(out) and bool(os.listdir(out)))
        if taken and not args.overwrite:
            raise UsageError(
                f"--output {out} already exists and is not empty: give --overwrite to replace it"
            )
        if os.path.isdir(out) and args.format != "parquet":
            raise UsageError(f"--output {out} is a folder: {args.format} output is one file")
    return outs


def cmd_tables(args: argparse.Namespace) -> int:
    from mor.api import resolve_catalog
    from mor.catalog_info import list_tables

    names = list_tables(resolve_catalog(args.catalog, args.warehouse), args.namespace)
    sys.stdout.write("".join(f"{n}\n" for n in names))
    return 0


def cmd_describe(args: argparse.Namespace) -> int:
    from mor.api import effective_path_map, resolve_catalog
    from mor.catalog_info import describe
    from mor.planner.sources import PathMap, Resolver

    catalog = args.catalog
    resolver = Resolver(
        lambda: resolve_catalog(catalog, args.warehouse),
        PathMap.of(effective_path_map(path_map(args))),
        file_io(args),
    )
    sys.stdout.write(describe(resolver.by_text(args.table)))
    return 0


def _maintenance_report(args: argparse.Namespace, report: Any, unit: str) -> int:
    """What a maintenance command wrote and removed (`unit`: what a written file holds), then
    its summary line; or the report as one JSON object."""
    import json

    progress.clear()
    if args.format == "json":
        sys.stdout.write(json.dumps(report.as_dict(), indent=1) + "\n")
        return 0
    for f in report.written if not args.dry_run else ():
        of = f" for {f.data_file}" if f.data_file else ""
        sys.stdout.write(f"added   {f.path} ({f.rows} {unit}, {f.bytes} bytes){of}\n")
    verb = "would remove" if args.dry_run else "removed"
    for f in report.removed:  # a deletion vector: one blob of its Puffin file, for a data file
        of = f" for {f.data_file}" if f.data_file else ""
        sys.stdout.write(f"{verb} {f.path} ({f.rows} rows, {f.bytes} bytes){of}\n")
    for f in getattr(report, "merged", ()):  # v3 conversion: held by the new vector now
        sys.stdout.write(f"{verb} {f.path} ({f.rows} rows, {f.bytes} bytes), merged\n")
    sys.stdout.write(report.line() + "\n")
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
    from mor.maintenance import convert_equality_deletes

    report = convert_equality_deletes(
        args.table,
        catalog=args.catalog,
        warehouse=args.warehouse,
        where=args.where,
        branch=args.branch,
        dry_run=args.dry_run,
        spark=lambda: spark_session(args, s3a=_table_on_s3(args, args.table)),
        progress=progress.note,
    )
    return _maintenance_report(args, report, "positions")


def cmd_orphans(args: argparse.Namespace) -> int:
    import json

    from mor.orphans import orphan_files

    report = orphan_files(
        args.table,
        catalog=args.catalog,
        warehouse=args.warehouse,
        older_than_hours=args.older_than,
        delete=args.delete,
    )
    if args.format == "json":
        sys.stdout.write(json.dumps(report.as_dict(), indent=1) + "\n")
        return 1 if report.left else 0
    removed = set(report.removed)
    for o in report.orphans:
        what = "removed" if o.path in removed else "orphan "
        sys.stdout.write(f"{what} {o.path} ({o.bytes} bytes, written {o.hours:.1f} h ago)\n")
    sys.stdout.write(report.line() + "\n")
    return 1 if report.left else 0


def cmd_compact(args: argparse.Namespace) -> int:
    from mor.maintenance import compact

    report = compact(
        args.table,
        catalog=args.catalog,
        warehouse=args.warehouse,
        where=args.where,
        branch=args.branch,
        target_file_size=args.target_file_size,
        delete_ratio_threshold=args.delete_ratio_threshold,
        delete_file_threshold=args.delete_file_threshold,
        min_input_files=args.min_input_files,
        dry_run=args.dry_run,
        spark=lambda: spark_session(args, s3a=_table_on_s3(args, args.table)),
        progress=progress.note,
    )
    return _maintenance_report(args, report, "rows")


def cmd_health(args: argparse.Namespace) -> int:
    from mor.api import health
    from mor.health_advice import Thresholds
    from mor.health_report import plot, render_table

    if not 0 < args.delete_ratio_threshold <= 1:
        raise UsageError("--delete-ratio-threshold must be in (0, 1]")
    if args.delete_file_threshold < 1:
        raise UsageError("--delete-file-threshold must be 1 or more")
    report = health(
        args.table,
        catalog=args.catalog,
        warehouse=args.warehouse,
        path_map=path_map(args),
        io_properties=file_io(args),
        snapshot_id=args.snapshot,
        exact=args.exact,
        spark=spark_session(args, s3a=_table_on_s3(args, args.table)) if args.exact else None,
        thresholds=Thresholds(
            delete_ratio=args.delete_ratio_threshold, delete_files=args.delete_file_threshold
        ),
        orphans=args.orphans,
    )
    if args.plot:
        plot(report, args.plot)
    if args.format == "json":
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        sys.stdout.write(render_table(report))
        if args.plot:
            sys.stdout.write(f"chart        {args.plot}\n")
    return 0


def cmd_changes(args: argparse.Namespace) -> int:
    """One batch: the commits after the checkpoint's snapshot (at most --max-commits), written
    whole (to --output, under a temporary name renamed into place, or printed), and only then
    the checkpoint moved. A run killed before that leaves the batch pending: the next run
    delivers the very same batch (same id, same commits), replacing its file."""
    from mor.api import resolve_catalog
    from mor.consume import next_pending, stream_changes
    from mor.planner.sources import is_table_path

    fmt = args.format or ("parquet" if args.output else "table")
    if fmt == "parquet" and not args.output:
        raise UsageError("--format parquet needs --output DIR")
    if args.output and fmt == "table":
        raise UsageError("--output needs --format parquet, csv or json")
    if args.max_commits is not None and args.max_commits < 1:
        raise UsageError(f"--max-commits needs 1 or more, not {args.max_commits}")
    if args.output:
        out_dir = os.path.abspath(args.output)
        parent = os.path.dirname(out_dir)
        if not os.path.isdir(parent):
            raise UsageError(f"--output {args.output}: the folder {parent} does not exist")
        if os.path.exists(out_dir) and not os.path.isdir(out_dir):
            raise UsageError(f"--output {args.output} is a file: batches go into a folder")
    cat = _catalog(args)
    opts = dict(catalog=cat, path_map=path_map(args), io_properties=file_io(args))
    if cat is None and not is_table_path(args.table):
        opts["catalog"] = resolve_catalog(None, args.warehouse)
    checkpoint = os.path.abspath(args.checkpoint)
    _, _, ahead = next_pending(args.table, checkpoint, opts, args.max_commits, args.start_snapshot)
    if ahead is None:  # known from metadata alone: no Spark started
        print("mor: no new commits since the checkpoint", file=sys.stderr)
        return 0
    progress.note("starting Spark ...")
    spark = spark_session(args, s3a=_table_on_s3(args, args.table, opts["catalog"]))
    progress.clear()
    batches = stream_changes(
        args.table,
        checkpoint,
        catalog=opts["catalog"],
        warehouse=args.warehouse,
        spark=spark,
        max_commits=args.max_commits,
        start_snapshot_id=args.start_snapshot,
        path_map=opts["path_map"],
        io_properties=opts["io_properties"],
    )
    batch = next(iter(batches), None)
    if batch is None:
        print("mor: no new commits since the checkpoint", file=sys.stderr)
        return 0
    df, n = batch.df, len(batch.commits)
    what = (
        f"batch {batch.batch_id}: {n} commit{'' if n == 1 else 's'} after "
        + (f"snapshot {batch.start_snapshot_id}" if batch.start_snapshot_id else "the start")
        + f" up to snapshot {batch.end_snapshot_id}"
        + (" (delivered again: an earlier run did not finish it)" if batch.redelivered else "")
    )
    out = None
    if args.output:
        os.makedirs(out_dir, exist_ok=True)
        out = os.path.join(out_dir, f"batch-{batch.batch_id:06d}.{fmt}")
        _remove_leftovers(out)
    rows = ""
    if fmt == "parquet":
        with progress.spark_stages(spark, f"writing {out}"):
            replace_atomically(out, True, lambda tmp: run_spark(lambda: df.write.parquet(tmp)))
    else:
        with progress.spark_stages(spark, what):
            cols, got = run_spark(lambda: (df.columns, df.collect()))
        text = format_rows(cols, got, fmt)
        if out is not None:
            replace_atomically(out, True, lambda tmp: write_text(tmp, text))
        else:
            sys.stdout.write(text)
            sys.stdout.flush()
        rows = f", {len(got)} row{'' if len(got) == 1 else 's'}"
    from mor import interrupts

    with interrupts.held(lambda: f"the checkpoint moved past batch {batch.batch_id}"):
        batch.commit()
    print(f"mor: {what}{rows}" + (f" -> {out}" if out else ""), file=sys.stderr)
    return 0


def _remove_leftovers(out: str) -> None:
    """What a killed run left of this batch under temporary names (_replace_atomically's)."""
    import glob
    import shutil

    folder, name = os.path.split(out)
    for tmp in glob.glob(os.path.join(glob.escape(folder), f".{glob.escape(name)}.mor-*")):
        shutil.rmtree(tmp, ignore_errors=True) if os.path.isdir(tmp) else os.remove(tmp)


def _shown(value: object) -> str:
    """A setting's value as it is written in a config file or `--set`."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def cmd_config(args: argparse.Namespace) -> int:
    """The config file and the settings in effect, each with where it comes from."""
    from mor.planner.errors import shown
    from mor.planner.settings import (
        current,
        declared,
        default_catalog_name,
        user_config,
        warehouse_and_source,
    )

    cfg = user_config()
    where = "" if cfg.exists else " (not found: defaults apply)"
    wh, wh_from = warehouse_and_source(args.warehouse)
    has_db = os.path.exists(os.path.join(wh, "catalog.db"))
    named = default_catalog_name(args.warehouse)
    catalog = (
        f"{named} (config file; pyiceberg's configuration)"
        if named
        else "embedded (SQLite in the warehouse)"
    )
    rows = [
        ("config file", cfg.path + where),
        ("warehouse", f"{wh} ({wh_from}; catalog.db {'present' if has_db else 'missing'})"),
        ("catalog", catalog),
    ]
    settings = current()
    width = max(len(s.name) for s in declared())
    rows += [
        (s.name.ljust(width), f"{_shown(getattr(settings, s.name))} ({settings.source(s.name)})")
        for s in declared()
    ]
    rows += [("spark", f"{k} = {shown(k, v)} (config file)") for k, v in sorted(cfg.spark.items())]
    rows.append(("s3a", _s3a_line(cfg.spark)))
    rows += [("path-map", f"{k} = {v} (config file)") for k, v in sorted(cfg.path_map.items())]
    from mor.api import cache_figures

    rows += [
        ("cache", f"{f.name} (bound: {f.bound}; weighed in {f.unit}): {f.holds}")
        for f in cache_figures()
    ]
    from mor.planner import manifest_store

    disk = manifest_store.folder()
    if disk is None:
        kept = "off" if settings.manifest_disk_cache_mb <= 0 else "not used (folder not private)"
    else:
        n, size = manifest_store.held()
        kept = f"{disk}: {n} manifests, {size / 2**20:.1f} MiB"
    rows.append(
        ("cache", f"manifests on disk (bound: manifest_disk_cache_mb), for later processes: {kept}")
    )
    from mor.options import connect_client
    from mor.server import running

    state = running()
    line = state.line() if state else "mor server: not running"
    if state and not connect_client():
        line += " (not used from here: this Python's pyspark cannot be its client)"
    rows.append(("server", line))
    from mor.planner.sources import io_defaults

    rows += [
        (
            "file-io",
            f"{k} = {shown(k, v)} ({'config file' if k in cfg.file_io else 'environment'})",
        )
        for k, v in sorted(io_defaults().items())
    ]
    sys.stdout.write("".join(f"{k:<12} {v}\n" for k, v in rows))
    return 0


def _s3a_line(spark_conf: dict[str, str]) -> str:
    """What a session mor starts gets when a query reads s3a:// paths."""
    from mor.physical.spark.s3a import s3a_for, what_starts_get

    return what_starts_get(s3a_for(spark_conf), "for s3a:// paths")


def cmd_server(args: argparse.Namespace) -> int:
    from mor import server

    if args.action == "start":
        from mor.demo import warm_plans
        from mor.options import session_may_need_s3a

        state = server.start(
            port=args.port,
            master=args.master,
            conf=pairs(args.conf, "--conf"),
            s3a=args.s3a or session_may_need_s3a(args, ""),
            timeout=args.timeout,
            plans=warm_plans,
        )
        sys.stdout.write(
            f"{state.line()}\ncommands without --master or --remote use it until "
            "`mor server stop`\n"
        )
        return 0
    if args.action == "status":
        state = server.running()
        if args.format == "json":
            sys.stdout.write(json.dumps(server.status_fields(state)) + "\n")
        else:
            sys.stdout.write((state.line() if state else "mor server: not running") + "\n")
        return 0 if state is not None else 3
    state = server.stop()
    sys.stdout.write(
        f"mor server: stopped (pid {state.pid})\n" if state else "mor server: not running\n"
    )
    return 0


def cmd_shell(args: argparse.Namespace) -> int:
    from mor.shell import run_shell

    return run_shell(args)


def cmd_demo(args: argparse.Namespace) -> int:
    from mor.demo import run_demo

    return run_demo(args.warehouse)


def main(argv: list[str] | None = None) -> int:
    """The command line (`argv`: the arguments; None: this process's, as the `mor` command,
    which then ends at once after an interrupt's line)."""
    from mor import interrupts

    before = interrupts.install()  # first: Ctrl-C from here on is one line and exit 130
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    try:
        code = _main(args, debug)
    except BaseException as e:  # noqa: BLE001 - each kind becomes one line and an exit code
        code = _failed(e, debug, console=argv is None)
    finally:
        if argv is not None:  # called in-process: the caller's handlers back
            interrupts.uninstall(before)
    if argv is None:
        _leave(code)
    return code


def _leave(code: int) -> None:
    """The `mor` command ends here once its output is out: the exit handlers run (the JVM's
    log removed, logging flushed), then the process ends without Python tearing down every
    module one by one, which took 0.3 s after a query (grpc's, pyspark's and pyarrow's
    objects; bench/start.py). Nothing of mor's is left to finish then: a command returns
    after its commits and its writes."""
    import atexit

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`mor run ... | head`)
            pass
    atexit._run_exitfuncs()
    os._exit(code)


def _main(argv: list[str], debug: bool) -> int:
    if not debug:
        # pyspark 4 logs each failed query to stderr as JSON ("SQLQueryContextLogger") before
        # raising it: the CLI reports the error itself, in one line
        import logging

        logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
        # pyiceberg warns on stderr about what mor reports itself or works around (a bucket's
        # region it could not resolve, ...): the CLI's stderr is one line per error
        logging.getLogger("pyiceberg").setLevel(logging.ERROR)
        # py4j logs a call an interrupt broke, with its traceback (on its own logger, or the
        # root one): after an interrupt the one line is mor's
        from mor import interrupts

        for name in ("py4j", ""):
            if interrupts.quiet_after not in logging.getLogger(name).filters:
                logging.getLogger(name).addFilter(interrupts.quiet_after)
    try:
        args = _parser().parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    commands = {
        "run": cmd_run,
        "explain": cmd_explain,
        "tables": cmd_tables,
        "describe": cmd_describe,
        "health": cmd_health,
        "convert-equality-deletes": cmd_convert,
        "compact": cmd_compact,
        "orphans": cmd_orphans,
        "procedure": cmd_procedure,
        "changes": cmd_changes,
        "shell": cmd_shell,
        "server": cmd_server,
        "config": cmd_config,
        "demo": cmd_demo,
    }
    from mor.options import release_sessions
    from mor.planner.settings import applied

    with applied(pairs(getattr(args, "set", []), "--set", "NAME=VALUE"), "--set"):
        try:
            return commands[args.cmd](args)
        finally:
            release_sessions()


def _reader_gone() -> bool:
    """stdout is a pipe whose reading end is closed."""
    import select

    try:
        poll = select.poll()
        poll.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in poll.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


def _failed(e: BaseException, debug: bool, console: bool) -> int:
    """The one line a failed or interrupted command ends with, and its exit code. An
    interrupt is reported whatever error it became on its way up (a py4j call it broke, a
    cancelled Spark job), and a console run then ends at once: nothing is printed after
    the line (pyspark's and py4j's shutdown would)."""
    from mor import interrupts

    if isinstance(e, SystemExit):
        raise e
    if isinstance(e, BrokenPipeError) and _reader_gone():
        # `mor run ... | head`: the reader took what it wanted; no traceback, as when the
        # pipe closes at the last flush (_leave)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    if isinstance(e, KeyboardInterrupt) or interrupts.interrupted():
        if debug:
            traceback.print_exception(e)
        progress.clear()
        print(interrupts.line(e), file=sys.stderr)
        if console:
            sys.stdout.flush()
            sys.stderr.flush()
            interrupts.stop_children()
            os._exit(130)
        return 130
    if not isinstance(e, (UsageError, MorError)):
        raise e
    if debug:
        traceback.print_exception(e)
    print(f"mor: {e}", file=sys.stderr)
    return 2 if isinstance(e, UsageError) else e.exit_code


if __name__ == "__main__":
    sys.exit(main())
