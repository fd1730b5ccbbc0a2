"""Write genuine Iceberg v2 merge-on-read tables from Python (pyiceberg + pyarrow).

pyiceberg has no public API that commits delete files; this module adds a snapshot producer on
top of its internals (see ../shared/ORACLE.md) that commits data files and delete files
together (a row delta), with the delete manifest writer of planner/commit.py (content
`deletes`, `equality_ids` as the spec's ints). Entries are written with null sequence numbers
and inherit their snapshot's at read time.

Used by the demo and the tests. Besides mor's maintenance commands (mor/maintenance.py), the
only module of the project that writes tables.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog import Catalog
from pyiceberg.io.pyarrow import (
    _dataframe_to_data_files,
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
    schema_to_pyarrow,
)
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
)
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionSpec
from pyiceberg.schema import Schema, prune_columns
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update.snapshot import _FastAppendFiles
from pyiceberg.typedef import Record
from pyiceberg.types import NestedField, StructType

from mor.planner.commit import FULL_METRICS, POSITION_DELETE_SCHEMA, DeleteManifestWriter


class _RowDelta(_FastAppendFiles):
    """One snapshot adding data files and delete files (each spec in its own manifest)."""

    def __init__(
        self, table: Table, tx: Any, data: Sequence[DataFile], deletes: Sequence[DataFile]
    ):
        op = Operation.OVERWRITE if deletes else Operation.APPEND
        super().__init__(operation=op, transaction=tx, io=table.io)
        self._data = list(data)
        self._deletes = list(deletes)
        self._added_data_files = self._data + self._deletes  # for the snapshot summary

    def _manifests(self) -> list[ManifestFile]:
        out: list[ManifestFile] = []
        for content, files in (
            (ManifestContent.DATA, self._data),
            (ManifestContent.DELETES, self._deletes),
        ):
            by_spec: dict[int, list[DataFile]] = defaultdict(list)
            for f in files:
                by_spec[f.spec_id].append(f)
            for spec_id, group in sorted(by_spec.items()):
                spec = self._transaction.table_metadata.specs()[spec_id]
                if content == ManifestContent.DATA:
                    writer = self.new_manifest_writer(spec)
                else:
                    writer = DeleteManifestWriter(
                        spec,
                        self.schema(),
                        self.new_manifest_output(),
                        self._snapshot_id,
                        self._compression,
                    )
                with writer:
                    for f in group:
                        writer.add(
                            ManifestEntry.from_args(
                                status=ManifestEntryStatus.ADDED,
                                snapshot_id=self._snapshot_id,
                                sequence_number=None,
                                file_sequence_number=None,
                                data_file=f,
                            )
                        )
                out.append(writer.to_manifest_file())
        return out + self._existing_manifests()


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
        rows = sorted((p, int(i)) for p, ps in positions.items() for i in ps)
        table = pa.table(
            {"file_path": [r[0] for r in rows], "pos": [r[1] for r in rows]},
            schema=schema_to_pyarrow(POSITION_DELETE_SCHEMA),
        )
        return self._delete_file(
            table,
            POSITION_DELETE_SCHEMA,
            DataFileContent.POSITION_DELETES,
            like.partition,
            like.spec_id,
            None,
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
        return self._delete_file(
            table,
            del_schema,
            DataFileContent.EQUALITY_DELETES,
            partition if partition is not None else Record(),
            sid,
            list(ids),
        )

    def _delete_file(
        self,
        table: pa.Table,
        schema: Schema,
        content: DataFileContent,
        partition: Record,
        spec_id: int,
        eq_ids: list[int] | None,
    ) -> DataFile:
        location = self.table.location()
        path = f"{location}/data/delete-{uuid.uuid4()}.parquet"
        sink = pa.BufferOutputStream()  # written through the table's FileIO: local or S3
        pq.write_table(table, sink)
        data = sink.getvalue().to_pybytes()
        with self.table.io.new_output(path).create() as out:
            out.write(data)
        meta = pq.read_metadata(pa.BufferReader(data))
        stats = data_file_statistics_from_parquet_metadata(
            meta, compute_statistics_plan(schema, FULL_METRICS), parquet_path_to_id_mapping(schema)
        )
        f = DataFile.from_args(
            content=content,
            file_path=path,
            file_format=FileFormat.PARQUET,
            partition=partition,
            file_size_in_bytes=len(data),
            equality_ids=eq_ids,
            **stats.to_serialized_dict(),
        )
        f.spec_id = spec_id
        return f

    def commit(self, data: Sequence[DataFile] = (), deletes: Sequence[DataFile] = ()) -> int:
        """Commit data and delete files as one snapshot; returns its snapshot id."""
        table = self.refresh()
        tx = table.transaction()
        producer = _RowDelta(table, tx, data, deletes)
        producer.commit()
        tx.commit_transaction()
        snap = self.refresh().current_snapshot()
        assert snap is not None
        return snap.snapshot_id

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


def _find_any(md: Any, field_id: int, prefer: Schema) -> NestedField:
    for s in [prefer, *md.schemas]:
        try:
            return s.find_field(field_id)
        except ValueError:
            continue
    raise ValueError(f"no field {field_id}")
