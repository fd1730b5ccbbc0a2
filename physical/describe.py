"""EXPLAIN PHYSICAL: the physical plan (rules/physical/) as numbered DataFrame operations.

It formats the nodes `plan_physical` made and decides nothing: the plan the compiler translates
is the plan printed. This module does not import pyspark.
"""

from __future__ import annotations

from collections.abc import Sequence

from mor.planner.errors import InternalError
from mor.planner.nodes import DataTask, DeleteTask, show_ids
from mor.planner.settings import current
from mor.rules.physical.broadcast import default_broadcast_bytes, side_text
from mor.rules.physical.equality import describe as explain_line
from mor.rules.physical.nodes import (
    AntiJoinExec,
    ChangesExec,
    CommitExec,
    CountRows,
    MetadataRows,
    PhysicalNode,
    QueryExec,
    ReadData,
    ReadEqDeletes,
    ResolvedBranch,
    UnionExec,
    ViewExec,
)
from mor.rules.physical.reading import Reading, SessionFacts, per_file_text, spark_tasks


def _files(n: int, what: str) -> str:
    return f"{n} {what} file{'' if n == 1 else 's'}"


# the method of _Describer that formats each kind of node
_FORMATS = {
    CountRows: "_count_rows",
    ReadData: "_scan",
    ReadEqDeletes: "_eq_deletes",
    ResolvedBranch: "_resolved_branch",
    AntiJoinExec: "_anti_join",
    UnionExec: "_union",
    CommitExec: "_commit",
    ChangesExec: "_changes",
    MetadataRows: "_metadata_rows",
    QueryExec: "_query",
    ViewExec: "_view",
}


class _Describer:
    def __init__(self, facts: SessionFacts) -> None:
        self.facts = facts  # the session's (reads.session_facts), or a session of mor's own
        self.limit = facts.broadcast_limit
        self.lines: list[str] = []
        self.done: dict[int, int] = {}
        self.formatted: list[PhysicalNode] = []  # every node formatted, in order

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

    def visit(self, node: PhysicalNode) -> int:
        if id(node) in self.done:
            return self.done[id(node)]
        self.formatted.append(node)
        step = self._visit(node)
        self.done[id(node)] = step
        return step

    def _visit(self, node: PhysicalNode) -> int:
        name = _FORMATS.get(type(node))
        if name is None:
            raise InternalError(f"no format for {type(node).__name__}")
        return getattr(self, name)(node)

    def _count_rows(self, node: CountRows) -> int:
        scan = node.scan
        tasks = scan.data_files()
        with_pos = sum(1 for t in tasks if t.pos_deletes)
        return self.emit(
            f"spark.range(rows): {len(tasks)} data file(s) of {scan.table} hold "
            f"{sum(t.record_count for t in tasks)} row(s) by their metadata, less the "
            f"positions deleted from {with_pos} of them (position delete files and "
            "deletion vectors read on the driver); no column is needed, so no data "
            "file is read"
        )

    def _eq_deletes(self, node: ReadEqDeletes) -> int:
        eq, how = node.node, node.reading
        kinds = sorted({"global" if f.partition_id < 0 else "partition" for f in eq.files})
        keys = ", ".join(k.col.show() for k in eq.keys)
        detail = f"of {eq.table} {show_ids(eq.eq_set)}, key columns by name: {keys}"
        self.emit(self.read(eq.files, "equality delete", how, detail))
        if eq.pushed:
            self.emit("where " + " AND ".join(e.text for e in eq.pushed))
        if not eq.meta:
            if node.compact:
                self.emit("distinct keys")
        else:
            per = per_file_text(
                "delete file table", how.key.describe(), "$del_seq, $del_partition", len(eq.files)
            )
            self.emit(f"{per} ({', '.join(kinds)})")
            if node.compact:
                self.emit("compact: one row per key and $del_partition with max($del_seq)")
        self._persist(node.persist)
        side = side_text("keys", node.broadcast, eq.rows(), node.estimate, self.limit)
        return self.emit(f"as {side}")

    def _resolved_branch(self, node: ResolvedBranch) -> int:
        res, base, step = node.resolution, node.base, node.step
        if step is not None:
            sides = [self.visit(s) for s in step.sides]
            self.formatted.append(step)
            self.emit(explain_line(res, base, ", ".join(f"[{s}]" for s in sides)))
        else:
            self.emit(explain_line(res, base))
        return self.visit(node.scan)

    def _anti_join(self, node: AntiJoinExec) -> int:
        left, right = node.left, node.right
        if node.joined is not None and node.branch is not None:
            n = len(node.branch.data_files())
            self.emit(f"branch of {n} data file(s): " + explain_line(node.joined, node.branch))
        a, b = self.visit(left), self.visit(right)
        c = node.condition
        op = "<=>" if c.null_safe else "="
        cond = [f"string({lk}) {op} {rk}" if text else f"{lk} {op} {rk}" for lk, rk, text in c.keys]
        if c.seq_guard:
            cond.append("$data_seq < $del_seq")
        if c.scope == "partition":
            cond.append("$partition = $del_partition")
        elif c.scope:
            cond.append("($del_partition = -1 OR $partition = $del_partition)")
        return self.emit(f"left_anti join [{a}] with [{b}] on " + " AND ".join(cond))

    def _union(self, node: UnionExec) -> int:
        inputs = node.inputs
        steps = [self.visit(i) for i in inputs]
        return self.emit(
            "unionAll "
            + ", ".join(f"[{s}]" for s in steps)
            + " (each projected to the scan's columns)"
        )

    def _commit(self, node: CommitExec) -> int:
        commit = node.node
        parts = {k: self.visit(p) for k, p in node.parts}
        pieces = []
        if "removed" in parts:
            pieces.append(f"[{parts['removed']}] as DELETE")
        if "before" in parts and commit.deletes_only:
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
                f"commit {commit.ordinal} (snapshot {commit.snapshot_id}, "
                f"{commit.operation}): nothing to read"
            )
        return self.emit(
            f"commit {commit.ordinal} (snapshot {commit.snapshot_id}, "
            f"{commit.operation}): " + "; ".join(pieces)
        )

    def _changes(self, node: ChangesExec) -> int:
        changes, commits = node.node, node.commits
        steps = [self.visit(c) for c in commits]
        mixed = [c for c in commits if c.node.mixed]
        text = "unionAll " + (", ".join(f"[{s}]" for s in steps) or "(no commits)")
        if mixed:
            text += (
                f"; the {len(mixed)} commit(s) with both kinds through one window "
                "over (ordinal, every column): identical DELETE/INSERT pairs cancelled"
            )
            if changes.identifier:
                text += (
                    ", a key (" + ", ".join(changes.identifier) + ") both deleted and "
                    "inserted by one commit is UPDATE_BEFORE / UPDATE_AFTER"
                )
        return self.emit(text)

    def _metadata_rows(self, node: MetadataRows) -> int:
        meta = node.node
        return self.emit(
            f"createDataFrame: {meta.rows()} row(s) of {meta.table}.{meta.kind} "
            "(pyiceberg's inspect, read at planning)"
        )

    def _query(self, node: QueryExec) -> int:
        views = node.views
        steps = [self.visit(v.input) for v in views]
        for i, (view, step) in enumerate(zip(views, steps), start=1):
            self.formatted.append(view)
            fence = (
                ", where spark_partition_id() >= 0 (a barrier: Spark pushes no join "
                "into the scan's reads)"
                if view.barrier
                else ""
            )
            select = f"[{step}]" if view.named else f"select [{step}] the table's columns by name"
            self.emit(f"{select}{fence} -> temporary view scan_{i}")
        return self.emit(
            "spark.sql(the query above, over the views); the views are dropped once "
            "Spark has analysed it"
        )

    def _view(self, node: ViewExec) -> int:
        return self.visit(node.input)

    def _persist(self, persist: bool) -> None:
        """The step of a delete side kept in Spark's cache (as reuse.cached keeps it)."""
        if persist:
            at = current().keep_at_read
            when = "from its first read" if at == 1 else f"from read {at} of it"
            self.emit(
                f"persist {when} in this session: kept in Spark's cache for later queries "
                "(delete_cache_bytes, keep_at_read)"
            )

    def _scan(self, node: ReadData) -> int:
        scan, how, strategy = node.scan, node.reading, node.positions
        tasks = scan.data_files()
        deletes = scan.deletes_by_id()
        cols = ", ".join(f.col.show() for f in scan.fields) or "no columns"
        step = self.emit(self.read(tasks, "data", how, f"of {scan.table}, columns by name: {cols}"))
        if scan.pushed:
            step = self.emit(
                "where "
                + " AND ".join(e.text for e in scan.pushed)
                + " (pushed into the Parquet scan)"
            )
        fk = how.key
        key = fk.describe()
        if strategy is not None:
            used = {p for t in tasks for p in t.pos_deletes}
            n_dv = sum(1 for p in used if deletes[p].is_dv)
            n_res = sum(1 for p in used if deletes[p].held) - n_dv
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
            elif node.spark_deletes and node.delete_reading is not None:
                files = node.spark_deletes
                detail = (
                    "(file_path, pos), joined with broadcast(applicable pairs) on the delete "
                    "file's key and the recorded data file path"
                )
                self.emit(self.read(files, "position delete", node.delete_reading, detail))
            if strategy.method != "bitmap":
                self._persist(node.persist)
                counts = per_file_text(
                    "recorded row counts", key, "$count, $recorded_path", strategy.data_files
                )
                self.emit(f"{counts}: a row at or past its file's count stops the query")
            side = side_text(
                "deleted positions",
                node.broadcast,
                strategy.delete_rows,
                node.estimate,
                self.limit,
            )
            step = self.emit(
                strategy.describe(key, side) + ": deleted positions removed in the scan"
            )
        if "_pos" in scan.hidden:
            step = self.emit("_pos = _metadata.row_index")
        per_file = [h for h in scan.hidden if h != "_pos"]
        files = len(tasks)
        if per_file:
            step = self.emit(per_file_text("file metadata table", key, ", ".join(per_file), files))
        if scan.meta:
            step = self.emit(per_file_text("data file table", key, ", ".join(scan.meta), files))
        return step


def _mib(n: int) -> str:
    return f"{n / (1 << 20):g} MiB"


def own_session_facts() -> SessionFacts:
    """The facts of a session of mor's own, whose broadcast limit follows the driver_memory
    setting (EXPLAIN without a session)."""
    s = current()
    limit = s.broadcast_bytes or default_broadcast_bytes(s.driver_memory, None)
    lists = None if s.file_lists else "setting file_lists is off"
    return SessionFacts(broadcast_limit=limit, lists=lists)


def describe_plan(plan: PhysicalNode, facts: SessionFacts) -> tuple[str, list[PhysicalNode]]:
    """EXPLAIN PHYSICAL of a physical plan, and the nodes formatted (in order)."""
    d = _Describer(facts)
    d.visit(plan)
    text = "== Physical Plan (DataFrame operations) ==\n" + "\n".join(d.lines) + "\n"
    return text, d.formatted
