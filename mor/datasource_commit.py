"""The driver's side of mor's Python data source (mor/datasource.py): reading the table and
planning the tasks' job (`prepare`), committing what they wrote (`commit`), deleting it when
the write fails (`abort`). Plain values go between them: the writer is pickled to the tasks."""

from __future__ import annotations

from typing import Any

from mor.planner.errors import MorError, UnsupportedError


def _table(options: dict[str, Any]) -> tuple[Any, Any, str]:
    from mor.catalogs import resolve_catalog
    from mor.planner.settings import effective_path_map
    from mor.planner.sources import PathMap, Resolver

    name = str(options.get("path") or options.get("table") or "").strip()
    if not name:
        raise UnsupportedError('format("mor"): name the table: save("ns.t")')
    parts = tuple(name.split("."))
    if len(parts) not in (2, 3):
        raise UnsupportedError(f'format("mor"): table {name!r}: ns.t or catalog.ns.t')
    cat = resolve_catalog(options.get("catalog"), options.get("warehouse"))
    if len(parts) == 3:
        from mor.planner.sources import load_named_catalog

        cat = cat if parts[0] == cat.name else load_named_catalog(parts[0])
        parts = parts[1:]
    resolver = Resolver(cat, PathMap.of(effective_path_map(None)), None)
    src = resolver.by_name(parts)
    return cat, src, ".".join(parts)


def prepare(options: dict[str, Any], schema: Any, overwrite: bool) -> dict[str, Any]:
    """The job of one save(): the table read once (its head), the DataFrame's columns matched
    to the table's by name with Spark's ANSI store-assignment rule, the tasks' arguments."""
    from mor.inserts import append_job, table_columns
    from mor.physical.appends import ansi_castable, fits_without_loss

    cat, src, name = _table(options)
    md = src.metadata
    table_schema = md.schema()
    spec = md.spec()
    by_lower = {f.name.lower(): f for f in schema.fields}
    columns = []
    for c in table_columns(table_schema, name):
        f = by_lower.get(c.name.lower())
        if f is None:
            raise UnsupportedError(
                f'format("mor"): {name}: no column {c.name} in the DataFrame (its columns: '
                f"{', '.join(schema.names)})"
            )
        got = f.dataType
        if got != c.dtype and not (fits_without_loss(got, c.dtype) or ansi_castable(got, c.dtype)):
            raise UnsupportedError(
                f'format("mor"): {name}: column {c.name} is {c.dtype.simpleString()}, and the '
                f"DataFrame gives {got.simpleString()}: cast it first"
            )
        columns.append(f.name)
    extra = [n for n in schema.names if n.lower() not in {c.lower() for c in columns}]
    if extra:
        raise UnsupportedError(f'format("mor"): {name} has no column {extra[0]}')
    verb = "OVERWRITE" if overwrite else "APPEND"
    job, folder, place = append_job(src, table_schema, spec, f"{verb} {name}")
    head = md.snapshot_by_name("main")
    return {
        "catalog": options.get("catalog"),
        "warehouse": options.get("warehouse"),
        "table": name,
        "overwrite": overwrite,
        "head": head.snapshot_id if head is not None else None,
        "folder": folder,
        "place": place,
        "task_args": {
            "fs": place.fs,
            "folder": place.path,
            "table": name,
            "schema": job.schema,
            "partition": [list(p) for p in job.partition],
            "codec": job.codec,
            "target_bytes": job.target_bytes,
            "row_group_bytes": job.row_group_bytes,
            "clustered": False,
            "columns": columns,
        },
    }


def commit(job: dict[str, Any], records: list[dict[str, Any]]) -> None:
    """Commit what the tasks wrote: one append (an overwrite of every row with mode
    "overwrite"), on the head the writer read; files no commit references are deleted."""
    from mor.inserts import files_of
    from mor.planner.scan_planning import live_entries
    from mor.planner.state import ProcessCaches
    from mor.row_writes import clear_folder
    from mor.writer.operations import AppendFiles, OverwriteFiles
    from mor.writer.producer import SnapshotProducer

    options = {"catalog": job["catalog"], "warehouse": job["warehouse"], "path": job["table"]}
    cat, src, name = _table(options)
    md = src.metadata
    head = md.snapshot_by_id(job["head"]) if job["head"] is not None else None
    schema = md.schema()
    committed: set[str] = set()
    try:
        files = files_of(records, src, schema, md.spec(), job["folder"])
        if job["overwrite"]:
            op: Any = OverwriteFiles(added_data=files, replaces=lambda f: True)
            for e in live_entries(src, head, ProcessCaches()) if head is not None else []:
                f = e.file
                f.spec_id = e.spec_id
                op.remove(f)
        else:
            if not files:
                return
            op = AppendFiles(added_data=files)
        mapped = src.path_map if src.path_map.pairs else None
        producer = SnapshotProducer(cat, name, "main", io=src.io.inner, path_map=mapped)
        producer.commit(op, head)
        committed = {f.file_path for f in files}
    except MorError:
        raise
    finally:
        clear_folder(job["place"], job["folder"], committed)


def abort(job: dict[str, Any], records: list[dict[str, Any]]) -> None:
    """The write failed: every file of its folder is deleted (nothing references them), the
    ones tasks still stopping write after the failure too (row_writes.clear_failed)."""
    from mor.row_writes import clear_failed

    clear_failed(job["place"], job["folder"])
