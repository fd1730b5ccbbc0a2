"""Consuming a table's changes incrementally, each commit exactly once, across restarts.

`stream_changes(table, checkpoint)` yields batches: the row-level changes (`mor.changes`, every
delete applied) of the commits after the checkpoint's snapshot, oldest first, at most
`max_commits` commits a batch. A batch is delivered, then committed by the caller
(`batch.commit()`, once its rows are safely written); only a commit moves the checkpoint.

The checkpoint is a small JSON file, replaced atomically (written beside it, flushed, renamed):

    {"format": "mor-changes-checkpoint", "version": 1, "table": "db.orders",
     "table_uuid": "...", "snapshot_id": 123, "batch_id": 4, "written_at": "...",
     "pending": {"batch_id": 5, "start_snapshot_id": 123, "end_snapshot_id": 456,
                 "commits": [234, 456]}}

Before a batch is delivered, its range is recorded as `pending`: a consumer killed after that,
at any moment before its commit, gets the same batch (same id, same commits, same rows) from
the next run, so a sink that writes each batch under its `batch_id` (replacing what a killed
run left) gets every commit exactly once. `batch_id` grows by one per committed batch.
Which commits come next, and every way the history can move under a checkpoint (expired
snapshots, a rollback, a re-created table), is planner/batches.py.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from mor.api import changes, checked, effective_path_map, resolve_catalog
from mor.planner.batches import Checkpoint, Pending, next_batch
from mor.planner.errors import ConsumeError
from mor.planner.sources import PathMap, Resolver, is_table_path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

FORMAT = "mor-changes-checkpoint"
VERSION = 1


def read_checkpoint(path: str) -> Checkpoint | None:
    """The checkpoint in `path`; None when there is no such file (a new consumer)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ConsumeError(f"checkpoint {path} cannot be read: {e.strerror or e}") from e
    try:
        d = json.loads(text)
        if d.get("format") != FORMAT:
            raise ValueError(f"not a mor changes checkpoint (format {d.get('format')!r})")
        if d.get("version") != VERSION:
            raise ValueError(f"version {d.get('version')!r}, this mor reads version {VERSION}")
        p = d.get("pending")
        pending = (
            Pending(
                batch_id=int(p["batch_id"]),
                start_snapshot_id=_opt_int(p["start_snapshot_id"]),
                end_snapshot_id=int(p["end_snapshot_id"]),
                commits=tuple(int(c) for c in p["commits"]),
            )
            if p is not None
            else None
        )
        return Checkpoint(
            table=str(d["table"]),
            table_uuid=str(d["table_uuid"]),
            snapshot_id=_opt_int(d["snapshot_id"]),
            batch_id=int(d["batch_id"]),
            pending=pending,
        )
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        what = f"missing field {e}" if isinstance(e, KeyError) else str(e)
        raise ConsumeError(f"checkpoint {path} is damaged: {what}") from e


def _opt_int(v: Any) -> int | None:
    return None if v is None else int(v)


def _encode(cp: Checkpoint) -> str:
    p = cp.pending
    return json.dumps(
        {
            "format": FORMAT,
            "version": VERSION,
            "table": cp.table,
            "table_uuid": cp.table_uuid,
            "snapshot_id": cp.snapshot_id,
            "batch_id": cp.batch_id,
            "written_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "pending": None
            if p is None
            else {
                "batch_id": p.batch_id,
                "start_snapshot_id": p.start_snapshot_id,
                "end_snapshot_id": p.end_snapshot_id,
                "commits": list(p.commits),
            },
        },
        indent=1,
    )


def write_checkpoint(path: str, cp: Checkpoint) -> None:
    """Replace the checkpoint atomically: written and flushed beside it, then renamed over it
    (a reader sees the old checkpoint or the new one, never a part), the folder flushed."""
    path = os.path.abspath(path)
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        raise ConsumeError(f"checkpoint {path}: the folder {folder} does not exist")
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(_encode(cp))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        raise ConsumeError(f"checkpoint {path} cannot be written: {e.strerror or e}") from e
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # a folder that cannot be opened (some platforms): the rename stands
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@dataclass(eq=False, repr=False)
class ChangeBatch:
    """One batch of changes: `df` is `mor.changes(table, start_snapshot_id, end_snapshot_id)`
    (the end snapshot's columns plus _change_type, _change_ordinal, _commit_snapshot_id).
    `redelivered`: planned by an earlier run that did not commit it (a sink may hold part or
    all of it, under this batch_id). Its range is the checkpoint's pending batch, as written
    before it was delivered."""

    df: DataFrame
    redelivered: bool
    _path: str = field(repr=False)
    _planned: Checkpoint = field(repr=False)  # with `pending` this batch
    committed: bool = False

    def __repr__(self) -> str:
        return (
            f"ChangeBatch(batch_id={self.batch_id}, start_snapshot_id={self.start_snapshot_id}, "
            f"end_snapshot_id={self.end_snapshot_id}, commits={len(self.commits)}, "
            f"redelivered={self.redelivered}, committed={self.committed})"
        )

    @property
    def _pending(self) -> Pending:
        assert self._planned.pending is not None
        return self._planned.pending

    @property
    def batch_id(self) -> int:
        return self._pending.batch_id

    @property
    def start_snapshot_id(self) -> int | None:
        """Exclusive; None: the table's first commit."""
        return self._pending.start_snapshot_id

    @property
    def end_snapshot_id(self) -> int:
        """Inclusive."""
        return self._pending.end_snapshot_id

    @property
    def commits(self) -> tuple[int, ...]:
        """The snapshot ids of its commits, oldest first."""
        return self._pending.commits

    def commit(self) -> None:
        """Record the batch as consumed: the checkpoint moves to its end snapshot. Call it
        once its rows are written; a batch not committed is delivered again, exactly."""
        if self.committed:
            return
        now = read_checkpoint(self._path)
        if now != self._planned:
            raise ConsumeError(
                f"checkpoint {self._path} changed while batch {self.batch_id} was delivered "
                "(another consumer of it?): the batch is not committed"
            )
        write_checkpoint(
            self._path,
            replace(
                self._planned,
                snapshot_id=self.end_snapshot_id,
                batch_id=self.batch_id,
                pending=None,
            ),
        )
        self.committed = True


@checked
def stream_changes(
    table: str,
    checkpoint: str | os.PathLike[str],
    *,
    catalog: Any = None,
    spark: Any = None,
    max_commits: int | None = None,
    start_snapshot_id: int | None = None,
    warehouse: str | None = None,
    path_map: dict[str, str] | None = None,
    io_properties: dict[str, str] | None = None,
    settings: Any = None,
) -> Iterator[ChangeBatch]:
    """The table's changes since the checkpoint, as batches of at most `max_commits` commits,
    until the current snapshot; nothing when there is nothing new. Commit each batch
    (`batch.commit()`) once its rows are written: the next batch is planned only then, and a
    batch not committed stops the iteration with an error rather than be skipped.
    `start_snapshot_id` (exclusive): where a new checkpoint starts (default: the table's first
    commit); ignored once the checkpoint exists, as Spark's starting offsets are.

    Arguments are checked, and the catalog resolved, when this is called; the table is read
    and each batch planned as the iteration asks for it."""
    path = os.path.abspath(os.fspath(checkpoint))
    cat = None if is_table_path(table) else resolve_catalog(catalog, warehouse)
    opts = dict(
        catalog=cat,
        spark=spark,
        path_map=path_map,
        io_properties=io_properties,
        settings=settings,
    )
    return _batches(table, path, opts, max_commits, start_snapshot_id)


def next_pending(
    table: str,
    path: str,
    opts: dict[str, Any],
    max_commits: int | None = None,
    start: int | None = None,
) -> tuple[Checkpoint | None, Any, Pending | None]:
    """(the checkpoint, the table read afresh, the next batch or None), from metadata alone:
    no Spark (the CLI asks this first, so a run with nothing new starts no JVM)."""
    cp = read_checkpoint(path)
    if cp is not None and cp.table != table:
        raise ConsumeError(
            f"checkpoint {path} is for table {cp.table}, not {table}: give each consumer "
            "its own checkpoint"
        )
    # read afresh for each batch: the commits that landed since the last one
    resolver = Resolver(
        opts["catalog"], PathMap.of(effective_path_map(opts["path_map"])), opts["io_properties"]
    )
    src = resolver.by_text(table)
    batch = next_batch(src.metadata, table, cp, max_commits=max_commits, start_snapshot_id=start)
    return cp, src, batch


def _batches(
    table: str,
    path: str,
    opts: dict[str, Any],
    max_commits: int | None,
    start: int | None,
) -> Iterator[ChangeBatch]:
    while True:
        cp, src, batch = next_pending(table, path, opts, max_commits, start)
        if batch is None:
            return
        redelivered = cp is not None and cp.pending == batch
        if not redelivered:
            base = cp or Checkpoint(
                table=table,
                table_uuid=str(src.metadata.table_uuid),
                snapshot_id=None,
                batch_id=-1,
            )
            cp = replace(base, pending=batch)
            write_checkpoint(path, cp)
        df = changes(
            table,
            start_snapshot_id=batch.start_snapshot_id,
            end_snapshot_id=batch.end_snapshot_id,
            **opts,
        )
        out = ChangeBatch(df=df, redelivered=redelivered, _path=path, _planned=cp)
        yield out
        if not out.committed:
            raise ConsumeError(
                f"batch {out.batch_id} of {table} was not committed: call batch.commit() once "
                "its rows are written (until then it is delivered again, never skipped)"
            )
