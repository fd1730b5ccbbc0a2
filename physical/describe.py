"""EXPLAIN PHYSICAL: the DataFrame operations `Compiler` builds, in order, without a JVM.

Kept beside compile.py and scan.py: each line names what those modules do for a node.
This module does not import pyspark.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from mor.physical.resolution import chain_of, decide, resolved_scan
from mor.physical.resolution import describe as explain_line
from mor.physical.reuse import keeps
from mor.physical.strategy import (
    Reading,
    SessionFacts,
    broadcast_text,
    compacted_keys,
    counted_from_metadata,
    default_broadcast_bytes,
    eq_relation_bytes,
    named_as_table,
    needs_barrier,
    position_relation_bytes,
    position_strategy,
    reading,
    scoped_only,
    spark_tasks,
)
from mor.planner.nodes import (
    RESOLVED,
    AntiJoin,
    CommitChanges,
    DataTask,
    DeleteTask,
    EqDeleteScan,
    IcebergScan,
    MetadataTable,
    Plan,
    SparkQuery,
    TableChanges,
    Union,
    show_ids,
)
from mor.planner.settings import current


def _files(n: int, what: str) -> str:
    return f"{n} {what} file{'' if n == 1 else 's'}"


class _Describer:
    def __init__(self, facts: SessionFacts) -> None:
        self.facts = facts  # the session's (reads.session_facts), or a session of mor's own
        self.limit = facts.broadcast_limit
        self.lines: list[str] = []
        self.done: dict[int, int] = {}
        self.needed: dict[int, frozenset[str]] = {}  # a union's columns, by input
        self.inner: set[int] = set()  # anti-joins under another one
        self.kept: list[Plan] = []  # nodes made here, kept alive so that no id is reused
        self.unfiltered: dict[int, Plan] = {}  # delete sides for resolution, by side

    def read(
        self, files: Sequence[DataTask | DeleteTask], what: str, how: Reading, detail: str
    ) -> str:
        """How a set of files is read (reads.read_files), as one step: `detail` says what of
        them (the table, the columns)."""
        if how.listed:
            tasks = spark_tasks([f.size_bytes for f in files], self.facts)
            return (
                f"read parquet through a file list: {_files(len(files), what)} {detail}"
                + (f"; {how.reads} layouts, a read each" if how.reads > 1 else "")
                + f"; ~{tasks} Spark task{'' if tasks == 1 else 's'} "
                f"({_mib(self.facts.split_bytes)} splits, {_mib(self.facts.open_cost)} open "
                "cost a file)"
            )
        return (
            f"read parquet by path: {_files(len(files), what)} {detail}; {how.reads} "
            f"read{'' if how.reads == 1 else 's'} of at most {self.facts.listing} paths, "
            f"unioned (no file list: {how.why})"
        )

    def emit(self, text: str) -> int:
        self.lines.append(f"{len(self.lines) + 1:>3}. {text}")
        return len(self.lines)

    def visit(self, node: Plan) -> int:
        if id(node) in self.done:
            return self.done[id(node)]
        step = self._visit(node)
        self.done[id(node)] = step
        return step

    def _visit(self, node: Plan) -> int:
        match node:
            case IcebergScan():
                return self._scan(node)
            case EqDeleteScan():
                kinds = sorted(
                    {"global" if f.partition_id < 0 else "partition" for f in node.files}
                )
                how = reading(node.files, self.facts)
                keys = ", ".join(k.col.show() for k in node.keys)
                detail = f"of {node.table} {show_ids(node.eq_set)}, key columns by name: {keys}"
                self.emit(self.read(node.files, "equality delete", how, detail))
                if node.pushed:
                    self.emit("where " + " AND ".join(e.text for e in node.pushed))
                compact = compacted_keys(node, self.limit)
                if not node.meta:
                    if compact:
                        self.emit("distinct keys")
                else:
                    self.emit(
                        f"join broadcast(delete file table) on {how.key.describe()} "
                        f"-> $del_seq, $del_partition ({', '.join(kinds)})"
                    )
                    if compact:
                        self.emit("compact: one row per key and $del_partition with max($del_seq)")
                est = eq_relation_bytes(node)
                self._persist(est)
                side = broadcast_text("keys", node.rows(), est, self.limit)
                return self.emit(f"as {side}")
            case AntiJoin() if (step := self._resolved(node)) is not None:
                return step
            case AntiJoin(left=left, right=right):
                self.inner.add(id(left))
                a, b = self.visit(left), self.visit(right)
                op = "<=>" if node.null_safe else "="
                texts = right.text_keys() if isinstance(right, EqDeleteScan) else frozenset()
                cond = [
                    f"string({lk}) {op} {rk}" if rk in texts else f"{lk} {op} {rk}"
                    for lk, rk in node.keys
                ]
                if node.seq_guard:
                    cond.append("$data_seq < $del_seq")
                if node.part_guard and scoped_only(right):
                    cond.append("$partition = $del_partition")
                elif node.part_guard:
                    cond.append("($del_partition = -1 OR $partition = $del_partition)")
                return self.emit(f"left_anti join [{a}] with [{b}] on " + " AND ".join(cond))
            case Union(inputs=inputs, columns=cols):
                needed = frozenset(c.name for c in cols)
                for i in inputs:
                    self.needed[id(i)] = needed
                steps = [self.visit(i) for i in inputs]
                return self.emit(
                    "unionAll "
                    + ", ".join(f"[{s}]" for s in steps)
                    + " (each projected to the scan's columns)"
                )
            case CommitChanges():
                parts = {k: self.visit(p) for k, p in node.parts()}
                pieces = []
                if "removed" in parts:
                    pieces.append(f"[{parts['removed']}] as DELETE")
                if "before" in parts and node.deletes_only:
                    pieces.append(
                        f"left_anti join [{parts['before']}] with [{parts['after']}] on _file, "
                        "_pos: rows the commit's new deletes removed, as DELETE"
                    )
                elif "before" in parts:
                    pieces.append(
                        f"full_outer join [{parts['before']}] with [{parts['after']}] on _file, "
                        "_pos: rows of one side only as DELETE / INSERT"
                    )
                if "added" in parts:
                    pieces.append(f"[{parts['added']}] as INSERT")
                if not pieces:
                    return self.emit(
                        f"commit {node.ordinal} (snapshot {node.snapshot_id}, "
                        f"{node.operation}): nothing to read"
                    )
                return self.emit(
                    f"commit {node.ordinal} (snapshot {node.snapshot_id}, {node.operation}): "
                    + "; ".join(pieces)
                )
            case TableChanges(commits=commits):
                steps = [self.visit(c) for c in commits or ()]
                mixed = [c for c in commits or () if c.mixed]
                text = "unionAll " + (", ".join(f"[{s}]" for s in steps) or "(no commits)")
                if mixed:
                    text += (
                        f"; the {len(mixed)} commit(s) with both kinds through one window "
                        "over (ordinal, every column): identical DELETE/INSERT pairs cancelled"
                    )
                    if node.identifier:
                        text += (
                            ", a key (" + ", ".join(node.identifier) + ") both deleted and "
                            "inserted by one commit is UPDATE_BEFORE / UPDATE_AFTER"
                        )
                return self.emit(text)
            case MetadataTable():
                return self.emit(
                    f"createDataFrame: {node.rows()} row(s) of {node.table}.{node.kind} "
                    "(pyiceberg's inspect, read at planning)"
                )
            case SparkQuery(scans=scans):
                steps = [self.visit(i) for i in scans]
                for i, (scan, step) in enumerate(zip(scans, steps), start=1):
                    fence = (
                        ", where spark_partition_id() >= 0 (a barrier: Spark pushes no join "
                        "into the scan's reads)"
                        if needs_barrier(scan, self.facts)
                        else ""
                    )
                    select = (
                        f"[{step}]"
                        if named_as_table(scan)
                        else f"select [{step}] the table's columns by name"
                    )
                    self.emit(f"{select}{fence} -> temporary view scan_{i}")
                return self.emit(
                    "spark.sql(the query above, over the views); the views are dropped once "
                    "Spark has analysed it"
                )
        return self.emit(type(node).__name__)

    def _resolved(self, node: AntiJoin) -> int | None:
        """The steps of a branch whose equality deletes are resolved (compile.py _resolved),
        its last step's number; None when it joins."""
        chain = chain_of(node)
        if chain is None or id(node) in self.inner:
            return None
        base, joins = chain
        res = decide(base, joins)
        if res.method != "positions":
            n = len(base.data_files())
            self.emit(f"branch of {n} data file(s): " + explain_line(res, base))
            return None
        needed = self.needed.get(id(node))
        if res.missing:
            sides = [self.visit(self._unfiltered(j.right)) for j in joins]
            self.emit(explain_line(res, base, ", ".join(f"[{s}]" for s in sides)))
        else:
            self.emit(explain_line(res, base))
        scan = resolved_scan(base, res, needed, preview=True)
        self.kept.append(scan)
        return self.visit(scan)

    def _unfiltered(self, side: Plan) -> Plan:
        """A delete side without the query's filters, one per side (as the compiler's
        reuse makes one DataFrame of it), kept alive while described: steps are found by id."""
        if id(side) not in self.unfiltered:
            self.unfiltered[id(side)] = replace(side, pushed=())
        return self.unfiltered[id(side)]

    def _persist(self, est: int) -> None:
        """The step of a delete side kept in Spark's cache (as reuse.cached keeps it)."""
        if keeps(est, current().delete_cache_bytes):
            self.emit(
                "persist: kept in Spark's cache for later queries of the session "
                "(delete_cache_bytes)"
            )

    def _scan(self, node: IcebergScan) -> int:
        tasks = node.data_files()
        deletes = node.deletes_by_id()
        if tasks and counted_from_metadata(
            len(node.fields),
            len(node.hidden),
            len(node.meta),
            len(node.pushed),
            len(node.eq_sets),
            tasks,
            deletes,
        ):
            with_pos = sum(1 for t in tasks if t.pos_deletes)
            return self.emit(
                f"spark.range(rows): {len(tasks)} data file(s) of {node.table} hold "
                f"{sum(t.record_count for t in tasks)} row(s) by their metadata, less the "
                f"positions deleted from {with_pos} of them (position delete files and "
                "deletion vectors read on the driver); no column is needed, so no data file "
                "is read"
            )
        cols = ", ".join(f.col.show() for f in node.fields) or "no columns"
        how = reading(tasks, self.facts)
        step = self.emit(self.read(tasks, "data", how, f"of {node.table}, columns by name: {cols}"))
        if node.pushed:
            step = self.emit(
                "where "
                + " AND ".join(e.text for e in node.pushed)
                + " (pushed into the Parquet scan)"
            )
        fk = how.key
        key = fk.describe()
        strategy = position_strategy(tasks, deletes, fk)
        if strategy is not None:
            used = {p for t in tasks for p in t.pos_deletes}
            n_dv = sum(1 for p in used if deletes[p].is_dv)
            n_res = sum(1 for p in used if deletes[p].kind == RESOLVED)
            n_files = len(used) - n_dv - n_res
            if n_res:
                self.emit(
                    f"resolved equality-delete positions of {n_res} data file(s), held on the "
                    "driver, as position deletes"
                    + (
                        ", one row of positions per data file, exploded"
                        if strategy.method != "bitmap"
                        else ""
                    )
                )
            if n_dv:
                self.emit(
                    f"read on the driver: {n_dv} deletion vector(s) (Puffin blobs read by "
                    "offset and length; length, magic and CRC checked)"
                    + (
                        ", as one row of positions per data file, exploded"
                        if strategy.method != "bitmap"
                        else ""
                    )
                )
            if strategy.method == "bitmap" and n_files:
                self.emit(
                    f"read on the driver: {n_files} position delete file(s) "
                    "(file_path, pos), rows kept for the applicable (delete, data file) pairs"
                )
            elif n_files:
                files = [
                    deletes[p]
                    for p in sorted(used)
                    if not deletes[p].is_dv and deletes[p].kind != RESOLVED
                ]
                detail = (
                    "(file_path, pos), joined with broadcast(applicable pairs) on the delete "
                    "file's key and the recorded data file path"
                )
                self.emit(self.read(files, "position delete", reading(files, self.facts), detail))
            est = position_relation_bytes(strategy, fk.is_long)
            if strategy.method != "bitmap":
                self._persist(est)
                self.emit(
                    f"join broadcast(recorded row counts) on {key}: a row at or past its file's "
                    "count stops the query"
                )
            side = broadcast_text("deleted positions", strategy.delete_rows, est, self.limit)
            step = self.emit(
                strategy.describe(key, side) + ": deleted positions removed in the scan"
            )
        if "_pos" in node.hidden:
            step = self.emit("_pos = _metadata.row_index")
        per_file = [h for h in node.hidden if h != "_pos"]
        if per_file:
            step = self.emit(
                f"join broadcast(file metadata table) on {key} -> {', '.join(per_file)}"
            )
        if node.meta:
            step = self.emit(f"join broadcast(data file table) on {key} -> {', '.join(node.meta)}")
        return step


def _mib(n: int) -> str:
    return f"{n / (1 << 20):g} MiB"


def describe(plan: Plan, facts: SessionFacts | None = None) -> str:
    """EXPLAIN PHYSICAL of `plan`, for a session of these facts (reads.session_facts; default:
    a session of mor's own, whose broadcast limit follows the driver_memory setting)."""
    if facts is None:
        s = current()
        limit = s.broadcast_bytes or default_broadcast_bytes(s.driver_memory, None)
        lists = None if s.file_lists else "setting file_lists is off"
        facts = SessionFacts(broadcast_limit=limit, lists=lists)
    d = _Describer(facts)
    d.visit(plan)
    return "== Physical Plan (DataFrame operations) ==\n" + "\n".join(d.lines) + "\n"
