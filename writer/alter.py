"""ALTER TABLE as one metadata commit, with Iceberg's rules (pyiceberg's schema, spec, sort
order and snapshot-reference updates apply them: safe type promotions only, no required
column added, field ids never reused), and the rules Iceberg's Spark catalog adds: no
column dropped that the current partition spec or the identifier fields use.

Each change is a planner `Change` (planner/statement_plans.py): its `kind` names the method
here that applies it to the transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError, TableAlreadyExistsError, ValidationError
from pyiceberg.table import Transaction
from pyiceberg.table.sorting import NullOrder
from pyiceberg.table.update.snapshot import ManageSnapshots
from pyiceberg.transforms import IdentityTransform, parse_transform

from mor.planner.errors import ColumnNotFoundError, TableNotFoundError, UnsupportedError
from mor.writer.catalog_changes import CatalogChangeError, load, v3_models, v3_writes


def alter_table(catalog: Catalog, identifier: str, changes: Sequence[Any]) -> str:
    """Apply `changes` to `identifier` in one commit; what was done, in one line. A change
    Iceberg refuses is one CatalogChangeError naming it, and nothing is committed."""
    renames = [c for c in changes if c.kind == "rename_table"]
    if renames:
        if len(changes) != 1:
            raise UnsupportedError("RENAME TO is a statement of its own")
        return _rename(catalog, identifier, renames[0].arg("to"))
    table = load(catalog, identifier)
    before = table.metadata.format_version
    with v3_models():  # the transaction's metadata is made again each time it is read
        txn = table.transaction()
        done = apply_changes(txn, changes, identifier)
        after = txn.table_metadata.format_version
        try:
            with v3_writes(
                catalog, max(before, after), table.metadata_location, identifier, table.io
            ):
                txn.commit_transaction()
        except (ValueError, ValidationError) as e:
            raise CatalogChangeError(f"ALTER TABLE {identifier}: {_reason(e)}") from None
    return done


def apply_changes(txn: Transaction, changes: Sequence[Any], identifier: str) -> str:
    """Apply `changes` to the transaction `txn` (nothing committed: `txn.table_metadata` is
    the table as they leave it); what they do, in one line."""
    done = []
    try:
        with v3_models():
            _apply_all(txn, changes, identifier, done)
    except (ValueError, ValidationError) as e:
        raise CatalogChangeError(f"ALTER TABLE {identifier}: {_reason(e)}") from None
    return "; ".join(d for d in done if d)


def _apply_all(txn: Transaction, changes: Sequence[Any], identifier: str, done: list[str]) -> None:
    schema_changes = [c for c in changes if c.kind in _SCHEMA]
    if schema_changes:  # one new schema for the statement, as Iceberg's UpdateSchema
        update = txn.update_schema()
        for c in schema_changes:
            done.append(_SCHEMA[c.kind](txn, update, c, identifier))
        update.commit()
    spec_changes = [c for c in changes if c.kind in _SPEC]
    if spec_changes:  # one new spec (REPLACE PARTITION FIELD: a field out, one in)
        update = txn.update_spec()
        for c in spec_changes:
            done.append(_SPEC[c.kind](txn, update, c, identifier))
        update.commit()
    for c in changes:
        if c.kind not in _SCHEMA and c.kind not in _SPEC:
            done.append(_APPLY[c.kind](txn, c, identifier))


def renamed_to(identifier: str, to: tuple[str, ...], catalog_name: str) -> str:
    """The new name of a RENAME TO (a one-part name stays in the table's namespace)."""
    if len(to) == 3:
        if to[0] != catalog_name:
            raise UnsupportedError(f"RENAME TO {'.'.join(to)}: a table stays in its catalog")
        return ".".join(to[1:])
    return ".".join(to) if len(to) > 1 else f"{identifier.rsplit('.', 1)[0]}.{to[0]}"


def _reason(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text[:300]


def _rename(catalog: Catalog, identifier: str, to: tuple[str, ...]) -> str:
    new = renamed_to(identifier, to, catalog.name)
    try:
        catalog.rename_table(identifier, new)
    except NoSuchTableError:
        raise TableNotFoundError(
            f"table {identifier} not found in catalog {catalog.name!r}"
        ) from None
    except TableAlreadyExistsError:
        raise CatalogChangeError(f"RENAME TO {new}: table {new} already exists") from None
    return f"renamed to {new}"


def _path(c: Any, key: str = "column") -> str:
    return ".".join(c.arg(key))


def _field(txn: Transaction, path: str, table: str) -> Any:
    try:
        return txn.table_metadata.schema().find_field(path, case_sensitive=False)
    except ValueError:
        cols = ", ".join(f.name for f in txn.table_metadata.schema().fields)
        raise ColumnNotFoundError(
            f"ALTER TABLE {table}: no column {path}; its columns are {cols}"
        ) from None


def _spelled(txn: Transaction, path: str, table: str) -> str:
    """`path` as the table spells it."""
    schema = txn.table_metadata.schema()
    return schema.find_column_name(_field(txn, path, table).field_id) or path


def _add_column(txn: Transaction, update: Any, c: Any, table: str) -> str:
    path = c.arg("column")
    if c.arg("required"):
        raise CatalogChangeError(
            f"ALTER TABLE {table} ADD COLUMN {'.'.join(path)} NOT NULL: Iceberg cannot add a "
            "required column (the rows already written have no value for it)"
        )
    parent = ".".join(path[:-1]) or None
    if parent is not None:
        parent = _spelled(txn, parent, table)
    name = path[-1]
    full = f"{parent}.{name}" if parent else name
    update.add_column(
        tuple([*parent.split(".")] + [name]) if parent else name,
        c.arg("type"),
        doc=c.arg("doc"),
        required=False,
    )
    if c.arg("first"):
        update.move_first(full)
    elif c.arg("after") is not None:
        update.move_after(full, _spelled(txn, ".".join(c.arg("after")), table))
    return f"added column {full}"


def _rename_column(txn: Transaction, update: Any, c: Any, table: str) -> str:
    old = _spelled(txn, _path(c), table)
    update.rename_column(old, c.arg("to"))
    return f"renamed column {old} to {c.arg('to')}"


def _drop_column(txn: Transaction, update: Any, c: Any, table: str) -> str:
    path = _path(c)
    md = txn.table_metadata
    try:
        field = md.schema().find_field(path, case_sensitive=False)
    except ValueError:
        if c.arg("if_exists"):
            return ""
        _field(txn, path, table)
        raise
    spelled = md.schema().find_column_name(field.field_id) or path
    used = [f.name for f in md.spec().fields if f.source_id == field.field_id]
    if used:
        raise CatalogChangeError(
            f"ALTER TABLE {table} DROP COLUMN {spelled}: the partition field {used[0]} uses it "
            f"(drop the partition field first: ALTER TABLE {table} DROP PARTITION FIELD "
            f"{used[0]})"
        )
    if field.field_id in md.schema().identifier_field_ids:
        raise CatalogChangeError(
            f"ALTER TABLE {table} DROP COLUMN {spelled}: it is an identifier field (ALTER "
            f"TABLE {table} DROP IDENTIFIER FIELDS {spelled} first)"
        )
    order = md.sort_order_by_id(md.default_sort_order_id)
    if order is not None and any(f.source_id == field.field_id for f in order.fields):
        raise CatalogChangeError(
            f"ALTER TABLE {table} DROP COLUMN {spelled}: the table's sort order uses it "
            f"(ALTER TABLE {table} WRITE UNORDERED, or order it by other columns, first)"
        )
    update.delete_column(spelled)
    return f"dropped column {spelled}"


def _update_column(txn: Transaction, update: Any, c: Any, table: str) -> str:
    path = _spelled(txn, _path(c), table)
    field = _field(txn, path, table)
    new_type = c.arg("type")
    required = c.arg("required")
    if required is True and not field.required:
        raise CatalogChangeError(
            f"ALTER TABLE {table} ALTER COLUMN {path} SET NOT NULL: Iceberg cannot make an "
            "optional column required (rows already written may hold NULL)"
        )
    if new_type is not None and new_type != field.field_type:
        if not (field.field_type.is_primitive and new_type.is_primitive):
            raise CatalogChangeError(
                f"ALTER TABLE {table} ALTER COLUMN {path} TYPE {new_type}: only a primitive "
                "column's type changes (nested types change by their fields)"
            )
    update.update_column(
        path,
        field_type=new_type if new_type is not None and new_type != field.field_type else None,
        required=required,
        doc=c.arg("doc"),
    )
    what = []
    if new_type is not None:
        what.append(f"type {new_type}")
    if required is not None:
        what.append("NOT NULL" if required else "nullable")
    if c.arg("doc") is not None:
        what.append("comment")
    return f"changed column {path}: {', '.join(what)}"


def _move_column(txn: Transaction, update: Any, c: Any, table: str) -> str:
    path = _spelled(txn, _path(c), table)
    if c.arg("first"):
        update.move_first(path)
    else:
        update.move_after(path, _spelled(txn, ".".join(c.arg("after")), table))
    return f"moved column {path}"


_RESERVED = ("provider", "location", "owner", "external", "is_managed_location")


def _set_properties(txn: Transaction, c: Any, table: str) -> str:
    props = dict(c.arg("properties"))
    for k in props:
        if k.lower() in _RESERVED:
            raise CatalogChangeError(
                f"ALTER TABLE {table} SET TBLPROPERTIES: {k} is a reserved property"
            )
    version = props.pop("format-version", None)
    if version is not None:
        current = txn.table_metadata.format_version
        if not version.isdigit() or int(version) not in (2, 3):
            raise CatalogChangeError(f"format-version {version}: mor's tables are v2 or v3")
        if int(version) < current:
            raise CatalogChangeError(
                f"format-version {version}: the table is v{current}, and Iceberg cannot "
                "downgrade a table"
            )
        if int(version) > current:
            from pyiceberg.table.update import UpgradeFormatVersionUpdate

            with v3_models():
                txn._apply((UpgradeFormatVersionUpdate(format_version=int(version)),))
    if props:
        txn.set_properties(props)
    return "set " + ", ".join(f"{k}={v}" for k, v in c.arg("properties"))


def _unset_properties(txn: Transaction, c: Any, table: str) -> str:
    keys = list(c.arg("keys"))
    for k in keys:
        if k.lower() in _RESERVED or k == "format-version":
            raise CatalogChangeError(f"ALTER TABLE {table} UNSET TBLPROPERTIES: {k} is reserved")
    present = [k for k in keys if k in txn.table_metadata.properties]
    if present:
        txn.remove_properties(*present)
    return "unset " + ", ".join(keys)


def _partition_field(txn: Transaction, c: Any, table: str) -> Any:
    """The current spec's field a DROP/REPLACE PARTITION FIELD names: by its name (a bare
    name), or by its source column and transform."""
    md = txn.table_metadata
    spec = md.spec()
    source = c.arg("source")
    transform = c.arg("transform")
    if transform == "identity" and len(source) == 1:
        for f in spec.fields:
            if f.name.lower() == source[0].lower():
                return f
    try:
        sid = md.schema().find_field(".".join(source), case_sensitive=False).field_id
    except ValueError:
        sid = None
    for f in spec.fields:
        if f.source_id == sid and str(f.transform) == transform:
            return f
    shown = ".".join(source) if transform == "identity" else f"{transform}({'.'.join(source)})"
    names = ", ".join(f.name for f in spec.fields) or "none"
    raise CatalogChangeError(
        f"ALTER TABLE {table}: no partition field {shown} in the current spec (its fields: {names})"
    )


def _add_partition_field(txn: Transaction, update: Any, c: Any, table: str) -> str:
    source = _spelled(txn, ".".join(c.arg("source")), table)
    transform = parse_transform(c.arg("transform"))
    name = c.arg("name") if c.arg("named") else None
    update.add_field(source, transform, name)
    return f"added partition field {name or c.arg('name')}"


def _drop_partition_field(txn: Transaction, update: Any, c: Any, table: str) -> str:
    field = _partition_field(txn, c, table)
    update.remove_field(field.name)
    return f"dropped partition field {field.name}"


def _write_order(txn: Transaction, c: Any, table: str) -> str:
    with txn.update_sort_order() as update:
        for f in c.arg("fields") or ():
            path = _spelled(txn, ".".join(f.source), table)
            nulls = NullOrder.NULLS_FIRST if f.nulls_first else NullOrder.NULLS_LAST
            transform = (
                parse_transform(f.transform) if f.transform != "identity" else (IdentityTransform())
            )
            if f.descending:
                update.desc(path, transform, nulls)
            else:
                update.asc(path, transform, nulls)
    mode = c.arg("distribution")
    if mode is not None:
        txn.set_properties({"write.distribution-mode": mode})
    order = ", ".join(str(f) for f in c.arg("fields") or ()) or "unordered"
    return f"write order {order}" + (f", distribution {mode}" if mode else "")


def _identifier_fields(txn: Transaction, c: Any, table: str) -> str:
    schema = txn.table_metadata.schema()
    current = [schema.find_column_name(i) for i in schema.identifier_field_ids]
    named = [_spelled(txn, ".".join(f), table) for f in c.arg("fields")]
    if c.kind == "set_identifier_fields":
        fields = named
    else:
        missing = [n for n in named if n not in current]
        if missing:
            raise CatalogChangeError(
                f"ALTER TABLE {table} DROP IDENTIFIER FIELDS: {missing[0]} is not an "
                f"identifier field (they are: {', '.join(str(x) for x in current) or 'none'})"
            )
        fields = [x for x in current if x not in named]
    with txn.update_schema() as update:
        update.set_identifier_fields(*[f for f in fields if f is not None])
    return "identifier fields " + (", ".join(str(f) for f in fields) or "none")


def _ref(txn: Transaction, c: Any, table: str) -> str:
    kind = "branch" if c.kind.endswith("branch") else "tag"
    name = c.arg("name")
    md = txn.table_metadata
    refs = md.refs
    if c.kind.startswith("drop_"):
        ref = refs.get(name)
        if ref is None or ref.snapshot_ref_type.value != kind:
            if c.arg("if_exists"):
                return ""
            raise CatalogChangeError(
                f"ALTER TABLE {table} DROP {kind.upper()} {name}: no such {kind}"
            )
        if name == "main":
            raise CatalogChangeError(f"ALTER TABLE {table}: the main branch cannot be dropped")
        with ManageSnapshots(txn) as ms:
            if kind == "branch":
                ms.remove_branch(name)
            else:
                ms.remove_tag(name)
        return f"dropped {kind} {name}"
    exists = name in refs
    create = c.kind.startswith("create_")
    if exists and create and not c.arg("replace"):
        if c.arg("if_not_exists"):
            return ""
        raise CatalogChangeError(f"ALTER TABLE {table} CREATE {kind.upper()} {name}: it exists")
    if not exists and not create:
        raise CatalogChangeError(
            f"ALTER TABLE {table} REPLACE {kind.upper()} {name}: no such {kind}"
        )
    if exists and refs[name].snapshot_ref_type.value != kind:
        raise CatalogChangeError(
            f"ALTER TABLE {table}: {name} is a {refs[name].snapshot_ref_type.value}"
        )
    snapshot = c.arg("snapshot")
    if snapshot is None:
        snapshot = md.current_snapshot_id if not exists else refs[name].snapshot_id
        if exists and create:  # CREATE OR REPLACE without AS OF: the current snapshot
            snapshot = md.current_snapshot_id
    if snapshot is None:
        raise CatalogChangeError(
            f"ALTER TABLE {table} CREATE {kind.upper()} {name}: the table has no snapshot yet"
        )
    if md.snapshot_by_id(snapshot) is None:
        raise CatalogChangeError(f"ALTER TABLE {table}: no snapshot {snapshot}")
    with ManageSnapshots(txn) as ms:
        if kind == "branch":
            ms.create_branch(
                snapshot,
                name,
                c.arg("max_ref_age_ms"),
                c.arg("max_snapshot_age_ms"),
                c.arg("min_snapshots"),
            )
        else:
            ms.create_tag(snapshot, name, c.arg("max_ref_age_ms"))
    return f"{kind} {name} at snapshot {snapshot}"


_SCHEMA = {
    "add_column": _add_column,
    "rename_column": _rename_column,
    "drop_column": _drop_column,
    "update_column": _update_column,
    "move_column": _move_column,
}
_SPEC = {
    "drop_partition_field": _drop_partition_field,
    "add_partition_field": _add_partition_field,
}
_APPLY = {
    "set_properties": _set_properties,
    "unset_properties": _unset_properties,
    "write_order": _write_order,
    "set_identifier_fields": _identifier_fields,
    "drop_identifier_fields": _identifier_fields,
    "create_branch": _ref,
    "replace_branch": _ref,
    "drop_branch": _ref,
    "create_tag": _ref,
    "replace_tag": _ref,
    "drop_tag": _ref,
}
