"""What Iceberg's `expire_snapshots` removes, computed without Spark and without changing
anything: which snapshots and refs go (the rules of Iceberg's `RemoveSnapshots`), and which
files only they reach (those of Iceberg's Spark action: every file reachable from the table's
metadata before, less every file reachable from it after).

Snapshots and refs (`plan_expiry`):
- a ref other than `main` whose snapshot is older than its `max-ref-age-ms` (else the table's
  `history.expire.max-ref-age-ms`, default forever) is removed;
- each remaining branch keeps the ancestors of its head that are newer than its cut-off (its
  `max-snapshot-age-ms` from now, else `older_than`, else the table's
  `history.expire.max-snapshot-age-ms`, default 5 days), and at least its `min-snapshots-to-keep`
  (else `retain_last`, else the table's `history.expire.min-snapshots-to-keep`, default 1);
- each remaining tag keeps its snapshot; a snapshot no ref reaches is kept while newer than the
  cut-off; `snapshot_ids` are removed as well (refused while a ref points at one).

Files (`reachable`): a snapshot reaches its manifest list, the manifests it lists, the data and
delete files of their live entries (ADDED or EXISTING; a Puffin file of deletion vectors is a
position delete file), and its statistics and partition statistics files.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.manifest import DataFileContent
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType

from mor.planner.errors import MorError

MAX_SNAPSHOT_AGE_MS = 5 * 24 * 3600 * 1000  # history.expire.max-snapshot-age-ms
MIN_SNAPSHOTS_TO_KEEP = 1  # history.expire.min-snapshots-to-keep
MAX_REF_AGE_MS = 2**63 - 1  # history.expire.max-ref-age-ms
KINDS = (
    "data_files",
    "position_delete_files",
    "equality_delete_files",
    "manifest_files",
    "manifest_lists",
    "statistics_files",
)
_CONTENT = {
    DataFileContent.DATA: "data_files",
    DataFileContent.POSITION_DELETES: "position_delete_files",
    DataFileContent.EQUALITY_DELETES: "equality_delete_files",
}


class ExpiryError(MorError):
    """An expiry Iceberg's rules refuse: nothing was committed, nothing deleted."""


@dataclass(frozen=True)
class Expiry:
    """The snapshots kept and removed (ids in the metadata's order) and the refs removed."""

    retained: frozenset[int]
    removed: tuple[int, ...]
    removed_refs: tuple[str, ...]

    @property
    def changes(self) -> bool:
        return bool(self.removed or self.removed_refs)


def _prop(md: TableMetadata, key: str, default: int) -> int:
    value = md.properties.get(key)
    try:
        return int(value) if value is not None else default
    except ValueError:
        raise ExpiryError(f"table property {key} = {value!r} is not a whole number") from None


def gc_enabled(md: TableMetadata) -> bool:
    return str(md.properties.get("gc.enabled", "true")).strip().lower() != "false"


def _ancestors(md: TableMetadata, sid: int | None) -> Iterator[Any]:
    seen: set[int] = set()
    while sid is not None and sid not in seen:
        snap = md.snapshot_by_id(sid)
        if snap is None:
            return
        seen.add(sid)
        yield snap
        sid = snap.parent_snapshot_id


def plan_expiry(
    md: TableMetadata,
    now_ms: int,
    older_than: int | None = None,
    retain_last: int | None = None,
    snapshot_ids: Iterable[int] = (),
) -> Expiry:
    """Which snapshots and refs `expire_snapshots` removes at `now_ms` (see the module)."""
    if retain_last is not None and retain_last < 1:
        raise ExpiryError(
            f"retain_last must be at least 1, cannot be: {retain_last}; nothing was committed"
        )
    explicit = list(dict.fromkeys(snapshot_ids))
    for sid in explicit:
        if md.snapshot_by_id(sid) is None:
            raise ExpiryError(f"no snapshot {sid} in the table; nothing was committed")
    cutoff = (
        older_than
        if older_than is not None
        else now_ms - _prop(md, "history.expire.max-snapshot-age-ms", MAX_SNAPSHOT_AGE_MS)
    )
    keep_min = (
        retain_last
        if retain_last is not None
        else _prop(md, "history.expire.min-snapshots-to-keep", MIN_SNAPSHOTS_TO_KEEP)
    )
    max_ref_age = _prop(md, "history.expire.max-ref-age-ms", MAX_REF_AGE_MS)
    refs = {}
    for name, ref in md.refs.items():
        if name == MAIN_BRANCH:
            refs[name] = ref
            continue
        snap = md.snapshot_by_id(ref.snapshot_id)
        age_limit = ref.max_ref_age_ms if ref.max_ref_age_ms is not None else max_ref_age
        if snap is not None and now_ms - snap.timestamp_ms <= age_limit:
            refs[name] = ref
    for sid in explicit:
        holders = sorted(n for n, r in refs.items() if r.snapshot_id == sid)
        if holders:
            raise ExpiryError(
                f"cannot expire {sid}: still referenced by refs {holders}; nothing was committed"
            )
    keep = {r.snapshot_id for r in refs.values()}
    reached: set[int] = set()
    for ref in refs.values():
        if ref.snapshot_ref_type == SnapshotRefType.BRANCH:
            branch_cutoff = (
                now_ms - ref.max_snapshot_age_ms if ref.max_snapshot_age_ms is not None else cutoff
            )
            least = ref.min_snapshots_to_keep if ref.min_snapshots_to_keep is not None else keep_min
            kept = 0
            for snap in _ancestors(md, ref.snapshot_id):
                if kept < least or snap.timestamp_ms >= branch_cutoff:
                    keep.add(snap.snapshot_id)
                    kept += 1
                else:
                    break
            reached.update(s.snapshot_id for s in _ancestors(md, ref.snapshot_id))
        else:
            reached.add(ref.snapshot_id)
    for snap in md.snapshots:
        if snap.snapshot_id not in reached and snap.timestamp_ms >= cutoff:
            keep.add(snap.snapshot_id)
    keep -= set(explicit) - {r.snapshot_id for r in refs.values()}
    removed = tuple(s.snapshot_id for s in md.snapshots if s.snapshot_id not in keep)
    removed_refs = tuple(n for n in md.refs if n not in refs)
    return Expiry(frozenset(keep), removed, removed_refs)


@dataclass
class Files:
    """Paths by kind (KINDS)."""

    paths: dict[str, set[str]] = field(default_factory=lambda: {k: set() for k in KINDS})

    def __sub__(self, other: Files) -> Files:
        return Files({k: self.paths[k] - other.paths[k] for k in KINDS})

    def counts(self) -> dict[str, int]:
        return {k: len(self.paths[k]) for k in KINDS}

    def all(self) -> list[tuple[str, str]]:
        return [(k, p) for k in KINDS for p in sorted(self.paths[k])]


def reachable(
    io: Any,
    md: TableMetadata,
    snapshot_ids: Iterable[int],
    missing_ok: bool = False,
    known: Files | None = None,
) -> Files:
    """Every file the snapshots `snapshot_ids` of `md` reach (see the module), each manifest
    list and manifest read once. `missing_ok`: a manifest list or manifest that is gone
    reaches nothing more (the side of what may be deleted; on the side of what is kept a
    missing file raises: what it reaches is unknown, so nothing may be deleted). `known`:
    files found reachable already; a manifest list or manifest among them is not read again
    (what it reaches is in `known` too), so the result is complete only beyond `known`."""
    from mor.planner.manifests import read_manifest, read_manifest_list

    out = Files()
    ids = set(snapshot_ids)
    seen = known.paths if known is not None else {"manifest_lists": (), "manifest_files": ()}
    manifests: dict[str, Any] = {}
    for sid in ids:
        snap = md.snapshot_by_id(sid)
        if snap is None or snap.manifest_list is None:
            continue
        if snap.manifest_list in seen["manifest_lists"]:
            continue
        try:
            listed = read_manifest_list(io, snap.manifest_list)
        except FileNotFoundError:
            if not missing_ok:
                raise
            continue
        out.paths["manifest_lists"].add(snap.manifest_list)
        for m in listed:
            if m.manifest_path not in seen["manifest_files"]:
                manifests.setdefault(m.manifest_path, m)
    def paths_of(m: Any) -> list[tuple[int, str]] | None:
        try:  # paths only: no column metrics decoded
            entries = read_manifest(io, m, metrics=False)  # live entries (ADDED, EXISTING)
        except FileNotFoundError:
            if not missing_ok:
                raise
            return None
        return [(e.data_file.content, e.data_file.file_path) for e in entries]

    # each manifest read once; several at a time (a request to an object store costs 10-50 ms)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(8, max(1, len(manifests)))) as pool:
        for path, found in zip(manifests, pool.map(paths_of, manifests.values())):
            if found is None:
                continue
            out.paths["manifest_files"].add(path)
            for content, file_path in found:
                out.paths[_CONTENT[content]].add(file_path)
    for st in list(md.statistics or []) + list(getattr(md, "partition_statistics", None) or []):
        if st.snapshot_id in ids:
            out.paths["statistics_files"].add(st.statistics_path)
    return out


def expired_metadata(
    io: Any, md: TableMetadata, retained: Iterable[int]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Iceberg's `clean_expired_metadata`: the partition specs and schemas no retained snapshot
    uses (a spec by the manifests its manifest list names, a schema by the snapshot's
    `schema-id`), the default spec and the current schema always kept. Each retained
    snapshot's manifest list is read (once per list); a table with one spec reads none."""
    from mor.planner.manifests import read_manifest_list

    specs = {md.default_spec_id}
    schemas = {md.current_schema_id}
    lists: set[str] = set()
    every = {s.spec_id for s in md.partition_specs}
    for sid in retained:
        snap = md.snapshot_by_id(sid)
        if snap is None:
            continue
        if snap.schema_id is not None:
            schemas.add(snap.schema_id)
        if specs >= every or snap.manifest_list in lists:
            continue  # every spec reachable already: no list need be read
        lists.add(snap.manifest_list)
        specs.update(m.partition_spec_id for m in read_manifest_list(io, snap.manifest_list))
    return (
        tuple(sorted(every - specs)),
        tuple(sorted(s.schema_id for s in md.schemas if s.schema_id not in schemas)),
    )


def expired_files(io: Any, md: TableMetadata, kept: Files) -> Files:
    """The files the snapshots of `md` reach beyond `kept` (every file reachable from what the
    table keeps): what expiring the others frees. A manifest or list `kept` holds is not read
    again; one already gone reaches nothing."""
    every = [s.snapshot_id for s in md.snapshots]
    return reachable(io, md, every, missing_ok=True, known=kept) - kept
