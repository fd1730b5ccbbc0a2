"""Which commits a consumer of a table's changes gets next (mor/consume.py), from metadata alone.

A consumer's checkpoint records the last snapshot it consumed (`snapshot_id`, None before the
first batch), the table's UUID, the id of its last committed batch, and the batch it planned
and has not committed yet (`pending`). The next batch is:

- the pending one again, exactly (same start, end and id) when there is one: a consumer killed
  after planning a batch and before committing it gets the very batch it may already have
  written, so a sink can replace it by id;
- else the commits after `snapshot_id` along the current snapshot's ancestry, oldest first, at
  most `max_commits` of them; none when `snapshot_id` is the current snapshot.

A batch is never planned across a gap. Each way the history can move under a checkpoint is one
line naming what happened and how to go on (never a silent skip or repeat): the table dropped
and re-created (another UUID); the checkpoint's snapshot expired, or history before a first
batch expired (the oldest snapshot still there is named: a new checkpoint can start after it);
the checkpoint's snapshot left the current ancestry (a rollback or a branch reset: the last
common ancestor is named).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot

from mor.planner.changes import lineage
from mor.planner.errors import ConsumeError


@dataclass(frozen=True, slots=True, kw_only=True)
class Pending:
    """A batch planned and not committed: delivered again, exactly, until it is."""

    batch_id: int
    start_snapshot_id: int | None  # exclusive; None: from the table's first commit
    end_snapshot_id: int  # inclusive
    commits: tuple[int, ...]  # the snapshots of its commits, oldest first


@dataclass(frozen=True, slots=True, kw_only=True)
class Checkpoint:
    table: str
    table_uuid: str
    snapshot_id: int | None  # the last snapshot consumed; None: none yet
    batch_id: int  # the last committed batch; -1: none
    pending: Pending | None = None


def _time(snap: Snapshot) -> str:
    import datetime as dt

    when = dt.datetime.fromtimestamp(snap.timestamp_ms / 1000, tz=dt.timezone.utc)
    return when.strftime("%Y-%m-%d %H:%M:%S UTC")


def current_chain(md: TableMetadata) -> tuple[list[Snapshot], bool]:
    """The current snapshot's ancestors, oldest first, as far as the metadata holds them, and
    whether the oldest one's parent has expired (history cut short)."""
    if md.current_snapshot_id is None:
        return [], False
    chain, missing = lineage(md, md.current_snapshot_id)
    chain.reverse()
    return chain, missing is not None or (bool(chain) and _carries_earlier(chain[0]))


def _carries_earlier(root: Snapshot) -> bool:
    """A snapshot without a parent whose summary counts more files than it added: its parent
    expired and the writer dropped the link (pyiceberg's expiry clears it; Java's keeps it)."""
    summary = root.summary
    if summary is None:
        return False

    def count(key: str) -> int:
        try:
            return int(summary.get(key) or 0)
        except ValueError:
            return 0

    return count("total-data-files") > count("added-data-files") or count(
        "total-delete-files"
    ) > count("added-delete-files")


def next_batch(
    md: TableMetadata,
    name: str,
    checkpoint: Checkpoint | None,
    *,
    max_commits: int | None = None,
    start_snapshot_id: int | None = None,
) -> Pending | None:
    """The next batch for this checkpoint (None: nothing new). `start_snapshot_id` (exclusive)
    is where a consumer without a checkpoint starts; by default the table's first commit."""
    if max_commits is not None and max_commits < 1:
        raise ConsumeError(f"max_commits must be 1 or more, not {max_commits}")
    uuid = str(md.table_uuid)
    if checkpoint is not None and checkpoint.table_uuid != uuid:
        raise ConsumeError(
            f"table {name} is not the table the checkpoint was made for (its UUID was "
            f"{checkpoint.table_uuid}, now {uuid}: dropped and re-created?): its changes since "
            "the checkpoint cannot be told; remove the checkpoint to consume the new table "
            "from its first commit"
        )
    chain, cut = current_chain(md)
    index = {s.snapshot_id: i for i, s in enumerate(chain)}
    if checkpoint is not None and checkpoint.pending is not None:
        p = checkpoint.pending
        if p.end_snapshot_id not in index or (
            p.start_snapshot_id is not None and p.start_snapshot_id not in index
        ):
            _off_history(md, name, chain, p.end_snapshot_id, f"batch {p.batch_id}")
        return p
    start = checkpoint.snapshot_id if checkpoint is not None else start_snapshot_id
    batch_id = checkpoint.batch_id + 1 if checkpoint is not None else 0
    if not chain:
        if start is not None and checkpoint is not None:
            _off_history(md, name, chain, start, "the checkpoint")
        if start is not None:
            raise ConsumeError(f"table {name} has no snapshot {start} (it has no commits yet)")
        return None
    if start is None:
        if cut:
            oldest = chain[0]
            raise ConsumeError(
                f"table {name}: its history before snapshot {oldest.snapshot_id} (committed "
                f"{_time(oldest)}) has expired, so its changes from the first commit cannot be "
                f"read: start after the oldest snapshot still there (start snapshot "
                f"{oldest.snapshot_id}), its rows read apart (VERSION AS OF {oldest.snapshot_id})"
            )
        commits = chain
    elif start in index:
        commits = chain[index[start] + 1 :]
    else:
        _off_history(md, name, chain, start, "the checkpoint" if checkpoint else "")
    if max_commits is not None:
        commits = commits[:max_commits]
    if not commits:
        return None
    return Pending(
        batch_id=batch_id,
        start_snapshot_id=start,
        end_snapshot_id=commits[-1].snapshot_id,
        commits=tuple(s.snapshot_id for s in commits),
    )


def _off_history(md: TableMetadata, name: str, chain: list[Snapshot], sid: int, whose: str) -> None:
    """Raise: snapshot `sid` is not on the current snapshot's ancestry. It expired (no longer
    in the metadata), or it is on another line of history (a rollback, a branch reset)."""
    held = f"{whose}'s snapshot {sid}" if whose else f"snapshot {sid}"
    current = md.current_snapshot_id
    if md.snapshot_by_id(sid) is None:
        if not chain:
            raise ConsumeError(f"table {name}: {held} is gone and the table has no snapshot now")
        oldest = chain[0]
        if not whose:  # a start the caller gave
            raise ConsumeError(
                f"table {name} has no snapshot {sid} (expired, or never one of this table); "
                f"the oldest snapshot of its current history is {oldest.snapshot_id} "
                f"(committed {_time(oldest)})"
            )
        raise ConsumeError(
            f"table {name}: {held} has expired (or was removed), so the commits after it "
            f"cannot all be read; the oldest snapshot still in the current history is "
            f"{oldest.snapshot_id} (committed {_time(oldest)}): to go on from there, start a "
            f"new checkpoint after it (start snapshot {oldest.snapshot_id}), its rows read "
            f"apart (VERSION AS OF {oldest.snapshot_id})"
        )
    index = {s.snapshot_id for s in chain}
    common = next((s.snapshot_id for s in lineage(md, sid)[0] if s.snapshot_id in index), None)
    where = (
        f"the last snapshot both share is {common}: to go on along the current history, start "
        f"a new checkpoint after it (start snapshot {common}); the rows of the commits undone "
        "are not retracted by it"
        if common is not None
        else "they share no snapshot"
    )
    raise ConsumeError(
        f"table {name}: {held} is not an ancestor of the current snapshot {current} (the table "
        f"was rolled back or its branch reset): {where}"
    )
