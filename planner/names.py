"""Whose relation a name in a statement is: a table of mor's catalog, or Spark's.

mor binds the Iceberg tables of its catalog (and `iceberg_scan(...)`); every other relation a
statement names is Spark's, resolved by Spark's analyzer as it would resolve it without mor.
The rule, as Spark's own (docs/semantics.md, "Names"):

1. a one-part name is a DataFrame the call hands in by that name (`views=`), else Spark's: a
   temporary view first, then a table of the session's current catalog and database (mor's
   tables are always `namespace.table`);
2. `global_temp.v` is Spark's global temporary view; ``parquet.`/path` `` (and `csv`, `json`,
   `orc`, `text`, `avro`, `binaryFile`, `delta`) a file source, read by Spark;
3. `ns.t` is mor's when mor's catalog holds it, Spark's when Spark's session holds it (a table
   or view of its current catalog); both holding it is an error naming both, never a choice;
4. `cat.ns.t`: `cat` is a catalog of Spark's (`spark_catalog`, or one configured as
   `spark.sql.catalog.<cat>`) or mor's (the statement's catalog, or one configured for mor or
   pyiceberg); a name both could mean, with both holding the table, is an error too;
5. anything else mor reads as before: metadata tables (`ns.t.snapshots`), branches
   (`ns.t.branch_b`), `cat.ns.t.files`.

What Spark holds is asked of the session the statement runs on (`SparkNames`, implemented in
physical/spark/names.py), only for names mor's catalog holds too or does not hold: no JVM is
involved here. Before a session exists (mor's own session, started after planning), Spark
holds nothing but the catalogs its configuration names (`ConfiguredNames`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

# Spark's file-source names (`<format>.`<path>``): DataSource short names Spark knows
FILE_SOURCES = frozenset(
    {"parquet", "csv", "json", "orc", "text", "avro", "binaryfile", "delta", "xml"}
)
SESSION_CATALOG = "spark_catalog"


class SparkNames:
    """What the Spark session a statement runs on holds under a name. This base holds
    nothing, and knows only the session catalog: a statement planned with no session."""

    def relation(self, parts: tuple[str, ...]) -> str | None:
        """What Spark resolves `parts` to ("temporary view staging", "table
        spark_catalog.db.t"), or None when it holds nothing under that name."""
        return None

    def ask_ahead(self, parts: tuple[str, ...]) -> None:
        """Start asking what Spark holds under `parts` while the caller asks mor's catalog
        (`relation` then waits for the answer): the two catalogs are independent, and each
        answer costs a round trip (the JVM's first catalog call: 0.1-0.2 s)."""

    def is_catalog(self, name: str) -> bool:
        """Whether `name` is a catalog of the session (`spark_catalog`, or configured as
        `spark.sql.catalog.<name>`)."""
        return name.lower() == SESSION_CATALOG

    def where(self) -> str:
        """Where Spark looked, for an error naming a relation neither side holds."""
        return "Spark's temporary views and session catalog"


@dataclass
class ConfiguredNames(SparkNames):
    """A session not started yet (mor's own): it holds nothing, and its catalogs are those
    its configuration names (`spark.sql.catalog.<name>` keys of mor's [spark] settings)."""

    catalogs: frozenset[str] = frozenset()

    def is_catalog(self, name: str) -> bool:
        return super().is_catalog(name) or name.lower() in self.catalogs


@dataclass
class PendingNames(SparkNames):
    """Spark's names as a script will find them: `inner`'s, and the temporary views the
    script's earlier statements create (checked before any of them runs)."""

    inner: SparkNames
    views: set[str] = field(default_factory=set)

    def relation(self, parts: tuple[str, ...]) -> str | None:
        if len(parts) == 1 and parts[0].lower() in self.views:
            return f"temporary view {parts[0]} (created earlier in the script)"
        return self.inner.relation(parts)

    def ask_ahead(self, parts: tuple[str, ...]) -> None:
        if not (len(parts) == 1 and parts[0].lower() in self.views):
            self.inner.ask_ahead(parts)

    def is_catalog(self, name: str) -> bool:
        return self.inner.is_catalog(name)

    def where(self) -> str:
        return self.inner.where()


def catalogs_in(conf: Iterable[tuple[str, str]]) -> frozenset[str]:
    """The catalog names a Spark configuration defines (`spark.sql.catalog.<name>` keys)."""
    out = set()
    for key, _ in conf:
        if key.startswith("spark.sql.catalog."):
            name = key[len("spark.sql.catalog.") :]
            if name and "." not in name:
                out.add(name.lower())
    return frozenset(out)


def is_spark_only(parts: tuple[str, ...], quoted_last: bool) -> bool:
    """Names Spark alone resolves whatever the catalogs hold: `global_temp.v` and a file
    source ``parquet.`/path` `` (the path quoted)."""
    if len(parts) != 2:
        return False
    first = parts[0].lower()
    if first == "global_temp":
        return True
    return first in FILE_SOURCES and quoted_last
