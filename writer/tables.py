"""The test tables' and the demo's writer: merge-on-read histories built from Python.

`TableWriter` makes a table and commits appends, position deletes and equality deletes to it,
each commit one snapshot through the one snapshot producer (writer/producer.py, a row delta:
`append`, `overwrite` when it adds delete files too, `delete` with delete files alone), the
data files written by pyiceberg's Parquet writer and the delete files by writer/files.py, all
with full column metrics. Entries are written with null sequence numbers and inherit their
snapshot's at read time.

Used by the demo (mor/demo.py) and the tests; mor's own commands write tables through
mor/maintenance.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.io.pyarrow import _dataframe_to_data_files, schema_to_pyarrow
from pyiceberg.manifest import DataFile, DataFileContent
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionSpec
from pyiceberg.schema import Schema, prune_columns
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.typedef import Record
from pyiceberg.types import NestedField, StructType

from mor.writer.files import (
    FULL_METRICS,
    POSITION_DELETE_SCHEMA,
    position_rows,
    write_delete_file,
)
from mor.writer.operations import appended
from mor.writer.producer import SnapshotProducer


class TableWriter:
    """Builds a merge-on-read history on one table: appends, position and equality deletes."""

    def __init__(
        self,
        catalog: Catalog,
        identifier: str,
        schema: Schema,
        spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC,
        properties: dict[str, str] | None = None,
    ) -> None:
        ns = identifier.rsplit(".", 1)[0]
        catalog.create_namespace_if_not_exists(ns)
        if catalog.table_exists(identifier):
            catalog.purge_table(identifier)
        props = {"format-version": "2", **FULL_METRICS, **(properties or {})}
        self.table = catalog.create_table(
            identifier, schema=schema, partition_spec=spec, properties=props
        )
        self._producer = SnapshotProducer(catalog, identifier, prefix="rows")

    def refresh(self) -> Table:
        self.table = self.table.refresh()
        return self.table

    def data_files(self, rows: pa.Table) -> list[DataFile]:
        """Write `rows` as data files of the current spec (partitioned as the spec says)."""
        md = self.refresh().metadata
        files = list(_dataframe_to_data_files(md, rows, self.table.io, write_uuid=uuid.uuid4()))
        for f in files:
            f.spec_id = md.default_spec_id
        return files

    def position_delete_file(self, positions: dict[str, Iterable[int]], like: DataFile) -> DataFile:
        """A position delete file for data files of `like`'s partition: {path: [pos, ...]}."""
        return write_delete_file(
            self.table,
            position_rows(positions),
            POSITION_DELETE_SCHEMA,
            DataFileContent.POSITION_DELETES,
            like.partition,
            like.spec_id,
            prefix="delete",
        )

    def equality_delete_file(
        self,
        ids: Sequence[int],
        rows: list[dict[int, Any]],
        partition: Record | None = None,
        spec_id: int | None = None,
        write_order: Sequence[int] | None = None,
    ) -> DataFile:
        """An equality delete file on field ids `ids` (listed in this order in the manifest).

        `rows` map field id -> value (None is NULL). Columns are written in `write_order`.
        With no partition the file is written under `spec_id` (default: the current spec, which
        must then be unpartitioned for the delete to be global).
        """
        md = self.refresh().metadata
        schema = md.schema()
        order = list(write_order or ids)
        top = [i for i in order if _is_top_level(schema, i) or not _in_schema(schema, i)]
        nested = [i for i in order if i not in top]
        fields = [_find_any(md, i, schema) for i in top]
        if nested:  # keep the struct around a nested field, as Iceberg's TypeUtil.select does
            fields += list(prune_columns(schema, set(nested), select_full_types=False).fields)
        del_schema = Schema(*fields)
        arrow_schema = schema_to_pyarrow(del_schema)
        cols = {f.name: [_value(f, r) for r in rows] for f in del_schema.fields}
        table = pa.table(cols, schema=arrow_schema)
        sid = md.default_spec_id if spec_id is None else spec_id
        return write_delete_file(
            self.table,
            table,
            del_schema,
            DataFileContent.EQUALITY_DELETES,
            partition if partition is not None else Record(),
            sid,
            list(ids),
            prefix="delete",
        )

    def commit(self, data: Sequence[DataFile] = (), deletes: Sequence[DataFile] = ()) -> int:
        """Commit data and delete files as one snapshot; returns its snapshot id."""
        head = self.refresh().metadata.snapshot_by_name("main")
        done = self._producer.commit(appended(list(data), list(deletes)), head)
        self.refresh()
        return done.snapshot.snapshot_id

    def append(self, rows: pa.Table) -> tuple[int, list[DataFile]]:
        files = self.data_files(rows)
        return self.commit(data=files), files


def _is_top_level(schema: Schema, field_id: int) -> bool:
    return any(f.field_id == field_id for f in schema.fields)


def _in_schema(schema: Schema, field_id: int) -> bool:
    try:
        schema.find_field(field_id)
        return True
    except ValueError:
        return False


def _value(f: NestedField, row: dict[int, Any]) -> Any:
    if isinstance(f.field_type, StructType):
        return {c.name: _value(c, row) for c in f.field_type.fields}
    return row.get(f.field_id)


def _find_any(md: TableMetadata, field_id: int, prefer: Schema) -> NestedField:
    for s in [prefer, *md.schemas]:
        try:
            return s.find_field(field_id)
        except ValueError:
            continue
    raise ValueError(f"no field {field_id}")
