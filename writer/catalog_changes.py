"""What a DDL statement changes in the catalog, as Iceberg's Spark catalog changes it: a new
table (with its first snapshot in the same commit for CREATE TABLE AS SELECT: the table
appears only when its rows are committed, as Iceberg's staged CTAS), a replaced one (REPLACE
TABLE: a new schema, spec, order and properties in the same history), a dropped one,
namespaces, and ALTER TABLE's changes (schema, partition spec, sort order and distribution,
properties, identifier fields, branches and tags), each ALTER one metadata commit.

Metadata is built by pyiceberg (fresh field ids as Iceberg assigns them, partition field ids
from 1000, sort order ids from 1) and committed through the catalog's own commit, with a v3
table's metadata written as `v3_writes` allows (pyiceberg 0.12 models v3 metadata but
refuses to write it). No Spark here; the files of a CTAS are written by Spark's tasks before
`commit_new_table` is called.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import StagedTable, Table
from pyiceberg.table.sorting import NullOrder, SortDirection, SortField, SortOrder
from pyiceberg.transforms import parse_transform

from mor.planner.errors import MorError, TableNotFoundError, UnsupportedError


class CatalogChangeError(MorError):
    """The catalog or Iceberg's rules refused a DDL change (one line, naming it)."""


# --- v3 metadata ----------------------------------------------------------------------------


@contextmanager
def v3_writes(
    catalog: Catalog,
    format_version: int,
    before_location: str | None,
    identifier: str,
    io: Any = None,
    removed: frozenset[int] = frozenset(),
) -> Iterator[None]:
    """Let a catalog that writes a table's metadata file itself (SQL, Hive, Glue, ...) write
    a v3 one: pyiceberg 0.12 models v3 metadata and applies updates to it, but refuses to
    serialize it (iceberg-python #1551). For one commit, this catalog object serializes it
    with pydantic, as it serializes v2 metadata, after two checks that refuse the commit
    (nothing written) when they fail: the JSON parses back to the same metadata, and it keeps
    every key the previous metadata file has (`before_location`; None for a new table), at
    the top and in each snapshot (a field pyiceberg does not model would be lost). `removed`:
    snapshots the commit expires (they go, and pyiceberg clears the `parent-snapshot-id` that
    named one of them, where Iceberg's Java library keeps it). A REST catalog writes the file
    itself: nothing to do."""
    from pyiceberg.table.metadata import TableMetadataUtil
    from pyiceberg.typedef import IcebergBaseModel

    if format_version < 3 or not hasattr(type(catalog), "_write_metadata"):
        yield
        return
    before: dict[str, Any] = {}
    if before_location:
        with io.new_input(before_location).open() as stream:
            raw = stream.read()
        before = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)

    def write(metadata: Any, io: Any, metadata_path: str) -> None:
        if getattr(metadata, "next_row_id", None) is None:
            raise MorError(
                f"{identifier}: its v3 metadata has no next-row-id, which Iceberg's readers "
                "require; nothing was committed"
            )
        text = IcebergBaseModel.model_dump_json(metadata, exclude_none=True)
        after = json.loads(text)
        lost = sorted(set(before) - set(after))
        snaps = {s["snapshot-id"]: s for s in after.get("snapshots", [])}
        for old in before.get("snapshots", []):
            if old["snapshot-id"] in removed:
                continue
            lost += [
                f"snapshot {old['snapshot-id']} {k}"
                for k in old
                if k not in snaps.get(old["snapshot-id"], {})
                and not (k == "parent-snapshot-id" and old[k] in removed)
            ]
        if lost:
            raise MorError(
                f"{identifier}: its v3 metadata written by pyiceberg would lose "
                f"{', '.join(lost[:5])}; nothing was committed"
            )
        if TableMetadataUtil.parse_raw(text) != metadata:
            raise MorError(
                f"{identifier}: its v3 metadata does not read back as written; nothing was "
                "committed"
            )
        data = text.encode()
        if ".gz." in metadata_path.rsplit("/", 1)[-1]:
            data = gzip.compress(data)
        with io.new_output(metadata_path).create(overwrite=False) as out:
            out.write(data)

    catalog._write_metadata = write  # type: ignore[method-assign]
    try:
        yield
    finally:
        del catalog._write_metadata  # type: ignore[attr-defined]


@contextmanager
def v3_models() -> Iterator[None]:
    """pyiceberg 0.12 models v3 metadata (row lineage included) but refuses to apply an
    update that makes a table v3 (`SUPPORTED_TABLE_FORMAT_VERSION` is 2): for one creation
    or upgrade, it applies it (the metadata it makes is written by `v3_writes`, checked)."""
    import pyiceberg.table.update as updates
    from pyiceberg.table.metadata import TableMetadataUtil

    before = updates.SUPPORTED_TABLE_FORMAT_VERSION
    apply = updates._apply_table_update
    original = apply.dispatch(updates.UpgradeFormatVersionUpdate)

    def upgrade(update: Any, base: Any, context: Any) -> Any:
        # a table becoming v3 starts its row ids at 0 (Iceberg's `next-row-id`, which its
        # readers require of v3 metadata; pyiceberg leaves it unset)
        out = original(update, base, context)
        if out.format_version >= 3 and getattr(out, "next_row_id", None) is None:
            copy = out.model_copy(update={"next_row_id": 0})
            out = TableMetadataUtil._construct_without_validation(copy)
        return out

    updates.SUPPORTED_TABLE_FORMAT_VERSION = max(before, 3)  # type: ignore[misc]
    apply.register(updates.UpgradeFormatVersionUpdate, upgrade)
    try:
        yield
    finally:
        updates.SUPPORTED_TABLE_FORMAT_VERSION = before  # type: ignore[misc]
        apply.register(updates.UpgradeFormatVersionUpdate, original)


# --- namespaces -----------------------------------------------------------------------------


def create_namespace(
    catalog: Catalog, namespace: str, if_not_exists: bool, properties: dict[str, str]
) -> bool:
    """Create `namespace`; whether it was created (False: it existed, IF NOT EXISTS)."""
    try:
        catalog.create_namespace(namespace, properties)
    except NamespaceAlreadyExistsError:
        if if_not_exists:
            return False
        raise CatalogChangeError(
            f"namespace {namespace} already exists in catalog {catalog.name!r}"
        ) from None
    return True


def drop_namespace(catalog: Catalog, namespace: str, if_exists: bool, cascade: bool) -> bool:
    """Drop `namespace` (with CASCADE its tables first, each dropped, not purged: Spark's
    DROP NAMESPACE ... CASCADE); whether it was dropped."""
    try:
        tables = catalog.list_tables(namespace)
    except NoSuchNamespaceError:
        if if_exists:
            return False
        raise TableNotFoundError(
            f"namespace {namespace} not found in catalog {catalog.name!r}"
        ) from None
    if tables and not cascade:
        raise CatalogChangeError(
            f"namespace {namespace} is not empty ({len(tables)} tables: "
            f"{', '.join('.'.join(t) for t in tables[:5])}): drop them first, or DROP "
            "NAMESPACE ... CASCADE"
        )
    for t in tables:
        catalog.drop_table(t)
    try:
        catalog.drop_namespace(namespace)
    except NamespaceNotEmptyError as e:
        raise CatalogChangeError(f"namespace {namespace} is not empty: {e}") from None
    return True


# --- new tables -----------------------------------------------------------------------------


def spec_of(schema: Schema, fields: Sequence[Any], table: str) -> PartitionSpec:
    """A partition spec over `schema` (field ids from 1000), from planner PartitionFields;
    a transform the source column's type cannot take is refused by name."""
    out = []
    seen = set()
    for i, f in enumerate(fields):
        source = _field_path(schema, f.source, table)
        transform = parse_transform(f.transform)
        if not transform.can_transform(source.field_type):
            raise UnsupportedError(
                f"{table}: partition transform {f} cannot take column {'.'.join(f.source)} of "
                f"type {source.field_type}"
            )
        if f.name.lower() in seen:
            raise UnsupportedError(f"{table}: two partition fields are named {f.name}")
        seen.add(f.name.lower())
        out.append(PartitionField(source.field_id, 1000 + i, transform, f.name))
    return PartitionSpec(*out, spec_id=0)


def sort_order_of(
    schema: Schema, fields: Sequence[Any], table: str, order_id: int = 1
) -> SortOrder:
    """A sort order over `schema` from planner SortFields (unsorted when there are none)."""
    if not fields:
        return SortOrder(order_id=0)
    out = []
    for f in fields:
        source = _field_path(schema, f.source, table)
        transform = parse_transform(f.transform)
        if not transform.can_transform(source.field_type):
            raise UnsupportedError(
                f"{table}: sort transform {f.transform} cannot take column "
                f"{'.'.join(f.source)} of type {source.field_type}"
            )
        out.append(
            SortField(
                source_id=source.field_id,
                transform=transform,
                direction=SortDirection.DESC if f.descending else SortDirection.ASC,
                null_order=NullOrder.NULLS_FIRST if f.nulls_first else NullOrder.NULLS_LAST,
            )
        )
    return SortOrder(*out, order_id=order_id)


def _field_path(schema: Schema, path: Sequence[str], table: str) -> Any:
    name = ".".join(path)
    try:
        return schema.find_field(name, case_sensitive=False)
    except ValueError:
        raise TableNotFoundError(
            f"{table}: no column {name}; its columns are {', '.join(f.name for f in schema.fields)}"
        ) from None


def stage_table(
    catalog: Catalog,
    identifier: str,
    schema: Schema,
    partition: Sequence[Any],
    sort: Sequence[Any],
    properties: dict[str, str],
    location: str | None,
) -> StagedTable:
    """The table `CREATE TABLE` makes, not committed: its metadata as the catalog will hold
    it (fresh field ids, spec and order over them, Iceberg's default properties), its
    location the catalog's (or `location`)."""
    spec = spec_of(schema, partition, identifier)
    order = sort_order_of(schema, sort, identifier)
    props = {"write.parquet.compression-codec": "zstd", **properties}
    version = props.get("format-version", "2")
    if version not in ("1", "2", "3"):
        raise UnsupportedError(f"{identifier}: format-version {version}; Iceberg has 1, 2 and 3")
    if version == "1":
        raise UnsupportedError(
            f"{identifier}: format-version 1 has no delete files: mor creates v2 and v3 tables"
        )
    try:
        with v3_models():
            txn = catalog.create_table_transaction(identifier, schema, location, spec, order, props)
            txn.table_metadata  # noqa: B018 - its updates applied: refused now, not at commit
    except TableAlreadyExistsError:
        raise CatalogChangeError(f"table {identifier} already exists") from None
    except NoSuchNamespaceError:
        raise TableNotFoundError(
            f"namespace {identifier.rsplit('.', 1)[0]} not found in catalog {catalog.name!r}: "
            f"CREATE NAMESPACE {identifier.rsplit('.', 1)[0]} first"
        ) from None
    return txn  # type: ignore[return-value]


def commit_new_table(catalog: Catalog, txn: Any, snapshot_updates: tuple = ()) -> Table:
    """Commit a staged table (`stage_table`), with the updates of its first snapshot when
    given (one catalog commit: the table appears with its rows, or not at all)."""
    from pyiceberg.table.update import AssertCreate

    staged = txn._table
    updates = txn._updates + tuple(snapshot_updates)
    identifier = ".".join(staged.name())
    version = max(
        [staged.metadata.format_version]
        + [int(u.format_version) for u in updates if hasattr(u, "format_version")]
    )
    try:
        with v3_models(), v3_writes(catalog, version, None, identifier):
            catalog.commit_table(staged, requirements=(AssertCreate(),), updates=updates)
    except (TableAlreadyExistsError, CommitFailedException) as e:
        raise CatalogChangeError(f"table {identifier} was created meanwhile: {e}") from None
    return catalog.load_table(identifier)


def drop_table(catalog: Catalog, identifier: str, if_exists: bool, purge: bool) -> bool:
    """Drop a table (PURGE: its files too, every snapshot's); whether it was dropped."""
    try:
        table = catalog.load_table(identifier)
    except NoSuchTableError:
        if if_exists:
            return False
        raise TableNotFoundError(
            f"table {identifier} not found in catalog {catalog.name!r}"
        ) from None
    if purge:
        if table.properties.get("gc.enabled", "true").lower() == "false":
            raise CatalogChangeError(
                f"DROP TABLE {identifier} PURGE: the table says gc.enabled=false (its files "
                "may be another table's): drop it without PURGE"
            )
        catalog.purge_table(identifier)
    else:
        catalog.drop_table(identifier)
    return True


def load(catalog: Catalog, identifier: str) -> Table:
    try:
        return catalog.load_table(identifier)
    except NoSuchTableError:
        raise TableNotFoundError(
            f"table {identifier} not found in catalog {catalog.name!r}"
        ) from None
