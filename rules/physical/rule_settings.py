"""The settings the physical rules decide by: which delete sides are broadcast (by rows) and
kept in Spark's cache (physical/, which keeps them, reads `delete_cache_bytes` too), whether
and when equality deletes are resolved, barriers, and the bitmap method for position deletes
(planner/settings.py has the machinery; docs/configuration.md the table). A setting is
declared by the lowest layer that reads it (tests/test_settings.py)."""

from __future__ import annotations

from mor.planner.settings import Setting, declare

PHYSICAL_RULES = declare(
    __name__,
    Setting(
        "broadcast_rows",
        "MOR_BROADCAST_ROWS",
        int,
        20_000_000,
        "delete sides with at most this many rows are broadcast",
    ),
    Setting(
        "delete_cache_bytes",
        "MOR_DELETE_CACHE_BYTES",
        int,
        256 << 20,
        "delete sides Spark reads (equality keys, and deleted positions joined rather than "
        "bitmapped) are kept in Spark's cache across queries of a session, least recently "
        "used first out beyond this many estimated bytes; 0 keeps none",
    ),
    Setting(
        "resolve_equality_deletes",
        "MOR_RESOLVE_EQUALITY_DELETES",
        bool,
        True,
        "the positions equality deletes remove from each data file are resolved by a query "
        "that reads it (a job reading its key columns; which read: resolve_at_read) and kept: "
        "later queries read the file as one with position deletes, without the anti-join; "
        "off: every query joins",
    ),
    Setting(
        "resolve_at_read",
        "MOR_RESOLVE_AT_READ",
        int,
        2,
        "which read of a data file resolves its equality deletes: 2 (the default) resolves "
        "when a query reads the file the second time in this process, so a first call (every "
        "`mor run`) never waits for a job whose benefit only later queries get; 1 resolves at "
        "the first read (the first query pays for the later ones); filtered queries always "
        "defer to the next read",
        minimum=1,
    ),
    Setting(
        "resolved_cache_rows",
        "MOR_RESOLVED_CACHE_ROWS",
        int,
        20_000_000,
        "resolved equality-delete positions kept across queries of one process (8 bytes each), "
        "least recently used out first; a branch whose files could lose more rows than this "
        "is joined, not resolved",
    ),
    Setting(
        "scan_barrier",
        "MOR_SCAN_BARRIER",
        bool,
        True,
        "a table scan read as several Parquet groups or delete-file branches is a barrier to "
        "Spark's optimizer, as a data source scan is: the query's semi and anti joins (IN and "
        "EXISTS subqueries) are not copied into each group (a shuffle each); Spark's own filter "
        "pushdown stops there too (mor pushes the query's filters into the reads itself)",
    ),
    Setting(
        "position_bitmap_bytes",
        "MOR_POSITION_BITMAP_BYTES",
        int,
        4 << 20,
        "position deletes become in-plan bitmaps when these take at most this many bytes "
        "(one bit per row of each data file with deletes); 0 always uses the anti-join",
    ),
    Setting(
        "position_driver_rows",
        "MOR_POSITION_DRIVER_ROWS",
        int,
        2_000_000,
        "... and the position delete files hold at most this many rows (read on the driver)",
    ),
    Setting(
        "position_driver_files",
        "MOR_POSITION_DRIVER_FILES",
        int,
        1000,
        "... and there are at most this many position delete files (each read on the driver, "
        "a request each on an object store); more are read by Spark's tasks (the anti-join)",
    ),
)
