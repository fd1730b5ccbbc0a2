"""Reading a set of files with Spark's Parquet reader, each row naming its file by a key.

A scan's data files, a scan's position delete files and an equality delete scan's files are
each read by `read_files`: one DataFrame of their rows, with the columns asked for, and on
request the file key (`$fkey`-like) and `_metadata.row_index`. How, is decided once per set of
files (rules/physical/reading.reading) from planning facts and the session (`session_facts`):

- **through a file list** (physical/scan/file_lists.py), the default: one Parquet read per layout
  of any number of files, no listing and no request per file; the key is the file's id in the
  plan, which the list gives Spark as the file's modification time;
- **by path**, when file lists cannot be used (setting `file_lists` off, a Spark Connect server
  that does not see the lists' folder, a session that ignores sink logs, a file named as Spark
  hides): groups of at most the session's listing threshold of paths (more would start a Spark
  job to list them), unioned; the key is `_metadata.file_size`, files of shared sizes told
  apart by the path Spark reports (rules/physical/reading.FileKey).

Each group's read is reused by later queries of a classic session (physical/spark/reuse.py).
"""

from __future__ import annotations

import contextvars
import threading
import weakref
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from mor.physical.scan import file_lists
from mor.physical.scan.classic import read_parquet, warm_credentials
from mor.physical.scan.files import first_line
from mor.physical.scan.paths import SparkPaths
from mor.physical.scan.tables import sql_literal
from mor.physical.spark.reuse import Fingerprint, reused
from mor.physical.spark.session import is_connect
from mor.physical.spark.store_access import StoreAccess
from mor.planner.errors import DataFileError
from mor.planner.nodes import DataTask, DeleteTask, Expr
from mor.planner.settings import current
from mor.planner.state import ProcessCaches, caches
from mor.rules.physical.broadcast import default_broadcast_bytes
from mor.rules.physical.reading import FileKey, Reading, SessionFacts, reading

LISTING = "spark.sql.sources.parallelPartitionDiscovery.threshold"
IGNORED = "spark.sql.streaming.fileStreamSink.metadata.ignored"
KEY = "key"  # a meta column: the file key
ROW_INDEX = "row_index"  # a meta column: _metadata.row_index
_FILE_ID = "unix_millis(_metadata.file_modification_time)"

File = DataTask | DeleteTask


def _conf(spark: SparkSession, key: str, default: str) -> str:
    try:
        value = spark.conf.get(key, default)
    except Exception:  # noqa: BLE001 - a session that hides a setting: Spark's default
        return default
    return default if value is None else str(value)


def _int_conf(spark: SparkSession, key: str, default: int) -> int:
    try:
        return max(int(_conf(spark, key, str(default)).strip().rstrip("bB") or default), 1)
    except ValueError:
        return default


def listing_threshold(spark: SparkSession) -> int:
    """The session's listing threshold: reads of more paths start a Spark listing job."""
    return _int_conf(spark, LISTING, 32)


def broadcast_limit(spark: SparkSession) -> int:
    """The most bytes a broadcast delete side may take (rules/physical/broadcast.py): the
    setting, else an eighth of the driver's memory within half its maxResultSize."""
    limit = current().broadcast_bytes
    if limit > 0:
        return limit
    memory = _conf(spark, "spark.driver.memory", "") or None
    result = _conf(spark, "spark.driver.maxResultSize", "") or None
    return default_broadcast_bytes(memory, result)


def session_facts(spark: SparkSession, packing: bool = False) -> SessionFacts:
    """What of `spark` decides how scans compile (asked once per query). `packing`: also
    Spark's split settings, which only EXPLAIN PHYSICAL prints (a round trip each)."""
    facts = SessionFacts(
        listing=listing_threshold(spark),
        broadcast_limit=broadcast_limit(spark),
        lists=lists_unusable(spark),
    )
    if not packing:
        return facts
    parallelism = (
        _conf(spark, "spark.sql.files.minPartitionNum", "")
        or _conf(spark, "spark.sql.leafNodeDefaultParallelism", "")
        or _conf(spark, "spark.default.parallelism", "")
    )
    if not parallelism and not is_connect(spark):
        parallelism = str(spark.sparkContext.defaultParallelism)
    return SessionFacts(
        listing=facts.listing,
        broadcast_limit=facts.broadcast_limit,
        lists=facts.lists,
        split_bytes=_size_conf(spark, "spark.sql.files.maxPartitionBytes", 128 << 20),
        open_cost=_size_conf(spark, "spark.sql.files.openCostInBytes", 4 << 20),
        min_partitions=int(parallelism) if parallelism.isdigit() else facts.min_partitions,
    )


def _size_conf(spark: SparkSession, key: str, default: int) -> int:
    from mor.rules.physical.broadcast import memory_bytes

    return memory_bytes(_conf(spark, key, str(default))) or default


# Spark Connect sessions whose server was asked whether it sees the lists' folder: the answer
_SEEN: weakref.WeakKeyDictionary[Any, tuple[str, str | None]] = weakref.WeakKeyDictionary()


def lists_unusable(spark: SparkSession) -> str | None:
    """Why file lists cannot be used with this session, or None when they can."""
    if not current().file_lists:
        return "setting file_lists is off"
    if _conf(spark, IGNORED, "false").strip().lower() == "true":
        return f"the session sets {IGNORED}"
    if not is_connect(spark):
        return None  # a classic session's driver is a JVM on this machine
    where = str(file_lists.root())
    seen = _SEEN.get(spark)
    if seen is not None and seen[0] == where:
        return seen[1]
    path, uri = file_lists.probe_file()
    try:
        spark.read.text(uri).schema  # noqa: B018 - the server resolves the path, or fails
        answer = None
    except Exception:  # noqa: BLE001 - PATH_NOT_FOUND: the server runs elsewhere
        answer = (
            f"the Spark Connect server does not see {where} (set file_list_dir to a folder "
            "its driver reads)"
        )
    finally:
        path.unlink(missing_ok=True)
    _SEEN[spark] = (where, answer)
    return answer


# classic sessions whose Parquet reader has run once in this process (`early_facts`)
_WARMED: weakref.WeakSet[Any] = weakref.WeakSet()


def _warm_up(spark: SparkSession) -> None:
    """On a classic session's first query through mor, one read of an empty file list: it
    loads what Spark's first Parquet read of a file list loads (the data source, the log's
    file index: 0.5-0.7 s of a JVM's first read). Reads no file of any table and writes
    nothing but the empty list (content-addressed: one folder whatever the session)."""
    if is_connect(spark) or spark in _WARMED:
        return
    _WARMED.add(spark)
    try:
        reader = spark.read.schema("mor_warm_up INT").option("recursiveFileLookup", "true")
        reader.parquet(file_lists.write(()))
    except Exception:  # noqa: BLE001 - only a warm-up: the query's own read says what fails
        pass


def early_facts(spark: SparkSession) -> Callable[[], SessionFacts]:
    """Start asking `spark` for the query's session facts on a thread of their own, under
    the settings in effect now, then warm its Parquet reader there (`_warm_up`, when file
    lists serve); the function returned waits for the facts only (raising what asking
    raised). Planning runs meanwhile: on a session's first query the JVM's first use of its
    SQL conf and Parquet reader (~1 s) overlaps the driver's decoding of manifests instead
    of following it."""
    done: dict[str, Any] = {}
    ready = threading.Event()

    def ask() -> None:
        try:
            done["facts"] = session_facts(spark)
        except BaseException as e:  # noqa: BLE001 - handed to the caller of the result
            done["error"] = e
        finally:
            ready.set()
        if "facts" in done and done["facts"].lists is None:
            _warm_up(spark)

    ctx = contextvars.copy_context()
    threading.Thread(target=ctx.run, args=(ask,), name="mor-session-facts", daemon=True).start()

    def result() -> SessionFacts:
        ready.wait()
        if "error" in done:
            raise done["error"]
        return done["facts"]

    return result


@dataclass
class Group:
    """Files read with one schema, and the columns made of what is read (the table's names)."""

    files: Sequence[File]
    schema: T.StructType
    columns: Sequence[Column]


@dataclass
class Read:
    """What `read_files` gave: the rows, how they name their file, and each file's key."""

    df: DataFrame
    reading: Reading
    keys: dict[int, Any]  # file id -> the file's key value
    access: StoreAccess | None = None  # the table's store settings, as given to read_files

    @property
    def key(self) -> FileKey:
        return self.reading.key


class ReadContext:
    """What the reads of one query share: the session, its facts, and Spark's form of paths
    read by path (physical/scan/paths.py)."""

    def __init__(self, spark: SparkSession, facts: SessionFacts, cache: ProcessCaches) -> None:
        self.spark = spark
        self.facts = facts
        self.cache = cache  # the process's caches: what was read of delete files, bitmaps
        self.paths = SparkPaths()


def read_files(
    ctx: ReadContext,
    groups: Sequence[Group],
    what: str,
    meta: Sequence[tuple[str, str]] = (),
    how: Reading | None = None,
    access: StoreAccess | None = None,
) -> Read:
    """The rows of every group's files (unioned by name), with `meta`: (alias, KEY or
    ROW_INDEX) columns after the groups' own, read as the physical plan decided (`how`;
    a read it did not plan is decided here, by the same function). `access`: the table's
    store settings, Spark given its paths under their scheme (physical/spark/store_access.py)."""
    files = [f for g in groups for f in g.files]
    table_access = access
    if access is not None:
        first = next((f.read_path for f in files if f.read_path.startswith("s3a://")), None)
        if first is None:
            access = None  # no file under the scheme: the reads stay as they are
        else:
            given = access.path(first)
            warm_credentials(ctx.spark, access.scheme, access.options([given]), given)
    how = how or reading(files, ctx.facts, len(groups))
    keys = _keys(files, how.key, ctx.paths) if how.key.is_long else {}
    key_col = _KeyColumn(how.key, files, keys, ctx.paths, what)
    frames = [
        _read_group(ctx, g, what, meta, key_col, access)
        if how.listed
        else _read_by_path(ctx, g, what, meta, key_col, access)
        for g in groups
    ]
    if not how.key.is_long:
        keys = _keys(files, how.key, ctx.paths)
    df = frames[0]
    for other in frames[1:]:
        df = df.unionByName(other)
    return Read(df, how, keys, table_access)


def _meta_expr(kind: str, listed: bool) -> str:
    if kind == ROW_INDEX:
        return "_metadata.row_index"
    return _FILE_ID if listed else ""


def _read_group(
    ctx: ReadContext,
    group: Group,
    what: str,
    meta: Sequence[tuple[str, str]],
    key_col: _KeyColumn,
    access: StoreAccess | None,
) -> DataFrame:
    """One Parquet read of a group's files through their file list. A classic session reuses
    the read by its files (frozen values: their paths, sizes and ids), so a repeated query
    writes no list (0.3 s at 100,000 files); Spark Connect writes it each time (it is found
    again by its content)."""
    spark = ctx.spark
    fields = group.schema.json()
    given = _given(access, [f.read_path for f in group.files])

    def make() -> DataFrame:
        listed = file_lists.write(
            (p, f.size_bytes, f.file_id) for p, f in zip(given, group.files, strict=True)
        )
        reader = spark.read.schema(group.schema).option("recursiveFileLookup", "true")
        if access is not None:
            reader = reader.options(**access.options(given))
        try:
            df = reader.parquet(listed)
        except Exception as e:  # noqa: BLE001 - the list's folder vanished, a bad setting
            raise DataFileError(f"cannot read {what} through {listed}: {first_line(e)}") from e
        if meta:
            df = df.select("*", *[F.expr(_meta_expr(m, True)).alias(a) for a, m in meta])
        return df

    files = Fingerprint(
        tuple((p, f.size_bytes, f.file_id) for p, f in zip(given, group.files, strict=True))
    )
    df = reused(spark, ("listed", fields, files, tuple(meta)), make)
    return df.select(*group.columns, *[a for a, _ in meta])


def _read_by_path(
    ctx: ReadContext,
    group: Group,
    what: str,
    meta: Sequence[tuple[str, str]],
    key_col: _KeyColumn,
    access: StoreAccess | None,
) -> DataFrame:
    """A group's files read by path, at most the listing threshold of paths per read: more
    would start a Spark job to list files mor already knows (0.7-4.5 s for 83 files, against
    0.13 s below it); the user's setting is read, never changed. `_metadata` does not resolve
    above a union, so each read selects its `_metadata` fields; the group's columns are applied
    once, above the union (on a classic session every Column passed is a py4j round trip)."""
    spark = ctx.spark
    limit = ctx.facts.listing
    read_paths = [f.read_path for f in group.files]
    frames = []
    fields = group.schema.json()
    for i in range(0, len(read_paths), limit):
        chunk = read_paths[i : i + limit]

        given = _given(access, chunk)

        def make(chunk: list[str] = chunk, given: list[str] = given) -> DataFrame:
            reader = spark.read.schema(group.schema)
            if access is not None:
                reader = reader.options(**access.options(given))
            try:
                df = read_parquet(reader, spark, given)
            except Exception as e:  # noqa: BLE001 - AnalysisException for a missing path, etc.
                raise DataFileError(f"cannot read {what}: {first_line(e)}") from e
            ctx.paths.learn(df, chunk, given)
            if meta:
                exprs = [key_col(chunk) if m == KEY else _meta_expr(m, False) for _, m in meta]
                df = df.select("*", *[F.expr(e).alias(a) for (a, _), e in zip(meta, exprs)])
            return df

        made = tuple((a, key_col.identity(chunk) if m == KEY else m) for a, m in meta)
        df = reused(spark, ("read", fields, tuple(given), made), make)
        ctx.paths.learn(df, chunk, given)
        frames.append(df)
    df = frames[0]
    for other in frames[1:]:
        df = df.union(other)
    return df.select(*group.columns, *[a for a, _ in meta])


def _given(access: StoreAccess | None, paths: Sequence[str]) -> list[str]:
    """The paths as Spark is given them: under the table's store scheme when it has one."""
    return [access.path(p) for p in paths] if access is not None else list(paths)


def _keys(files: Sequence[File], fk: FileKey, paths: SparkPaths) -> dict[int, Any]:
    """Each file's key value: its id (file lists); its size, -n for the n-th file (in path
    order) of a size another file shares, or Spark's path (asked of `paths` only for that
    kind, after the reads)."""
    if fk.kind == "file_id":
        return {f.file_id: f.file_id for f in files}
    if fk.kind == "file_path":
        return {f.file_id: paths(f.read_path) for f in files}
    keys: dict[int, Any] = {}
    n = 0
    for f in sorted(files, key=lambda f: f.read_path):
        if f.size_bytes in fk.shared:
            n += 1
            keys[f.file_id] = -n
        else:
            keys[f.file_id] = f.size_bytes
    return keys


class _KeyColumn:
    """The file key of a row as SQL text over `_metadata`, for a group of files read by path
    together: `_metadata.file_size`, or with files of shared sizes told apart by the path Spark
    reports. `identity` says what the text depends on without asking Spark for paths (the text
    needs the group read first)."""

    def __init__(
        self,
        fk: FileKey,
        files: Sequence[File],
        keys: dict[int, Any],
        paths: SparkPaths,
        what: str,
    ) -> None:
        self.fk, self.keys, self.paths, self.what = fk, keys, paths, what
        self.by_path = {f.read_path: f for f in files}

    def _shared(self, chunk: list[str]) -> list[File]:
        if self.fk.kind != "file_size+path":
            return []
        return [self.by_path[p] for p in chunk if self.by_path[p].size_bytes in self.fk.shared]

    def identity(self, chunk: list[str]) -> Hashable:
        return (
            self.fk.kind,
            tuple((f.read_path, self.keys[f.file_id]) for f in self._shared(chunk)),
        )

    def __call__(self, chunk: list[str]) -> str:
        if self.fk.kind != "file_size+path":
            return f"_metadata.{self.fk.kind}"
        shared = self._shared(chunk)
        if not shared:
            return "_metadata.file_size"
        sizes = ", ".join(str(s) for s in sorted({f.size_bytes for f in shared}))
        text = T.StringType()
        whens = " ".join(
            f"WHEN {sql_literal(self.paths(f.read_path), text)} THEN {int(self.keys[f.file_id])}"
            for f in shared
        )
        msg = sql_literal(unlisted(self.what), text)
        return (
            f"CASE WHEN _metadata.file_size IN ({sizes}) THEN CASE _metadata.file_path {whens} "
            f"ELSE raise_error({msg}) END ELSE _metadata.file_size END"
        )


def where_all(df: DataFrame, conditions: Sequence[Expr]) -> DataFrame:
    """Rows meeting every condition (bound SQL text), as one Spark filter."""
    return df.where(F.expr(" AND ".join(f"({e.sql})" for e in conditions)))


def unlisted(what: str) -> str:
    """The failure of a row whose file is not in the plan (physical/spark/spark_errors.py
    recognises it)."""
    return f"mor: a row of {what} came from a file the plan does not list"


def _session_memos() -> tuple[int, int]:
    n = len(_SEEN) + len(_WARMED)
    return n, n


def _clear_session_memos() -> None:
    _SEEN.clear()
    _WARMED.clear()


caches().register(
    "session probes",
    "per live Spark session: whether a Connect server sees the file lists' folder, whether "
    "a classic session's Parquet reader was warmed",
    "sessions",
    "the sessions alive (weak references)",
    _session_memos,
    _clear_session_memos,
)
