"""The settings physical/ reads: the session facts the physical rules decide by (broadcast
bytes, whether file lists serve), what is kept of delete files, where file lists are written,
and the Spark session mor starts (planner/settings.py has the machinery;
docs/configuration.md the table). No pyspark here: `mor config` lists these without starting
Spark. A setting is declared by the lowest layer that reads it (tests/test_settings.py)."""

from __future__ import annotations

import re

from mor.planner.settings import Setting, declare

LOG_LEVELS = ("ALL", "DEBUG", "ERROR", "FATAL", "INFO", "OFF", "TRACE", "WARN")


def _memory_size(value: str) -> str | None:
    return None if re.fullmatch(r"\d+[kmgtKMGT]?", value) else "a size like 4g or 2048m"


def _log_level(value: str) -> str | None:
    return None if value.upper() in LOG_LEVELS else f"one of {', '.join(LOG_LEVELS)}"


COMPACTION_WRITERS = ("auto", "spark", "arrow")
EARLY_SESSIONS = ("auto", "on", "off", "always")
SERVERS = ("auto", "off")


def _server(value: str) -> str | None:
    return None if value in SERVERS else f"one of {', '.join(SERVERS)}"


def _early_session(value: str) -> str | None:
    return None if value in EARLY_SESSIONS else f"one of {', '.join(EARLY_SESSIONS)}"


def _compaction_writer(value: str) -> str | None:
    return None if value in COMPACTION_WRITERS else f"one of {', '.join(COMPACTION_WRITERS)}"


PHYSICAL = declare(
    __name__,
    Setting(
        "broadcast_bytes",
        "MOR_BROADCAST_BYTES",
        int,
        0,
        "delete sides whose estimated hash relation is at most this many bytes are broadcast "
        "(0: an eighth of spark.driver.memory, at most half of spark.driver.maxResultSize); "
        "larger ones are joined by a shuffle",
    ),
    Setting(
        "file_lists",
        "MOR_FILE_LISTS",
        bool,
        True,
        "Spark reads each scan's files as one Parquet relation through a file list mor writes "
        "(no listing, no request per file, a plan whose size does not grow with the files); "
        "off: by path, in groups of at most Spark's listing threshold, unioned",
    ),
    Setting(
        "keep_at_read",
        "MOR_KEEP_AT_READ",
        int,
        2,
        "which read of a delete side in a Spark session keeps it in Spark's cache "
        "(delete_cache_bytes): 2 (the default) from its second read, so a first call does not "
        "pay to cache rows only later queries read again; 1: from its first read",
        minimum=1,
    ),
    Setting(
        "position_cache_rows",
        "MOR_POSITION_CACHE_ROWS",
        int,
        10_000_000,
        "positions of position delete files kept across queries of one process (read on the "
        "driver for bitmaps; 8 bytes each), and the bitmaps made of them (a word's text, about "
        "20 bytes, weighs three)",
    ),
    Setting(
        "file_list_dir",
        "MOR_FILE_LIST_DIR",
        str,
        "",
        "where file lists are written; Spark's driver must read it (a Spark Connect server on "
        "another machine: a shared folder); empty: mor-<uid>/file-lists in the temporary folder",
    ),
    Setting(
        "file_list_bytes",
        "MOR_FILE_LIST_BYTES",
        int,
        2 << 30,
        "file lists kept in file_list_dir for reuse, least recently used removed beyond this "
        "many bytes (about 150 bytes a file; none used in the last hour)",
    ),
    Setting(
        "s3a_packages",
        "MOR_S3A_PACKAGES",
        bool,
        True,
        "a Spark session mor starts for a query that reads s3a:// paths gets Hadoop's s3a "
        "connector as spark-submit --packages adds it: hadoop-aws of the Hadoop version Spark "
        "ships (Spark's Ivy fetches it and its AWS SDK bundle from Maven Central once); off "
        "where Spark has the connector or cannot reach a Maven repository",
        session=True,
    ),
    Setting(
        "table_store_access",
        "MOR_TABLE_STORE_ACCESS",
        bool,
        True,
        "Spark reads (and compaction writes) a table's s3a:// files with the store settings "
        "mor's FileIO has for that table (a REST catalog's vended credentials, the catalog's "
        "s3.* properties, [file-io], AWS_*), as options of each read through a file system of "
        "their own; the session's settings are never changed. Off: Spark's own s3a settings",
    ),
    Setting(
        "compaction_writer",
        "MOR_COMPACTION_WRITER",
        str,
        "auto",
        "how compaction's Spark tasks write the new data files: spark (Spark's Parquet writer "
        "and its file commit protocol: a temporary folder renamed), arrow (each task writes "
        "its files straight to their final paths with pyarrow, as Iceberg's writers do; needs "
        "pyarrow on the executors, which Spark's Arrow support needs anyway), auto (arrow for "
        "tables on S3 with store settings mor knows, whose buckets may refuse folders and "
        "where a rename is a copy; spark otherwise)",
        check=_compaction_writer,
    ),
    Setting(
        "early_session",
        "MOR_EARLY_SESSION",
        str,
        "auto",
        "when `mor run` starts its Spark session: on (on a thread while it parses and plans, "
        "when the plan cannot change the session: Spark Connect, no s3a connector to add, or "
        "nothing on S3 named by the SQL, the catalog, the warehouse or a path map), always "
        "(so even when S3 is named: a session started without the s3a connector a plan needs "
        "is stopped and started again with it), off (after planning), auto (on with 4 cores "
        "or more: with 2, the JVM's start and planning share them and nothing was gained)",
        check=_early_session,
    ),
    Setting(
        "server",
        "MOR_SERVER",
        str,
        "auto",
        "the Spark a CLI command runs on when it names none (no --master, --remote or "
        "$SPARK_REMOTE): auto (the Spark Connect server `mor server start` started, while it "
        "runs; else a session of its own), off (always a session of its own)",
        check=_server,
    ),
    Setting(
        "master",
        "MOR_SPARK_MASTER",
        str,
        "local[*]",
        "the master of a Spark session mor starts",
        session=True,
    ),
    Setting(
        "shuffle_partitions",
        "MOR_SHUFFLE_PARTITIONS",
        int,
        8,
        "spark.sql.shuffle.partitions of a session mor starts",
        minimum=1,
        session=True,
    ),
    Setting(
        "driver_memory",
        "MOR_DRIVER_MEMORY",
        str,
        "4g",
        "spark.driver.memory of a session mor starts (4g, 2048m)",
        session=True,
        check=_memory_size,
    ),
    Setting(
        "spark_log_level",
        "MOR_SPARK_LOG_LEVEL",
        str,
        "FATAL",
        "the log level of a session mor starts",
        session=True,
        check=_log_level,
    ),
)
