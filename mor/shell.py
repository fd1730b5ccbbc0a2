"""`mor shell`: statements typed at a prompt, one Spark session kept warm between them.

A statement ends with `;` (it may span lines; a `;` inside a string or comment does not count).
Queries, DELETE, UPDATE and MERGE run as `mor run` runs them (mor/statements.py), with the
shell's options (catalog, path map, FileIO properties, branch, dry run);
`EXPLAIN [VERBOSE|PHYSICAL|ANALYZE] <statement>;` prints mor's plan. Dot commands, alone on a line:
`.tables [NAMESPACE]`, `.schema TABLE`, `.caches [clear]`, `.help`, `.quit`. Errors are one
line; the shell goes on.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

from mor.planner.errors import MorError

HELP = """\
Statements end with ';' and may span lines.
  SELECT ...;                          run a query (at most 1000 rows are shown)
  DELETE FROM ... / UPDATE ... / MERGE INTO ...;   commit a row-level write (--branch,
                                       --dry-run as the shell was started with)
  EXPLAIN [VERBOSE|PHYSICAL|ANALYZE] <statement>;  mor's plan of a statement
  .tables [NAMESPACE]                  the catalog's tables
  .schema TABLE                        a table's schema, partitioning, snapshots
  .caches [clear]                      what this session keeps between queries (or forget it)
  .help                                this text
  .quit                                leave (or Ctrl-D)
"""
SHOWN_ROWS = 1000


def complete(buffer: str) -> tuple[str, str]:
    """(the complete statements of `buffer`, up to its last top-level `;`, and the rest)."""
    import sqlglot
    from sqlglot.errors import TokenError
    from sqlglot.tokens import TokenType

    try:
        tokens = sqlglot.Dialect.get_or_raise("spark").tokenize(buffer)
    except TokenError:
        return "", buffer  # an unterminated string or comment: read on
    ends = [t.end for t in tokens if t.token_type == TokenType.SEMICOLON]
    if not ends:
        return "", buffer
    return buffer[: ends[-1] + 1], buffer[ends[-1] + 1 :]


class Shell:
    def __init__(self, args: Any, out: Callable[[str], Any], err: Callable[[str], Any]) -> None:
        self.args = args
        self.out = out
        self.err = err
        self._spark: Any = None

    def spark(self, plan: Any = None) -> Any:
        """The shell's session, started for the first query that needs one: with Hadoop's
        s3a connector when that query's tables are on S3 (a later query reading s3a:// paths
        from a session started without it is refused, naming what to add)."""
        from mor.options import spark_session
        from mor.physical.spark.s3a import reads_s3a

        s3a = plan is not None and reads_s3a(plan, counts=True)
        if self._spark is None:
            from mor import interrupts

            # Ctrl-C while the session starts waits for it: a start broken half-way leaves
            # pyspark unable to start another, and the shell runs on
            with interrupts.held():
                self._spark = spark_session(self.args, s3a=s3a)
        elif s3a:
            from mor.physical.spark.session import check_s3a

            check_s3a(self._spark)
        return self._spark

    def names(self) -> Any:
        """What Spark holds under a statement's names: the shell's session once started (the
        views its statements created), a Spark Connect server's (asked when a name needs it),
        else the session the shell will start (nothing but its configured catalogs)."""
        from mor.options import remote_url
        from mor.physical.spark.names import LazyNames, SessionNames, own_session_names
        from mor.planning import Names

        if self._spark is not None:
            return Names(spark=SessionNames(self._spark))
        if remote_url(self.args):
            return Names(spark=LazyNames(lambda: self.spark(None)))
        return Names(spark=own_session_names())

    def run(self, lines: Iterator[str]) -> int:
        buffer = ""
        for line in lines:
            if not buffer.strip():
                buffer = ""  # a new statement: its lines count from here
                if line.strip().startswith("."):
                    if not self.dot(line.strip()):
                        return 0
                    continue
            buffer += line + "\n"
            done, buffer = complete(buffer)
            if done.strip():
                self.statements(done)
        if buffer.strip():
            self.statements(buffer)  # the last statement may omit its ';'
        return 0

    def dot(self, line: str) -> bool:
        """Runs a dot command; False to leave the shell."""
        from mor.catalog_info import describe, list_tables

        cmd, _, rest = line.partition(" ")
        rest = rest.strip()
        try:
            if cmd in (".quit", ".exit"):
                return False
            if cmd == ".help":
                self.out(HELP)
            elif cmd == ".tables":
                self.out("".join(f"{n}\n" for n in list_tables(self.catalog(), rest or None)))
            elif cmd == ".schema" and rest:
                self.out(describe(self.resolver().by_name(tuple(rest.split(".")))))
            elif cmd == ".caches" and rest in ("", "clear"):
                from mor.api import cache_figures, clear_caches

                if rest == "clear":
                    clear_caches()
                self.out("".join(f"{f.line()}\n" for f in cache_figures()))
            else:
                self.err(f"mor: unknown command {line!r}: .help lists them\n")
        except MorError as e:
            self.err(f"mor: {e}\n")
        return True

    def catalog(self) -> Any:
        from mor.catalogs import resolve_catalog

        return resolve_catalog(self.args.catalog, self.args.warehouse)

    def resolver(self) -> Any:
        from mor.options import file_io, path_map
        from mor.planner.settings import effective_path_map
        from mor.planner.sources import PathMap, Resolver

        pm = PathMap.of(effective_path_map(path_map(self.args)))
        return Resolver(self.catalog, pm, file_io(self.args))

    def statements(self, text: str) -> None:
        from mor.options import run_spark
        from mor.output import format_rows
        from mor.planner.sql import split_statements

        try:
            stmts = split_statements(text)
        except MorError as e:
            self.err(f"mor: {e}\n")
            return
        from mor import interrupts

        for stmt in stmts:
            try:
                self.out(self.one(stmt, format_rows, run_spark))
            except (MorError, KeyboardInterrupt) as e:
                if isinstance(e, KeyboardInterrupt) or interrupts.interrupted():
                    if interrupts.terminating():
                        raise
                    # the statement's jobs are cancelled; the rest of the input is not run
                    self.err(interrupts.line(e) + "\n")
                    interrupts.reset()
                    return
                self.err(f"mor: {e}\n")

    def one(self, stmt: Any, fmt: Any, run_spark: Any) -> str:
        """One statement, run as `mor run` runs it, with the shell's options: a query's rows
        (at most SHOWN_ROWS), an EXPLAIN's plan, what a command did, SHOW's rows."""
        import json

        from mor.options import file_io, path_map
        from mor.statements import StatementExecution

        run = StatementExecution(
            stmt,
            catalog=self.args.catalog,
            warehouse=self.args.warehouse,
            path_map=path_map(self.args),
            io_properties=file_io(self.args),
            branch=getattr(self.args, "branch", "main"),
            dry_run=getattr(self.args, "dry_run", False),
            names=self.names(),
        )
        run.spark = lambda: self.spark(run.query.plan if run.is_query else None)
        out = run.run()
        if run.is_explain:
            return out.line
        if out.df is not None:
            df = out.df
            plan = run.query.plan if run.is_query else None
            cols, rows = run_spark(lambda: (df.columns, df.limit(SHOWN_ROWS + 1).collect()), plan)
            more = len(rows) > SHOWN_ROWS
            text = fmt(cols, rows[:SHOWN_ROWS], "table")
            return text + (f"(only the first {SHOWN_ROWS} rows are shown)\n" if more else "")
        if out.rows is not None:
            return fmt(out.columns or [], out.rows, "table")
        if getattr(self.args, "format", "table") == "json":
            return json.dumps(out.report, default=str) + "\n"
        return out.line + "\n"


def _prompt_lines() -> Iterator[str]:
    """Lines typed at a prompt, with history (~/.mor_history) when readline is there."""
    try:
        import readline
    except ImportError:  # pragma: no cover - not on every platform
        readline = None  # type: ignore[assignment]
    history = os.path.expanduser("~/.mor_history")
    if readline is not None and os.path.exists(history):
        readline.read_history_file(history)
    buffer_open = False
    try:
        while True:
            try:
                line = input("   ...> " if buffer_open else "mor> ")
            except EOFError:
                print()
                return
            except KeyboardInterrupt:
                from mor import interrupts

                if interrupts.terminating():
                    raise
                interrupts.reset()  # Ctrl-C at the prompt drops the line typed
                print()
                buffer_open = False
                continue
            dot = not buffer_open and line.strip().startswith(".")
            if line.strip() and not dot:
                buffer_open = not line.rstrip().endswith(";")
            yield line
    finally:
        if readline is not None:
            try:
                readline.write_history_file(history)
            except OSError:
                pass


def run_shell(args: Any) -> int:
    interactive = sys.stdin.isatty()
    if interactive:
        print("mor shell: statements end with ';'. .help for help, Ctrl-D to leave.")
    lines = _prompt_lines() if interactive else (ln.rstrip("\n") for ln in sys.stdin)
    shell = Shell(args, sys.stdout.write, sys.stderr.write)
    return shell.run(lines)
