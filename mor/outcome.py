"""What running a statement gives back, whatever its kind, and what its runner is given.

A runner (mor/statements.py's registry: one per plan class) takes the statement's plan and a
`RunContext` (the catalog, the session, the call's options; with `pending`, a check of the
statement only, against a script's catalog as its earlier statements leave it) and returns
an `Outcome`: rows (a query's DataFrame, or rows the catalog answered without Spark), or
what a command did (one line, and the same as a JSON object).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyspark.sql import DataFrame

    from mor.planner.pending import Pending
    from mor.planning import Names


@dataclass
class Outcome:
    """A statement's result.

    `columns`/`rows`: rows answered from the catalog (SHOW, DESCRIBE): printed as they are,
    no Spark needed; `df`: rows Spark computes (a query, a Spark statement's answer); `line`
    and `report`: what a command did; `snapshot`: the snapshot it committed (None: none);
    `affected`: rows written or changed (the `num_affected_rows` mor_sql returns)."""

    kind: str
    line: str = ""
    report: dict[str, Any] = field(default_factory=dict)
    columns: list[str] | None = None
    types: str | None = None  # the rows' Spark schema (DDL), for a DataFrame of them
    rows: list[tuple[Any, ...]] | None = None
    df: DataFrame | None = None
    snapshot: int | None = None
    affected: int | None = None
    answer: Callable[[], DataFrame] | None = None  # what mor_sql returns, when not the above


@dataclass
class RunContext:
    """What a runner gets besides its plan: the statement's catalog (made when first
    asked), its session (made when first asked), the call's options, and for a check the
    script's catalog to come (`pending`)."""

    catalog: Callable[[], Catalog]
    session: Callable[[], Any]
    names: Names
    path_map: dict[str, str] | None
    io_properties: dict[str, str] | None
    warehouse: str | None
    branch: str
    dry_run: bool
    progress: Callable[[str], None]
    views: dict[str, DataFrame]
    settings: Any
    pending: Pending | None = None

    @property
    def checking(self) -> bool:
        return self.pending is not None
