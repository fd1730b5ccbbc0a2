"""The runners of the statements that change or read the catalog alone: CREATE/DROP NAMESPACE,
CREATE TABLE (without AS SELECT: mor/inserts.py runs that), DROP TABLE, ALTER TABLE, CALL of
Iceberg's procedures (writer/procedures.py, writer/expiry.py), SHOW
NAMESPACES/TABLES/CREATE TABLE/TBLPROPERTIES and DESCRIBE. No Spark: SHOW and DESCRIBE answer
from the metadata, with the columns and rows Spark's own commands give.

Each runner also checks its statement without running it (`ctx.pending`: the script's
catalog as its earlier statements leave it), and records there what it would change.
"""

from __future__ import annotations

import fnmatch
from typing import TYPE_CHECKING, Any

from mor.outcome import Outcome, RunContext
from mor.planner.errors import MorError, TableNotFoundError, UnsupportedError
from mor.planner.statement_plans import (
    AlterTable,
    CallProcedure,
    CreateNamespace,
    CreateTable,
    DescribeTable,
    DropNamespace,
    DropTable,
    ShowCreateTable,
    ShowNamespaces,
    ShowProperties,
    ShowTables,
    TableName,
)

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table.metadata import TableMetadata


def catalog_of(ctx: RunContext, name: str | None, create: bool = False) -> Catalog:
    """The catalog a statement's name means: its own (`name` None or its name), or another
    configured one. `create`: the embedded catalog is made when missing (a statement that
    creates a namespace or a table creates its warehouse too)."""
    from mor.catalogs import default_catalog
    from mor.planner.sources import load_named_catalog

    try:
        cat = ctx.catalog()
    except TableNotFoundError:
        if not create or name is not None:
            raise
        cat = default_catalog(ctx.warehouse)
    if name is None or name == cat.name:
        return cat
    return load_named_catalog(name)


def table_exists(ctx: RunContext, cat: Catalog, name: str) -> bool:
    if ctx.pending is not None:
        known = ctx.pending.has_table(cat.name, name)
        if known is not None:
            return known
    try:
        return bool(cat.table_exists(name))
    except Exception:  # noqa: BLE001 - a namespace that does not exist holds no table
        return False


def namespace_exists(ctx: RunContext, cat: Catalog, ns: str) -> bool:
    if ctx.pending is not None:
        known = ctx.pending.has_namespace(cat.name, ns)
        if known is not None:
            return known
    try:
        return bool(cat.namespace_exists(ns))
    except Exception:  # noqa: BLE001 - a catalog that cannot say: the commit will
        return True


def metadata_of(ctx: RunContext, cat: Catalog, name: str) -> TableMetadata:
    """A table's metadata as the script leaves it (a check), else as the catalog has it."""
    if ctx.pending is not None:
        known = ctx.pending.has_table(cat.name, name)
        if known:
            return ctx.pending.tables[f"{cat.name}:{name}"]
        if known is False:
            raise TableNotFoundError(
                f"table {name} not found in catalog {cat.name!r}: an earlier statement of the "
                "script drops it"
            )
    from mor.writer.catalog_changes import load

    return load(cat, name).metadata


# --- namespaces -----------------------------------------------------------------------------


def run_create_namespace(plan: CreateNamespace, ctx: RunContext) -> Outcome:
    from mor.writer.catalog_changes import create_namespace

    cat = catalog_of(ctx, plan.catalog, create=True)
    if ctx.checking or ctx.dry_run:
        if namespace_exists(ctx, cat, plan.namespace) and not plan.if_not_exists:
            if (
                ctx.pending is None
                or ctx.pending.has_namespace(cat.name, plan.namespace) is not True
            ):
                raise MorError(f"namespace {plan.namespace} already exists in catalog {cat.name!r}")
        if ctx.pending is not None:
            ctx.pending.namespaces.add(f"{cat.name}:{plan.namespace}")
            ctx.pending.dropped_namespaces.discard(f"{cat.name}:{plan.namespace}")
        return Outcome("CREATE NAMESPACE", f"namespace {plan.namespace}: would be created")
    made = create_namespace(cat, plan.namespace, plan.if_not_exists, dict(plan.properties))
    what = "created" if made else "exists already; nothing changed"
    return Outcome(
        "CREATE NAMESPACE",
        f"namespace {plan.namespace}: {what}",
        {"namespace": plan.namespace, "created": made},
    )


def run_drop_namespace(plan: DropNamespace, ctx: RunContext) -> Outcome:
    from mor.writer.catalog_changes import drop_namespace

    cat = catalog_of(ctx, plan.catalog)
    if ctx.checking or ctx.dry_run:
        if not namespace_exists(ctx, cat, plan.namespace) and not plan.if_exists:
            raise TableNotFoundError(
                f"namespace {plan.namespace} not found in catalog {cat.name!r}"
            )
        if ctx.pending is not None:
            ctx.pending.dropped_namespaces.add(f"{cat.name}:{plan.namespace}")
            ctx.pending.namespaces.discard(f"{cat.name}:{plan.namespace}")
        return Outcome("DROP NAMESPACE", f"namespace {plan.namespace}: would be dropped")
    dropped = drop_namespace(cat, plan.namespace, plan.if_exists, plan.cascade)
    what = "dropped" if dropped else "does not exist; nothing changed"
    return Outcome(
        "DROP NAMESPACE",
        f"namespace {plan.namespace}: {what}",
        {"namespace": plan.namespace, "dropped": dropped},
    )


# --- tables ---------------------------------------------------------------------------------


def new_metadata(cat: Catalog, plan: CreateTable, schema: Any) -> TableMetadata:
    """The metadata `CREATE TABLE` would make (a check: nothing written, nothing staged)."""
    from pyiceberg.table.metadata import new_table_metadata

    from mor.writer.catalog_changes import sort_order_of, spec_of

    name = plan.target.name
    spec = spec_of(schema, plan.partition, name)
    order = sort_order_of(schema, plan.sort, name)
    props = {"write.parquet.compression-codec": "zstd", **dict(plan.properties)}
    location = (
        plan.location or f"{cat.properties.get('warehouse', '/tmp')}/{name.replace('.', '/')}"
    )
    return new_table_metadata(schema, spec, order, location, props)


def run_create_table(plan: CreateTable, ctx: RunContext) -> Outcome:
    """CREATE TABLE with its columns (AS SELECT: mor/inserts.py)."""
    from mor.writer.catalog_changes import commit_new_table, stage_table

    cat = catalog_of(ctx, plan.target.catalog, create=True)
    name = plan.target.name
    exists = table_exists(ctx, cat, name)
    if exists:
        if plan.if_not_exists:
            return Outcome(
                "CREATE TABLE",
                f"table {name}: exists already; nothing changed",
                {"table": name, "created": False},
            )
        raise MorError(f"CREATE TABLE {name}: the table already exists in catalog {cat.name!r}")
    ns = name.rsplit(".", 1)[0]
    if not namespace_exists(ctx, cat, ns):
        raise TableNotFoundError(
            f"CREATE TABLE {name}: namespace {ns} not found in catalog {cat.name!r} "
            f"(CREATE NAMESPACE {ns} first)"
        )
    if ctx.checking or ctx.dry_run:
        md = new_metadata(cat, plan, plan.schema)
        if ctx.pending is not None:
            ctx.pending.created(cat.name, name, md)
        return Outcome("CREATE TABLE", f"table {name}: would be created")
    txn = stage_table(
        cat, name, plan.schema, plan.partition, plan.sort, dict(plan.properties), plan.location
    )
    table = commit_new_table(cat, txn)
    return Outcome(
        "CREATE TABLE",
        f"table {name}: created (v{table.metadata.format_version}, {table.metadata.location})",
        {"table": name, "created": True, "location": table.metadata.location},
    )


def run_drop_table(plan: DropTable, ctx: RunContext) -> Outcome:
    from mor.writer.catalog_changes import drop_table

    cat = catalog_of(ctx, plan.target.catalog)
    name = plan.target.name
    if ctx.checking or ctx.dry_run:
        if not table_exists(ctx, cat, name) and not plan.if_exists:
            raise TableNotFoundError(
                f"DROP TABLE {name}: table {name} not found in catalog {cat.name!r}"
            )
        if ctx.pending is not None:
            ctx.pending.drop(cat.name, name)
        return Outcome("DROP TABLE", f"table {name}: would be dropped")
    dropped = drop_table(cat, name, plan.if_exists, plan.purge)
    what = (
        (
            "dropped, its files deleted"
            if plan.purge
            else "dropped (its files stay: PURGE deletes them)"
        )
        if dropped
        else "does not exist; nothing changed"
    )
    return Outcome("DROP TABLE", f"table {name}: {what}", {"table": name, "dropped": dropped})


def run_alter_table(plan: AlterTable, ctx: RunContext) -> Outcome:
    from pyiceberg.table import Table

    from mor.writer.alter import alter_table, apply_changes, renamed_to

    cat = catalog_of(ctx, plan.target.catalog)
    name = plan.target.name
    if ctx.checking or ctx.dry_run:
        md = metadata_of(ctx, cat, name)
        rename = [c for c in plan.changes if c.kind == "rename_table"]
        if rename:
            new = renamed_to(name, rename[0].arg("to"), cat.name)
            if table_exists(ctx, cat, new):
                raise MorError(f"ALTER TABLE {name} RENAME TO {new}: table {new} already exists")
            if ctx.pending is not None:
                ctx.pending.drop(cat.name, name)
                ctx.pending.created(cat.name, new, md)
            return Outcome("ALTER TABLE", f"table {name}: would be renamed to {new}")
        from pyiceberg.io import load_file_io

        table = Table(tuple(name.split(".")), md, "", load_file_io({}, md.location), cat)
        txn = table.transaction()
        what = apply_changes(txn, plan.changes, name)
        if ctx.pending is not None:
            ctx.pending.created(cat.name, name, txn.table_metadata)
        return Outcome("ALTER TABLE", f"table {name}: would change: {what}")
    what = alter_table(cat, name, plan.changes)
    return Outcome(
        "ALTER TABLE",
        f"table {name}: {what or 'nothing changed'}",
        {"table": name, "changes": what},
    )


def run_call(plan: CallProcedure, ctx: RunContext) -> Outcome:
    """Iceberg's procedures: expire_snapshots (`_expire`), and those that move a branch
    (writer/procedures.py): Iceberg's output row, and one line of what moved."""
    from mor.planner.procedures import PROCEDURES
    from mor.writer.procedures import ref_move, run_ref_move, updates

    cat = catalog_of(ctx, plan.target.catalog)
    name = plan.target.name
    proc = PROCEDURES[plan.procedure]
    args = dict(plan.args)
    if plan.procedure == "expire_snapshots":
        return _expire(plan, ctx, cat, proc)
    if plan.procedure == "remove_orphan_files":
        return _orphans(plan, ctx, cat, proc)
    if plan.procedure == "rewrite_data_files":
        return _rewrite_data_files(plan, ctx, cat, proc)
    if plan.procedure == "cherrypick_snapshot":
        return _cherrypick(plan, ctx, cat, proc)
    if plan.procedure == "rewrite_manifests":
        return _rewrite_manifests(plan, ctx, cat, proc)
    done = not (ctx.checking or ctx.dry_run)
    if done:
        from mor import interrupts

        with interrupts.held(lambda: f"CALL {plan.procedure} on {name} committed"):
            move = run_ref_move(cat, name, plan.procedure, args)
    else:
        md = metadata_of(ctx, cat, name)
        move = ref_move(md, plan.procedure, args, name)
        if ctx.pending is not None:
            from pyiceberg.table.update import update_table_metadata

            changes, _ = updates(md, move)
            if changes:
                ctx.pending.created(cat.name, name, update_table_metadata(md, changes))
    report = {
        "table": name,
        "procedure": plan.procedure,
        "branch": move.branch,
        "before": move.before,
        "after": move.after,
        "committed": done and move.moves,
    }
    return _called(plan, proc, move.line(name, done), report, [move.row()] if done else None)


def _called(
    plan: CallProcedure, proc: Any, line: str, report: dict[str, Any], rows: list[Any] | None
) -> Outcome:
    """A procedure's outcome: its line and report, and Iceberg's output rows unless it was a
    dry run (`rows` None: a dry run says what it would do in a line, no committed state)."""
    if rows is None:
        return Outcome(f"CALL {plan.procedure}", line, report)
    return Outcome(
        f"CALL {plan.procedure}", line, report, columns=proc.columns, types=proc.output, rows=rows
    )


# files deleted at once by expire_snapshots and remove_orphan_files unless
# max_concurrent_deletes says otherwise: each deletion is one request to an object store
DELETE_THREADS = 8


def _expire(plan: CallProcedure, ctx: RunContext, cat: Catalog, proc: Any) -> Outcome:
    """expire_snapshots (writer/expiry.py): the metadata commit, held against Ctrl-C as every
    commit; then the deletions, which an interrupt stops (what is left stays unreferenced)."""
    from mor import interrupts
    from mor.writer.expiry import delete_expired, expire

    name = plan.target.name
    args = dict(plan.args)
    given = args.get("max_concurrent_deletes")
    threads = DELETE_THREADS if given is None else int(given)
    if threads < 1:  # refused before anything is committed
        raise UnsupportedError(
            f"CALL expire_snapshots: max_concurrent_deletes must be at least 1, not {threads}"
        )
    dry = ctx.checking or ctx.dry_run
    if ctx.checking and ctx.pending is not None and ctx.pending.has_table(cat.name, name):
        return Outcome(f"CALL {plan.procedure}")  # a table the script makes: nothing to expire
    kwargs = {
        "older_than": args.get("older_than"),
        "retain_last": args.get("retain_last"),
        "snapshot_ids": args.get("snapshot_ids") or (),
        "clean_expired_metadata": bool(args.get("clean_expired_metadata")),
    }
    if dry:
        run = expire(cat, name, dry_run=True, **kwargs)
    else:

        def before_commit() -> None:
            interrupts.raise_if_interrupted()  # nothing commits after Ctrl-C

        with interrupts.held(lambda: f"CALL expire_snapshots on {name} committed"):
            run = expire(cat, name, before_commit=before_commit, **kwargs)
        delete_expired(run, threads, interrupts.interrupted)
    removed, refs = len(run.expiry.removed), len(run.expiry.removed_refs)
    verb = "would remove" if dry else "removed"
    line = f"table {name}: {verb} {removed} snapshot(s)"
    if refs:
        line += f" and {refs} ref(s) ({', '.join(run.expiry.removed_refs)})"
    if run.removed_specs or run.removed_schemas:
        line += (
            f", partition specs {list(run.removed_specs)} and schemas "
            f"{list(run.removed_schemas)} no retained snapshot uses"
        )
    n = sum(run.row())
    line += f"; {'would delete' if dry else 'deleted'} {n} file(s)"
    if run.failed:
        path, why = run.failed[0]
        line += (
            f"; {len(run.failed)} file(s) not deleted (first: {path}: {why}): no snapshot "
            "references them any more"
        )
    report = {
        "table": name,
        "removed_snapshots": list(run.expiry.removed),
        "removed_refs": list(run.expiry.removed_refs),
        "removed_specs": list(run.removed_specs),
        "removed_schemas": list(run.removed_schemas),
        "files": {k: sorted(v) for k, v in run.gone.paths.items()},
        "not_deleted": [p for p, _ in run.failed],
        "committed": not dry
        and bool(run.expiry.changes or run.removed_specs or run.removed_schemas),
    }
    return _called(plan, proc, line, report, None if dry else [run.row()])


def _cherrypick(plan: CallProcedure, ctx: RunContext, cat: Catalog, proc: Any) -> Outcome:
    """cherrypick_snapshot (writer/cherrypick.py): one commit, held against Ctrl-C."""
    from mor import interrupts
    from mor.writer.cherrypick import cherrypick

    name = plan.target.name
    sid = dict(plan.args)["snapshot_id"]
    if ctx.checking and ctx.pending is not None and ctx.pending.has_table(cat.name, name):
        return Outcome(f"CALL {plan.procedure}")  # a table the script makes: checked when run
    dry = ctx.checking or ctx.dry_run
    if dry:
        picked = cherrypick(cat, name, sid, dry_run=True)
    else:
        with interrupts.held(lambda: f"CALL cherrypick_snapshot on {name} committed"):
            picked = cherrypick(cat, name, sid, before_commit=interrupts.raise_if_interrupted)
    report = {
        "table": name,
        "procedure": plan.procedure,
        "source": picked.source,
        "how": picked.how,
        "before": picked.before,
        "after": picked.after,
        "committed": not dry,
    }
    return _called(plan, proc, picked.line(name, not dry), report, None if dry else [picked.row()])


def _rewrite_manifests(plan: CallProcedure, ctx: RunContext, cat: Catalog, proc: Any) -> Outcome:
    """rewrite_manifests (writer/rewrite_manifests.py): the manifests written, then one commit,
    held against Ctrl-C: an interrupt before the commit (checked after each manifest read)
    commits nothing and deletes what was written. `use_caching` is a hint for Iceberg's Spark
    job; mor runs none."""
    from mor import interrupts
    from mor.writer.rewrite_manifests import rewrite_manifests

    name = plan.target.name
    args = dict(plan.args)
    if ctx.checking and ctx.pending is not None and ctx.pending.has_table(cat.name, name):
        return Outcome(f"CALL {plan.procedure}")  # a table the script makes: checked when run
    spec_id = args.get("spec_id")
    spec_id = None if spec_id is None else int(spec_id)
    dry = ctx.checking or ctx.dry_run
    if dry:
        done = rewrite_manifests(cat, name, spec_id, dry_run=True)
    else:
        with interrupts.held(lambda: f"CALL rewrite_manifests on {name} committed"):
            done = rewrite_manifests(cat, name, spec_id, check=interrupts.raise_if_asked)
    line = done.line(not dry)
    return _called(plan, proc, line, done.as_dict(not dry), None if dry else [done.row()])


def _rewrite_data_files(plan: CallProcedure, ctx: RunContext, cat: Catalog, proc: Any) -> Outcome:
    """rewrite_data_files as mor's compaction (mor/maintenance.py: bin-packing, every delete
    applied, one commit), its options translated (planner/procedures.compaction_options)."""
    from mor.maintenance import compact
    from mor.planner.procedures import compaction_options

    name = plan.target.name
    args = dict(plan.args)
    kwargs = compaction_options(
        args.get("strategy"), args.get("sort_order"), args.get("options") or ()
    )
    if ctx.checking:  # a script's check: the arguments are right; nothing is read
        return Outcome(f"CALL {plan.procedure}")
    report = compact(
        name,
        catalog=cat,
        where=args.get("where"),
        branch=args.get("branch") or ctx.branch,
        dry_run=ctx.dry_run,
        spark=ctx.session,
        progress=ctx.progress,
        **kwargs,
    )
    row = (report.data_files, len(report.written), report.data_bytes, 0, len(report.removed))
    return _called(plan, proc, report.line(), report.as_dict(), None if ctx.dry_run else [row])


def _orphans(plan: CallProcedure, ctx: RunContext, cat: Catalog, proc: Any) -> Outcome:
    """remove_orphan_files (writer/orphans.py): no commit; the deletions, which an interrupt
    stops (what is left stays an orphan, for the next run)."""
    import time

    from mor import interrupts
    from mor.planner.orphans import OLDER_THAN_MS, Prefixes
    from mor.writer.orphans import check_interval, delete_orphans, find

    name = plan.target.name
    args = dict(plan.args)
    if args.get("file_list_view") is not None:
        raise UnsupportedError(
            "CALL remove_orphan_files: file_list_view (a view of the files to compare, instead "
            "of a listing) is not read by mor yet; leave it out to list the table's folders; "
            "nothing was deleted"
        )
    given = args.get("max_concurrent_deletes")
    threads = DELETE_THREADS if given is None else int(given)
    if threads < 1:
        raise UnsupportedError(
            f"CALL remove_orphan_files: max_concurrent_deletes must be at least 1, not {threads}"
        )
    schemes = dict(args.get("equal_schemes") or ())
    authorities = dict(args.get("equal_authorities") or ())
    mode = args.get("prefix_mismatch_mode")
    Prefixes.of(schemes, authorities, mode)  # a bad mode refused before any listing
    now = int(time.time() * 1000)
    older_than = args.get("older_than")
    check_interval(older_than if older_than is not None else now - OLDER_THAN_MS, now)
    if ctx.checking:  # a script's check: the arguments are right; nothing is listed
        return Outcome(f"CALL {plan.procedure}")
    dry = ctx.dry_run or bool(args.get("dry_run"))
    run = find(
        cat,
        name,
        older_than=older_than,
        location=args.get("location"),
        equal_schemes=schemes,
        equal_authorities=authorities,
        prefix_mismatch_mode=mode,
        now_ms=now,
    )
    if not dry:
        delete_orphans(run, threads, interrupts.interrupted)
        interrupts.raise_if_interrupted()
    n = len(run.orphans)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(run.older_than / 1000))
    line = (
        f"table {name}: {n} orphan file(s), {run.bytes} bytes, written before {stamp} UTC "
        f"under {', '.join(run.listed)}"
    )
    if n:
        line += f"; {'would delete them (dry run)' if dry else 'deleted'}"
        if run.failed:
            path, why = run.failed[0]
            line += f"; {len(run.failed)} not deleted (first: {path}: {why})"
    if run.conflicts:
        line += f"; {len(run.conflicts)} scheme/authority conflict(s) kept (IGNORE)"
    report = {
        "table": name,
        "listed": run.listed,
        "older_than_ms": run.older_than,
        "orphans": [p for p, _ in run.orphans],
        "bytes": run.bytes,
        "not_deleted": [p for p, _ in run.failed],
        "dry_run": dry,
    }
    failed = {p for p, _ in run.failed}
    # a dry run answers too: Iceberg's dry run returns the files it would delete
    return _called(plan, proc, line, report, [(p,) for p, _ in run.orphans if p not in failed])


# --- what the catalog holds -------------------------------------------------------------------


def _like(names: list[str], pattern: str | None) -> list[str]:
    """Spark's SHOW ... LIKE pattern: `*` any characters, `|` alternatives, no case."""
    if pattern is None:
        return names
    alts = [p.strip().lower() for p in pattern.split("|")]
    return [n for n in names if any(fnmatch.fnmatchcase(n.lower(), a) for a in alts)]


def run_show_namespaces(plan: ShowNamespaces, ctx: RunContext) -> Outcome:
    cat = catalog_of(ctx, plan.catalog)
    if ctx.checking:
        if plan.parent and not namespace_exists(ctx, cat, plan.parent):
            raise TableNotFoundError(f"namespace {plan.parent} not found in catalog {cat.name!r}")
        return Outcome("SHOW NAMESPACES")
    parent = tuple(plan.parent.split(".")) if plan.parent else ()
    names = [".".join(ns) for ns in cat.list_namespaces(parent)]
    names = sorted(_like(names, plan.pattern))
    return Outcome(
        "SHOW NAMESPACES",
        columns=["namespace"],
        types="namespace string",
        rows=[(n,) for n in names],
    )


def run_show_tables(plan: ShowTables, ctx: RunContext) -> Outcome:
    from mor.catalog_info import list_tables

    cat = catalog_of(ctx, plan.catalog)
    if ctx.checking:  # the namespace as the script leaves it; the listing waits for the run
        if plan.namespace and not namespace_exists(ctx, cat, plan.namespace):
            raise TableNotFoundError(
                f"namespace {plan.namespace} not found in catalog {cat.name!r}"
            )
        return Outcome("SHOW TABLES")
    names = list_tables(cat, plan.namespace)
    rows = []
    for full in names:
        ns, table = full.rsplit(".", 1)
        if _like([table], plan.pattern):
            rows.append((ns, table, False))
    return Outcome(
        "SHOW TABLES",
        columns=["namespace", "tableName", "isTemporary"],
        types="namespace string, tableName string, isTemporary boolean",
        rows=rows,
    )


def _spark_type_name(t: Any) -> str:
    """A column's type as Iceberg's Spark catalog presents it (`bigint`, `timestamp`,
    `timestamp_ntz`, `struct<a:int>`)."""
    from mor.physical.scan.types import spark_type

    try:
        return spark_type(t.model_dump_json(), "").simpleString()
    except MorError:
        return str(t)


def _transform_sql(schema: Any, f: Any) -> str:
    """A partition field as Spark's PARTITIONED BY writes it (`days(ts)`, `bucket(16, id)`)."""
    src = schema.find_column_name(f.source_id) or str(f.source_id)
    t = str(f.transform)
    if t == "identity":
        return src
    if "[" in t:
        kind, arg = t[:-1].split("[")
        return f"{kind}({arg}, {src})"
    return {"year": "years", "month": "months", "day": "days", "hour": "hours"}.get(
        t, t
    ) + f"({src})"


def run_describe(plan: DescribeTable, ctx: RunContext) -> Outcome:
    cat = catalog_of(ctx, plan.target.catalog)
    md = metadata_of(ctx, cat, plan.target.name)
    schema = md.schema()
    if plan.column is not None:
        path = ".".join(plan.column)
        try:
            f = schema.find_field(path, case_sensitive=False)
        except ValueError:
            raise TableNotFoundError(
                f"DESCRIBE {plan.target}: no column {path}; its columns are "
                f"{', '.join(x.name for x in schema.fields)}"
            ) from None
        rows = [
            ("col_name", f.name),
            ("data_type", _spark_type_name(f.field_type)),
            ("comment", f.doc or "NULL"),
        ]
        return Outcome(
            "DESCRIBE",
            columns=["info_name", "info_value"],
            types="info_name string, info_value string",
            rows=rows,
        )
    rows: list[tuple[Any, ...]] = [
        (f.name, _spark_type_name(f.field_type) + (" NOT NULL" if f.required else ""), f.doc)
        for f in schema.fields
    ]
    spec = md.spec()
    if spec.fields:
        rows += [("", "", ""), ("# Partitioning", "", "")]
        rows += [(f"Part {i}", _transform_sql(schema, f), "") for i, f in enumerate(spec.fields)]
    if plan.extended:
        rows += [("", "", ""), ("# Metadata Columns", "", "")]
        meta = [
            ("_spec_id", "int"),
            ("_partition", "struct<...>"),
            ("_file", "string"),
            ("_pos", "bigint"),
        ]
        if md.format_version >= 3:
            meta += [("_row_id", "bigint"), ("_last_updated_sequence_number", "bigint")]
        rows += [(n, t, "") for n, t in meta]
        props = ",".join(f"{k}={v}" for k, v in sorted(_properties(md).items()))
        rows += [
            ("", "", ""),
            ("# Detailed Table Information", "", ""),
            ("Name", str(plan.target), ""),
            ("Type", "MANAGED", ""),
            ("Location", md.location, ""),
            ("Provider", "iceberg", ""),
            ("Table Properties", f"[{props}]", ""),
        ]
    return Outcome(
        "DESCRIBE",
        columns=["col_name", "data_type", "comment"],
        types="col_name string, data_type string, comment string",
        rows=rows,
    )


def _properties(md: TableMetadata) -> dict[str, str]:
    """A table's properties as Iceberg's Spark catalog shows them: its own, with the format,
    its version and the current snapshot."""
    out = dict(md.properties)
    out["format"] = "iceberg/parquet"
    out["format-version"] = str(md.format_version)
    if md.current_snapshot_id is not None:
        out["current-snapshot-id"] = str(md.current_snapshot_id)
    order = md.sort_order_by_id(md.default_sort_order_id)
    if order is not None and order.fields:
        schema = md.schema()
        out["sort-order"] = ", ".join(
            f"{_transform_sql(schema, f)} {f.direction.value.upper()} "
            f"{'NULLS FIRST' if f.null_order.value == 'nulls-first' else 'NULLS LAST'}"
            for f in order.fields
        )
    if md.schema().identifier_field_ids:
        schema = md.schema()
        out["identifier-fields"] = (
            "["
            + ",".join(schema.find_column_name(i) or "?" for i in schema.identifier_field_ids)
            + "]"
        )
    return out


def run_show_properties(plan: ShowProperties, ctx: RunContext) -> Outcome:
    cat = catalog_of(ctx, plan.target.catalog)
    md = metadata_of(ctx, cat, plan.target.name)
    props = _properties(md)
    if plan.key is not None:
        value = props.get(plan.key)
        rows = [
            (
                plan.key,
                value
                if value is not None
                else f"Table {plan.target} does not have property: {plan.key}",
            )
        ]
    else:
        rows = sorted(props.items())
    return Outcome(
        "SHOW TBLPROPERTIES", columns=["key", "value"], types="key string, value string", rows=rows
    )


def _sql_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _type_sql(t: Any) -> str:
    """An Iceberg type as Spark SQL writes it in a CREATE TABLE (nested names as they are)."""
    from pyiceberg.types import ListType, MapType, StructType

    if isinstance(t, StructType):
        inner = ", ".join(
            f"{_quoted(f.name)}: {_type_sql(f.field_type)}"
            + (" NOT NULL" if f.required else "")
            + (f" COMMENT {_sql_string(f.doc)}" if f.doc else "")
            for f in t.fields
        )
        return f"STRUCT<{inner}>"
    if isinstance(t, ListType):
        return f"ARRAY<{_type_sql(t.element_type)}>"
    if isinstance(t, MapType):
        return f"MAP<{_type_sql(t.key_type)}, {_type_sql(t.value_type)}>"
    return _spark_type_name(t).upper()


def _column_sql(f: Any) -> str:
    out = f"{_quoted(f.name)} {_type_sql(f.field_type)}"
    if f.required:
        out += " NOT NULL"
    if f.doc:
        out += f" COMMENT {_sql_string(f.doc)}"
    return out


def _quoted(name: str) -> str:
    plain = name.replace("_", "").isalnum() and not name[:1].isdigit()
    return name if plain else "`" + name.replace("`", "``") + "`"


def create_statement(name: TableName | str, md: TableMetadata) -> str:
    """A CREATE TABLE statement that makes a table of this one's schema, partitioning,
    location and properties (what SHOW CREATE TABLE prints; mor runs it as it is)."""
    schema = md.schema()
    cols = ",\n".join(f"  {_column_sql(f)}" for f in schema.fields)
    out = [f"CREATE TABLE {name} (\n{cols})", "USING iceberg"]
    spec = md.spec()
    if spec.fields:
        out.append(f"PARTITIONED BY ({', '.join(_transform_sql(schema, f) for f in spec.fields)})")
    out.append(f"LOCATION {_sql_string(md.location)}")
    props = {
        k: v
        for k, v in _properties(md).items()
        if k not in ("format", "current-snapshot-id", "sort-order", "identifier-fields")
    }
    if props:
        body = ",\n".join(
            f"  {_sql_string(k)} = {_sql_string(v)}" for k, v in sorted(props.items())
        )
        out.append(f"TBLPROPERTIES (\n{body})")
    return "\n".join(out) + "\n"


def run_show_create_table(plan: ShowCreateTable, ctx: RunContext) -> Outcome:
    cat = catalog_of(ctx, plan.target.catalog)
    md = metadata_of(ctx, cat, plan.target.name)
    if md.format_version < 2:
        raise UnsupportedError(f"SHOW CREATE TABLE {plan.target}: a v1 table")
    return Outcome(
        "SHOW CREATE TABLE",
        columns=["createtab_stmt"],
        types="createtab_stmt string",
        rows=[(create_statement(plan.target, md),)],
    )
