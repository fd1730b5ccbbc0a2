"""Iceberg's `remove_orphan_files`: the files under a table's folders that nothing in its
metadata references (planner/orphans.py says which), listed through the table's FileIO and
deleted through it.

The store is listed first and the table's metadata read after: a commit that lands meanwhile
references its files in what is read, so a file is called an orphan only if the table as read
after the listing does not reference it. A file written less than `older_than` ago (default
three days) is never an orphan: a writer running now has files no snapshot references yet, so
the procedure refuses an `older_than` under a day ago, as Iceberg's does. Nothing is deleted on
a dry run, nor when `gc.enabled` is false, nor after a prefix conflict in ERROR mode.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.catalog import Catalog

from mor.planner.expiry import gc_enabled
from mor.planner.orphans import (
    MIN_INTERVAL_MS,
    OLDER_THAN_MS,
    OrphanError,
    Prefixes,
    find_orphans,
    hidden_test,
    roots,
    valid_files,
)
from mor.writer.catalog_changes import load
from mor.writer.files import delete_each, listing


@dataclass
class OrphanRun:
    """What a run found: the folders listed, the cut-off, each orphan with its size, the
    prefix conflicts kept (IGNORE mode), and the deletions that failed."""

    table: str
    io: Any
    listed: list[str]
    older_than: int
    orphans: list[tuple[str, int]]
    conflicts: set[tuple[str, str]] = field(default_factory=set)
    failed: list[tuple[str, str]] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(size for _, size in self.orphans)


def check_interval(older_than: int, now_ms: int) -> None:
    if now_ms - older_than < MIN_INTERVAL_MS:
        raise OrphanError(
            "remove_orphan_files: older_than must be at least 24 hours ago: a write running now "
            "has files no snapshot references yet, and removing them would corrupt the table; "
            "nothing was deleted"
        )


def find(
    catalog: Catalog,
    identifier: str,
    *,
    older_than: int | None = None,
    location: str | None = None,
    equal_schemes: Mapping[str, str] | None = None,
    equal_authorities: Mapping[str, str] | None = None,
    prefix_mismatch_mode: str | None = None,
    now_ms: int | None = None,
) -> OrphanRun:
    """The orphans of `identifier` (nothing deleted: `delete_orphans` does that)."""
    prefixes = Prefixes.of(equal_schemes, equal_authorities, prefix_mismatch_mode)
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    cutoff = older_than if older_than is not None else now - OLDER_THAN_MS
    check_interval(cutoff, now)
    table = load(catalog, identifier)
    md = table.metadata
    if not gc_enabled(md):
        raise OrphanError(
            f"cannot remove orphan files of {identifier}: GC is disabled (gc.enabled=false: "
            "deleting files may corrupt other tables); nothing was deleted"
        )
    folders = roots(md, location)
    sizes = candidates(table.io, md, folders, cutoff)
    # the metadata read after the listing: what a commit landing meanwhile references is in it
    table = load(catalog, identifier)
    valid = valid_files(table.io, table.metadata, table.metadata_location)
    orphans, conflicts = find_orphans(sizes, valid, prefixes)
    no_other_table(table.io, table.metadata.table_uuid, orphans, identifier)
    return OrphanRun(
        identifier, table.io, folders, cutoff, [(p, sizes[p]) for p in orphans], conflicts
    )


def no_other_table(io: Any, uuid: Any, orphans: list[str], identifier: str) -> None:
    """Refuse when a metadata file among the orphans is another table's (or cannot be read):
    a table sharing this location (a CREATE TABLE copied with its LOCATION) would lose every
    file to this removal. Iceberg 1.12's procedure deletes them; its later
    `location_conflict_mode` refuses by default, as this does."""
    import gzip
    import json

    for path in orphans:
        name = path.rsplit("/", 1)[-1]
        if not name.endswith((".metadata.json", ".metadata.json.gz")):
            continue
        try:
            with io.new_input(path).open() as f:
                raw = f.read()
            if name.endswith(".gz"):
                raw = gzip.decompress(raw)
            other = json.loads(raw).get("table-uuid")
        except Exception:  # noqa: BLE001 - unreadable: whose it is is unknown, so refuse
            other = None
        if other is None or str(other) != str(uuid):
            whose = f"table {other}" if other else "a table this cannot read"
            raise OrphanError(
                f"cannot remove orphan files of {identifier}: {path} is the metadata of "
                f"{whose}, not of {identifier} ({uuid}): another table keeps its files under "
                "this location, and removing them would destroy it; remove that file if it "
                "is a stray, or give a location of this table's only; nothing was deleted"
            )


def candidates(io: Any, md: Any, folders: list[str], cutoff: int) -> dict[str, int]:
    """The files under `folders` older than `cutoff` (ms) and under no hidden folder, with
    their sizes: those that are orphans unless the metadata references them."""
    hidden = hidden_test(md)
    sizes: dict[str, int] = {}
    for folder in folders:
        named = "file:" + folder if folder.startswith("/") else folder  # as listing names it
        for path, size, mtime in listing(io, folder, qualify=True):
            if mtime < cutoff and not hidden(path[len(named) :]):
                sizes[path] = size
    return sizes


def delete_orphans(
    run: OrphanRun, threads: int = 1, interrupted: Callable[[], bool] = lambda: False
) -> OrphanRun:
    """Delete `run.orphans` on `threads` threads (Iceberg's `max_concurrent_deletes`); stop
    once `interrupted()`."""
    run.failed = delete_each(run.io, [p for p, _ in run.orphans], threads, interrupted)
    return run
