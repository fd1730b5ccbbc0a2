"""Equality deletes resolved once: the positions they remove from each data file, kept and
applied later as position deletes.

Which rows of a data file its equality deletes remove is a pure function of immutable things:
the data file (its content, sequence number, partition and how its columns are read), and the
equality delete files that apply to it (their content, sequence numbers, id sets, and how their
columns are read). The anti-join of a branch (compile.py) recomputes that answer on every
query, a hash probe of every row. Here it is computed once, by a Spark job that reads only the
key columns of the branch's files and semi-joins them with the same delete sides and guards,
and the deleted positions (`_file`, `_pos`) come back to the driver, one sorted array per data
file. From then on, in this process, the branch is a plain scan: each data file with resolved
positions gets one more position delete (`kind="resolved"`, its positions carried in memory),
applied by the bitmap or join method like any other (position_deletes.py), no key column read
unless the query selects it, no join with the delete side.

The key of a data file's positions (`file_key`) holds all the answer depends on: the data file
(path as recorded and as read, size, row count, sequence number, spec and partition, layout),
the key fields (field ids, types, defaults), and every equality delete file that applies to it
(path, size, row count, sequence number, id set, scope, layout). Scan planning lists exactly
those deletes per data file (`DataTask.eq_deletes`: by sequence number and partition scope,
less those whose key bounds exclude the file, which match none of its rows), so a new delete
file, a replaced file (another size), another sequence number or another snapshot makes another
key: an answer is never reused where it could differ. Files are checked against their recorded
sizes before every query, resolved or not (guards.check_files).

When: at the read setting `resolve_at_read` names (2 by default: the second query that reads a
file in this process). A query before that joins, and the files it joined are remembered with
the number of reads (ProcessCaches.joined): a first call never waits for a job only later
queries gain from, and a process that runs one query (`mor run`) never resolves. A query that
reads every row of a branch's files anyway (no filter pushed into the scan) resolves them at
that read; a filtered query reads only part of each file (row groups skipped), where resolving
would read all of it, so it joins even then and the next read resolves (with
`resolve_at_read = 1`, the first unfiltered read resolves). Files already resolved are read
resolved by any query.

Kept per process, least recently used out beyond setting `resolved_cache_rows` positions
(8 bytes each); a branch whose positions could exceed it (estimated from the row counts of its
files and of its delete files) is not resolved: it joins as before. Setting
`resolve_equality_deletes` turns it off. EXPLAIN PHYSICAL shows per branch which files read
resolved positions and which are resolved by the query.

A physical rule (no pyspark): the plan holds its decision, compile.py runs the job.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import pyarrow as pa

from mor.planner.errors import InternalError
from mor.planner.nodes import (
    GLOBAL_PART,
    RESOLVED,
    AntiJoin,
    DataTask,
    DeleteTask,
    EqDeleteScan,
    IcebergScan,
    Plan,
    ReadField,
)
from mor.planner.settings import current
from mor.planner.state import JOINED_KEYS, ProcessCaches

# Resolved positions are kept per data file (ProcessCaches.resolved), and so are the keys of
# files a query joined rather than resolved, with the number of queries that did
# (ProcessCaches.joined): the read setting resolve_at_read names resolves them.


def clear_resolved(cache: ProcessCaches) -> None:
    """Forget every resolved position: the next query joins (and resolves) again."""
    cache.resolved.clear()
    cache.joined.clear()


def held(cache: ProcessCaches) -> tuple[int, int]:
    """(data files, positions) held."""
    return len(cache.resolved), cache.resolved.held


def seen(cache: ProcessCaches) -> int:
    """Data files a query joined, to be resolved when read again."""
    return len(cache.joined)


def chain_of(node: AntiJoin) -> tuple[IcebergScan, tuple[AntiJoin, ...]] | None:
    """The branch scan under a chain of anti-joins and the anti-joins, innermost first; None
    when the chain does not end in a planned scan of equality-deleted files."""
    joins = []
    base: Plan = node
    while isinstance(base, AntiJoin):
        if not isinstance(base.right, EqDeleteScan):
            return None
        joins.append(base)
        base = base.left
    if not isinstance(base, IcebergScan) or base.files is None or not base.data_files():
        return None
    return base, tuple(reversed(joins))


def key_fields(scan: IcebergScan, joins: Sequence[AntiJoin]) -> tuple[ReadField, ...]:
    """The fields of the branch scan the anti-joins compare."""
    names = {lk for j in joins for lk, _ in j.keys}
    return tuple(f for f in scan.fields if f.col.name in names)


def file_key(
    task: DataTask,
    scan: IcebergScan,
    deletes: Mapping[int, DeleteTask],
    keys: Sequence[ReadField],
    eq_sets: frozenset[frozenset[int]] | None = None,
) -> tuple:
    """Everything the positions equality deletes remove from `task` depend on (module doc):
    those of the id sets `eq_sets` (the anti-joins resolved; None: all of them)."""
    layouts = scan.files.layouts if scan.files else ()
    fields = tuple(sorted((f.field_id, f.type_str, f.path, f.default) for f in keys))
    eq = tuple(
        sorted(
            (
                d.path,
                d.read_path,
                d.size_bytes,
                d.record_count,
                d.data_seq,
                tuple(sorted(d.eq_ids)),
                d.spec_id,
                d.partition_id == GLOBAL_PART,
                layouts[d.layout] if d.layout < len(layouts) else None,
            )
            for d in (deletes[i] for i in task.eq_deletes)
            if eq_sets is None or d.eq_ids in eq_sets
        )
    )
    return (
        task.path,
        task.read_path,
        task.size_bytes,
        task.record_count,
        task.data_seq,
        task.spec_id,
        task.partition,
        layouts[task.layout] if task.layout < len(layouts) else None,
        fields,
        eq,
    )


@dataclass(frozen=True, slots=True)
class Resolution:
    """What a branch does with its equality deletes: `method` "positions" (held: its files'
    keys found in the cache; missing: the tasks the query resolves first) or "join" (`why`)."""

    method: str
    keys: Mapping[int, tuple] | None = None  # file id -> file_key
    held: tuple[DataTask, ...] = ()
    missing: tuple[DataTask, ...] = ()
    estimate: int = 0  # positions the missing files could hold at most
    why: str = ""
    positions: Mapping[int, pa.Array] | None = None  # of the held files, by file id


def decide(
    scan: IcebergScan, joins: Sequence[AntiJoin], cache: ProcessCaches, every: bool = False
) -> Resolution:
    """Whether this branch reads resolved positions, and which of its files must be resolved
    first (by what `cache` holds; nothing is written to it here). `every`: each file is
    resolved, whatever the settings say (the conversion of equality deletes asks it)."""
    s = current()
    if not s.resolve_equality_deletes and not every:
        return Resolution("join", why="setting resolve_equality_deletes is off")
    tasks = scan.data_files()
    deletes = scan.deletes_by_id()
    fields = key_fields(scan, joins)
    sets = frozenset(j.eq_set for j in joins)
    keys = {t.file_id: file_key(t, scan, deletes, fields, sets) for t in tasks}
    positions = {}
    kept, joined_before = cache.resolved, cache.joined
    for t in tasks:
        hit = kept.get(keys[t.file_id])
        if hit is not None:
            positions[t.file_id] = hit  # kept here: the cache may drop it before it is used
    held = tuple(t for t in tasks if t.file_id in positions)
    missing = tuple(t for t in tasks if t.file_id not in positions)
    # reads before this one that must have joined each missing file
    before = max(s.resolve_at_read - 1, 1 if scan.pushed else 0)
    if every:
        before = 0
    if missing and any((joined_before.get(keys[t.file_id]) or 0) < before for t in missing):
        reads = min((joined_before.get(keys[t.file_id]) or 0) for t in missing)
        return Resolution(
            "join",
            keys,
            held,
            missing,
            why="the query's filters read part of the files, resolving reads all of them: "
            "resolved when a query reads them again"
            if scan.pushed and reads + 1 >= s.resolve_at_read
            else f"read {reads + 1} of these files in this process; resolved at read "
            f"{s.resolve_at_read}, setting resolve_at_read",
        )
    # a data file loses at most its rows; the deletes remove at most one row per delete row
    # unless keys repeat in the data, so the smaller of the two bounds the usual case
    rows = sum(t.record_count for t in missing)
    applied = {i for t in missing for i in t.eq_deletes if deletes[i].eq_ids in sets}
    del_rows = sum(deletes[i].record_count for i in applied)
    estimate = min(rows, del_rows)
    if estimate > s.resolved_cache_rows and not every:
        return Resolution(
            "join",
            why=f"its files could lose ~{estimate} rows, over resolved_cache_rows "
            f"({s.resolved_cache_rows})",
        )
    return Resolution("positions", keys, held, missing, estimate, positions=positions)


def joined(res: Resolution, cache: ProcessCaches) -> None:
    """Count a read of the files a query joined, to resolve them at the read setting
    resolve_at_read names (a filtered query's: at the next read)."""
    if res.keys is not None:
        for t in res.missing:
            cache.joined.count(res.keys[t.file_id], JOINED_KEYS)


def store(res: Resolution, found: Mapping[str, pa.Array], cache: ProcessCaches) -> None:
    """Keep the positions the job found for the missing files (by recorded path; a file the
    job returned nothing for loses no row)."""
    assert res.keys is not None
    limit = current().resolved_cache_rows
    empty = pa.array([], pa.int64())
    kept = cache.resolved
    for t in res.missing:
        positions = found.get(t.path, empty)
        kept.put(res.keys[t.file_id], positions, len(positions) + 1, limit)


def resolved_scan(
    scan: IcebergScan,
    res: Resolution,
    needed: frozenset[str] | None,
    found: Mapping[str, pa.Array] | None = None,
    preview: bool = False,
) -> IcebergScan:
    """The branch as a plain scan: each data file's resolved positions as one more position
    delete, no equality delete, no anti-join guard column, and of the key columns only those
    in `needed` (the columns the branch's consumer selects; None: all). Held files' positions
    come from `res` (taken when decided), the others' from `found`, what this query's job
    returned (a file it returned nothing for loses no row). `preview` (EXPLAIN): a
    file not resolved yet gets a delete of as many positions as it could lose, and none is
    read."""
    assert res.keys is not None and scan.files is not None
    by_id = scan.deletes_by_id()
    # the equality delete files stay listed (none applies to a task any more): they are
    # checked against their recorded sizes with the rest (guards.check_files)
    deletes = list(scan.files.deletes)
    next_id = max((d.file_id for d in scan.files.deletes), default=-1) + 1
    empty = pa.array([], pa.int64())
    tasks = []
    for t in scan.data_files():
        key = res.keys[t.file_id]
        positions = (res.positions or {}).get(t.file_id)
        count = len(positions) if positions is not None else 0
        if positions is None and preview:
            count = min(t.record_count, sum(by_id[i].record_count for i in t.eq_deletes))
        elif positions is None:
            if found is None:
                raise InternalError(f"no resolved positions for data file {t.path}")
            positions = found.get(t.path, empty)
            count = len(positions)
        extra: tuple[int, ...] = ()
        if count:
            digest = hashlib.sha1(repr(key).encode()).hexdigest()
            deletes.append(
                DeleteTask(
                    file_id=next_id,
                    kind=RESOLVED,
                    path=f"mor-resolved:{digest}",
                    read_path=f"mor-resolved:{digest}",
                    data_seq=t.data_seq,
                    spec_id=t.spec_id,
                    partition_id=t.partition_id,
                    record_count=count,
                    size_bytes=0,
                    positions=(t.path, positions),
                )
            )
            extra = (next_id,)
            next_id += 1
        tasks.append(replace(t, pos_deletes=t.pos_deletes + extra, eq_sets=(), eq_deletes=()))
    files = replace(scan.files, data=tuple(tasks), deletes=tuple(deletes))
    if needed is None:  # the branch's own output, guard columns included
        return replace(scan, files=files, eq_sets=())
    fields = tuple(f for f in scan.fields if f.col.name in needed)
    hidden = tuple(h for h in scan.hidden if h in needed)
    return replace(scan, files=files, fields=fields, hidden=hidden, eq_sets=(), meta=())


def describe(res: Resolution, scan: IcebergScan, sides: str = "the delete sides") -> str:
    """One line of EXPLAIN PHYSICAL for a branch's resolution (`sides`: its delete sides' steps)."""
    n = len(scan.data_files())
    if res.method == "join":
        return f"equality deletes joined, not resolved ({res.why})"
    if not res.missing:
        return (
            f"equality deletes resolved: the positions they remove from {n} data file(s) are "
            "held from an earlier query (resolved_cache_rows): no anti-join, key columns read "
            "only where the query selects them"
        )
    return (
        f"resolve equality deletes first (a Spark job): {len(res.missing)} of {n} data file(s) "
        f"read for their key columns only, left_semi joined with {sides} (the same guards, "
        f"without the query's filters); (_file, _pos) of at most ~{res.estimate} rows collected "
        f"to the driver and kept per data file (resolved_cache_rows); {len(res.held)} held "
        "from earlier queries"
    )


def resolving_scan(base: IcebergScan, joins: Sequence[AntiJoin], res: Resolution) -> IcebergScan:
    """What the job resolving a branch reads: the key columns of the files it resolves
    (`res.missing`), every row (no filter of the query, no position delete applied), with
    `_file` and `_pos`, their equality deletes alone beside them."""
    assert base.files is not None
    files = replace(
        base.files,
        data=tuple(replace(t, pos_deletes=()) for t in res.missing),
        deletes=tuple(d for d in base.files.deletes if d.kind == "equality"),
    )
    return replace(
        base, fields=key_fields(base, joins), pushed=(), hidden=("_file", "_pos"), files=files
    )


def scoped_only(deletes: Plan) -> bool:
    """Every delete file of this equality delete scan is partition-scoped (none global): the
    anti-join's scope check is then `$partition = $del_partition`, a join key."""
    return isinstance(deletes, EqDeleteScan) and all(
        f.partition_id != GLOBAL_PART for f in deletes.files
    )
