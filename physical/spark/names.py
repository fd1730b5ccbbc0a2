"""What a Spark session holds under a name (planner/names.py's `SparkNames`, asked of a
session): its temporary views, global temporary views, and the tables and views of its
catalogs. One catalog call per name asked (`spark.catalog.getTable`, classic and Spark
Connect alike), each answer kept for the statement; asked only for the names mor's
catalog holds too (never taken silently from one side) or does not hold. A name both sides
may hold is asked on a thread (`ask_ahead`) while mor's catalog loads the table: neither
answer depends on the other."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from mor.planner.names import SESSION_CATALOG, ConfiguredNames, SparkNames, catalogs_in


def _quoted(part: str) -> str:
    return "`" + part.replace("`", "``") + "`"


class SessionNames(SparkNames):
    """The names of one session (a classic or a Spark Connect one)."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self._relations: dict[tuple[str, ...], str | None] = {}
        self._asking: dict[tuple[str, ...], threading.Thread] = {}
        self._catalogs: dict[str, bool] = {}

    def relation(self, parts: tuple[str, ...]) -> str | None:
        key = tuple(p.lower() for p in parts)
        asking = self._asking.pop(key, None)
        if asking is not None:
            asking.join()
        if key not in self._relations:
            self._relations[key] = self._ask(parts)
        return self._relations[key]

    def ask_ahead(self, parts: tuple[str, ...]) -> None:
        """`relation(parts)` asked on a thread of its own (its answer kept as relation's)."""
        key = tuple(p.lower() for p in parts)
        if key in self._relations or key in self._asking:
            return

        def ask() -> None:
            self._relations[key] = self._ask(parts)

        t = threading.Thread(target=ask, name="mor-spark-names", daemon=True)
        self._asking[key] = t
        t.start()

    def _ask(self, parts: tuple[str, ...]) -> str | None:
        name = ".".join(_quoted(p) for p in parts)
        try:
            t = self.spark.catalog.getTable(name)
        except Exception:  # noqa: BLE001 - Spark says "not found" as an AnalysisException
            return None
        if getattr(t, "isTemporary", False):
            glob = len(parts) == 2 and parts[0].lower() == "global_temp"
            return f"{'global ' if glob else ''}temporary view {'.'.join(parts)}"
        kind = "view" if str(getattr(t, "tableType", "")).upper() == "VIEW" else "table"
        where = [getattr(t, "catalog", None), *(getattr(t, "namespace", None) or []), t.name]
        return f"{kind} {'.'.join(str(p) for p in where if p)}"

    def is_catalog(self, name: str) -> bool:
        low = name.lower()
        if low == SESSION_CATALOG:
            return True
        if low not in self._catalogs:
            try:
                value = self.spark.conf.get(f"spark.sql.catalog.{name}", None)
            except Exception:  # noqa: BLE001 - a configuration the session cannot read
                value = None
            self._catalogs[low] = value is not None
        return self._catalogs[low]

    def where(self) -> str:
        try:
            current = (
                f"{self.spark.catalog.currentCatalog()}.{self.spark.catalog.currentDatabase()}"
            )
        except Exception:  # noqa: BLE001 - only the message's detail
            current = SESSION_CATALOG
        return f"Spark's temporary views and its current catalog and database ({current})"


class LazyNames(SparkNames):
    """The names of a session made only when one is asked for (a command's Spark Connect
    session, made after the statements are planned)."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._names: SessionNames | None = None

    def _session(self) -> SessionNames:
        if self._names is None:
            self._names = SessionNames(self._make())
        return self._names

    def relation(self, parts: tuple[str, ...]) -> str | None:
        return self._session().relation(parts)

    def ask_ahead(self, parts: tuple[str, ...]) -> None:
        if self._names is not None:  # never makes the session only to ask ahead
            self._names.ask_ahead(parts)

    def is_catalog(self, name: str) -> bool:
        return name.lower() == SESSION_CATALOG or self._session().is_catalog(name)

    def where(self) -> str:
        return self._session().where()


def own_session_names() -> SparkNames:
    """The names of the session mor will start itself (none is running): it holds nothing,
    and its catalogs are those mor's [spark] settings configure."""
    import sys

    from mor.planner.settings import user_config

    if "pyspark.sql" in sys.modules:  # else no session can be running: no import to ask
        from mor.physical.spark.session import active_session

        active = active_session()
        if active is not None:
            return SessionNames(active)

    return ConfiguredNames(catalogs_in((k, str(v)) for k, v in user_config().spark.items()))


def spark_names(spark: Any) -> SparkNames:
    """The names of the session a statement runs on: `spark` a session, a function making
    one (asked only when a name needs it), or None (the active session, else mor's own)."""
    if spark is None:
        return own_session_names()
    if callable(spark) and not hasattr(spark, "sql"):
        return LazyNames(spark)
    return SessionNames(spark)
