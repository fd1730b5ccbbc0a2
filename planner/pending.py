"""A script's catalog as its earlier statements will leave it, for checking it whole.

`mor run FILE` checks every statement before the first one runs (its SQL, tables, columns
and types), so that an error in statement 5 commits nothing of statements 1-4. A statement
may name what an earlier one makes: a table `CREATE TABLE` creates (or `ALTER TABLE` changes),
a namespace, a temporary view. `Pending` holds those as the script leaves them, and the
Resolver finds a table here before asking the catalog: a table created earlier in the script
reads as an empty table of the schema it was created with. Nothing here is written anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mor.planner.errors import TableNotFoundError

if TYPE_CHECKING:
    from pyiceberg.table.metadata import TableMetadata

    from mor.planner.sources import PathMap, TableSource


@dataclass
class Pending:
    """Tables (by `catalog:ns.t`, their metadata as the script leaves them), tables dropped,
    namespaces created and dropped, and temporary views created by the statements checked
    so far."""

    tables: dict[str, TableMetadata] = field(default_factory=dict)
    dropped: set[str] = field(default_factory=set)
    namespaces: set[str] = field(default_factory=set)  # `catalog:ns`
    dropped_namespaces: set[str] = field(default_factory=set)
    views: set[str] = field(default_factory=set)  # lower-case names
    # the views' rows as Spark analyses them (DataFrames over empty scans, nothing read), so
    # the statements after them are checked against their columns; a view Spark could not
    # analyse before the script runs is in `views` alone
    frames: dict[str, Any] = field(default_factory=dict)

    def created(self, catalog: str, name: str, metadata: TableMetadata) -> None:
        key = f"{catalog}:{name}"
        self.tables[key] = metadata
        self.dropped.discard(key)

    def drop(self, catalog: str, name: str) -> None:
        key = f"{catalog}:{name}"
        self.tables.pop(key, None)
        self.dropped.add(key)

    def has_table(self, catalog: str, name: str) -> bool | None:
        """True: created earlier in the script; False: dropped by it; None: not touched."""
        key = f"{catalog}:{name}"
        if key in self.tables:
            return True
        return False if key in self.dropped else None

    def has_namespace(self, catalog: str, namespace: str) -> bool | None:
        key = f"{catalog}:{namespace}"
        if key in self.namespaces:
            return True
        return False if key in self.dropped_namespaces else None

    def source(self, catalog: str, name: str, path_map: PathMap) -> TableSource | None:
        """The table as the script leaves it (no snapshot: it reads as empty), None when the
        script has not touched it; a table the script dropped is not found."""
        from pyiceberg.io import load_file_io

        from mor.planner.sources import MappedFileIO, TableSource

        key = f"{catalog}:{name}"
        md = self.tables.get(key)
        if md is None:
            if key in self.dropped:
                raise TableNotFoundError(
                    f"table {name} not found in catalog {catalog!r}: an earlier statement of "
                    "the script drops it"
                )
            return None
        io = MappedFileIO(load_file_io({}, md.location), path_map)
        return TableSource(key, name, md, io, path_map, "")
