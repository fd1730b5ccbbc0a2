"""convert-equality-deletes: every snapshot reads as before, against a naive evaluation of the
spec rules, and the commit is atomic, rebased over appends and stopped by conflicts.

The histories are those of tests/test_semantics.py (random appends, position deletes and
equality deletes of one or two columns, NULL keys, partitioned or not). After a conversion:
mor reads the new snapshot and every earlier one exactly as the reference says; with no
equality delete left pyiceberg (which refuses them) reads the new snapshot the same; the new
snapshot's metadata is what Iceberg's `RewriteFiles` writes (operation `replace`, the parent,
new entries inheriting its sequence number, removed ones DELETED with their own).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.manifest import DataFileContent, ManifestEntryStatus
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType
from test_semantics import PART_SPEC, SCHEMA, Reference, _history, op

from helpers import landing
from legs import soak_in
from mor import MorError, mor_sql
from mor.maintenance import convert_equality_deletes
from mor.writer.conflicts import ConflictError
from mor.writer.tables import TableWriter

ROOT = Path(__file__).resolve().parent.parent


def _rows(cat: Any, spark: Any, name: str, snapshot: int | None = None) -> Counter:
    at = f" VERSION AS OF {snapshot}" if snapshot is not None else ""
    sql = f"SELECT id, p, v FROM {name}{at}"
    return Counter(tuple(r) for r in mor_sql(sql, catalog=cat, spark=spark).collect())


def _entries(table: Any, snapshot: Any) -> list[Any]:
    io = table.io
    return [
        (m, e)
        for m in snapshot.manifests(io)
        for e in m.fetch_manifest_entry(io, discard_deleted=False)
    ]


def _files(location: str) -> set[str]:
    root = location.removeprefix("file://")
    return {os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs}


def _keys(ops: list) -> list:
    """Key tuples of the strategy's equality deletes, mapped onto each delete's id order
    (as tests/test_semantics.py does)."""
    ops = [
        (o[0], o[1], [dict(zip((1, 3), k)) for k in o[2]], o[3], o[4]) if o[0] == "eq" else o
        for o in ops
    ]
    return [
        (o[0], o[1], [tuple(k[i] for i in o[1]) for k in o[2]], o[3], o[4]) if o[0] == "eq" else o
        for o in ops
    ]


@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    partitioned=st.booleans(),
    ops=st.lists(op, min_size=2, max_size=7),
    only_a=st.booleans(),
)
def test_every_snapshot_reads_as_before_and_as_the_reference(
    tmp_path_factory: Any, spark: Any, partitioned: bool, ops: list, only_a: bool
) -> None:
    from mor.api import default_catalog

    cat = default_catalog(str(tmp_path_factory.mktemp("wh")))
    spec = PART_SPEC if partitioned else UNPARTITIONED_PARTITION_SPEC
    writer = TableWriter(cat, "m.h", SCHEMA, spec)
    ref = Reference(partitioned)
    first = ("append", [(1, "a", 1), (None, "b", 2), (2, "a", None), (3, "b", 3)])
    _history(writer, ref, _keys([first, *ops, ("eq", (1,), [(2,)], True, 0)]))
    table = writer.refresh()
    head = table.current_snapshot()
    snaps = sorted(table.metadata.snapshots, key=lambda s: s.sequence_number)
    before = {s.snapshot_id: _rows(cat, spark, "m.h", s.snapshot_id) for s in snaps}
    assert before[head.snapshot_id] == ref.live()

    where = "p = 'a'" if only_a else None
    report = convert_equality_deletes("m.h", catalog=cat, spark=spark, where=where)

    table = writer.refresh()
    new = table.current_snapshot()
    assert _rows(cat, spark, "m.h") == ref.live()
    for s in snaps:
        assert _rows(cat, spark, "m.h", s.snapshot_id) == before[s.snapshot_id], s
    if report.snapshot is None:
        assert new.snapshot_id == head.snapshot_id
        return
    assert new.snapshot_id == report.snapshot
    assert new.parent_snapshot_id == head.snapshot_id
    assert new.summary.operation.value == "replace"
    assert new.sequence_number == table.metadata.last_sequence_number
    entries = _entries(table, new)
    added = [e for _, e in entries if e.snapshot_id == new.snapshot_id]
    for e in added:
        f = e.data_file
        if e.status == ManifestEntryStatus.ADDED:
            assert f.content == DataFileContent.POSITION_DELETES
            assert e.sequence_number == new.sequence_number  # inherited: null in the file
        else:
            assert e.status == ManifestEntryStatus.DELETED
            assert f.content == DataFileContent.EQUALITY_DELETES
            assert e.sequence_number < new.sequence_number  # its own, kept
    assert {e.data_file.file_path for e in added if e.status == ManifestEntryStatus.DELETED} == {
        f.path for f in report.removed
    }
    live_eq = [
        e
        for _, e in entries
        if e.status != ManifestEntryStatus.DELETED
        and e.data_file.content == DataFileContent.EQUALITY_DELETES
    ]
    assert len(live_eq) == report.kept
    summary = new.summary
    assert int(summary.get("added-position-deletes", "0")) == report.positions
    assert int(summary["removed-delete-files"]) == len(report.removed)
    if where is None:
        assert report.kept == 0
        got = Counter(
            (r["id"], r["p"], r["v"])
            for r in table.scan(snapshot_id=new.snapshot_id).to_arrow().to_pylist()
        )
        assert got == ref.live()  # pyiceberg, which refuses equality deletes, reads it now


SCHEMA2 = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "s", StringType(), required=False),
)


def _two_files(catalog: Any, name: str = "m.g") -> TableWriter:
    """Two data files (ids 0-9, 10-19) in one unpartitioned table, then one global equality
    delete on id reaching both (3 and 12) and one on s reaching the first (s7)."""
    w = TableWriter(catalog, name, SCHEMA2)
    for lo in (0, 10):
        ids = list(range(lo, lo + 10))
        w.append(pa.table({"id": pa.array(ids, pa.int64()), "s": [f"s{i}" for i in ids]}))
    w.commit(
        deletes=[
            w.equality_delete_file([1], [{1: 3}, {1: 12}]),
            w.equality_delete_file([2], [{2: "s7"}]),
        ]
    )
    return w


def _ids(cat: Any, spark: Any, name: str = "m.g") -> list[int]:
    return sorted(
        r[0] for r in mor_sql(f"SELECT id FROM {name}", catalog=cat, spark=spark).collect()
    )


LIVE = sorted(set(range(20)) - {3, 7, 12})


def test_where_keeps_the_deletes_that_reach_files_left_unconverted(
    catalog: Any, spark: Any
) -> None:
    """Converting the files of ids below 10 only: the delete on id also reaches the other
    file (12), so it stays; the delete on s reaches only the converted file and goes."""
    w = _two_files(catalog)
    report = convert_equality_deletes("m.g", catalog=catalog, spark=spark, where="id < 10")
    assert report.data_files == 1 and report.positions == 2  # rows 3 and 7
    assert [Path(f.path).name for f in report.removed] == [
        Path(p).name
        for p in [
            e.data_file.file_path
            for _, e in _entries(w.refresh(), w.table.current_snapshot())
            if e.status == ManifestEntryStatus.DELETED
        ]
    ]
    assert report.kept == 1 and len(report.removed) == 1
    assert _ids(catalog, spark) == LIVE
    report = convert_equality_deletes("m.g", catalog=catalog, spark=spark)
    assert report.kept == 0 and len(report.removed) == 1 and report.positions == 2
    assert _ids(catalog, spark) == LIVE
    rows = w.refresh().scan().to_arrow()
    assert sorted(rows["id"].to_pylist()) == LIVE


def test_dry_run_writes_nothing_and_reports_what_the_run_does(catalog: Any, spark: Any) -> None:
    w = _two_files(catalog)
    location = w.table.metadata.location
    files = _files(location)
    head = w.refresh().current_snapshot().snapshot_id
    dry = convert_equality_deletes("m.g", catalog=catalog, spark=spark, dry_run=True)
    assert _files(location) == files and w.refresh().current_snapshot().snapshot_id == head
    assert dry.snapshot is None and dry.dry_run
    real = convert_equality_deletes("m.g", catalog=catalog, spark=spark)
    assert (dry.data_files, dry.data_rows, dry.positions, len(dry.written)) == (
        real.data_files,
        real.data_rows,
        real.positions,
        len(real.written),
    )
    assert [f.path for f in dry.removed] == [f.path for f in real.removed]
    assert "dry run" in dry.line() and "committed" in real.line()


def test_a_concurrent_append_is_rebased_over(catalog: Any, spark: Any) -> None:
    w = _two_files(catalog)
    landed = []

    def append(attempt: int) -> None:
        if attempt == 1:
            ids = [3, 12, 100]  # keys the removed deletes named: appended later, they live
            t = pa.table({"id": pa.array(ids, pa.int64()), "s": ["s7", "x", "y"]})
            landed.append(w.append(t)[0])

    with landing(append):
        report = convert_equality_deletes("m.g", catalog=catalog, spark=spark)
    assert report.attempts == 2 and report.rebased_over == landed
    snap = w.refresh().current_snapshot()
    assert snap.snapshot_id == report.snapshot and snap.parent_snapshot_id == landed[0]
    assert _ids(catalog, spark) == sorted(LIVE + [3, 12, 100])
    assert report.kept == 0


def test_a_concurrent_delete_on_a_converted_file_stops_it_leaving_nothing(
    catalog: Any, spark: Any
) -> None:
    w = _two_files(catalog)
    location = w.table.metadata.location
    data = [
        e.data_file
        for _, e in _entries(w.refresh(), w.table.current_snapshot())
        if e.data_file.content == DataFileContent.DATA
    ]
    landed = []

    def delete(attempt: int) -> None:
        if attempt > 1:  # one concurrent commit: retried without it, mor would commit
            return
        f = data[0]
        landed.append(w.commit(deletes=[w.position_delete_file({f.file_path: [0]}, f)]))

    with (
        landing(delete),
        pytest.raises(ConflictError, match=r"added position deletes .* nothing was committed"),
    ):
        convert_equality_deletes("m.g", catalog=catalog, spark=spark)
    assert w.refresh().current_snapshot().snapshot_id == landed[0]
    left = {p for p in _files(location) if "/mor-" in p}
    assert not left, left  # its position delete files and manifests removed
    got = _ids(catalog, spark)
    assert len(got) == len(LIVE) - 1 and set(got) < set(LIVE)


def test_refusals_are_one_line(catalog: Any, spark: Any) -> None:
    _two_files(catalog)
    with pytest.raises(MorError, match="m.nope"):
        convert_equality_deletes("m.nope", catalog=catalog, spark=spark)
    with pytest.raises(MorError, match="no branch 'b'"):
        convert_equality_deletes("m.g", catalog=catalog, spark=spark, branch="b")
    with pytest.raises(MorError, match="nosuch"):
        convert_equality_deletes("m.g", catalog=catalog, spark=spark, where="nosuch > 1")


def _cli(
    wh: Path, *args: str, command: str = "convert-equality-deletes", **kw: Any
) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MOR_WAREHOUSE": str(wh)}
    return subprocess.Popen(
        [str(Path(sys.executable).parent / "mor"), command, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


# in `make soak` (CI's time): the same producer's commit is killed in CI by
# tests/test_compact.py's CLI kill test
@soak_in("3.5")
def test_cli_killed_at_any_moment_leaves_the_table_before_or_after(
    tmp_path: Path, spark: Any
) -> None:
    """`mor convert-equality-deletes` as a user runs it, killed (SIGKILL) at moments spread
    over its run: each time the table is either unchanged or fully converted, and reads the
    same rows; a last run completes and prints its summary line."""
    from mor.api import default_catalog

    wh = tmp_path / "wh"
    cat = default_catalog(str(wh))
    _two_files(cat)
    head = cat.load_table("m.g").current_snapshot().snapshot_id
    t0 = time.perf_counter()
    done = _cli(wh, "m.g", "--dry-run")
    out, err = done.communicate(timeout=300)
    whole = time.perf_counter() - t0
    assert done.returncode == 0, err
    assert "dry run" in out.splitlines()[-1]
    for frac in (0.6, 0.95):
        p = _cli(wh, "m.g")
        time.sleep(whole * frac)
        p.send_signal(signal.SIGKILL)
        p.wait()
        snap = cat.load_table("m.g").current_snapshot()
        assert snap.snapshot_id == head or snap.summary.operation.value == "replace"
        assert _ids(cat, spark) == LIVE
        head = snap.snapshot_id
    p = _cli(wh, "m.g", "--format", "json")
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    assert '"base_snapshot"' in out
    assert _ids(cat, spark) == LIVE
    bad = _cli(wh, "m.nope")
    out, err = bad.communicate(timeout=300)
    assert bad.returncode != 0 and out == "" and len(err.strip().splitlines()) == 1, err


def test_health_advises_the_conversion_then_shows_its_effect(catalog: Any, spark: Any) -> None:
    from mor import health

    _two_files(catalog)
    before = health("m.g", catalog=catalog, exact=True, spark=spark)
    (adv,) = [a for a in before["advice"] if a["procedure"] == "convert-equality-deletes"]
    assert adv["mor"] == "mor convert-equality-deletes m.g"
    assert "2 equality delete file(s) apply to live data files" in adv["reason"]
    convert_equality_deletes("m.g", catalog=catalog, spark=spark)
    after = health("m.g", catalog=catalog, exact=True, spark=spark)
    assert (after["equality_delete_files"], after["position_delete_files"]) == (0, 2)
    assert after["deleted_records"] == before["deleted_records"] == 3
    assert not [a for a in after["advice"] if a["procedure"] == "convert-equality-deletes"]


def test_a_failure_before_the_commit_leaves_nothing_behind(catalog: Any, spark: Any) -> None:
    """Anything failing after the files are written and before the catalog commits (here:
    the process's storage at the last moment): every file the operation wrote (position
    delete files, new and rewritten manifests, the manifest list) is removed."""
    w = _two_files(catalog)
    location = w.table.metadata.location
    files = _files(location)
    head = w.refresh().current_snapshot().snapshot_id

    def boom(attempt: int) -> None:
        assert {p for p in _files(location) - files if "/mor-" in p or "/snap-" in p}
        raise OSError("storage went away")

    with landing(boom), pytest.raises(OSError, match="storage went away"):
        convert_equality_deletes("m.g", catalog=catalog, spark=spark)
    assert _files(location) == files
    assert w.refresh().current_snapshot().snapshot_id == head


def _as_v3(catalog: Any, w: TableWriter, name: str) -> Any:
    """The table of `w` registered again as `name`, upgraded to format version 3 as an
    upgrade leaves a table (its v2 manifests, no row id assigned yet: `next-row-id` 0), its
    metadata file written here with pydantic (pyiceberg 0.12 writes no v3 metadata)."""
    import json

    from pyiceberg.table.metadata import TableMetadataUtil
    from pyiceberg.typedef import IcebergBaseModel

    t = w.refresh()
    raw = {**json.loads(t.metadata.model_dump_json()), "format-version": 3, "next-row-id": 0}
    md = TableMetadataUtil.parse_obj(raw)
    path = f"{t.metadata.location}/metadata/00099-upgraded.metadata.json"
    with t.io.new_output(path).create() as out:
        out.write(IcebergBaseModel.model_dump_json(md).encode())
    return catalog.register_table(name, path)


def _raw_entries(table: Any, snapshot: Any) -> list[tuple[dict, dict]]:
    """(manifest-list record, entry record) of a snapshot, as Avro stores them (pyiceberg
    0.12 reads v3 fields away)."""
    import io

    import fastavro

    def read(path: str) -> list[dict]:
        with table.io.new_input(path).open() as s:
            return list(fastavro.reader(io.BytesIO(s.read())))

    return [(m, e) for m in read(snapshot.manifest_list) for e in read(m["manifest_path"])]


def test_v3_deletion_vectors_merge_the_files_deletes_and_assign_row_ids(
    catalog: Any, spark: Any
) -> None:
    """On a v3 table (upgraded from v2: its position delete file and equality deletes kept),
    each data file the equality deletes reach gets one deletion vector holding those
    positions and the ones its position delete file deletes, all in one Puffin file whose
    blobs, footer and manifest entries agree; the equality delete files go; the manifest
    list assigns row ids to the data manifests (none had any), the snapshot's first-row-id
    is the table's next-row-id and its added-rows what it assigned. A failure right before
    the commit leaves no file behind."""
    import json

    from mor.physical.deletes.dv import decode

    w = _two_files(catalog)
    first = min(
        (
            e.data_file
            for _, e in _entries(w.refresh(), w.table.current_snapshot())
            if e.data_file.content == DataFileContent.DATA
        ),
        key=lambda f: int.from_bytes(f.lower_bounds[1], "little"),
    )  # ids 0-9
    w.commit(deletes=[w.position_delete_file({first.file_path: [0, 5]}, first)])
    table = _as_v3(catalog, w, "m.g3")
    before = _ids(catalog, spark, "m.g3")
    old = table.current_snapshot()
    snaps = [s.snapshot_id for s in table.metadata.snapshots]
    history = {s: _ids_at(catalog, spark, "m.g3", s) for s in snaps}

    files = _files(table.metadata.location)

    def boom(attempt: int) -> None:  # the Puffin file, manifests and list were written
        assert any(p.endswith(".puffin") for p in _files(table.metadata.location) - files)
        raise OSError("storage went away")

    with landing(boom), pytest.raises(OSError, match="storage went away"):
        convert_equality_deletes("m.g3", catalog=catalog, spark=spark)
    assert _files(table.metadata.location) == files  # all of it deleted again
    report = convert_equality_deletes("m.g3", catalog=catalog, spark=spark)
    assert report.vectors and len(report.removed) == 2 and report.kept == 0
    assert "deletion vectors" in report.line()
    table = catalog.load_table("m.g3")
    assert table.metadata.format_version == 3
    new = table.current_snapshot()
    assert new.parent_snapshot_id == old.snapshot_id
    assert _ids(catalog, spark, "m.g3") == before
    for s in snaps:
        assert _ids_at(catalog, spark, "m.g3", s) == history[s]

    entries = _raw_entries(table, new)
    dvs = [(m, e) for m, e in entries if e["data_file"]["file_format"].upper() == "PUFFIN"]
    assert len(dvs) == 2 and all(e["status"] == 1 for _, e in dvs)
    puffins = {e["data_file"]["file_path"] for _, e in dvs}
    assert len(puffins) == 1
    with table.io.new_input(puffins.pop()).open() as s:
        blob = s.read()
    assert blob[:4] == b"PFA1" and blob[-4:] == b"PFA1"
    size = int.from_bytes(blob[-12:-8], "little")
    footer = json.loads(blob[-12 - size : -12])
    meta = {b["properties"]["referenced-data-file"]: b for b in footer["blobs"]}
    got = {}
    for _, e in dvs:
        f = e["data_file"]
        at, n = f["content_offset"], f["content_size_in_bytes"]
        b = meta[f["referenced_data_file"]]
        assert (b["offset"], b["length"], b["type"]) == (at, n, "deletion-vector-v1")
        assert b["fields"] == [2147483645] and b["snapshot-id"] == b["sequence-number"] == -1
        positions = decode(blob[at : at + n], "test", f["record_count"]).to_pylist()
        assert int(b["properties"]["cardinality"]) == len(positions)
        got[f["referenced_data_file"]] = positions
        assert f["file_size_in_bytes"] == len(blob)
    # the first file: positions 0 and 5 (its position delete file), 3 (id 3), 7 (s7)
    assert got[first.file_path] == [0, 3, 5, 7]
    assert sorted(len(p) for p in got.values()) == [1, 4]  # the second: id 12 (position 2)
    removed = [e for _, e in entries if e["status"] == 2]
    # the equality delete files, and the position delete file naming the first file alone
    # (its positions are in the vector now)
    assert sorted(e["data_file"]["content"] for e in removed) == [1, 2, 2]
    (pos,) = [e["data_file"] for e in removed if e["data_file"]["content"] == 1]
    assert [f.path for f in report.merged] == [pos["file_path"]]
    assert "replacing 0 and 1 position delete files" in report.line()
    # row lineage: both data manifests assigned ids in order, 20 rows in all
    data = [m for m in {m["manifest_path"]: m for m, _ in entries}.values() if m["content"] == 0]
    assert sorted(m["first_row_id"] for m in data) == [0, 10]
    assert (new.first_row_id, new.added_rows, table.metadata.next_row_id) == (0, 20, 20)
    assert new.summary["added-dvs"] == "2" and new.summary["removed-delete-files"] == "3"
    assert new.summary["removed-position-delete-files"] == "1"
    assert new.summary["removed-position-deletes"] == "2"
    assert int(new.summary["added-position-deletes"]) == 5
    blobs = sum(e["data_file"]["content_size_in_bytes"] for _, e in dvs)
    assert int(new.summary["added-files-size"]) == blobs  # the vectors, not the Puffin twice
    assert sorted(f.data_file for f in report.written) == sorted(got)

    again = convert_equality_deletes("m.g3", catalog=catalog, spark=spark)
    assert again.snapshot is None and not again.written


def test_v3_health_advises_the_conversion_and_compaction(catalog: Any, spark: Any) -> None:
    """`mor health` of a v3 table names mor's conversion (which writes deletion vectors
    there) and `mor compact` for the files deletes weigh on; after the conversion it counts
    the vectors and no equality delete, after the compaction no delete at all."""
    from mor import health
    from mor.maintenance import compact

    w = _two_files(catalog)
    w.commit(deletes=[w.equality_delete_file([1], [{1: i} for i in range(20)])])  # all rows
    _as_v3(catalog, w, "m.g5")
    before = health("m.g5", catalog=catalog, exact=True, spark=spark)
    (adv,) = [a for a in before["advice"] if a["procedure"] == "convert-equality-deletes"]
    assert adv["mor"] == "mor convert-equality-deletes m.g5"
    heavy = [a for a in before["advice"] if a["procedure"] == "rewrite_data_files"]
    assert heavy and all(a["mor"].startswith("mor compact m.g5") for a in heavy)
    convert_equality_deletes("m.g5", catalog=catalog, spark=spark)
    after = health("m.g5", catalog=catalog, exact=True, spark=spark)
    assert after["equality_delete_files"] == 0
    assert after["deleted_records"] == before["deleted_records"] == 20
    report = compact("m.g5", catalog=catalog, spark=spark, delete_file_threshold=1)
    assert report.data_files == 2 and not report.written  # every row deleted
    assert sorted(f.data_file for f in report.removed) == sorted(
        p for p in _files_of(catalog, "m.g5", before=True)
    )
    done = health("m.g5", catalog=catalog, exact=True, spark=spark)
    counts = ("data_files", "position_delete_files", "deletion_vectors", "deleted_records")
    assert [done[k] for k in counts] == [0, 0, 0, 0]
    assert not [a for a in done["advice"] if "mor" in a]


def _files_of(catalog: Any, name: str, before: bool = False) -> list[str]:
    """The data files of `name`'s current snapshot (`before`: of its parent)."""
    table = catalog.load_table(name)
    snap = table.current_snapshot()
    if before:
        snap = table.metadata.snapshot_by_id(snap.parent_snapshot_id)
    return sorted(
        e["data_file"]["file_path"]
        for _, e in _raw_entries(table, snap)
        if e["status"] != 2 and e["data_file"]["content"] == 0
    )


def test_v3_compaction_keeps_each_rows_lineage(catalog: Any, spark: Any) -> None:
    """On a v3 table, compaction writes each row's `_row_id` and
    `_last_updated_sequence_number` (field ids 2147483540 and 2147483539) into the new files,
    so every row keeps both (Iceberg's rewrite does the same); the new entries carry the read
    snapshot's data sequence number and no first_row_id of their own (their manifest's is
    assigned from the table's next-row-id); the rewritten files' deletion vectors are removed
    blob by blob, and the equality delete that reached them with them."""
    import pyarrow.parquet as pq
    from pyiceberg.manifest import DATA_FILE_TYPE, DataFile

    from mor.maintenance import compact
    from mor.writer.operations import RewriteFiles
    from mor.writer.producer import SnapshotProducer

    w = _two_files(catalog)
    _as_v3(catalog, w, "m.g6")
    convert_equality_deletes("m.g6", catalog=catalog, spark=spark)  # assigns row ids 0-19
    eq = w.equality_delete_file([1], [{1: 4}])  # and an equality delete again, v3-committed
    v3 = DataFile.from_args(
        _table_format_version=3, **{f.name: getattr(eq, f.name) for f in DATA_FILE_TYPE[2].fields}
    )
    v3.spec_id = eq.spec_id
    table = catalog.load_table("m.g6")
    SnapshotProducer(catalog, "m.g6").commit(RewriteFiles(added=[v3]), table.current_snapshot())
    sql = "SELECT id, s, _row_id, _last_updated_sequence_number FROM m.g6"
    before = sorted(tuple(r) for r in mor_sql(sql, catalog=catalog, spark=spark).collect())
    assert [r[0] for r in before] == [i for i in LIVE if i != 4]
    # row ids 0-19, a file's ten in its order (which file got 0-9 is the list's order)
    assert all(r[2] % 10 == r[0] % 10 for r in before) and len({r[2] for r in before}) == 16
    assert all(r[3] is not None for r in before)
    head = catalog.load_table("m.g6").current_snapshot()
    old_files = _files_of(catalog, "m.g6")

    report = compact("m.g6", catalog=catalog, spark=spark, delete_file_threshold=1)
    assert report.data_files == 2 and len(report.written) == 1
    vectors = [f for f in report.removed if f.data_file]
    assert sorted(f.rows for f in vectors) == [1, 2]  # {12} and {3, 7}, by blob
    assert sorted(f.data_file for f in vectors) == old_files
    assert [f.rows for f in report.removed if not f.data_file] == [1]  # the delete of 4
    assert "removed 1 delete files and 2 deletion vectors (4 rows" in report.line()
    table = catalog.load_table("m.g6")
    new = table.current_snapshot()
    after = sorted(tuple(r) for r in mor_sql(sql, catalog=catalog, spark=spark).collect())
    assert after == before
    entries = _raw_entries(table, new)
    live = [(m, e) for m, e in entries if e["status"] != 2]
    assert all(e["data_file"]["content"] == 0 for _, e in live)  # no delete left
    ((m, e),) = live
    f = e["data_file"]
    assert e["status"] == 1 and f["first_row_id"] is None
    assert e["sequence_number"] == head.sequence_number  # the read snapshot's
    assert m["first_row_id"] == 20 and m["added_rows_count"] == len(before)
    assert (new.first_row_id, new.added_rows) == (20, len(before))
    assert table.metadata.next_row_id == 20 + len(before)
    gone = [e for _, e in entries if e["status"] == 2 and e["snapshot_id"] == new.snapshot_id]
    assert sorted(e["data_file"]["content"] for e in gone) == [0, 0, 1, 1, 2]
    assert new.summary["removed-dvs"] == "2" and new.summary["deleted-data-files"] == "2"
    # the lineage is stored in the file, under its field ids
    with table.io.new_input(f["file_path"]).open() as stream:
        stored = pq.read_table(stream)
    ids = {
        fld.name: int(fld.metadata[b"PARQUET:field_id"]) for fld in stored.schema if fld.metadata
    }
    assert ids["_row_id"] == 2147483540 and ids["_last_updated_sequence_number"] == 2147483539
    rows = sorted(zip(*(stored.column(c).to_pylist() for c in ("id", "s", "_row_id"))))
    assert rows == [r[:3] for r in before]
    assert f["column_sizes"] and 2147483540 not in {
        kv["key"] for kv in f["lower_bounds"] or []
    }  # no bounds of lineage: a null _row_id stands for an inherited one


def _ids_at(cat: Any, spark: Any, name: str, snapshot: int) -> list[int]:
    sql = f"SELECT id FROM {name} VERSION AS OF {snapshot}"
    return sorted(r[0] for r in mor_sql(sql, catalog=cat, spark=spark).collect())


def test_v3_replaces_one_vector_of_a_shared_puffin_file(catalog: Any, spark: Any) -> None:
    """A conversion replaces the vector of the data file it converts, one blob of its Puffin
    file: the vectors of other data files in that file stay. The first conversion writes the
    vectors of both data files in one Puffin file; an equality delete reaching the first file
    only is then committed (through mor's v3 commit, as a fixture: pyiceberg writes no v3
    snapshot), and the second conversion replaces the first file's vector alone."""
    from pyiceberg.manifest import DATA_FILE_TYPE, DataFile

    from mor.writer.operations import RewriteFiles
    from mor.writer.producer import SnapshotProducer

    w = _two_files(catalog)
    table = _as_v3(catalog, w, "m.g4")
    convert_equality_deletes("m.g4", catalog=catalog, spark=spark)
    assert _ids(catalog, spark, "m.g4") == LIVE
    eq = w.equality_delete_file([1], [{1: 4}])
    v3 = DataFile.from_args(
        _table_format_version=3, **{f.name: getattr(eq, f.name) for f in DATA_FILE_TYPE[2].fields}
    )
    v3.spec_id = eq.spec_id
    table = catalog.load_table("m.g4")
    SnapshotProducer(catalog, "m.g4").commit(RewriteFiles(added=[v3]), table.current_snapshot())
    assert _ids(catalog, spark, "m.g4") == [i for i in LIVE if i != 4]

    report = convert_equality_deletes("m.g4", catalog=catalog, spark=spark)
    assert report.data_files == 1 and report.replaced == 1 and len(report.written) == 1
    assert _ids(catalog, spark, "m.g4") == [i for i in LIVE if i != 4]
    table = catalog.load_table("m.g4")
    live = [
        e["data_file"]
        for _, e in _raw_entries(table, table.current_snapshot())
        if e["status"] != 2 and e["data_file"]["content"] == 1
    ]
    assert sorted(f["record_count"] for f in live) == [1, 3]  # B's {2}, A's {3, 4, 7}
    assert len({f["file_path"] for f in live}) == 2  # B's stays in the first Puffin file
    # row lineage: the ids the first conversion assigned are kept, none assigned again
    snap = table.current_snapshot()
    listed = {m["manifest_path"]: m for m, _ in _raw_entries(table, snap)}.values()
    assert sorted(m["first_row_id"] for m in listed if m["content"] == 0) == [0, 10]
    assert (snap.first_row_id, snap.added_rows, table.metadata.next_row_id) == (20, 0, 20)


def test_v3_compaction_keeps_the_ids_of_files_left_in_an_old_manifest(
    catalog: Any, spark: Any
) -> None:
    """A table upgraded from v2 keeps its v2 manifests, whose files inherit their row ids
    counted over the manifest's live entries. A compaction that rewrites one file of such a
    manifest marks it DELETED, so the files after it would count differently: each file left
    gets its first_row_id written out (the manifest copied in the schema with the v3 field),
    and keeps the ids it had (the bug the harness found on an upgraded history: a row's id
    moved from 3 to 4)."""
    from mor.maintenance import compact

    w = TableWriter(catalog, "m.v7", SCHEMA2)
    files = [
        f
        for lo in (0, 10, 20)
        for f in w.data_files(
            pa.table(
                {
                    "id": pa.array(range(lo, lo + 10), pa.int64()),
                    "s": [f"s{i}" for i in range(lo, lo + 10)],
                }
            )
        )
    ]
    w.commit(data=files)  # one manifest of three files
    w.commit(deletes=[w.equality_delete_file([1], [{1: i} for i in range(6)])])
    _as_v3(catalog, w, "m.g7")
    convert_equality_deletes("m.g7", catalog=catalog, spark=spark)  # assigns ids 0-29
    sql = "SELECT id, _row_id, _last_updated_sequence_number FROM m.g7"
    before = sorted(tuple(r) for r in mor_sql(sql, catalog=catalog, spark=spark).collect())
    assert [r[0] for r in before] == list(range(6, 30))
    assert len({r[1] for r in before}) == 24
    sizes = sorted(f.file_size_in_bytes for f in files)
    # the first file qualifies by its deletes (60%), the other two are of the target size
    report = compact("m.g7", catalog=catalog, spark=spark, target_file_size=sizes[1])
    assert report.data_files == 1 and len(report.written) == 1
    after = sorted(tuple(r) for r in mor_sql(sql, catalog=catalog, spark=spark).collect())
    assert after == before
    table = catalog.load_table("m.g7")
    kept = [
        e["data_file"]
        for _, e in _raw_entries(table, table.current_snapshot())
        if e["status"] == 0 and e["data_file"]["content"] == 0
    ]
    assert len(kept) == 2 and all(f["first_row_id"] is not None for f in kept)
