"""mor health against truth computed apart: pyiceberg's metadata tables (files by kind and
partition), the naive spec reference of test_semantics (live rows), and mor's own scan for the
exact counts. The Java-written histories of tests/oracle check the same against Iceberg's own
reader and metadata tables."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType
from test_semantics import PART_SPEC, SCHEMA, Reference, _history

from mor import health
from mor.cli import main
from mor.writer.tables import TableWriter

ROWS = [(i, "a" if i % 3 else "b", i % 4) for i in range(30)]


@pytest.fixture()
def mixed(catalog: Any) -> tuple[Any, TableWriter, Reference]:
    """A partitioned table with position deletes in both partitions and equality deletes in one
    (NULL keys too)."""
    w = TableWriter(catalog, "h.mixed", SCHEMA, PART_SPEC)
    ref = Reference(partitioned=True)
    _history(
        w,
        ref,
        [
            ("append", ROWS[:20]),
            ("pos", 0, 0, [1, 2, 3]),
            ("pos", 1, 0, [0, 4]),
            ("append", ROWS[20:] + [(None, "a", 1)]),
            ("eq", (1,), [(4,), (5,), (None,)], True, 0),
            ("pos", 0, 1, [0, 1]),
            ("eq", (3, 1), [(2, 10), (0, 8)], False, 1),
        ],
    )
    return catalog, w, ref


def _truth(w: TableWriter) -> dict[str, Counter]:
    """Files per partition value and kind, from pyiceberg's metadata tables."""
    files = w.refresh().inspect.files().to_pylist()
    out: dict[str, Counter] = {}
    for f in files:
        p = f["partition"]["p"]
        c = out.setdefault(p, Counter())
        kind = {0: "data_files", 1: "position_delete_files", 2: "equality_delete_files"}
        c[kind[f["content"]]] += 1
        if f["content"] == 0:
            c["data_records"] += f["record_count"]
    return out


def test_counts_match_the_metadata_tables_and_the_reference(mixed: Any, spark: Any) -> None:
    cat, w, ref = mixed
    est = health("h.mixed", catalog=cat)
    exact = health("h.mixed", catalog=cat, exact=True, spark=spark)
    truth = _truth(w)
    live = ref.live()
    live_by_p = Counter()
    for (_, p, _), n in live.items():
        live_by_p[p] += n
    for report in (est, exact):
        assert report["data_files"] == sum(c["data_files"] for c in truth.values())
        assert report["data_records"] == sum(c["data_records"] for c in truth.values())
        assert report["position_delete_files"] == sum(
            c["position_delete_files"] for c in truth.values()
        )
        assert report["equality_delete_files"] == sum(
            c["equality_delete_files"] for c in truth.values()
        )
        assert [p["values"]["1000"] for p in report["partitions"]] == ["a", "b"]
        for p in report["partitions"]:
            t = truth[p["values"]["1000"]]
            assert (p["data_files"], p["data_records"]) == (t["data_files"], t["data_records"])
            # delete files that apply to the partition's data: here, those written to it
            assert p["position_delete_files"] == t["position_delete_files"]
            assert p["equality_delete_files"] == t["equality_delete_files"]
    # exact: every delete applied, per partition
    assert exact["deleted_records_exact"] is True
    assert exact["deleted_records"] == exact["data_records"] - sum(live.values())
    for p in exact["partitions"]:
        assert p["deleted_records"] == p["data_records"] - live_by_p[p["values"]["1000"]]
        assert p["delete_ratio"] == round(p["deleted_records"] / p["data_records"], 4)
    # without --exact the equality part is an estimate, and says so; positions stay exact
    assert est["deleted_records_exact"] is False
    keys = {k["field_ids"]: k for k in est["equality_keys"]}
    assert set(keys) == {"{1}", "{1,3}"}
    assert keys["{1}"]["columns"] == ["id"] and keys["{1,3}"]["delete_records"] == 2
    assert keys["{1}"]["min_sequence_number"] == keys["{1}"]["max_sequence_number"] == 5


def test_position_deletes_are_exact_without_spark(catalog: Any) -> None:
    w = TableWriter(catalog, "h.pos", SCHEMA, PART_SPEC)
    ref = Reference(partitioned=True)
    # overlapping positions in two files and a position past the file's end count once / never
    _history(
        w,
        ref,
        [
            ("append", ROWS),
            ("pos", 0, 0, [1, 2, 3]),
            ("pos", 0, 0, [2, 3, 4, 500]),
            ("pos", 1, 0, [0]),
        ],
    )
    report = health("h.pos", catalog=catalog)
    assert report["deleted_records_exact"] is True
    first = health("h.pos", catalog=catalog, snapshot_id=report_snapshots(w)[0])
    assert first["deleted_records"] == 0
    # more delete files and fewer live rows: a scan costs more per live row
    assert report["read_amplification"] > first["read_amplification"]
    assert report["deleted_records"] == report["data_records"] - sum(ref.live().values())
    assert report["read_amplification"] > 1


def report_snapshots(w: TableWriter) -> list[int]:
    md = w.refresh().metadata
    return [s.snapshot_id for s in sorted(md.snapshots, key=lambda s: s.sequence_number)]


def test_a_healthy_table_gets_no_advice(catalog: Any) -> None:
    w = TableWriter(catalog, "h.clean", SCHEMA)
    w.append(pa.table({"id": pa.array([1, 2], pa.int64()), "p": ["a", "b"], "v": [1, 2]}))
    report = health("h.clean", catalog=catalog)
    assert report["advice"] == []
    assert report["delete_ratio"] == 0 and report["deleted_records_exact"] is True


def test_advice_names_procedure_options_partition_and_figure(catalog: Any) -> None:
    w = TableWriter(catalog, "h.adv", SCHEMA, PART_SPEC)
    _, files = w.append(
        pa.table(
            {
                "id": pa.array(range(20), pa.int64()),
                "p": ["a"] * 10 + ["b"] * 10,
                "v": pa.array([1] * 20, pa.int64()),
            }
        )
    )
    a = next(f for f in files if f.partition[0] == "a")
    # five position delete files on one data file of partition a, half its rows
    for i in range(5):
        w.commit(deletes=[w.position_delete_file({a.file_path: [i]}, a)])
    # one that names no live file: dangling
    w.commit(deletes=[w.position_delete_file({"file:///gone/x.parquet": [0]}, a)])
    report = health("h.adv", catalog=catalog)
    by = {(x["procedure"], x["call"].split("map(")[-1]): x for x in report["advice"]}
    ratio = next(x for x in report["advice"] if "delete-ratio-threshold" in x["call"])
    assert ratio["call"] == (
        "CALL mor.system.rewrite_data_files(table => 'h.adv', where => \"p = 'a'\", "
        "options => map('delete-ratio-threshold', '0.3'))"
    )
    assert "highest 0.5 in spec 0: p='a'" in ratio["reason"]
    files_ = next(x for x in report["advice"] if "delete-file-threshold" in x["call"])
    assert "1 data file(s) have 5 or more delete files" in files_["reason"]
    pos = next(x for x in report["advice"] if x["procedure"] == "rewrite_position_delete_files")
    assert "1 delete file(s) or vectors apply to no live data file" in pos["reason"]
    assert "5.0 position delete files apply to each data file that has any" in pos["reason"]
    assert report["dangling_delete_files"] == 1 and len(by) == 3
    # thresholds move the advice
    calm = health("h.adv", catalog=catalog, thresholds={"delete_ratio": 0.9, "delete_files": 9})
    assert [x["procedure"] for x in calm["advice"]] == ["rewrite_position_delete_files"]


def test_cli_json_table_and_chart(mixed: Any, capsys: Any, tmp_path: Path) -> None:
    cat, w, _ = mixed
    wh = str(tmp_path / "wh")  # the `catalog` fixture's warehouse
    code = main(["health", "h.mixed", "--warehouse", wh, "--format", "json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    report = json.loads(out.out)
    for key in (
        "data_files",
        "data_records",
        "position_delete_files",
        "equality_delete_files",
        "deletion_vectors",
        "deleted_records",
        "delete_ratio",
        "equality_keys",
        "small_files",
        "read_amplification",
        "advice",
    ):
        assert key in report
    assert {k for p in report["partitions"] for k in p} >= {
        "data_files",
        "deleted_records",
        "delete_ratio",
        "read_amplification",
    }
    png = tmp_path / "health.png"
    code = main(["health", "h.mixed", "--warehouse", wh, "--plot", str(png)])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = [ln for ln in out.out.splitlines() if ln.startswith("spec 0: p=")]
    assert len(rows) == 2 and all("█" in r or "·" * 20 in r for r in rows)
    assert "(estimated: --exact counts it)" in out.out


def test_cli_errors_are_one_line(capsys: Any, tmp_path: Path, catalog: Any) -> None:
    TableWriter(catalog, "h.e", SCHEMA)
    wh = str(tmp_path / "wh")
    code = main(["health", "h.nope", "--warehouse", wh])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1 and "h.nope" in err
    code = main(["health", "h.e", "--warehouse", wh, "--delete-ratio-threshold", "2"])
    err = capsys.readouterr().err
    assert code == 2 and "--delete-ratio-threshold" in err
    code = main(["health", "h.e", "--warehouse", wh, "--snapshot", "42"])
    err = capsys.readouterr().err
    assert code == 1 and "no snapshot 42" in err
    # an empty table: a report with nothing to advise
    code = main(["health", "h.e", "--warehouse", wh, "--format", "json"])
    out = capsys.readouterr()
    assert code == 0 and json.loads(out.out)["advice"] == []


def test_partition_where_is_omitted_for_transforms(catalog: Any) -> None:
    """rewrite_data_files' `where` filters source columns: a partition of an identity spec is
    `col = value`; one of a transform (bucket) cannot be named, and the call covers the table."""
    from pyiceberg.transforms import BucketTransform

    from mor.health_advice import _where
    from mor.planner.sources import PathMap, Resolver

    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "s", StringType(), required=False),
    )
    spec = PartitionSpec(
        PartitionField(1, 1000, BucketTransform(2), "id_bucket"),
        PartitionField(2, 1001, IdentityTransform(), "s"),
    )
    catalog.create_namespace_if_not_exists("h")
    catalog.create_table("h.bucket", schema=schema, partition_spec=spec)
    catalog.create_table(
        "h.ident",
        schema=schema,
        partition_spec=PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "s")),
    )
    resolver = Resolver(lambda: catalog, PathMap.of({}))
    bucket = resolver.by_name(("h", "bucket"))
    assert _where(bucket, [{"spec_id": 0, "values": {"1000": 1, "1001": "x"}}]) is None
    ident = resolver.by_name(("h", "ident"))
    two = [{"spec_id": 0, "values": {"1000": "x'y"}}, {"spec_id": 0, "values": {"1000": None}}]
    assert _where(ident, two) == "(s = 'x''y') OR (s IS NULL)"


def test_health_after_convert_and_compact_reports_what_a_reader_pays_now(
    tmp_path: Path, spark: Any, capsys: Any
) -> None:
    """After convert-equality-deletes the equality deletes' cost is gone (positions stay);
    after compact no delete file is left and a reader pays what the compacted rows cost:
    1.00x, the table figure being its partitions' (each compacted on its own: rows of two
    partitions never share a file)."""
    from mor.demo import build_demo_table

    wh = str(tmp_path / "wh")
    build_demo_table(wh)

    def report() -> dict[str, Any]:
        code = main(["health", "demo.orders", "--warehouse", wh, "--format", "json"])
        out = capsys.readouterr()
        assert code == 0, out.err
        return json.loads(out.out)

    before = report()
    assert before["equality_delete_files"] and before["read_amplification"] > 2
    assert main(["convert-equality-deletes", "demo.orders", "--warehouse", wh]) == 0
    capsys.readouterr()
    converted = report()
    assert converted["equality_delete_files"] == 0 and converted["position_delete_files"]
    assert 1 < converted["read_amplification"] < before["read_amplification"]
    assert main(["compact", "demo.orders", "--warehouse", wh, "--delete-file-threshold", "1"]) == 0
    capsys.readouterr()
    compacted = report()
    assert compacted["position_delete_files"] == 0 and compacted["deleted_records"] == 0
    assert len(compacted["partitions"]) == 2
    assert compacted["read_amplification"] == 1.0
    assert all(p["read_amplification"] == 1.0 for p in compacted["partitions"])
    assert not compacted["advice"]
