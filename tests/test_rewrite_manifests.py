"""rewrite_manifests (writer/rewrite_manifests.py): the current snapshot's manifests regrouped
by partition, one `replace` commit, no row changed.

Against a naive evaluation of the spec rules (tests/test_semantics.py's random histories of
appends, position and equality deletes): after the rewrite every snapshot reads as before and
the head as the reference, every live entry keeps its snapshot id and sequence numbers (an
equality delete's reach depends on them), and pyiceberg reads the new manifests. On v3, every
row keeps its `_row_id` and `_last_updated_sequence_number`. Iceberg's own procedure on twin
tables: tests/oracle/procedures.py.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.manifest import ManifestContent, ManifestEntryStatus
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from test_maintenance import _entries, _keys, _rows
from test_semantics import PART_SPEC, SCHEMA, Reference, _history, op

from mor import MorError, mor_sql
from mor.statements import StatementExecution
from mor.writer.conflicts import ConflictError
from mor.writer.procedures import ProcedureError
from mor.writer.tables import TableWriter

pytestmark = [pytest.mark.check]


def _run(catalog: Any, sql: str, **kw: Any) -> Any:
    return StatementExecution(sql, catalog=catalog, **kw).run()


def _live(table: Any, snapshot: Any = None) -> list[tuple[Any, ...]]:
    """The live entries of a snapshot (default: the current), with what they inherit."""
    snap = snapshot or table.current_snapshot()
    return sorted(
        (
            e.data_file.file_path,
            int(e.data_file.content),
            e.snapshot_id,
            e.sequence_number,
            e.file_sequence_number,
            e.data_file.record_count,
        )
        for _, e in _entries(table, snap)
        if e.status != ManifestEntryStatus.DELETED
    )


def _on_disk(table: Any) -> set[str]:
    root = table.location().removeprefix("file://")
    return {os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs}


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    partitioned=st.booleans(),
    ops=st.lists(op, min_size=3, max_size=8),
    target=st.sampled_from([2_000, 6_000, 8 << 20]),
)
def test_every_snapshot_reads_as_before_and_as_the_reference(
    tmp_path_factory: Any, spark: Any, partitioned: bool, ops: list, target: int
) -> None:
    from mor.api import default_catalog

    cat = default_catalog(str(tmp_path_factory.mktemp("wh")))
    spec = PART_SPEC if partitioned else UNPARTITIONED_PARTITION_SPEC
    writer = TableWriter(
        cat, "m.h", SCHEMA, spec, {"commit.manifest.target-size-bytes": str(target)}
    )
    ref = Reference(partitioned)
    first = ("append", [(1, "a", 1), (None, "b", 2), (2, "a", None), (3, "b", 3)])
    _history(writer, ref, _keys([first, *ops, ("eq", (1,), [(2,)], True, 0)]))
    table = writer.refresh()
    head = table.current_snapshot()
    snaps = sorted(table.metadata.snapshots, key=lambda s: s.sequence_number)
    before = {s.snapshot_id: _rows(cat, spark, "m.h", s.snapshot_id) for s in snaps}
    assert before[head.snapshot_id] == ref.live()
    entries = _live(table)
    manifests = head.manifests(table.io)

    out = _run(cat, "CALL system.rewrite_manifests('m.h')")

    table = writer.refresh()
    new = table.current_snapshot()
    chosen = []  # as Iceberg's action chooses: a content's manifests unless one within target
    for content in (ManifestContent.DATA, ManifestContent.DELETES):
        ms = [m for m in manifests if m.content == content]
        if ms and not (len(ms) == 1 and sum(m.manifest_length for m in ms) <= target):
            chosen.append(content)
    if not chosen:
        assert out.rows == [(0, 0)] and new.snapshot_id == head.snapshot_id
        return
    replaced = [m for m in manifests if m.content in chosen]
    assert out.rows == [(len(replaced), len(out.report["added"]))]
    assert new.parent_snapshot_id == head.snapshot_id
    assert new.summary.operation.value == "replace"
    assert new.summary["manifests-replaced"] == str(len(replaced))
    for k in ("total-records", "total-data-files", "total-delete-files"):
        assert new.summary[k] == head.summary[k]
    assert _live(table) == entries  # same files, snapshot ids, sequence numbers
    assert _rows(cat, spark, "m.h") == ref.live()
    for s in snaps:
        assert _rows(cat, spark, "m.h", s.snapshot_id) == before[s.snapshot_id], s
    written = [m for m in new.manifests(table.io) if m.added_snapshot_id == new.snapshot_id]
    assert {m.manifest_path for m in written} == set(out.report["added"])
    assert len(new.manifests(table.io)) == len(manifests) - len(replaced) + len(written)
    for m in written:
        got = m.fetch_manifest_entry(table.io, discard_deleted=False)
        assert {e.status for e in got} == {ManifestEntryStatus.EXISTING}
        assert m.existing_files_count == len(got) and m.added_snapshot_id == new.snapshot_id
        assert m.min_sequence_number == min(e.sequence_number for e in got)
        if partitioned:  # the summary bounds every entry's partition
            (s,) = m.partitions
            values = [e.data_file.partition[0] for e in got]
            assert s.contains_null == (None in values)
            present = sorted(v for v in values if v is not None)
            if present:
                assert (s.lower_bound, s.upper_bound) == (
                    present[0].encode(),
                    present[-1].encode(),
                )
    if target == 8 << 20:
        assert len(written) == len(chosen)  # one per content, within the target


def test_entries_are_grouped_by_partition_ranges(catalog: Any, spark: Any) -> None:
    """Forty appends to three partitions, three manifests targeted: one partition in each,
    in partition order (Iceberg's range partitioning), each entry once."""
    writer = TableWriter(catalog, "m.g", SCHEMA, PART_SPEC)
    for i in range(40):
        writer.append(
            pa.table(
                {
                    "id": pa.array([3 * i, 3 * i + 1, 3 * i + 2], pa.int64()),
                    "p": ["a", "b", "c"],
                    "v": pa.array([i, i, i], pa.int64()),
                }
            )
        )
    table = writer.refresh()
    total = sum(m.manifest_length for m in table.current_snapshot().manifests(table.io))
    _run(
        catalog,
        "ALTER TABLE m.g SET TBLPROPERTIES ('commit.manifest.target-size-bytes' = "
        f"'{total // 3 + 1}')",
    )
    rows = _rows(catalog, spark, "m.g")
    entries = _live(writer.refresh())
    out = _run(catalog, "CALL system.rewrite_manifests(table => 'm.g', use_caching => false)")
    assert out.rows == [(40, 3)]
    table = writer.refresh()
    parts = [
        sorted({e.data_file.partition[0] for e in m.fetch_manifest_entry(table.io)})
        for m in table.current_snapshot().manifests(table.io)
    ]
    assert sorted(parts) == [["a"], ["b"], ["c"]]
    assert _live(table) == entries and _rows(catalog, spark, "m.g") == rows
    # pyiceberg's reader prunes with the new summaries and reads the same rows
    got = table.scan(row_filter="p = 'b'").to_arrow()
    assert sorted(got["id"].to_pylist()) == [3 * i + 1 for i in range(40)]


def test_v3_rows_keep_their_row_ids_and_deletion_vectors(catalog: Any, spark: Any) -> None:
    """mor's INSERTs, a DELETE and an UPDATE (deletion vectors) on a v3 table: the data and
    delete manifests rewritten, every row read with the same `_row_id` and
    `_last_updated_sequence_number`, every snapshot as before, the table's next row id
    moved past what the new manifests reserve."""
    _run(catalog, "CREATE NAMESPACE db")
    _run(
        catalog,
        "CREATE TABLE db.v (id BIGINT, p STRING, d DATE, x DECIMAL(9, 2)) "
        "PARTITIONED BY (p, d) TBLPROPERTIES ('format-version' = '3')",
    )
    for i in range(6):
        _run(
            catalog,
            f"INSERT INTO db.v VALUES ({i * 10 + 1}, 'p{i % 3}', DATE '2024-01-0{i + 1}', "
            f"{i}.25), ({i * 10 + 2}, 'p{(i + 1) % 3}', NULL, NULL), "
            f"({i * 10 + 3}, 'p{(i + 1) % 3}', NULL, -1.5)",
            spark=spark,
        )
    _run(catalog, "DELETE FROM db.v WHERE id IN (12, 33)", spark=spark)
    _run(catalog, "UPDATE db.v SET x = 9.99 WHERE id = 43", spark=spark)
    q = "SELECT id, p, d, x, _row_id, _last_updated_sequence_number FROM db.v"

    def rows(at: str = "") -> list[tuple[Any, ...]]:
        return sorted(tuple(r) for r in mor_sql(q + at, catalog=catalog, spark=spark).collect())

    table = catalog.load_table("db.v")
    snaps = [s.snapshot_id for s in table.metadata.snapshots]
    before = {s: rows(f" VERSION AS OF {s}") for s in snaps}
    entries = _live(table)
    head = table.current_snapshot()
    contents = Counter(int(m.content) for m in head.manifests(table.io))
    assert contents[int(ManifestContent.DELETES)] >= 2
    next_row = table.metadata.next_row_id
    out = _run(catalog, "CALL system.rewrite_manifests('db.v')")
    assert out.rows == [(sum(contents.values()), 2)]
    table = catalog.load_table("db.v")
    assert rows() == before[head.snapshot_id]
    for s in snaps:
        assert rows(f" VERSION AS OF {s}") == before[s]
    assert _live(table) == entries
    new = table.current_snapshot()
    data = [m for m in new.manifests(table.io) if m.content == ManifestContent.DATA]
    reserved = sum(m.existing_rows_count for m in data)
    assert new.first_row_id == next_row and table.metadata.next_row_id == next_row + reserved
    # a bad spec id is one line, and nothing changes
    with pytest.raises(ProcedureError, match="invalid spec id 7"):
        _run(catalog, "CALL system.rewrite_manifests(table => 'db.v', spec_id => 7)")
    assert catalog.load_table("db.v").current_snapshot().snapshot_id == new.snapshot_id


def test_only_the_given_spec_is_rewritten(catalog: Any, spark: Any) -> None:
    """After a partition spec change, the default is the current spec's manifests; the old
    spec's are rewritten only when `spec_id` names it."""
    writer = TableWriter(catalog, "m.s", SCHEMA, PART_SPEC)
    for i in range(3):
        writer.append(pa.table({"id": [i], "p": ["a"], "v": [i]}))
    _run(catalog, "ALTER TABLE m.s DROP PARTITION FIELD p")
    for i in range(3):
        writer.append(pa.table({"id": [10 + i], "p": ["b"], "v": [i]}))
    table = writer.refresh()
    specs = Counter(m.partition_spec_id for m in table.current_snapshot().manifests(table.io))
    assert specs == {0: 3, 1: 3}
    rows = _rows(catalog, spark, "m.s")
    assert _run(catalog, "CALL system.rewrite_manifests('m.s')").rows == [(3, 1)]
    table = writer.refresh()
    specs = Counter(m.partition_spec_id for m in table.current_snapshot().manifests(table.io))
    assert specs == {0: 3, 1: 1}
    assert _run(catalog, "CALL system.rewrite_manifests('m.s', false, 0)").rows == [(3, 1)]
    table = writer.refresh()
    specs = Counter(m.partition_spec_id for m in table.current_snapshot().manifests(table.io))
    assert specs == {0: 1, 1: 1} and _rows(catalog, spark, "m.s") == rows


def _three_appends(catalog: Any) -> TableWriter:
    writer = TableWriter(catalog, "m.c", SCHEMA, PART_SPEC)
    for i in range(3):
        writer.append(pa.table({"id": [i, 10 + i], "p": ["a", "b"], "v": [i, i]}))
    return writer


def test_a_commit_landing_meanwhile_is_kept_or_stops_it(catalog: Any, monkeypatch: Any) -> None:
    """An append landing between the manifests' writing and the commit: its manifest kept,
    the rewrite committed over it. A commit that rewrote a manifest being replaced (a DELETE
    removing a whole file): nothing committed, every file the rewrite wrote deleted."""
    from mor.writer.producer import SnapshotProducer

    writer = _three_appends(catalog)
    landed: list[int] = []

    def append_first(self: Any, attempt: int) -> None:
        if not landed:
            landed.append(0)  # the append's own commit passes here too
            landed[0] = writer.append(pa.table({"id": [99], "p": ["c"], "v": [0]}))[0]

    monkeypatch.setattr(SnapshotProducer, "_attempting", append_first)
    out = _run(catalog, "CALL system.rewrite_manifests('m.c')")
    monkeypatch.undo()
    table = writer.refresh()
    new = table.current_snapshot()
    assert out.rows == [(3, 1)] and new.parent_snapshot_id == landed[0]
    assert new.summary["manifests-kept"] == "1"
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [0, 1, 2, 10, 11, 12, 99]

    writer = _three_appends(catalog)
    on_disk = _on_disk(writer.refresh())
    first = writer.refresh().current_snapshot().snapshot_id

    def delete_first(self: Any, attempt: int) -> None:
        monkeypatch.undo()
        _run(catalog, "DELETE FROM m.c WHERE id = 0")  # removes a whole file: its manifest

    monkeypatch.setattr(SnapshotProducer, "_attempting", delete_first)
    with pytest.raises(ConflictError, match="could not be found in the latest snapshot"):
        _run(catalog, "CALL system.rewrite_manifests('m.c')")
    table = writer.refresh()
    assert table.current_snapshot().parent_snapshot_id == first  # the DELETE only
    assert table.current_snapshot().summary.operation.value != "replace"
    added = _on_disk(table) - on_disk
    assert all("mor-manifests-" not in p for p in added)  # the rewrite's: deleted


def test_dry_run_interrupt_and_command(
    catalog: Any, capsys: Any, monkeypatch: Any, tmp_path: Any
) -> None:
    """A dry run says what it would rewrite and writes nothing; Ctrl-C before the commit
    commits nothing and leaves no file; `mor rewrite-manifests` prints Iceberg's row."""
    from mor import interrupts
    from mor.cli import main

    writer = _three_appends(catalog)
    table = writer.refresh()
    head, files = table.current_snapshot().snapshot_id, _on_disk(table)
    out = _run(catalog, "CALL system.rewrite_manifests('m.c')", dry_run=True)
    assert "would rewrite 3 data manifest(s) into about 1" in out.line and out.rows is None
    assert _on_disk(writer.refresh()) == files

    from mor.writer import rewrite_manifests as rm

    real = rm._Rolling.close

    def ctrl_c_while_writing(self: Any) -> Any:
        interrupts._S.pending = signal.SIGINT  # as the handler holds it inside `held`
        return real(self)

    monkeypatch.setattr(rm._Rolling, "close", ctrl_c_while_writing)
    try:
        with pytest.raises(KeyboardInterrupt):
            _run(catalog, "CALL system.rewrite_manifests('m.c')")
    finally:
        interrupts.reset()
    monkeypatch.undo()
    table = writer.refresh()
    assert table.current_snapshot().snapshot_id == head and _on_disk(table) == files

    wh = str(tmp_path / "wh")  # the `catalog` fixture's embedded warehouse
    code = main(["rewrite-manifests", "--warehouse", wh, "m.c", "--format", "json"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert '"rewritten_manifests_count": 3' in printed and '"added_manifests_count": 1' in printed
    assert main(["rewrite_manifests", "--warehouse", wh, "m.c", "--spec-id", "5"]) == 1
    err = capsys.readouterr().err
    assert "invalid spec id 5" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(MorError):
        _run(catalog, "CALL system.rewrite_manifests('m.nope')")


def test_health_counts_the_manifests_and_advises_the_rewrite(catalog: Any) -> None:
    """`mor health` says how many manifests the current snapshot has and how many
    rewrite_manifests would leave; past the threshold it advises the rewrite with its
    command, and after it advises nothing of the kind."""
    from mor.api import health
    from mor.health_advice import Thresholds
    from mor.health_report import render_table

    writer = TableWriter(catalog, "m.h", SCHEMA, PART_SPEC)
    for i in range(6):
        writer.append(pa.table({"id": [i], "p": ["a"], "v": [i]}))
    report = health("m.h", catalog=catalog, thresholds=Thresholds(manifests=4))
    m = report["history"]["manifests"]
    assert (m["count"], m["data"], m["deletes"], m["after_rewrite"]) == (6, 6, 0, 1)
    advised = {a["procedure"]: a for a in report["advice"]}
    assert advised["rewrite_manifests"]["mor"] == "mor rewrite-manifests m.h"
    assert "regrouped by partition they would be 1" in advised["rewrite_manifests"]["reason"]
    assert "manifests    6 in the current snapshot" in render_table(report)
    assert "rewrite_manifests" not in {
        a["procedure"] for a in health("m.h", catalog=catalog)["advice"]
    }  # the default threshold: 100
    _run(catalog, "CALL system.rewrite_manifests('m.h')")
    after = health("m.h", catalog=catalog, thresholds=Thresholds(manifests=4))
    assert after["history"]["manifests"]["count"] == 1
    assert "rewrite_manifests" not in {a["procedure"] for a in after["advice"]}


@pytest.mark.parametrize("version", [2, 3])
def test_entries_copied_as_bytes_read_as_the_ones_encoded(
    catalog: Any, spark: Any, monkeypatch: Any, version: int
) -> None:
    """An entry whose manifest's schema is the new manifests' is copied as its bytes (its
    inherited values written in front, a v3 `first_row_id` written in): the manifests
    written so read, entry by entry, as the ones written by encoding every entry again."""
    import io

    import fastavro

    from mor.writer import rewrite_manifests as rm

    _run(catalog, "CREATE NAMESPACE IF NOT EXISTS db")
    _run(
        catalog,
        f"CREATE TABLE db.b (id BIGINT, p STRING, x DECIMAL(9, 2)) PARTITIONED BY (p) "
        f"TBLPROPERTIES ('format-version' = '{version}')",
    )
    for i in range(4):
        _run(
            catalog,
            f"INSERT INTO db.b VALUES ({i}, 'p{i % 2}', {i}.5), ({i + 10}, NULL, NULL)",
            spark=spark,
        )
    _run(catalog, "DELETE FROM db.b WHERE id = 1", spark=spark)
    table = catalog.load_table("db.b")
    spec = table.metadata.spec()
    listed = rm.read_records(table.io, table.current_snapshot().manifest_list)[2]

    def written(copy: bool) -> dict[str, Any]:
        if not copy:
            monkeypatch.setattr(rm, "_suits", lambda *a: False)
        chosen = rm.choose(table.metadata, listed, spec.spec_id)
        done = rm.ManifestRewrite("db.b", spec.spec_id, chosen)
        paths: list[str] = []
        news = rm._write_groups(table, spec, done, paths, None)
        monkeypatch.undo()
        out = {}
        for m in news:
            raw = rm._read(table.io, m["manifest_path"])
            for e in fastavro.reader(io.BytesIO(raw)):
                f = e["data_file"]
                out[f["file_path"]] = (e["status"], e["snapshot_id"], e["sequence_number"],
                                       e["file_sequence_number"], f)  # fmt: skip
        return out

    copied, encoded = written(True), written(False)
    assert copied == encoded and len(copied) == 7
    if version == 3:
        assert all(v[4]["first_row_id"] is not None for v in copied.values())
