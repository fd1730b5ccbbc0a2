"""Iceberg's procedures that move a branch, as CALL statements (planner/procedures.py binds
them, writer/procedures.py runs them), without Spark: on tables of the embedded catalog whose
snapshots pyiceberg appends. Iceberg's own procedures on twin tables: tests/oracle/procedures.py.
"""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa
import pytest

from mor.planner.errors import MorError, SqlSyntaxError, UnsupportedError
from mor.statements import StatementExecution
from mor.writer.procedures import ProcedureError

pytestmark = [pytest.mark.check]


def _run(catalog: Any, sql: str, **kw: Any) -> Any:
    return StatementExecution(sql, catalog=catalog, **kw).run()


@pytest.fixture()
def history(catalog: Any) -> tuple[Any, list[int]]:
    """db.t with four appends (snapshots s1..s4, a few milliseconds apart), ids 1..4."""
    _run(catalog, "CREATE NAMESPACE db")
    _run(catalog, "CREATE TABLE db.t (id BIGINT)")
    t = catalog.load_table("db.t")
    for i in range(1, 5):
        t.append(pa.table({"id": pa.array([i], pa.int64())}))
        time.sleep(0.01)
    t = catalog.load_table("db.t")
    return catalog, [s.snapshot_id for s in t.metadata.snapshots]


def _ids(catalog: Any, ref: str = "main") -> list[int]:
    t = catalog.load_table("db.t")
    sid = t.metadata.refs[ref].snapshot_id
    return sorted(t.scan(snapshot_id=sid).to_arrow()["id"].to_pylist())


def test_rollback_to_snapshot_moves_main_back_and_answers_as_icebergs(history: Any) -> None:
    catalog, s = history
    out = _run(catalog, f"CALL system.rollback_to_snapshot('db.t', {s[1]})")
    assert out.columns == ["previous_snapshot_id", "current_snapshot_id"]
    assert out.rows == [(s[3], s[1])] and out.report["committed"]
    md = catalog.load_table("db.t").metadata
    assert md.current_snapshot_id == s[1] and md.snapshot_log[-1].snapshot_id == s[1]
    assert len(md.snapshots) == 4  # nothing removed: s3 and s4 stay reachable by id
    assert _ids(catalog) == [1, 2]
    # s4 is no longer an ancestor of the current state: refused, as Iceberg refuses it
    with pytest.raises(ProcedureError, match="not an ancestor of the current state"):
        _run(catalog, f"CALL system.rollback_to_snapshot(table => 'db.t', snapshot_id => {s[3]})")
    with pytest.raises(ProcedureError, match="unknown snapshot id 42"):
        _run(catalog, "CALL system.rollback_to_snapshot('db.t', 42)")
    assert catalog.load_table("db.t").metadata.current_snapshot_id == s[1]
    # set_current_snapshot reaches any snapshot (and by name here, in any order)
    out = _run(catalog, f"CALL system.set_current_snapshot(snapshot_id => {s[3]}, table => 'db.t')")
    assert out.rows == [(s[1], s[3])] and _ids(catalog) == [1, 2, 3, 4]


def test_rollback_to_timestamp_takes_the_latest_ancestor_strictly_older(history: Any) -> None:
    catalog, s = history
    md = catalog.load_table("db.t").metadata
    ts = {x.snapshot_id: x.timestamp_ms for x in md.snapshots}
    at = ts[s[2]]  # strictly older than s3's own time: s2
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at / 1000)) + f".{at % 1000:03d}"
    out = _run(catalog, f"CALL system.rollback_to_timestamp('db.t', TIMESTAMP '{stamp}')")
    assert out.rows == [(s[3], s[1])] and _ids(catalog) == [1, 2]
    with pytest.raises(ProcedureError, match="no ancestor of the current snapshot older"):
        _run(catalog, "CALL system.rollback_to_timestamp('db.t', TIMESTAMP '2001-01-01 00:00:00')")


def test_set_current_snapshot_to_a_tag_and_fast_forward_a_branch(history: Any) -> None:
    catalog, s = history
    _run(catalog, f"ALTER TABLE db.t CREATE TAG v1 AS OF VERSION {s[0]}")
    _run(catalog, f"ALTER TABLE db.t CREATE BRANCH b AS OF VERSION {s[1]} RETAIN 7 DAYS")
    before = catalog.load_table("db.t").metadata.refs["b"]
    out = _run(catalog, "CALL system.fast_forward('db.t', 'b', 'main')")
    assert out.columns == ["branch_updated", "previous_ref", "updated_ref"]
    assert out.rows == [("b", s[1], s[3])]
    after = catalog.load_table("db.t").metadata.refs["b"]
    assert after.snapshot_id == s[3] and after.max_ref_age_ms == before.max_ref_age_ms
    assert catalog.load_table("db.t").metadata.current_snapshot_id == s[3]  # main untouched
    out = _run(catalog, "CALL system.fast_forward('db.t', 'b', 'main')")  # there already
    assert out.rows == [("b", s[3], s[3])] and not out.report["committed"]
    with pytest.raises(ProcedureError, match="b is not an ancestor of v1"):
        _run(catalog, "CALL system.fast_forward('db.t', 'b', 'v1')")
    with pytest.raises(ProcedureError, match="v1 is a tag not a branch"):
        _run(catalog, "CALL system.fast_forward('db.t', 'v1', 'main')")
    with pytest.raises(ProcedureError, match="target branch does not exist: nope"):
        _run(catalog, "CALL system.fast_forward('db.t', 'nope', 'main')")
    out = _run(catalog, "CALL system.set_current_snapshot(table => 'db.t', ref => 'v1')")
    assert out.rows == [(s[3], s[0])] and _ids(catalog) == [1]
    with pytest.raises(ProcedureError, match="either snapshot_id or ref"):
        _run(catalog, f"CALL system.set_current_snapshot('db.t', {s[0]}, 'v1')")


def test_a_dry_run_and_a_checked_script_commit_nothing(history: Any) -> None:
    catalog, s = history
    out = _run(catalog, f"CALL system.rollback_to_snapshot('db.t', {s[0]})", dry_run=True)
    assert f"main would move from snapshot {s[3]} to {s[0]}" in out.line
    assert not out.report["committed"] and out.report["after"] == s[0]
    assert catalog.load_table("db.t").metadata.current_snapshot_id == s[3]
    # a script checked whole sees the branch where its earlier CALL leaves it: rolled back
    # to s2, s4 is no longer an ancestor (nothing ran)
    from mor.planner.pending import Pending
    from mor.planner.sql import split_statements

    script = split_statements(
        f"CALL system.rollback_to_snapshot('db.t', {s[1]});\n"
        f"CALL system.rollback_to_snapshot('db.t', {s[3]})"
    )
    pending = Pending()
    StatementExecution(script[0], catalog=catalog).check(pending)
    with pytest.raises(ProcedureError, match="not an ancestor"):
        StatementExecution(script[1], catalog=catalog).check(pending)
    assert catalog.load_table("db.t").metadata.current_snapshot_id == s[3]


def test_a_commit_that_loses_a_race_is_checked_again(history: Any, monkeypatch: Any) -> None:
    """Another writer moves main between the procedure's read and its commit: the catalog
    refuses the commit (main is asserted as read), and the procedure reads again, checks
    again against the new head and commits from there."""
    from mor.writer.procedures import RefMove
    from mor.writer.procedures import updates as ref_updates

    catalog, s = history
    real = type(catalog).commit_table
    calls: list[int] = []

    def racing(self: Any, table: Any, requirements: Any, updates: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:  # the other writer: main to s3, first
            other = self.load_table("db.t")
            moved = RefMove("set_current_snapshot", "main", s[3], s[2])
            their_updates, their_requirements = ref_updates(other.metadata, moved)
            real(self, other, their_requirements, their_updates)
        return real(self, table, requirements, updates)

    monkeypatch.setattr(type(catalog), "commit_table", racing)
    out = _run(catalog, f"CALL system.rollback_to_snapshot('db.t', {s[1]})")
    monkeypatch.setattr(type(catalog), "commit_table", real)
    assert len(calls) == 2  # refused once, then committed over the other writer's move
    assert out.rows == [(s[2], s[1])]
    log = [e.snapshot_id for e in catalog.load_table("db.t").metadata.snapshot_log]
    assert log[-2:] == [s[2], s[1]]


@pytest.mark.parametrize(
    ("sql", "error", "message"),
    [
        (
            "CALL system.rewrite_position_delete_files('db.t')",
            UnsupportedError,
            "rewrite_position_delete_files procedure yet",
        ),
        (
            "CALL system.remove_orphan_files(table => 'db.t', prefix_mismatch_mode => 'NOPE')",
            MorError,
            "prefix_mismatch_mode must be one of ERROR, IGNORE, DELETE, not 'NOPE'",
        ),
        (
            "CALL system.remove_orphan_files(table => 'db.t', older_than => '2999-01-01')",
            MorError,
            "older_than must be at least 24 hours ago",
        ),
        (
            "CALL system.remove_orphan_files(table => 'db.t', equal_schemes => 's3')",
            SqlSyntaxError,
            "must be a map of strings",
        ),
        (
            "CALL system.remove_orphan_files(table => 'db.t', equal_schemes => map('s3a'))",
            SqlSyntaxError,
            "keys and values in pairs",
        ),
        (
            "CALL system.remove_orphan_files(table => 'db.t', file_list_view => 'v')",
            UnsupportedError,
            "file_list_view",
        ),
        (
            "CALL system.expire_snapshots('db.t', retain_last => 0)",
            SqlSyntaxError,
            "all by position or all by name",
        ),
        (
            "CALL system.expire_snapshots(table => 'db.t', retain_last => 0)",
            MorError,
            "retain_last must be at least 1",
        ),
        (
            "CALL system.expire_snapshots(table => 'db.t', stream_results => 1)",
            SqlSyntaxError,
            "must be true or false",
        ),
        ("CALL system.rollback_to_snapshots('db.t', 1)", SqlSyntaxError, "no procedure"),
        ("CALL db.rollback_to_snapshot('db.t', 1)", SqlSyntaxError, "system.<name>"),
        (
            "CALL system.rollback_to_snapshot('db.t', snapshot_id => 1)",
            SqlSyntaxError,
            "all by position or all by name",
        ),
        (
            "CALL system.rollback_to_snapshot('db.t')",
            SqlSyntaxError,
            "missing argument snapshot_id",
        ),
        ("CALL system.rollback_to_snapshot('db.t', 'x')", SqlSyntaxError, "must be a whole number"),
        ("CALL system.rollback_to_snapshot('db.t', 1, 2)", SqlSyntaxError, "at most 2"),
        (
            "CALL system.rollback_to_timestamp('db.t', 1700000000000)",
            SqlSyntaxError,
            "not a number",
        ),
        (
            "CALL system.fast_forward(table => 'db.t', branch => 'b', too => 'main')",
            SqlSyntaxError,
            "no argument too",
        ),
        ("CALL system.rollback_to_snapshot('db.nope', 1)", MorError, "db.nope"),
    ],
)
def test_a_bad_call_is_one_line_naming_what_is_wrong(
    history: Any, sql: str, error: type, message: str
) -> None:
    catalog, s = history
    with pytest.raises(error, match=message) as e:
        _run(catalog, sql)
    assert "\n" not in str(e.value)
    assert catalog.load_table("db.t").metadata.current_snapshot_id == s[3]


def test_a_call_error_names_its_line_and_column(history: Any) -> None:
    catalog, _ = history
    with pytest.raises(
        SqlSyntaxError, match=r"line 2, column 20: CALL rollback_to_snapshot: argument snapshot_id"
    ):
        _run(catalog, "CALL system.rollback_to_snapshot(\n  table => 'db.t', snapshot_id => 'abc')")


def test_each_procedure_is_a_command_too(history: Any, capsys: Any, tmp_path: Any) -> None:
    """`mor rollback_to_snapshot db.t ID` (and `rollback-to-snapshot`) runs the CALL through
    `mor run`'s road: Iceberg's output row, --format json, --dry-run, a refusal in one line."""
    from mor.cli import main

    catalog, s = history
    wh = str(tmp_path / "wh")  # the `catalog` fixture's embedded warehouse
    assert main(["rollback-to-snapshot", "--warehouse", wh, "db.t", str(s[1]), "--dry-run"]) == 0
    assert f"main would move from snapshot {s[3]} to {s[1]}" in capsys.readouterr().out
    assert catalog.load_table("db.t").metadata.current_snapshot_id == s[3]
    assert (
        main(["rollback_to_snapshot", "--warehouse", wh, "--format", "json", "db.t", str(s[1])])
        == 0
    )
    assert (
        f'"previous_snapshot_id": {s[3]}, "current_snapshot_id": {s[1]}' in capsys.readouterr().out
    )
    assert (
        main(["set-current-snapshot", "--warehouse", wh, "db.t", "--snapshot-id", str(s[3])]) == 0
    )
    assert catalog.load_table("db.t").metadata.current_snapshot_id == s[3]
    assert main(["fast-forward", "--warehouse", wh, "db.t", "nope", "main"]) == 1
    err = capsys.readouterr().err
    assert "target branch does not exist: nope; nothing was committed" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


# --- expire_snapshots ---------------------------------------------------------------------------


def _files(catalog: Any) -> set[str]:
    import os

    root = catalog.load_table("db.t").location().removeprefix("file://")
    return {os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs}


@pytest.fixture()
def rewritten(history: Any) -> tuple[Any, list[int]]:
    """history, then a copy-on-write delete of id 1 (its data file replaced): s5."""
    from pyiceberg.expressions import EqualTo

    catalog, s = history
    catalog.load_table("db.t").delete(EqualTo("id", 1))
    t = catalog.load_table("db.t")
    return catalog, [x.snapshot_id for x in t.metadata.snapshots]


def test_expire_snapshots_removes_old_snapshots_and_only_what_they_reached(rewritten: Any) -> None:
    catalog, s = rewritten
    md = catalog.load_table("db.t").metadata
    before = _files(catalog)
    lists = {x.snapshot_id: x.manifest_list.removeprefix("file://") for x in md.snapshots}
    later = max(x.timestamp_ms for x in md.snapshots) + 1000
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(later / 1000))
    sql = f"CALL system.expire_snapshots(table => 'db.t', older_than => TIMESTAMP '{stamp}')"
    dry = _run(catalog, sql, dry_run=True)
    assert f"would remove {len(s) - 1} snapshot(s)" in dry.line
    assert _files(catalog) == before  # nothing deleted, nothing committed
    assert len(catalog.load_table("db.t").metadata.snapshots) == len(s)
    out = _run(catalog, sql)
    assert out.columns[0] == "deleted_data_files_count"
    data, pos, eq, manifests, manifest_lists, stats = out.rows[0]
    assert (data, pos, eq, manifest_lists, stats) == (1, 0, 0, len(s) - 1, 0)  # id 1's file
    md = catalog.load_table("db.t").metadata
    assert [x.snapshot_id for x in md.snapshots] == [s[-1]]  # retain_last 1: the head
    after = _files(catalog)
    gone = before - after
    assert {lists[x] for x in s[:-1]} <= gone and lists[s[-1]] in after
    assert dry.report["files"] == out.report["files"]  # the dry run named the same files
    assert sorted(catalog.load_table("db.t").scan().to_arrow()["id"].to_pylist()) == [2, 3, 4]
    # every file the head reaches is still there
    from mor.planner.expiry import reachable

    t = catalog.load_table("db.t")
    live = reachable(t.io, t.metadata, [s[-1]])
    for kind, paths in live.paths.items():
        assert {p.removeprefix("file://") for p in paths} <= after, kind


def test_expire_snapshots_keeps_what_refs_and_retain_last_keep(rewritten: Any) -> None:
    catalog, s = rewritten
    _run(catalog, f"ALTER TABLE db.t CREATE TAG v1 AS OF VERSION {s[0]}")
    md = catalog.load_table("db.t").metadata
    later = max(x.timestamp_ms for x in md.snapshots) + 1000
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(later / 1000))
    out = _run(
        catalog,
        f"CALL system.expire_snapshots('db.t', TIMESTAMP '{stamp}', 2)",
    )
    kept = [x.snapshot_id for x in catalog.load_table("db.t").metadata.snapshots]
    assert kept == [s[0], s[-2], s[-1]]  # the tag's, and the last two of main
    assert out.rows[0][0] == 0  # id 1's old file: the tag still reaches it
    t = catalog.load_table("db.t")
    assert t.scan(snapshot_id=s[0]).to_arrow()["id"].to_pylist() == [1]
    # a snapshot a ref points at is refused by id; the default age (5 days) expires nothing
    with pytest.raises(MorError, match=f"cannot expire {s[0]}: still referenced by refs"):
        _run(
            catalog, f"CALL system.expire_snapshots(table => 'db.t', snapshot_ids => ARRAY({s[0]}))"
        )
    out = _run(catalog, "CALL system.expire_snapshots('db.t')")
    assert "removed 0 snapshot(s)" in out.line and sum(out.rows[0]) == 0


def test_expire_snapshots_refused_when_gc_is_disabled(history: Any) -> None:
    catalog, s = history
    _run(catalog, "ALTER TABLE db.t SET TBLPROPERTIES ('gc.enabled' = 'false')")
    with pytest.raises(MorError, match="GC is disabled"):
        _run(
            catalog, f"CALL system.expire_snapshots(table => 'db.t', snapshot_ids => ARRAY({s[0]}))"
        )
    assert len(catalog.load_table("db.t").metadata.snapshots) == 4


@pytest.mark.parametrize(
    ("rounds", "writer"),
    [
        (6, "pyiceberg"),
        pytest.param(18, "pyiceberg", marks=pytest.mark.soak),
        pytest.param(9, "mor", marks=pytest.mark.soak),
    ],
)
def test_expiry_and_orphan_removal_killed_while_a_writer_commits(rounds: int, writer: str) -> None:
    """tests/kill_maintenance.py: `mor expire-snapshots`, `mor remove-orphan-files` and `mor
    rewrite-manifests` SIGKILLed at random moments (or let finish; six rounds: each command
    killed once and let finish once) while a writer commits; every snapshot the table then
    holds reaches only files that exist and reads the ids a model recorded for it."""
    from tests.kill_maintenance import main as harness

    assert harness(["--rounds", str(rounds), "--writer", writer, "--seed", "3"]) == 0


# --- remove_orphan_files --------------------------------------------------------------------------


def _age(paths: Any, hours: float) -> None:
    import os

    then = time.time() - hours * 3600
    for p in paths:
        os.utime(p, (then, then))


def _plant(root: str, rel: str, hours: float = 100.0) -> str:
    import os

    p = os.path.join(root, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "wb") as f:
        f.write(b"x" * 5)
    _age([p], hours)
    return p


def test_remove_orphan_files_deletes_what_nothing_references_and_nothing_else(
    rewritten: Any,
) -> None:
    """Every file of the table made old (so that only references protect it); then files no
    snapshot references: planted ones, and those of snapshots whose expiry removed them from
    the metadata only (pyiceberg's expiry). Hidden folders and young files are never listed."""
    from mor.planner.expiry import expired_files, reachable

    catalog, s = rewritten
    t = catalog.load_table("db.t")
    root = t.location().removeprefix("file://")
    # pyiceberg's expiry edits the metadata only: what s1..s3 alone reached stays on the store
    kept = reachable(t.io, t.metadata, s[3:])
    gone = {
        p.removeprefix("file://")
        for paths in expired_files(t.io, t.metadata, kept).paths.values()
        for p in paths
    }
    t.maintenance.expire_snapshots().by_ids(s[:3]).commit()
    assert gone, "the expiry left files behind"
    _age(_files(catalog), 200)
    planted = {
        _plant(root, "data/stray.parquet"),
        _plant(root, "data/id=3/deep/stray.parquet"),
        _plant(root, "metadata/stray-m0.avro"),
        _plant(root, "elsewhere.txt"),  # under the table, outside data/ and metadata/ too
    }
    kept_anyway = {
        _plant(root, "data/_temporary/0/part-0.parquet"),  # hidden folders: never listed
        _plant(root, "data/.hidden.parquet"),
        _plant(root, "data/young.parquet", hours=2),  # written less than 3 days ago
    }
    before = _files(catalog)
    reads = {x.snapshot_id: _ids_at(catalog, x.snapshot_id) for x in t.refresh().metadata.snapshots}
    sql = "CALL system.remove_orphan_files(table => 'db.t', dry_run => true)"
    dry = _run(catalog, sql)
    assert dry.columns == ["orphan_file_location"]
    listed = {_local(r[0]) for r in dry.rows}
    expected = planted | gone
    assert listed == expected, sorted(listed ^ expected)
    assert _files(catalog) == before and "would delete them (dry run)" in dry.line
    out = _run(catalog, "CALL system.remove_orphan_files('db.t')")
    assert sorted(out.rows) == sorted(dry.rows)
    assert before - _files(catalog) == expected
    assert kept_anyway <= _files(catalog)
    for sid, ids in reads.items():  # every snapshot the table keeps reads as before
        assert _ids_at(catalog, sid) == ids
    md = catalog.load_table("db.t").metadata
    for entry in md.metadata_log:  # the metadata log's files are referenced
        assert entry.metadata_file.removeprefix("file://") in _files(catalog)
    assert not _run(catalog, "CALL system.remove_orphan_files('db.t')").rows  # nothing left
    # a location of its own: only what is under it
    other = _plant(root, "metadata/another.avro")
    data_only = _run(
        catalog,
        f"CALL system.remove_orphan_files(table => 'db.t', location => '{root}/data', "
        "dry_run => true)",
    )
    assert not data_only.rows and other in _files(catalog)


def _local(path: str) -> str:
    if path.startswith("file://"):
        return path.removeprefix("file://")
    return path.removeprefix("file:")


def _ids_at(catalog: Any, sid: int) -> list[int]:
    t = catalog.load_table("db.t")
    return sorted(t.scan(snapshot_id=sid).to_arrow()["id"].to_pylist())


def test_remove_orphan_files_refused_when_gc_is_disabled(history: Any) -> None:
    catalog, _ = history
    _run(catalog, "ALTER TABLE db.t SET TBLPROPERTIES ('gc.enabled' = 'false')")
    with pytest.raises(MorError, match="GC is disabled"):
        _run(catalog, "CALL system.remove_orphan_files('db.t')")


def test_remove_orphan_files_compares_schemes_and_authorities_as_iceberg() -> None:
    from mor.planner.orphans import OrphanError, Prefixes, find_orphans, parse

    assert parse("file:///tmp/a//b/") == parse("file:/tmp/a/b")
    assert parse("s3://bucket/k").authority == "bucket" and parse("/x").scheme is None
    valid = ["s3://bucket/t/data/a.parquet", "/local/t/data/b.parquet"]
    listed = ["s3a://bucket/t/data/a.parquet", "file:/local/t/data/b.parquet", "s3://b/t/c"]
    # s3a is s3; a reference without a scheme matches any scheme
    assert find_orphans(listed, valid, Prefixes.of())[0] == ["s3://b/t/c"]
    other = ["s3://other/t/data/a.parquet"]
    with pytest.raises(OrphanError, match="bucket / other"):
        find_orphans(other, valid, Prefixes.of())
    assert find_orphans(other, valid, Prefixes.of(mode="ignore"))[0] == []
    assert find_orphans(other, valid, Prefixes.of(mode="DELETE"))[0] == other
    assert find_orphans(other, valid, Prefixes.of(None, {"other,x": "bucket"}))[0] == []
    with pytest.raises(OrphanError, match="s3 / gs"):
        find_orphans(["gs://bucket/t/data/a.parquet"], valid, Prefixes.of())
    assert find_orphans(["gs://bucket/t/data/a.parquet"], valid, Prefixes.of({"gs": "s3"}))[0] == []
    # referenced under one prefix: never an orphan, even in DELETE mode
    both = valid + ["s3://other/t/data/a.parquet"]
    assert find_orphans(["s3://bucket/t/data/a.parquet"], both, Prefixes.of(mode="DELETE"))[0] == []


def test_remove_orphan_files_as_a_command(history: Any, capsys: Any, tmp_path: Any) -> None:
    from mor.cli import main

    catalog, _ = history
    wh = str(tmp_path / "wh")
    root = catalog.load_table("db.t").location().removeprefix("file://")
    _age(_files(catalog), 100)
    stray = _plant(root, "data/stray.parquet")
    argv = ["remove-orphan-files", "--warehouse", wh, "db.t", "--format", "json"]
    assert main([*argv, "--dry-run", "--equal-schemes", "s3a,s3n=s3"]) == 0
    out = capsys.readouterr().out
    assert f'"orphan_file_location": "file://{stray}"' in out and os_exists(stray)
    assert main(argv) == 0 and not os_exists(stray)
    assert main([*argv, "--prefix-mismatch-mode", "sometimes"]) == 1
    err = capsys.readouterr().err
    assert "prefix_mismatch_mode must be one of" in err and len(err.strip().splitlines()) == 1


def os_exists(p: str) -> bool:
    import os

    return os.path.exists(p)


# --- cherrypick_snapshot -------------------------------------------------------------------------


def _append(catalog: Any, ids: list[int], branch: str = "main", **props: str) -> int:
    t = catalog.load_table("db.t")
    t.append(pa.table({"id": pa.array(ids, pa.int64())}), snapshot_properties=props, branch=branch)
    return catalog.load_table("db.t").metadata.refs[branch].snapshot_id


def _branch(catalog: Any, name: str) -> None:
    t = catalog.load_table("db.t")
    t.manage_snapshots().create_branch(t.metadata.current_snapshot_id, name).commit()


def test_cherrypick_snapshot_applies_a_staged_append_to_main_as_icebergs(history: Any) -> None:
    catalog, s = history
    _branch(catalog, "b")
    staged = _append(catalog, [10], "b", **{"wap.id": "w1"})
    head = _append(catalog, [5])  # main moved on: the staged snapshot's parent is not the head
    dry = _run(catalog, f"CALL system.cherrypick_snapshot('db.t', {staged})", dry_run=True)
    assert "would be applied to main" in dry.line
    assert catalog.load_table("db.t").metadata.current_snapshot_id == head
    sql = f"CALL system.cherrypick_snapshot(table => 'db.t', snapshot_id => {staged})"
    out = _run(catalog, sql)
    assert out.columns == ["source_snapshot_id", "current_snapshot_id"]
    md = catalog.load_table("db.t").metadata
    new = md.current_snapshot()
    assert out.rows == [(staged, new.snapshot_id)] and new.parent_snapshot_id == head
    assert new.summary.operation.value == "append"
    props = new.summary.additional_properties
    assert props["source-snapshot-id"] == str(staged) and props["published-wap-id"] == "w1"
    assert _ids(catalog) == [1, 2, 3, 4, 5, 10]
    # the staged snapshot's data file is added as it is, not written again
    staged_files = {
        f.file_path
        for m in md.snapshot_by_id(staged).manifests(catalog.load_table("db.t").io)
        for e in m.fetch_manifest_entry(catalog.load_table("db.t").io)
        if e.snapshot_id == staged
        for f in [e.data_file]
    }
    t = catalog.load_table("db.t")
    now_files = {f.file_path for f in t.scan().plan_files() for f in [f.file]}
    assert staged_files and staged_files <= now_files
    # Iceberg's refusals (its WAP id checked first, as Iceberg's), an ancestor, unknown
    for sid, message in (
        (staged, "wap id that was published already: w1"),
        (s[1], "already an ancestor"),
        (42, "unknown snapshot id 42"),
    ):
        with pytest.raises(ProcedureError, match=message):
            _run(catalog, f"CALL system.cherrypick_snapshot('db.t', {sid})")
    _branch(catalog, "c")
    _append(catalog, [6], "main")
    again = _append(catalog, [11], "c", **{"wap.id": "w1"})
    with pytest.raises(ProcedureError, match="wap id that was published already: w1"):
        _run(catalog, f"CALL system.cherrypick_snapshot('db.t', {again})")
    plain = _append(catalog, [12], "c")  # no WAP id: picked once, then refused as picked
    done = _run(catalog, f"CALL system.cherrypick_snapshot('db.t', {plain})").rows[0][1]
    with pytest.raises(ProcedureError, match=f"already picked to create ancestor {done}"):
        _run(catalog, f"CALL system.cherrypick_snapshot('db.t', {plain})")
    assert _ids(catalog) == [1, 2, 3, 4, 5, 6, 10, 12]


def test_cherrypick_snapshot_fast_forwards_when_main_is_the_parent(history: Any) -> None:
    catalog, s = history
    _branch(catalog, "d")
    child = _append(catalog, [20], "d")
    out = _run(catalog, f"CALL system.cherrypick_snapshot('db.t', {child})")
    md = catalog.load_table("db.t").metadata
    assert out.rows == [(child, child)] and md.current_snapshot_id == child
    assert len(md.snapshots) == 5 and "fast-forward" in out.line  # no new snapshot
    assert _ids(catalog) == [1, 2, 3, 4, 20]


def test_a_cherrypick_that_fails_never_deletes_the_picked_files(
    history: Any, monkeypatch: Any
) -> None:
    """The files a cherry-pick adds are the picked snapshot's: a commit that fails deletes
    what it wrote (manifests, the list) and never those."""
    import os

    from mor.writer.producer import SnapshotProducer

    catalog, s = history
    _branch(catalog, "b")
    staged = _append(catalog, [10], "b")
    _append(catalog, [5])
    before = _files(catalog)

    def refuse(self: Any, attempt: int) -> None:
        raise MorError("the catalog is gone")

    monkeypatch.setattr(SnapshotProducer, "_attempting", refuse)
    with pytest.raises(MorError, match="the catalog is gone"):
        _run(catalog, f"CALL system.cherrypick_snapshot('db.t', {staged})")
    assert _files(catalog) == before
    assert all(os.path.exists(p) for p in before)
    monkeypatch.undo()
    assert _ids(catalog, "b") == [1, 2, 3, 4, 10]


def test_health_reports_the_history_and_advises_expiry_and_orphan_removal(
    rewritten: Any,
) -> None:
    """`mor health` says what expiry with the table's own retention would free and, with
    --orphans, what orphan removal would; it advises both with the command to run, and after
    running them advises neither."""
    from mor.api import health

    catalog, s = rewritten
    _run(
        catalog,
        "ALTER TABLE db.t SET TBLPROPERTIES ('history.expire.max-snapshot-age-ms' = '1')",
    )
    root = catalog.load_table("db.t").location().removeprefix("file://")
    _age(_files(catalog), 100)
    _plant(root, "data/stray.parquet")
    report = health("db.t", catalog=catalog, orphans=True)
    h = report["history"]
    assert h["snapshots"] == len(s) and h["metadata_file_bytes"] > 0
    assert h["expiry"]["snapshots"] == len(s) - 1  # the table's retention: 1 ms, 1 kept
    assert h["expiry"]["files"]["manifest_lists"] == len(s) - 1
    assert h["expiry"]["files"]["data_files"] == 1  # id 1's file, replaced by the delete
    assert h["orphans"] == {"files": 1, "bytes": 5}
    advised = {a["procedure"]: a for a in report["advice"]}
    assert advised["expire_snapshots"]["mor"] == "mor expire-snapshots db.t"
    assert advised["remove_orphan_files"]["mor"] == "mor remove-orphan-files db.t"
    assert "1 file(s), 5 bytes" in advised["remove_orphan_files"]["reason"]
    _run(catalog, "CALL system.expire_snapshots('db.t')")
    _run(catalog, "CALL system.remove_orphan_files('db.t')")
    after = health("db.t", catalog=catalog, orphans=True)
    assert after["history"]["expiry"]["snapshots"] == 0
    assert after["history"]["orphans"]["files"] == 0
    assert not {"expire_snapshots", "remove_orphan_files"} & {
        a["procedure"] for a in after["advice"]
    }


def test_expire_snapshots_cleans_the_specs_and_schemas_no_retained_snapshot_uses(
    catalog: Any,
) -> None:
    """clean_expired_metadata (Iceberg's RemoveSnapshots.cleanExpiredMetadata): a schema only
    expired snapshots used goes, as does a spec no retained manifest is of; the current schema
    and the default spec always stay."""
    _run(catalog, "CREATE NAMESPACE db")
    _run(catalog, "CREATE TABLE db.m (id BIGINT, p STRING)")
    _run(catalog, "ALTER TABLE db.m ADD PARTITION FIELD p")  # spec 0 never written under
    t = catalog.load_table("db.m")
    t.append(pa.table({"id": pa.array([1], pa.int64()), "p": ["a"]}))
    _run(catalog, "ALTER TABLE db.m ADD COLUMN s STRING")  # schema 1; s1 was of schema 0
    t = catalog.load_table("db.m")
    t.append(pa.table({"id": pa.array([2], pa.int64()), "p": ["b"], "s": ["x"]}))
    md = catalog.load_table("db.m").metadata
    assert [s.spec_id for s in md.partition_specs] == [0, 1]
    assert [s.schema_id for s in md.schemas] == [0, 1]
    later = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(time.time() + 5))
    args = f"table => 'db.m', older_than => TIMESTAMP '{later}', clean_expired_metadata => true"
    dry = _run(catalog, f"CALL system.expire_snapshots({args})", dry_run=True)
    assert "partition specs [0] and schemas [0] no retained snapshot uses" in dry.line
    out = _run(catalog, f"CALL system.expire_snapshots({args})")
    assert out.report["removed_specs"] == [0] and out.report["removed_schemas"] == [0]
    md = catalog.load_table("db.m").metadata
    assert [s.spec_id for s in md.partition_specs] == [1]
    assert [s.schema_id for s in md.schemas] == [1]
    rows = catalog.load_table("db.m").scan().to_arrow().sort_by("id").to_pylist()
    assert [(r["id"], r["p"], r["s"]) for r in rows] == [(1, "a", None), (2, "b", "x")]


def test_remove_orphan_files_refuses_a_location_another_table_shares(history: Any) -> None:
    """A table whose location another table shares (a CREATE TABLE copied with its LOCATION):
    the other's files are orphans to it; refused in one line, nothing deleted, unless the
    metadata file is this table's own (an old version out of its log)."""
    import json
    import os

    catalog, _ = history
    t = catalog.load_table("db.t")
    root = t.location().removeprefix("file://")
    _age(_files(catalog), 100)
    own = json.loads(open(t.metadata_location.removeprefix("file://")).read())
    mine = _plant(root, "metadata/00000-old.metadata.json")
    with open(mine, "w") as f:
        json.dump(own, f)  # this table's own version, out of its log: an orphan, removable
    _age([mine], 100)
    other = _plant(root, "metadata/00001-other.metadata.json")
    with open(other, "w") as f:
        json.dump({**own, "table-uuid": "00000000-0000-0000-0000-000000000001"}, f)
    _age([other], 100)
    before = _files(catalog)
    with pytest.raises(MorError, match="is the metadata of table 00000000-") as e:
        _run(catalog, "CALL system.remove_orphan_files('db.t')")
    assert "\n" not in str(e.value) and _files(catalog) == before
    # `mor health --orphans` says so, and advises no removal
    from mor.api import health
    from mor.health_report import render_table

    report = health("db.t", catalog=catalog, orphans=True)
    assert "is the metadata of table 00000000-" in report["history"]["orphans"]["error"]
    assert "remove_orphan_files" not in {a["procedure"] for a in report["advice"]}
    assert "orphans      cannot tell: " in render_table(report)
    os.remove(other)
    out = _run(catalog, "CALL system.remove_orphan_files('db.t')")
    assert [_local(r[0]) for r in out.rows] == [mine]
