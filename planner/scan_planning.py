"""Scan planning over Iceberg metadata: which data files, which delete files apply to each.

pyiceberg's `plan_files()` refuses equality deletes, so this module reads the manifest list and
manifests itself (decoded by manifests.py with fastavro, pyiceberg's reader as the fallback;
fetched in parallel, kept in the process's caches: state.py) and applies the rules of
SEMANTICS.md:

- data sequence numbers (inherited from the manifest when null);
- a position delete applies when data_seq <= delete_seq and the delete is in the same spec and
  partition, or its `referenced_data_file` names the file; `file_path` bounds are only a range;
- an equality delete applies when data_seq < delete_seq and it is in the same spec and partition,
  or its spec is unpartitioned (a global delete).

Pruning never drops a delete file that could still remove a row the query returns: delete files
are pruned only by partition (never a global one) and by having no surviving data file to apply to.
"""

from __future__ import annotations

import os
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pyiceberg.expressions import (
    AlwaysTrue,
    And,
    BooleanExpression,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNull,
    LessThan,
    LessThanOrEqual,
    NotEqualTo,
    NotNull,
)
from pyiceberg.expressions.visitors import (
    _InclusiveMetricsEvaluator,
    expression_evaluator,
    inclusive_projection,
    manifest_evaluator,
)
from pyiceberg.manifest import DataFileContent, FileFormat, ManifestContent
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.types import UUIDType

from mor.planner import manifest_store
from mor.planner.column_metrics import compile_inclusive
from mor.planner.delete_index import DeleteIndex, Entry, InvalidDeletes, is_dv, names_one
from mor.planner.eq_bounds import may_apply, metrics_of
from mor.planner.errors import MetadataError, UnsupportedError, clipped
from mor.planner.manifests import (
    CheckedIO,
    EntryFile,
    ListedManifest,
    ManifestEntry,
    decode_manifest,
    decode_manifest_list,
    gc_paused,
)
from mor.planner.nodes import (
    GLOBAL_PART,
    DataTask,
    DeleteTask,
    DvBlob,
    Expr,
    IcebergScan,
    PartField,
    Pred,
    Pruning,
    ScanFiles,
)
from mor.planner.partition_values import compile_exact
from mor.planner.requests import in_context
from mor.planner.settings import current
from mor.planner.sources import TableSource
from mor.planner.state import ProcessCaches

_OPS: dict[str, Callable[[str, Any], BooleanExpression]] = {
    "=": EqualTo,
    "!=": NotEqualTo,
    "<": LessThan,
    "<=": LessThanOrEqual,
    ">": GreaterThan,
    ">=": GreaterThanOrEqual,
}


def row_filter(preds: Iterable[Pred], names: dict[str, str]) -> BooleanExpression:
    """AND of the simple predicates, on Iceberg column names (`names`: internal -> dotted name)."""
    out: BooleanExpression = AlwaysTrue()
    for p in preds:
        name = names.get(p.column)
        if name is None:
            continue
        term: BooleanExpression
        if p.op in _OPS:
            term = _OPS[p.op](name, p.values[0])
        elif p.op == "in":
            term = In(name, set(p.values))
        elif p.op == "isnull":
            term = IsNull(name)
        elif p.op == "notnull":
            term = NotNull(name)
        else:
            continue
        out = And(out, term)
    return out


def snapshot_for(src: TableSource, snapshot_id: int | None) -> Snapshot | None:
    if snapshot_id is None:
        return None
    snap = src.metadata.snapshot_by_id(snapshot_id)
    if snap is None:
        raise MetadataError(f"table {src.name} has no snapshot {snapshot_id}")
    return snap


def _manifests(src: TableSource, snap: Snapshot, cache: ProcessCaches) -> list[ListedManifest]:
    """The snapshot's manifest list, decoded with fastavro (pyiceberg's reader when fastavro
    cannot: it is about three times slower). Kept across queries like manifests: immutable."""
    path = snap.manifest_list
    try:
        with src.io.new_input(path).open() as f:
            raw = f.read()
    except FileNotFoundError as e:
        raise MetadataError(
            f"table {src.name}: manifest list {path} of snapshot "
            f"{snap.snapshot_id} is missing{moved_hint(src, path)}"
        ) from e
    except Exception as e:  # noqa: BLE001 - any FileIO's error: one line, never a traceback
        raise _list_error(src, snap, e) from e
    key = ("list", src.read_path(path), len(raw))
    hit = cache.manifest_lists.get(key)
    if hit is not None:
        return hit
    # what another process decoded (planner/manifest_store.py)
    disk = manifest_store.folder()
    name = manifest_store.list_key(src.read_path(path), len(raw)) if disk is not None else None
    stored = manifest_store.get(disk, name) if name is not None else None
    if stored is not None:
        cache.manifest_lists.put(key, stored, len(stored), current().manifest_cache_entries)
        return stored
    try:
        out = decode_manifest_list(raw)
    except Exception as fast:  # noqa: BLE001 - a codec fastavro lacks, a schema it cannot read
        if src.metadata.format_version >= 3:  # pyiceberg's model has no first_row_id
            raise _list_error(src, snap, fast) from fast
        try:  # only a file fastavro reads whole reaches pyiceberg's decoder (CheckedIO)
            checked = CheckedIO(src.io, {path: raw})
            out = [ListedManifest.of(m) for m in snap.manifests(checked)]
        except Exception as e:  # noqa: BLE001 - unreadable or truncated: never a traceback
            raise _list_error(src, snap, e) from e
    cache.manifest_lists.put(key, out, len(out), current().manifest_cache_entries)
    if name is not None:
        manifest_store.put(disk, name, out)
    return out


def _list_error(src: TableSource, snap: Snapshot, e: Exception) -> MetadataError:
    first = clipped(str(e).splitlines()[0], 160) if str(e) else ""
    return MetadataError(
        f"table {src.name}: cannot read manifest list {snap.manifest_list} of snapshot "
        f"{snap.snapshot_id}: {type(e).__name__}: {first}"
    )


# Manifests are immutable: their live entries are kept across queries of one process
# (planner/state.py), keyed by the path actually read, its length and the manifest's sequence
# number (inherited numbers depend on it); manifest lists by path and length; planned scans by
# what _plan_key says.


def clear_manifest_cache(cache: ProcessCaches) -> None:
    """Forget what planning read of manifests, manifest lists and footers, and the scans it
    planned from them (cold planning; `cache.clear()` forgets everything)."""
    for k in (cache.manifest_lists, cache.manifests, cache.scans, cache.layouts):
        k.clear()


def moved_hint(src: TableSource, recorded: str) -> str:
    """Where a missing file was looked for, and, when the folder it was recorded in does not
    exist here, that the table was probably moved (and how to read it where it lies)."""
    actual = src.read_path(recorded)
    text = f" (looked for {actual})" if actual != recorded else ""
    folder = os.path.dirname(actual.removeprefix("file://").removeprefix("file:"))
    if "://" not in actual.replace("file://", "") and folder and not os.path.isdir(folder):
        text += (
            f"; {folder} does not exist here: if the table was copied or moved, give its new "
            "place with --path-map RECORDED_PREFIX=ACTUAL_PREFIX (path_map= in Python)"
        )
    return text


def _cache_key(
    src: TableSource, manifest: ListedManifest, metrics: bool = True
) -> tuple[str, int, int, bool]:
    """A manifest's entries, decoded with their column metrics or without (a fully decoded
    manifest serves plans that read no metrics too)."""
    return (
        src.read_path(manifest.manifest_path),
        manifest.manifest_length,
        manifest.sequence_number or 0,
        metrics,
    )


def _read_bytes(src: TableSource, manifest: ListedManifest) -> bytes:
    try:
        with src.io.new_input(manifest.manifest_path).open() as f:
            return f.read()
    except FileNotFoundError as e:
        raise MetadataError(
            f"table {src.name}: manifest {manifest.manifest_path} is missing"
            f"{moved_hint(src, manifest.manifest_path)}"
        ) from e
    except OSError as e:
        raise MetadataError(
            f"table {src.name}: cannot read manifest {manifest.manifest_path}: {e}"
        ) from e


def _decoded(
    src: TableSource,
    manifest: ListedManifest,
    raw: bytes,
    cache: ProcessCaches,
    limit: int,
    metrics: bool = True,
) -> list[ManifestEntry]:
    try:
        entries = decode_manifest(raw, manifest, src.io, metrics)
    except Exception as e:  # noqa: BLE001 - a broken Avro file surfaces as many error kinds
        raise MetadataError(
            f"table {src.name}: cannot read manifest {manifest.manifest_path}: "
            f"{type(e).__name__}: {e}"
        ) from e
    cache.manifests.put(_cache_key(src, manifest, metrics), entries, len(entries), limit)
    return entries


def _is_unpartitioned(spec: PartitionSpec) -> bool:
    return all(str(f.transform) == "void" for f in spec.fields)


def _part_label(names: tuple[str, ...], spec_id: int, part: tuple[Any, ...]) -> str:
    """`names`: the spec's partition field names."""
    if not names:
        return f"spec {spec_id}: unpartitioned"
    vals = ", ".join(f"{n}={v!r}" for n, v in zip(names, part))
    return f"spec {spec_id}: {vals}"


def _check_supported(src: TableSource, f: EntryFile) -> None:
    fmt = f.file_format
    if fmt == FileFormat.PUFFIN:
        if f.content != DataFileContent.POSITION_DELETES:
            raise MetadataError(
                f"table {src.name}: Puffin file {f.file_path} is listed as "
                f"{f.content.name.lower().replace('_', ' ')}; only deletion vectors are Puffin"
            )
        missing = [
            n
            for n in ("referenced_data_file", "content_offset", "content_size_in_bytes")
            if getattr(f, n) is None
        ]
        if missing:
            raise MetadataError(
                f"table {src.name}: deletion vector {f.file_path} has no {', '.join(missing)} "
                "in its manifest entry"
            )
        return
    if fmt != FileFormat.PARQUET:
        raise UnsupportedError(
            f"table {src.name}: file {f.file_path} is {fmt.value}; only Parquet files are supported"
        )


def plan_scan(
    scan: IcebergScan, src: TableSource, schema: Schema, cache: ProcessCaches
) -> ScanFiles:
    """Read the snapshot's manifests and decide, file by file, which deletes apply; what is
    read and planned is kept in `cache` (and taken from it)."""
    with gc_paused():
        return _plan_scan(scan, src, schema, cache)


def _plan_scan(
    scan: IcebergScan, src: TableSource, schema: Schema, cache: ProcessCaches
) -> ScanFiles:
    snap = snapshot_for(src, scan.snapshot_id)
    if snap is None:  # a table with no snapshot is empty
        return ScanFiles(
            snapshot_id=None,
            sequence_number=0,
            data=(),
            deletes=(),
            partitions=(),
            partition_fields=partition_fields(src),
        )
    preds = pushed_preds(scan.pushed)
    manifests = _manifests(src, snap, cache)
    key = _plan_key(scan, src, schema, snap, manifests, preds)
    planned = cache.scans.get(key) if key is not None else None
    if planned is None:
        planned = _plan_manifests(scan, src, schema, snap, manifests, preds, cache)
        if key is not None:
            weight = len(planned.data) + len(planned.deletes) + 1
            cache.scans.put(key, planned, weight, current().manifest_cache_entries)
    return planned


def _plan_key(
    scan: IcebergScan,
    src: TableSource,
    schema: Schema,
    snap: Snapshot,
    manifests: list[ListedManifest],
    preds: list[Pred],
) -> tuple[Any, ...] | None:
    """What a planned scan is a function of: the table's metadata file (written once: its
    schemas and specs; with the table's uuid and last update, as a table re-created where
    another was can write a file of the same name), the manifests read (by path, length and
    sequence number, as their entries are cached), the snapshot, the schema, the columns and
    pushed predicates, and how paths are read. A repeated query of a snapshot then costs
    nothing per file here. None (planned each time) for a table source without a metadata
    file, or a predicate's value that cannot be hashed."""
    if not src.metadata_location:
        return None
    key = (
        src.metadata_location,
        str(src.metadata.table_uuid),
        src.metadata.last_updated_ms,
        src.path_map,
        snap.snapshot_id,
        schema.schema_id,
        tuple((f.col.name, f.field_id) for f in scan.fields),
        tuple(preds),
        scan.limit,
        tuple(_cache_key(src, m) for m in manifests),
    )
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _plan_manifests(
    scan: IcebergScan,
    src: TableSource,
    schema: Schema,
    snap: Snapshot,
    manifests: list[ListedManifest],
    preds: list[Pred],
    cache: ProcessCaches,
) -> ScanFiles:
    names = {f.col.name: schema.find_column_name(f.field_id) or "" for f in scan.fields}
    filt = _bindable(row_filter(preds, names), schema)
    n_data_m = sum(1 for m in manifests if m.content == ManifestContent.DATA)
    n_del_m = len(manifests) - n_data_m
    kept, kept_m, part_eval = _kept_manifests(src, schema, manifests, filt)
    found = _Entries(src, part_eval)
    # delete manifests first: whether equality deletes apply decides what data entries need
    data_m = [m for m in kept if m.content == ManifestContent.DATA]
    for m, entries in _read_all(src, [m for m in kept if m.content != ManifestContent.DATA], cache):
        found.visit(m, entries)
    # the filter on column metrics leaves out what partition values answer exactly (a column
    # every spec of the data manifests partitions by identity); with nothing left and no
    # equality delete (whose key bounds are metrics too), data manifests are decoded without
    # metrics: a sixth faster, and nothing per file to hold
    exact = _identity_sources(src, {m.partition_spec_id for m in data_m})
    by_id = {f.col.name: f.field_id for f in scan.fields}
    residual = [p for p in preds if by_id.get(p.column) not in exact]
    metrics_filt = (
        filt if len(residual) == len(preds) else _bindable(row_filter(residual, names), schema)
    )
    has_eq = any(d.file.content == DataFileContent.EQUALITY_DELETES for d in found.deletes)
    if not isinstance(metrics_filt, AlwaysTrue):
        found.metrics = (
            compile_inclusive(schema, metrics_filt)
            or _InclusiveMetricsEvaluator(
                schema, metrics_filt, case_sensitive=True, include_empty_files=True
            ).eval
        )
    need_metrics = has_eq or not isinstance(metrics_filt, AlwaysTrue)

    passes = _passes(src, preds, by_id)

    def match(limit: int | None = None, read: int = 0) -> ScanFiles | None:
        return _match(
            src,
            snap,
            found.data,
            found.deletes,
            found.n_data,
            found.n_data_part,
            kept_m,
            n_data_m,
            n_del_m,
            found.n_del_total,
            (limit, read, passes) if limit is not None else None,
        )

    entries_read = _read_all(src, data_m, cache, need_metrics)
    if scan.limit is None or not all(_decides(p, by_id, exact) for p in preds):
        for m, entries in entries_read:
            found.visit(m, entries)
        return match()  # type: ignore[return-value] - without a limit it always matches
    # a row limit: data manifests in order until the files read surely hold the rows; the
    # files are matched to their deletes again only when twice as many were read since
    read = tried = rows = 0
    try:
        for m, entries in entries_read:
            before = len(found.data)
            found.visit(m, entries)
            read += 1
            rows += sum(e.file.record_count for e in found.data[before:])
            if rows >= scan.limit and len(found.data) >= 2 * tried:
                tried = len(found.data)
                planned = match(scan.limit, read)
                if planned is not None:
                    return planned
    finally:
        entries_read.close()  # the manifests not read yet: their fetches are cancelled
    return match(scan.limit, read) or match()  # type: ignore[return-value]


def _kept_manifests(
    src: TableSource, schema: Schema, manifests: list[ListedManifest], filt: Any
) -> tuple[
    list[ListedManifest], dict[ManifestContent, int], dict[int, Callable[[EntryFile], bool]]
]:
    """The manifests whose partition summaries may match the filter, how many of each
    content, and the partition evaluator of each spec (for the entries)."""
    unfiltered = isinstance(filt, AlwaysTrue)
    part_eval: dict[int, Callable[[EntryFile], bool]] = {}
    kept_m = {ManifestContent.DATA: 0, ManifestContent.DELETES: 0}
    kept = []
    manifest_eval: dict[int, Callable[[ListedManifest], bool]] = {}
    for m in manifests:
        spec_id = m.partition_spec_id
        if spec_id not in part_eval:
            if unfiltered:
                manifest_eval[spec_id], part_eval[spec_id] = (lambda _m: True), (lambda _f: True)
            else:
                manifest_eval[spec_id], part_eval[spec_id] = _evaluators(src, schema, spec_id, filt)
        if manifest_eval[spec_id](m):
            kept_m[m.content] += 1
            kept.append(m)
    return kept, kept_m, part_eval


class _Entries:
    """The entries of the kept manifests that may match: data files by partition values and
    column metrics (`metrics`, set once the delete manifests are read), delete files by
    partition values; with the counts the pruning figures report."""

    def __init__(self, src: TableSource, part_eval: dict[int, Callable[[EntryFile], bool]]):
        self.src = src
        self.part_eval = part_eval
        self.v3 = src.metadata.format_version >= 3
        self.metrics: Callable[[EntryFile], bool] = lambda _f: True
        self.data: list[Entry] = []
        self.deletes: list[Entry] = []
        self.n_data = self.n_data_part = 0
        self.n_del_total: dict[str, Any] = {"position": 0, "dv": 0, "equality": defaultdict(int)}

    def visit(self, m: ListedManifest, entries: list[ManifestEntry]) -> None:
        src, spec_id = self.src, m.partition_spec_id
        part_eval = self.part_eval[spec_id]
        # row lineage: a data file without a first_row_id inherits the manifest's plus the
        # record counts of the files before it in the manifest that inherit too
        next_row_id = m.first_row_id if self.v3 else None
        for entry in entries:
            f = entry.data_file
            _check_supported(src, f)
            seq = entry.sequence_number
            if seq is None:
                raise MetadataError(f"table {src.name}: file {f.file_path} has no sequence number")
            e = Entry(f, seq, spec_id, f.partition)
            if f.content == DataFileContent.DATA:
                if self.v3:
                    e.first_row_id = f.first_row_id
                    if e.first_row_id is None and next_row_id is not None:
                        e.first_row_id = next_row_id
                        next_row_id += f.record_count
                self.n_data += 1
                if not part_eval(f):
                    continue
                self.n_data_part += 1
                if self.metrics(f):
                    self.data.append(e)
                continue
            if f.content == DataFileContent.POSITION_DELETES and is_dv(f):
                self.n_del_total["dv"] += 1
            elif f.content == DataFileContent.POSITION_DELETES:
                self.n_del_total["position"] += 1
            else:
                self.n_del_total["equality"][frozenset(f.equality_ids or ())] += 1
            # pruning a delete file by partition is safe: it only applies inside its partition
            # (a global equality delete's spec is unpartitioned, so its evaluator keeps it)
            if part_eval(f):
                self.deletes.append(e)


def live_entries(src: TableSource, snap: Snapshot, cache: ProcessCaches) -> list[Entry]:
    """Every live entry of the snapshot (data and delete files, matched or not), with its data
    sequence number, spec and partition: what a health report counts."""
    out = []
    with gc_paused():
        for m, entries in _read_all(src, _manifests(src, snap, cache), cache):
            for entry in entries:
                f = entry.data_file
                if entry.sequence_number is None:
                    raise MetadataError(
                        f"table {src.name}: file {f.file_path} has no sequence number"
                    )
                out.append(Entry(f, entry.sequence_number, m.partition_spec_id, f.partition))
    return out


def part_label(src: TableSource, spec_id: int, part: tuple[Any, ...]) -> str:
    """A partition as EXPLAIN and health reports print it: `spec 0: p='a'`."""
    spec = src.metadata.specs()[spec_id]
    return _part_label(tuple(f.name for f in spec.fields), spec_id, part)


def _read_all(
    src: TableSource, manifests: list[ListedManifest], cache: ProcessCaches, metrics: bool = True
) -> Iterator[tuple[ListedManifest, list[ManifestEntry]]]:
    """Live entries of the manifests, in order (`metrics`: with their column metrics). Files
    not in the cache are fetched on a thread pool (setting planning_threads: object stores are
    slow to answer) and decoded on the calling thread as they arrive, where decoding (CPU) does
    not contend for the interpreter."""
    settings = current()  # read here, in the caller's thread: the pool's threads see no context
    limit = settings.manifest_cache_entries

    manifests_kept = cache.manifests

    def cached(m: ListedManifest) -> list[ManifestEntry] | None:
        hit = manifests_kept.get(_cache_key(src, m, True))
        return hit if hit is not None or metrics else manifests_kept.get(_cache_key(src, m, False))

    hits = {id(m): cached(m) for m in manifests}
    # what another process decoded (planner/manifest_store.py), then what must be fetched
    disk = manifest_store.folder() if any(h is None for h in hits.values()) else None
    names: dict[int, str | None] = {}
    if disk is not None:
        for m in manifests:
            if hits[id(m)] is None:
                name = names[id(m)] = manifest_store.key(
                    src.read_path(m.manifest_path), m, metrics
                )
                stored = manifest_store.get(disk, name) if name is not None else None
                if stored is not None:
                    hits[id(m)] = stored
                    manifests_kept.put(_cache_key(src, m, metrics), stored, len(stored), limit)
    missing = [m for m in manifests if hits[id(m)] is None]
    workers = min(len(missing), settings.planning_threads)
    pool = (
        ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mor-manifests")
        if workers > 1
        else None
    )
    read = in_context(_read_bytes)
    fetched = {id(m): pool.submit(read, src, m) for m in missing} if pool else {}
    try:
        for m in manifests:
            hit = hits[id(m)]
            if hit is None:
                fut = fetched.get(id(m))
                raw = fut.result() if fut is not None else _read_bytes(src, m)
                hit = _decoded(src, m, raw, cache, limit, metrics)
                name = names.get(id(m))
                if name is not None and len(raw) == m.manifest_length:  # read whole: kept
                    manifest_store.put(disk, name, hit)
            yield m, hit
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        if disk is not None and missing:
            manifest_store.trim(disk)


def _identity_sources(src: TableSource, spec_ids: set[int]) -> set[int]:
    """Field ids that every one of these specs partitions by identity: a predicate on such a
    column is decided exactly by each file's partition value."""
    specs = src.metadata.specs()
    sources = [
        {f.source_id for f in specs[i].fields if str(f.transform) == "identity"}
        for i in spec_ids
        if i in specs
    ]
    return set.intersection(*sources) if sources and len(sources) == len(spec_ids) else set()


def _bindable(expr: BooleanExpression, schema: Schema) -> BooleanExpression:
    """The filter if pyiceberg can bind it (types and names agree), else no filter at all."""
    try:
        _InclusiveMetricsEvaluator(schema, expr, case_sensitive=True)
        return expr
    except Exception:  # noqa: BLE001 - pruning is an optimisation: never fail the query for it
        return AlwaysTrue()


def _evaluators(
    src: TableSource, schema: Schema, spec_id: int, filt: BooleanExpression
) -> tuple[Callable[[ListedManifest], bool], Callable[[EntryFile], bool]]:
    """For one spec: what prunes its manifests by their partition summaries, and what prunes
    its files by their partition values (the filter projected onto the spec once for both)."""
    spec = src.metadata.specs()[spec_id]
    try:
        projected = inclusive_projection(schema, spec, True)(filt)
    except Exception:  # noqa: BLE001 - e.g. a partition source column dropped since
        return (lambda _m: True), (lambda _f: True)
    return _manifest_evaluator(spec, schema, projected), _partition_evaluator(
        spec, schema, projected
    )


def _partition_evaluator(
    spec: PartitionSpec, schema: Schema, projected: BooleanExpression
) -> Callable[[EntryFile], bool]:
    try:
        ptype = spec.partition_type(schema)
        pschema = Schema(*ptype.fields)
        uuids = any(isinstance(f.field_type, UUIDType) for f in ptype.fields)
        compiled = None if uuids else compile_exact(pschema, projected)
        if compiled is None:  # pyiceberg's evaluator: a visitor walk per file
            ev = expression_evaluator(pschema, projected, True)
    except Exception:  # noqa: BLE001 - pruning only: keep the file when unsure
        return lambda _f: True
    if compiled is not None:  # the walk done once, not per file (5 us a file)
        return lambda f: compiled(f.partition)
    if uuids:
        # pyiceberg's literal for a uuid is its 16 bytes, a decoded partition value a
        # uuid.UUID: compared as they are, `=` is never true (pyiceberg 0.12 prunes every file
        # of an identity partition on a uuid column) and `<` raises. Bytes compare as the spec
        # orders uuids (unsigned).
        return lambda f: ev(tuple(v.bytes if isinstance(v, uuid.UUID) else v for v in f.partition))
    return lambda f: ev(f.partition)


def _manifest_evaluator(
    spec: PartitionSpec, schema: Schema, projected: BooleanExpression
) -> Callable[[ListedManifest], bool]:
    """Prunes manifests of one spec by their partition summaries."""
    try:
        ev = manifest_evaluator(spec, schema, projected, True)
    except Exception:  # noqa: BLE001 - pruning only: keep the manifest when unsure
        return lambda _m: True

    def may_match(m: ListedManifest) -> bool:
        try:
            return ev(m)  # type: ignore[arg-type] - it reads the attributes ListedManifest has
        except Exception:  # noqa: BLE001 - e.g. a summary pyiceberg cannot decode
            return True

    return may_match


def _match(
    src: TableSource,
    snap: Snapshot,
    data: list[Entry],
    deletes: list[Entry],
    n_data_total: int,
    n_data_part: int,
    kept_m: dict[ManifestContent, int],
    n_data_m: int,
    n_del_m: int,
    n_del_total: dict[str, Any],
    limit: tuple[int, int, Callable[[Entry], bool]] | None = None,
) -> ScanFiles | None:
    """The scan's files: each data file with the delete files that apply to it (by the
    spec's rules, and equality deletes whose key ranges miss the file's left out), every
    delete file used once, partitions numbered in the order first met, and the pruning
    figures. With `limit` (rows, data manifests read, whether a file's partition passes the
    scan's predicates): only the files `_enough_rows` keeps, or None when those read cannot be
    shown to hold that many rows."""
    specs = src.metadata.specs()
    unpartitioned = {i: _is_unpartitioned(spec) for i, spec in specs.items()}
    data.sort(key=lambda e: e.file.file_path)
    part_id, labels = _partition_ids(specs)
    per_file, used = _applying(src, data, deletes, unpartitioned)
    n_matched = len(per_file)
    if limit is not None:
        enough = _enough_rows(per_file, limit[0], limit[2])
        if enough is None:
            return None
        per_file = enough
        used = {delete_key(d): d for _, pos, eqs in per_file for d in (*pos, *eqs)}
    del_ids, delete_tasks = _delete_tasks(src, used, unpartitioned, part_id, len(per_file))
    # read once: attributes of pyiceberg's spec models are slow to read per file
    field_ids = {i: tuple(f.field_id for f in spec.fields) for i, spec in specs.items()}
    tasks = _data_tasks(src, per_file, del_ids, part_id, field_ids)
    kept_eq: dict[frozenset[int], int] = defaultdict(int)
    for t in delete_tasks:
        if t.kind == "equality":
            kept_eq[t.eq_ids] += 1
    eq_total: dict[frozenset[int], int] = n_del_total["equality"]
    pruning = Pruning(
        manifests_data=(kept_m[ManifestContent.DATA], n_data_m),
        manifests_delete=(kept_m[ManifestContent.DELETES], n_del_m),
        data_files=(n_data_total, n_data_part, n_matched),
        pos_deletes=(
            n_del_total["position"],
            sum(1 for t in delete_tasks if t.kind == "position" and not t.is_dv),
        ),
        dvs=(n_del_total["dv"], sum(1 for t in delete_tasks if t.is_dv)),
        eq_deletes=tuple((s, eq_total[s], kept_eq.get(s, 0)) for s in sorted(eq_total, key=sorted)),
        limit=(limit[0], len(tasks), limit[1]) if limit is not None else None,
    )
    return ScanFiles(
        snapshot_id=snap.snapshot_id,
        sequence_number=snap.sequence_number or 0,
        data=tuple(tasks),
        deletes=tuple(delete_tasks),
        partitions=tuple(labels),
        pruning=pruning,
        partition_fields=partition_fields(src),
    )


def _decides(p: Pred, by_id: dict[str, int], exact: set[int]) -> bool:
    """Whether the partition values of a file decide `p` for each of its rows as Spark does: a
    column every spec partitions by identity, tested by `=`, `IN` or `IS [NOT] NULL` (a NULL
    partition value fails `=` and `IN` in both; pyiceberg's `!=` and ranges keep a NULL
    partition, whose rows Spark's WHERE drops)."""
    return p.op in _DECIDED_OPS and by_id.get(p.column) in exact


_DECIDED_OPS = ("=", "in", "isnull", "notnull")  # what `_decides` and `_passes` test


def _passes(src: TableSource, preds: list[Pred], by_id: dict[str, int]) -> Callable[[Entry], bool]:
    """Whether every row of a data file passes `preds` (each one `_decides`), told by its
    partition values alone; False when unsure (a value of another type than the literal's: a
    date partition holds days, the literal is text), which only keeps fewer files sure."""
    if not preds:
        return lambda _e: True
    specs = src.metadata.specs()
    slots = {
        i: {f.source_id: k for k, f in enumerate(spec.fields) if str(f.transform) == "identity"}
        for i, spec in specs.items()
    }

    def passes(e: Entry) -> bool:
        where = slots.get(e.spec_id, {})
        for p in preds:
            k = where.get(by_id.get(p.column, -1))
            if k is None or k >= len(e.part):
                return False
            v = e.part[k]
            if p.op == "isnull":
                ok = v is None
            elif p.op == "notnull":
                ok = v is not None
            elif p.op in ("=", "in"):
                ok = v is not None and any(type(v) is type(x) and v == x for x in p.values)
            else:
                ok = False
            if not ok:
                return False
        return True

    return passes


def _enough_rows(
    per_file: list[tuple[Entry, list[Entry], list[Entry]]],
    rows: int,
    passes: Callable[[Entry], bool],
) -> list[tuple[Entry, list[Entry], list[Entry]]] | None:
    """The fewest files, cheapest to read first, sure to hold `rows` live rows that pass the
    scan's predicates between them, in their order; None when these files cannot be shown to
    hold that many.

    A file whose partition values do not show that all its rows pass holds none that are
    sure. Otherwise a file without deletes holds its recorded rows; one with position deletes
    only, its recorded rows less every position its delete files hold (a delete file that names
    other files too counts in full; a deletion vector's count is its cardinality); one with an
    equality delete, none that are sure (which rows its keys match is known only by reading).
    Files without deletes come first (no position machinery to read them), then those with
    position deletes by the rows they surely hold."""
    if rows <= 0:
        return []

    def sure(item: tuple[Entry, list[Entry], list[Entry]]) -> int:
        e, pos, eqs = item
        if eqs or not passes(e):
            return 0
        return e.file.record_count - sum(d.file.record_count for d in pos)

    sures = [sure(x) for x in per_file]  # once per file: `passes` reads partition values
    order = [i for i, x in enumerate(per_file) if not x[1] and not x[2]]
    order += sorted(
        (i for i, x in enumerate(per_file) if x[1] and not x[2]), key=lambda i: -sures[i]
    )
    chosen, total = [], 0
    for i in order:
        if total >= rows:
            break
        if sures[i] > 0:
            chosen.append(i)
            total += sures[i]
    if total < rows:
        return None
    return [per_file[i] for i in sorted(chosen)]


def _partition_ids(
    specs: dict[int, Any],
) -> tuple[Callable[[int, tuple[Any, ...]], int], list[str]]:
    """A numbering of (spec, partition values), in the order asked, and the labels of the
    partitions numbered so far (EXPLAIN's and the health report's names)."""
    field_names = {i: tuple(f.name for f in spec.fields) for i, spec in specs.items()}
    parts: dict[tuple[int, tuple[Any, ...]], int] = {}
    labels: list[str] = []

    def part_id(spec_id: int, part: tuple[Any, ...]) -> int:
        key = (spec_id, part)
        pid = parts.get(key)
        if pid is None:
            pid = parts[key] = len(parts)
            labels.append(_part_label(field_names[spec_id], spec_id, part))
        return pid

    return part_id, labels


def _applying(
    src: TableSource, data: list[Entry], deletes: list[Entry], unpartitioned: dict[int, bool]
) -> tuple[list[tuple[Entry, list[Entry], list[Entry]]], dict[tuple[str, int], Entry]]:
    """Per data file, the position and equality deletes that apply to it; every delete file
    used, by its key."""
    index = DeleteIndex(deletes, unpartitioned.__getitem__)
    used: dict[tuple[str, int], Entry] = {}
    per_file: list[tuple[Entry, list[Entry], list[Entry]]] = []
    # equality deletes whose key ranges miss a data file's do not apply to it (eq_bounds.py)
    types = {i: src.metadata.schema().find_type(i) for i in _eq_field_ids(deletes, src)}
    del_metrics = {
        id(d): metrics_of(d.file, d.file.equality_ids or (), types)
        for d in deletes
        if d.file.content == DataFileContent.EQUALITY_DELETES
    }
    eq_fields = {i for i in types}
    for e in data:
        try:
            pos = index.position_deletes(e)
        except InvalidDeletes as err:
            raise MetadataError(f"table {src.name}: {err}") from err
        eqs = index.equality_deletes(e) if index.has_equality else []
        if eqs:
            mine = metrics_of(e.file, eq_fields, types)
            eqs = [d for d in eqs if may_apply(mine, del_metrics[id(d)])]
        for d in pos:
            used[delete_key(d)] = d
        for d in eqs:
            used[delete_key(d)] = d
        per_file.append((e, pos, eqs))
    return per_file, used


def _delete_tasks(
    src: TableSource,
    used: dict[tuple[str, int], Entry],
    unpartitioned: dict[int, bool],
    part_id: Callable[[int, tuple[Any, ...]], int],
    first_id: int,
) -> tuple[dict[tuple[str, int], int], list[DeleteTask]]:
    """The delete files used, in data sequence order, numbered from `first_id` (after the
    data files); their ids by key."""
    del_ids: dict[tuple[str, int], int] = {}
    delete_tasks: list[DeleteTask] = []
    next_id = first_id
    for key in sorted(used, key=lambda k: (used[k].seq, k)):
        d = used[key]
        del_ids[key] = next_id
        is_pos = d.file.content == DataFileContent.POSITION_DELETES
        glob = not is_pos and unpartitioned[d.spec_id]
        delete_tasks.append(
            DeleteTask(
                file_id=next_id,
                kind="position" if is_pos else "equality",
                path=d.file.file_path,
                read_path=src.read_path(d.file.file_path),
                data_seq=d.seq,
                spec_id=d.spec_id,
                partition_id=GLOBAL_PART if glob else part_id(d.spec_id, d.part),
                record_count=d.file.record_count,
                size_bytes=d.file.file_size_in_bytes,
                eq_ids=frozenset(d.file.equality_ids or ()),
                null_free=_null_free(d.file),
                dv=DvBlob(
                    d.file.content_offset,
                    d.file.content_size_in_bytes,
                    d.file.referenced_data_file,
                )
                if is_dv(d.file)
                else None,
                names_one=names_one(d.file) if is_pos else None,
            )
        )
        next_id += 1
    return del_ids, delete_tasks


def _data_tasks(
    src: TableSource,
    per_file: list[tuple[Entry, list[Entry], list[Entry]]],
    del_ids: dict[tuple[str, int], int],
    part_id: Callable[[int, tuple[Any, ...]], int],
    field_ids: dict[int, tuple[int, ...]],
) -> list[DataTask]:
    """The data files' tasks, numbered from 0 in path order."""
    tasks = []
    # one (field id, value) tuple per partition, shared by its files (10^6 files, 10^3 values)
    pairs: dict[tuple[int, tuple[Any, ...]], tuple[tuple[int, Any], ...]] = {}
    for i, (e, pos, eqs) in enumerate(per_file):
        key = (e.spec_id, e.part)
        partition = pairs.get(key)
        if partition is None:
            partition = pairs[key] = tuple(zip(field_ids[e.spec_id], e.part))
        tasks.append(
            DataTask(
                file_id=i,
                path=e.file.file_path,
                read_path=src.read_path(e.file.file_path),
                data_seq=e.seq,
                spec_id=e.spec_id,
                partition_id=part_id(e.spec_id, e.part),
                record_count=e.file.record_count,
                size_bytes=e.file.file_size_in_bytes,
                partition=partition,
                first_row_id=e.first_row_id,
                pos_deletes=tuple(sorted(del_ids[delete_key(d)] for d in pos)) if pos else (),
                eq_sets=tuple(
                    sorted({frozenset(d.file.equality_ids or ()) for d in eqs}, key=sorted)
                )
                if eqs
                else (),
                eq_deletes=tuple(sorted(del_ids[delete_key(d)] for d in eqs)) if eqs else (),
            )
        )
    return tasks


def partition_fields(src: TableSource) -> tuple[PartField, ...]:
    """Every partition field of the table's specs, by field id (Iceberg's `_partition` type)."""
    out: dict[int, PartField] = {}
    specs = src.metadata.specs()
    for spec_id in sorted(specs):
        spec = specs[spec_id]
        for schema in [src.metadata.schema(), *reversed(src.metadata.schemas)]:
            try:
                ptype = spec.partition_type(schema)
                break
            except Exception:  # noqa: BLE001 - a source column dropped from this schema
                continue
        else:
            continue
        for f, nf in zip(spec.fields, ptype.fields):
            if f.field_id not in out:
                out[f.field_id] = PartField(
                    field_id=f.field_id, name=f.name, type_str=nf.field_type.model_dump_json()
                )
    return tuple(out[k] for k in sorted(out))


_STRICT_OPS = ("=", "<", "<=", ">", ">=", "in", "isnull", "notnull")


def must_hold(
    src: TableSource, schema: Schema, scan: IcebergScan
) -> Callable[[EntryFile], bool] | None:
    """Whether every row of a data file satisfies the scan's pushed predicates, by its
    partition values (a strict projection of them onto its spec) or its column metrics
    (pyiceberg's strict metrics evaluator): the files a DELETE of exactly those predicates
    removes whole, as Iceberg's metadata delete does. Spark's three-valued logic is kept: a
    column a predicate compares must be known free of NULL (and of NaN) in the file, and `!=`
    (true for NULL in Iceberg's expressions, not in SQL) never proves anything. None when a
    predicate cannot be read so: no file is known to match whole."""
    from pyiceberg.expressions.visitors import ROWS_MUST_MATCH, _StrictMetricsEvaluator

    preds = pushed_preds(scan.pushed)
    names = {f.col.name: schema.find_column_name(f.field_id) or "" for f in scan.fields}
    if not preds or any(p.op not in _STRICT_OPS or not names.get(p.column) for p in preds):
        return None
    filt = row_filter(preds, names)
    try:
        strict = _StrictMetricsEvaluator(schema, filt, case_sensitive=True).eval
        ids = {p.column: schema.find_field(names[p.column]) for p in preds}
    except Exception:  # noqa: BLE001 - a filter pyiceberg cannot bind proves nothing
        return None
    compared = [
        (f.field_id, f.field_type.is_primitive and str(f.field_type) in ("float", "double"))
        for c, f in ids.items()
        if all(p.op != "isnull" for p in preds if p.column == c)
    ]
    by_spec: dict[int, Callable[[EntryFile], bool]] = {}

    def no_nulls(f: EntryFile) -> bool:
        nulls, nans = f.null_value_counts or {}, f.nan_value_counts or {}
        return all(
            nulls.get(i) == 0 and (not floating or nans.get(i) == 0) for i, floating in compared
        )

    def must(f: EntryFile) -> bool:
        try:
            if f.spec_id not in by_spec:
                by_spec[f.spec_id] = _strict_partition(src, schema, f.spec_id, filt)
            if by_spec[f.spec_id](f):
                return True
            return no_nulls(f) and strict(f) == ROWS_MUST_MATCH
        except Exception:  # noqa: BLE001 - unsure: not known to match whole
            return False

    return must


def _strict_partition(
    src: TableSource, schema: Schema, spec_id: int, filt: BooleanExpression
) -> Callable[[EntryFile], bool]:
    """Whether a file's partition values alone prove every row of it satisfies `filt`."""
    from pyiceberg.expressions.visitors import strict_projection

    spec = src.metadata.specs().get(spec_id)
    if spec is None or spec.is_unpartitioned():
        return lambda _f: False
    try:
        projected = strict_projection(schema, spec, True)(filt)
        if isinstance(projected, AlwaysTrue):  # nothing projected: proves nothing
            return lambda _f: False
        ev = expression_evaluator(Schema(*spec.partition_type(schema).fields), projected, True)
    except Exception:  # noqa: BLE001 - proves nothing
        return lambda _f: False

    def holds(f: EntryFile) -> bool:
        values = tuple(v.bytes if isinstance(v, uuid.UUID) else v for v in f.partition)
        return None not in values and bool(ev(values))

    return holds


def _eq_field_ids(deletes: list[Entry], src: TableSource) -> set[int]:
    """Equality field ids of the delete files that the table's current schema still has."""
    schema = src.metadata.schema()
    ids = {i for d in deletes for i in (d.file.equality_ids or ())}
    known = set()
    for i in ids:
        try:
            schema.find_field(i)
        except ValueError:
            continue
        known.add(i)
    return known


def delete_key(d: Entry) -> tuple[str, int]:
    """A delete file's identity: its path, and for a deletion vector its blob's offset (the
    vectors of many data files share one Puffin file)."""
    return (d.file.file_path, (d.file.content_offset or 0) if is_dv(d.file) else -1)


def pushed_preds(pushed: Iterable[Expr]) -> list[Pred]:
    return [e.pred for e in pushed if e.pred is not None]


def _null_free(f: EntryFile) -> frozenset[int]:
    """Equality field ids that the entry's metrics record as never NULL (count 0)."""
    counts = f.null_value_counts or {}
    return frozenset(i for i in (f.equality_ids or ()) if counts.get(i) == 0)


def may_hold(
    src: TableSource, schema: Schema, scan: IcebergScan
) -> Callable[[EntryFile], bool] | None:
    """Whether a file (data or delete, of any spec of `src`) may hold rows the scan's pushed
    predicates keep, by its partition values and column metrics: a row-level write's conflict
    detection filter (Iceberg's `conflictDetectionFilter`), for files committed after its
    read. None when no predicate was pushed: every file may."""
    preds = pushed_preds(scan.pushed)
    names = {f.col.name: schema.find_column_name(f.field_id) or "" for f in scan.fields}
    filt = _bindable(row_filter(preds, names), schema)
    if isinstance(filt, AlwaysTrue):
        return None
    metrics = _InclusiveMetricsEvaluator(
        schema, filt, case_sensitive=True, include_empty_files=True
    ).eval
    by_spec: dict[int, Callable[[EntryFile], bool]] = {}

    def may(f: EntryFile) -> bool:
        try:
            if f.spec_id not in by_spec:
                known = f.spec_id in src.metadata.specs()
                by_spec[f.spec_id] = (
                    _evaluators(src, schema, f.spec_id, filt)[1] if known else lambda _f: True
                )
            return by_spec[f.spec_id](f) and metrics(f)
        except Exception:  # noqa: BLE001 - unsure: the file may hold such rows
            return True

    return may
