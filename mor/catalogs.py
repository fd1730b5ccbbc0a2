"""The catalogs mor reads and writes through: the embedded one (SQLite under the warehouse,
created on first use) or one the user names (`.pyiceberg.yaml`, mor's config file), or a
pyiceberg `Catalog` given as it is."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import quote

from pyiceberg.catalog import Catalog

from mor.planner.errors import MorError, TableNotFoundError
from mor.planner.settings import default_catalog_name, user_config, warehouse_dir
from mor.planner.sources import load_named_catalog

DEFAULT_CATALOG_NAME = "mor"


def default_catalog(warehouse: str | None = None) -> Catalog:
    """The embedded catalog: SQLite at <warehouse>/catalog.db, created on first use."""
    from pyiceberg.catalog.sql import SqlCatalog

    wh = warehouse_dir(warehouse)
    os.makedirs(wh, exist_ok=True)
    return SqlCatalog(
        DEFAULT_CATALOG_NAME,
        # SQLAlchemy decodes %-escapes in the URL: a folder named `a b%20c` must be escaped
        uri=f"sqlite:///{quote(os.path.join(wh, 'catalog.db'))}",
        warehouse=f"file://{wh}",
    )


def resolve_catalog(catalog: Catalog | str | None, warehouse: str | None = None) -> Catalog:
    """The catalog to read from. The embedded one must exist: a read creates nothing."""
    if catalog is None:
        catalog = default_catalog_name(warehouse)
    if catalog is None:
        db = os.path.join(warehouse_dir(warehouse), "catalog.db")
        if not os.path.exists(db):
            raise TableNotFoundError(
                f"no embedded catalog at {db} (the warehouse is --warehouse, $MOR_WAREHOUSE, "
                f"`warehouse` in {user_config().path} or ./warehouse): run `mor demo` to "
                "create one there, or name your catalog with --catalog / catalog="
            )
        return default_catalog(warehouse)
    if isinstance(catalog, str):
        return load_named_catalog(catalog)
    if isinstance(catalog, Catalog):
        return catalog
    raise MorError(f"catalog must be a pyiceberg Catalog, a catalog name or None, not {catalog!r}")


def load_target(catalog: Catalog, name: str) -> Any:
    """A table a write command changes; one line naming it when the catalog has none."""
    try:
        return catalog.load_table(name)
    except Exception as e:  # noqa: BLE001 - NoSuchTableError and kin: one line
        raise TableNotFoundError(f"{name}: {e}") from e
