"""`mor orphans`: the files mor wrote that no snapshot references (what a write command killed
before its commit leaves) are listed, and deleted with --delete when old enough; nothing mor
did not write, and nothing a snapshot references, ever is. No Spark: the table is written by
mor's own test writer, whose commits name their manifests and lists as every command does."""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from mor import MorError
from mor.cli import main
from mor.orphans import is_mors, orphan_files
from mor.writer.operations import appended
from mor.writer.producer import SnapshotProducer
from mor.writer.tables import TableWriter

pytestmark = [pytest.mark.check]

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))


def _table(catalog: Any) -> tuple[TableWriter, Path]:
    """A table whose last commit went through the snapshot producer as mor's commands use
    it: its manifest and manifest list are named as mor names them, and referenced."""
    w = TableWriter(catalog, "o.t", SCHEMA)
    _, files = w.append(pa.table({"id": pa.array(range(10), pa.int64())}))
    deletes = [w.position_delete_file({files[0].file_path: [1, 2]}, files[0])]
    head = w.refresh().current_snapshot()
    SnapshotProducer(catalog, "o.t").commit(appended([], deletes), head)
    return w, Path(w.refresh().metadata.location.removeprefix("file://").removeprefix("file:"))


def _plant(root: Path, rel: str, hours: float = 100.0) -> Path:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(b"x" * 7)
    then = time.time() - hours * 3600
    os.utime(p, (then, then))
    return p


def test_lists_and_deletes_only_unreferenced_files_mor_wrote(catalog: Any) -> None:
    w, root = _table(catalog)
    u = uuid.uuid4()
    planted = [
        _plant(root, f"data/mor-{u}-deletes.parquet"),
        _plant(root, f"data/mor-{u}-deletes.puffin"),
        _plant(root, f"data/mor-compact-{u}/mor_group=0/part-0.parquet"),
        _plant(root, f"metadata/mor-{u}-m0.avro"),
        _plant(root, f"metadata/snap-12-1-mor-{u}.avro"),
    ]
    young = _plant(root, f"data/mor-{uuid.uuid4()}-deletes.parquet", hours=1)
    foreign = [  # not named as mor names files: never listed, never deleted
        _plant(root, "data/00000-0-other.parquet"),
        _plant(root, f"metadata/snap-13-1-{u}.avro"),
        _plant(root, "data/sub/morning.parquet"),
    ]
    before = [r["id"] for r in w.refresh().scan().to_arrow().to_pylist()]
    referenced = sorted(str(p) for p in root.rglob("*") if p.is_file() and is_mors(str(p)))
    report = orphan_files("o.t", catalog=catalog)
    listed = {o.path.removeprefix("file://").removeprefix("file:") for o in report.orphans}
    assert listed == {str(p) for p in (*planted, young)}
    assert not report.removed
    assert "6 files mor wrote are referenced by no snapshot" in report.line()
    assert "1 of them written less than 72 h ago" in report.line()
    # the commit's own manifest and list (named as mor names them) are referenced: kept
    assert len(set(referenced) - listed) == 2, referenced
    done = orphan_files("o.t", catalog=catalog, delete=True)
    assert sorted(done.removed) == sorted(o.path for o in report.orphans if o.hours >= 72)
    assert not any(p.exists() for p in planted)
    assert young.exists() and all(p.exists() for p in foreign)
    assert [r["id"] for r in w.refresh().scan().to_arrow().to_pylist()] == before
    again = orphan_files("o.t", catalog=catalog, older_than_hours=0, delete=True)
    assert again.removed == [o.path for o in again.orphans] and not young.exists()
    assert not orphan_files("o.t", catalog=catalog).orphans
    assert [r["id"] for r in w.refresh().scan().to_arrow().to_pylist()] == before


def test_cli(catalog: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    w, root = _table(catalog)
    wh = str(Path(w.refresh().metadata.location.removeprefix("file://")).parent.parent)
    stray = _plant(root, f"data/mor-{uuid.uuid4()}-deletes.parquet")
    assert main(["orphans", "o.t", "--warehouse", wh]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("orphan ") and str(stray) in out[0] and stray.exists()
    assert main(["orphans", "o.t", "--warehouse", wh, "--delete", "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert len(got["removed"]) == 1 and not stray.exists()
    assert main(["orphans", "o.nope", "--warehouse", wh]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "o.nope" in err[0]
    with pytest.raises(MorError, match="--older-than"):
        orphan_files("o.t", catalog=catalog, older_than_hours=-1)
