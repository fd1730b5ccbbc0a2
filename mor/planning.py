"""The one planning pipeline (the API, EXPLAIN, the CLI and the write commands all call it),
JVM-free: a statement bound, its scans planned, the merge-on-read rules applied; and the
checks of the public functions' arguments."""

from __future__ import annotations

import functools
import inspect
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pyiceberg.catalog import Catalog

from mor.catalogs import resolve_catalog
from mor.planner.attach import attach_files
from mor.planner.errors import ArgumentError
from mor.planner.names import SparkNames
from mor.planner.nodes import Plan
from mor.planner.pending import Pending
from mor.planner.query_metrics import MorMetrics, static_metrics
from mor.planner.settings import Settings, applied, effective_path_map
from mor.planner.sources import PathMap, Resolver
from mor.planner.sql import Statement, bind, one_statement
from mor.planner.state import ProcessCaches, caches
from mor.rules import MOR_RULES, TraceStep, optimize

_F = TypeVar("_F", bound=Callable[..., Any])


def _kind(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60] + '...' if len(text) > 60 else text}"


def _mapping_of_text(value: Any) -> bool:
    return isinstance(value, Mapping) and all(
        isinstance(k, str) and isinstance(v, (str, int, float, bool)) for k, v in value.items()
    )


# what each argument of the public functions must be, and how to say so
_ARGS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "sql": (
        lambda v: (isinstance(v, str) and v.strip() != "") or isinstance(v, Statement),
        "a SQL text (one statement)",
    ),
    "branch": (lambda v: isinstance(v, str) and v.strip() != "", "a branch name"),
    "dry_run": (lambda v: isinstance(v, bool), "True or False"),
    "name": (lambda v: isinstance(v, str) and v.strip() != "", "a table name or path"),
    "table": (lambda v: isinstance(v, str) and v.strip() != "", "a table name or path"),
    "catalog": (
        lambda v: v is None or isinstance(v, (Catalog, str)),
        "a pyiceberg Catalog, a catalog name or None",
    ),
    "spark": (
        lambda v: v is None or (hasattr(v, "createDataFrame") and hasattr(v, "sql")),
        "a SparkSession (classic or Spark Connect) or None",
    ),
    "path_map": (
        lambda v: (
            v is None or (_mapping_of_text(v) and all(isinstance(x, str) for x in v.values()))
        ),
        "a dict of recorded prefix -> actual prefix, or None",
    ),
    "io_properties": (
        lambda v: v is None or _mapping_of_text(v),
        "a dict of FileIO properties (str -> str), or None",
    ),
    "settings": (
        lambda v: v is None or isinstance(v, (Settings, Mapping)),
        "a dict of settings, a Settings or None",
    ),
    "warehouse": (lambda v: v is None or isinstance(v, (str, os.PathLike)), "a folder or None"),
    "snapshot_id": (
        lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)),
        "a snapshot id (int) or None",
    ),
    "where": (lambda v: v is None or isinstance(v, str), "a Spark SQL condition or None"),
    "checkpoint": (
        lambda v: isinstance(v, (str, os.PathLike)) and os.fspath(v).strip() != "",
        "a checkpoint file's path",
    ),
    "max_commits": (
        lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 1),
        "a number of commits, 1 or more, or None",
    ),
    "start_snapshot_id": (
        lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)),
        "a snapshot id (int) or None",
    ),
    "views": (
        lambda v: v is None
        or (
            isinstance(v, Mapping)
            and all(isinstance(k, str) and k.isidentifier() for k in v)
            and all(hasattr(d, "schema") for d in v.values())
        ),
        "a dict of view name -> DataFrame (names of one part, as a temporary view's), or None",
    ),
    "df": (lambda v: hasattr(v, "schema") and hasattr(v, "sparkSession"), "a Spark DataFrame"),
    "mode": (lambda v: isinstance(v, str), "a write mode (str)"),
    "columns": (
        lambda v: (
            v is None or (isinstance(v, (list, tuple)) and all(isinstance(c, str) for c in v))
        ),
        "a list of column names or None",
    ),
}


def checked(fn: _F) -> _F:
    """Check the arguments of a public function before anything runs: a wrong kind is one
    ArgumentError naming the function and the argument (`explain(None)`), not an
    AttributeError from deep inside."""
    sig = inspect.signature(fn)
    names = [n for n in sig.parameters if n in _ARGS]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as e:
            raise ArgumentError(f"{fn.__name__}(): {e}") from None
        for n in names:
            if n in bound.arguments:
                ok, what = _ARGS[n]
                value = bound.arguments[n]
                if not ok(value):
                    raise ArgumentError(f"{fn.__name__}(): {n} must be {what}, not {_kind(value)}")
        return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


SettingsArg = Settings | Mapping[str, Any] | None


@dataclass(frozen=True)
class Planned:
    """A query planned end to end, JVM-free: the bound plan (a SparkQuery over one IcebergScan
    per table reference), the plan after scan planning and the merge-on-read rules, the trace."""

    logical: Plan
    optimized: Plan
    trace: tuple[TraceStep, ...]
    planning_seconds: float = 0.0

    def metrics(self) -> MorMetrics:
        """Delete files and bytes read by kind, data rows, planning time (no data is read)."""
        return static_metrics(self.optimized, self.planning_seconds)


@checked
def plan_query(
    sql: str | Statement,
    *,
    catalog: Catalog | str | None = None,
    path_map: dict[str, str] | None = None,
    io_properties: dict[str, str] | None = None,
    warehouse: str | None = None,
    settings: SettingsArg = None,
    cache: ProcessCaches | None = None,
    names: Names | None = None,
) -> Planned:
    """The one planning pipeline (API, EXPLAIN and CLI all call it): bind the statement (find
    its table references and what each needs), plan each scan's files, apply the merge-on-read
    rules. `sql`: one statement's text, or a Statement from `planner.sql.split_statements`.
    `cache`: what planning keeps and reuses (default: this process's caches). `names`: what
    else the statement's names may be (Spark's session, views handed in, a script's tables
    to come: planner/names.py); default: nothing but mor's catalog."""
    with applied(settings):
        return _plan(
            sql, catalog, path_map, io_properties, warehouse, cache or caches(), names or Names()
        )


@dataclass(frozen=True)
class Names:
    """What a statement's names may be besides the tables of mor's catalog."""

    spark: SparkNames | None = None  # what Spark's session holds (None: nothing)
    given: tuple[str, ...] = ()  # the DataFrames the call hands in by name
    pending: Pending | None = None  # a script's tables as its earlier statements leave them


def _plan(
    sql: str | Statement,
    catalog: Catalog | str | None,
    path_map: dict[str, str] | None,
    io_properties: dict[str, str] | None,
    warehouse: str | None,
    cache: ProcessCaches,
    names: Names,
) -> Planned:
    if isinstance(catalog, str):
        catalog = resolve_catalog(catalog)  # an unknown catalog name fails even for iceberg_scan
    # the embedded catalog is created only when a query names a table
    resolver = Resolver(
        lambda: resolve_catalog(catalog, warehouse),
        PathMap.of(effective_path_map(path_map)),
        io_properties,
        spark=names.spark,
        given=names.given,
        pending=names.pending,
    )
    started = time.perf_counter()
    stmt = one_statement(sql) if isinstance(sql, str) else sql
    logical = bind(stmt, resolver)
    trace = [TraceStep("bind (table references, their columns and filters)", True, logical)]
    planned = attach_files(logical, resolver, cache)
    trace.append(TraceStep("plan_files (scan planning)", planned is not logical, planned))
    optimized, rule_steps = optimize(planned, MOR_RULES)
    return Planned(logical, optimized, tuple(trace + rule_steps), time.perf_counter() - started)
