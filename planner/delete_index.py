"""Which delete files apply to a data file: the spec's scope rules as an index.

The rules (SEMANTICS.md, Iceberg spec "Scan Planning"):

- a position delete file applies to a data file when `data_seq <= delete_seq` and either its
  `referenced_data_file` is that file, or it has none and is in the same spec and partition;
  its `file_path` lower/upper bounds, when present, are an inclusive range the path must fall in
  (a range, never an equality test: a writer may record truncated bounds);
- an equality delete file applies when `data_seq < delete_seq` and it is in the same spec and
  partition, or its spec is unpartitioned (a global delete, whatever the data file's spec);
- a deletion vector (v3: a Puffin blob) applies to the one data file its
  `referenced_data_file` names, and then replaces every position delete file of that file
  (writers merge older position deletes into the vector); a data file has at most one vector in
  a snapshot, with a data sequence number at or after the file's (Iceberg's reader refuses a
  table that breaks either rule, and so does this index: InvalidDeletes).

Deletes are bucketed by where they apply (partition, referenced file, global) and each bucket is
sorted by sequence number once, with its sequence numbers kept beside it, so matching one data
file costs a dictionary lookup and a binary search per bucket, plus the deletes it returns.
No I/O, no Spark: tests/test_delete_index.py checks it against a direct reading of the rules.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pyiceberg.manifest import DataFileContent, FileFormat

from mor.planner.manifests import EntryFile

POS_FILE_PATH_ID = 2147483546
"""Field id of `file_path` in position delete files (its bounds are a path range)."""


@dataclass(slots=True)
class Entry:
    """A manifest entry as planning sees it: the file, its data sequence number (inherited
    when the entry has none), the spec it was written with and its partition tuple."""

    file: EntryFile
    seq: int
    spec_id: int
    part: tuple[Any, ...]
    first_row_id: int | None = None  # data files of v3 tables: recorded, else inherited


def bounds_admit(d: EntryFile, path: str) -> bool:
    """Whether `path` lies in the `file_path` bounds of position delete file `d` (inclusive;
    missing bounds admit every path)."""
    return _within(_path_bounds(d), path.encode("utf-8"))


def _path_bounds(d: EntryFile) -> tuple[bytes | None, bytes | None]:
    """The `file_path` lower and upper bounds of a position delete file, if recorded."""
    lo = (d.lower_bounds or {}).get(POS_FILE_PATH_ID)
    hi = (d.upper_bounds or {}).get(POS_FILE_PATH_ID)
    return lo, hi


def _within(bounds: tuple[bytes | None, bytes | None], raw: bytes) -> bool:
    lo, hi = bounds
    return (lo is None or lo <= raw) and (hi is None or raw <= hi)


def names_one(d: Any) -> str | None:
    """The one data file a position delete file names (its referenced data file, or equal
    `file_path` bounds: a truncated bound never equals the other), or None when it may name
    several."""
    ref = getattr(d, "referenced_data_file", None)
    if ref:
        return str(ref)
    lo, hi = _path_bounds(d)
    if lo is not None and lo == hi:
        return bytes(lo).decode("utf-8", errors="replace")
    return None


class InvalidDeletes(ValueError):
    """The deletes of a snapshot break a rule of the spec that no writer may break."""


def is_dv(f: EntryFile) -> bool:
    return f.file_format == FileFormat.PUFFIN


class _Bucket:
    """Deletes of one scope, sorted by (sequence number, path), with the numbers beside them."""

    __slots__ = ("entries", "seqs")

    def __init__(self, entries: list[Entry]) -> None:
        entries.sort(key=lambda x: (x.seq, x.file.file_path))
        self.entries = entries
        self.seqs = [x.seq for x in entries]

    def at_or_after(self, seq: int) -> list[Entry]:
        """delete_seq >= seq (the position rule)."""
        return self.entries[bisect.bisect_left(self.seqs, seq) :]

    def after(self, seq: int) -> list[Entry]:
        """delete_seq > seq (the equality rule)."""
        return self.entries[bisect.bisect_right(self.seqs, seq) :]


_EMPTY = _Bucket([])


class DeleteIndex:
    """The delete files of one snapshot, indexed for matching data files by the spec's rules.

    `unpartitioned(spec_id)` says whether a spec has no partition fields (its equality deletes
    are global)."""

    def __init__(self, deletes: Iterable[Entry], unpartitioned: Callable[[int], bool]) -> None:
        pos_part: dict[tuple[int, tuple[Any, ...]], list[Entry]] = {}
        pos_ref: dict[str, list[Entry]] = {}
        eq_part: dict[tuple[int, tuple[Any, ...]], list[Entry]] = {}
        eq_global: list[Entry] = []
        dvs: dict[str, list[Entry]] = {}
        for d in deletes:
            f = d.file
            if f.content == DataFileContent.POSITION_DELETES and is_dv(f):
                dvs.setdefault(f.referenced_data_file or "", []).append(d)
            elif f.content == DataFileContent.POSITION_DELETES:
                ref = f.referenced_data_file
                if ref:
                    pos_ref.setdefault(ref, []).append(d)
                else:
                    pos_part.setdefault((d.spec_id, d.part), []).append(d)
            elif f.content == DataFileContent.EQUALITY_DELETES:
                if unpartitioned(d.spec_id):
                    eq_global.append(d)
                else:
                    eq_part.setdefault((d.spec_id, d.part), []).append(d)
            else:
                raise ValueError(f"{f.file_path} is a data file, not a delete file")
        self._pos_part = {k: _Bucket(v) for k, v in pos_part.items()}
        self._pos_ref = {k: _Bucket(v) for k, v in pos_ref.items()}
        self._eq_part = {k: _Bucket(v) for k, v in eq_part.items()}
        self._eq_global = _Bucket(eq_global)
        self.has_equality = bool(eq_part or eq_global)
        self._dvs = dvs
        # each position delete file's `file_path` bounds, read once (not once per data file);
        # paths are compared only when some delete file of the partition has bounds
        self._bounds = {
            id(x): _path_bounds(x.file) for b in self._pos_part.values() for x in b.entries
        }
        self._bounded = {
            k
            for k, b in self._pos_part.items()
            if any(self._bounds[id(x)] != (None, None) for x in b.entries)
        }

    def position_deletes(self, data: Entry) -> list[Entry]:
        """Position delete files that apply to `data`, by (sequence number, path), or its
        deletion vector alone."""
        key = (data.spec_id, data.part)
        path = data.file.file_path
        dv = self._dvs.get(path)
        if dv is not None:
            return [_one_dv(dv, data)]
        scoped = self._pos_part.get(key, _EMPTY).at_or_after(data.seq)
        if key in self._bounded:
            raw = path.encode("utf-8")
            scoped = [d for d in scoped if _within(self._bounds[id(d)], raw)]
        named = self._pos_ref.get(path, _EMPTY).at_or_after(data.seq)
        if not named:
            return scoped
        return sorted(scoped + named, key=lambda x: (x.seq, x.file.file_path))

    def equality_deletes(self, data: Entry) -> list[Entry]:
        """Equality delete files that apply to `data` (before key metrics), by (sequence
        number, path)."""
        glob = self._eq_global.after(data.seq)
        scoped = self._eq_part.get((data.spec_id, data.part), _EMPTY).after(data.seq)
        if not glob:
            return scoped
        if not scoped:
            return glob
        return sorted(glob + scoped, key=lambda x: (x.seq, x.file.file_path))


def _one_dv(dvs: list[Entry], data: Entry) -> Entry:
    path = data.file.file_path
    if len(dvs) > 1:
        blobs = ", ".join(f"{d.file.file_path} at offset {d.file.content_offset}" for d in dvs[:3])
        raise InvalidDeletes(
            f"data file {path} has {len(dvs)} deletion vectors ({blobs}); the spec allows one"
        )
    dv = dvs[0]
    if dv.seq < data.seq:
        raise InvalidDeletes(
            f"deletion vector {dv.file.file_path} (sequence number {dv.seq}) is older than the "
            f"data file {path} it names (sequence number {data.seq})"
        )
    return dv
