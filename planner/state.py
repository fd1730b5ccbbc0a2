"""What one process remembers between queries, owned by one object (`ProcessCaches`).

The entry points (mor/api.py, the CLI, the shell) take the process's object once per call
(`caches()`) and pass it down: planning (`attach_files`, `plan_scan`), the physical rules
(`plan_physical`, `Planner`) and the compiler (`Compiler`, `to_dataframe`) receive it as a
parameter named `cache` and never look it up themselves, so a test or a benchmark can hand
them a fresh one. The one module that reaches it by itself is physical/spark/reuse.py, which
registers, when imported, what it keeps per Spark session.

Everything kept is read from files Iceberg never changes once written (manifest lists,
manifests, delete files, data file footers) or derived from them alone (a planned scan, a
bitmap, the positions an equality delete removes from one data file), and each entry is keyed
by what it was derived from (paths and lengths, sequence numbers, schemas, filters). So a kept
entry can only save work: a query answered with every cache empty returns the same rows.

Lifetime: the process. Each cache is bounded by a setting (docs/configuration.md) and drops its
least recently used entries beyond it; `clear()` (`mor.clear_caches()`) forgets all of them at
once, as a new process would have it. What physical/ keeps per Spark session (DataFrames built
for earlier queries, delete rows persisted in Spark's cache) registers itself here
(`register`), so that it is listed, sized and cleared with the rest.

Not caches, and not here: the FileIO of each table loaded (planner/sources.py: how its files
are read, not what they hold), memos of parsed Avro schemas (planner/manifests.py: pure
functions of a schema's text, a few hundred at most) and the settings in effect
(planner/settings.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from mor.planner.cache import BoundedCache

V = TypeVar("V")

# bounds not steered by a setting
LAYOUT_CACHE_FILES = 1_000_000  # file layouts: a few hundred bytes each
JOINED_KEYS = 1_000_000  # files a filtered query joined: a key each


class Kept(BoundedCache[V]):
    """A BoundedCache that says what it holds and what bounds it."""

    def __init__(self, name: str, holds: str, unit: str, bound: str | int) -> None:
        super().__init__()
        self.name = name
        self.holds = holds
        self.unit = unit  # what its weight counts
        self.bound = bound  # the setting that bounds it, or a fixed bound


@dataclass(frozen=True, slots=True)
class CacheFigures:
    """One cache as `mor config`, the shell and EXPLAIN ANALYZE show it."""

    name: str
    holds: str
    entries: int
    held: int
    unit: str
    bound: str  # "<setting> = <value>", or the fixed bound

    def line(self) -> str:
        return (
            f"{self.name}: {self.entries} entr{'y' if self.entries == 1 else 'ies'}, "
            f"{self.held} {self.unit} held (bound: {self.bound}); {self.holds}"
        )


@dataclass(frozen=True, slots=True)
class _Registered:
    name: str
    holds: str
    unit: str
    bound: str
    size: Callable[[], tuple[int, int]]  # (entries, held)
    clear: Callable[[], None]


class ProcessCaches:
    """The caches of one process, by name (each `Kept`), and what other layers registered."""

    def __init__(self) -> None:
        # planning (planner/scan_planning.py, planner/attach.py)
        self.manifest_lists: Kept[list] = Kept(
            "manifest lists",
            "decoded manifest lists, by path and length",
            "manifests",
            "manifest_cache_entries",
        )
        self.manifests: Kept[list] = Kept(
            "manifests",
            "live entries of each manifest read, by path, length and sequence number",
            "manifest entries",
            "manifest_cache_entries",
        )
        self.scans: Kept = Kept(
            "planned scans",
            "the files and deletes of a scan, by table, snapshot, schema and filters",
            "files",
            "manifest_cache_entries",
        )
        self.layouts: Kept = Kept(
            "file layouts",
            "how each data file's columns map to the table's field ids (its footer, read once)",
            "files",
            LAYOUT_CACHE_FILES,
        )
        # reading (physical/deletes/delete_files.py, physical/deletes/bitmaps.py,
        # rules/physical/equality.py)
        self.positions: Kept[dict] = Kept(
            "position deletes",
            "positions of each position delete file and deletion vector read, per data file",
            "positions",
            "position_cache_rows",
        )
        self.bitmaps: Kept[str] = Kept(
            "bitmaps",
            "a data file's deleted positions as a bitmap, by file and the deletes applying",
            "positions (a word counts 3)",
            "position_cache_rows",
        )
        self.resolved: Kept = Kept(
            "resolved positions",
            "positions equality deletes remove from each data file, resolved by a Spark job",
            "positions",
            "resolved_cache_rows",
        )
        self.joined: Kept[int] = Kept(
            "joined files",
            "data files queries joined instead of resolving, with their number of reads "
            "(setting resolve_at_read)",
            "files",
            JOINED_KEYS,
        )
        self._registered: list[_Registered] = []

    def kept(self) -> tuple[Kept, ...]:
        return (
            self.manifest_lists,
            self.manifests,
            self.scans,
            self.layouts,
            self.positions,
            self.bitmaps,
            self.resolved,
            self.joined,
        )

    def register(
        self,
        name: str,
        holds: str,
        unit: str,
        bound: str,
        size: Callable[[], tuple[int, int]],
        clear: Callable[[], None],
    ) -> None:
        """Add what another layer keeps (once per name: a module imported again replaces it)."""
        self._registered = [r for r in self._registered if r.name != name]
        self._registered.append(_Registered(name, holds, unit, bound, size, clear))

    def figures(self) -> list[CacheFigures]:
        """Every cache with its size now, in a fixed order."""
        from mor.planner.settings import current

        settings = current()
        out = []
        for k in self.kept():
            bound = (
                f"{k.bound} = {getattr(settings, k.bound)}"
                if isinstance(k.bound, str)
                else str(k.bound)
            )
            out.append(CacheFigures(k.name, k.holds, len(k), k.held, k.unit, bound))
        for r in self._registered:
            entries, held = r.size()
            known = hasattr(settings, r.bound)
            bound = f"{r.bound} = {getattr(settings, r.bound)}" if known else r.bound
            out.append(CacheFigures(r.name, r.holds, entries, held, r.unit, bound))
        return out

    def clear(self) -> None:
        """Forget everything kept: the next query plans and reads as a new process would."""
        for k in self.kept():
            k.clear()
        for r in self._registered:
            r.clear()


_PROCESS = ProcessCaches()


def caches() -> ProcessCaches:
    """This process's caches."""
    return _PROCESS
