"""How position deletes are applied (rules/physical/, no Spark) and the settings it reads."""

from __future__ import annotations

import pytest

from helpers import data_file, eq_delete, scan
from mor.planner.errors import ConfigError
from mor.planner.nodes import DeleteTask, EqDeleteScan, IcebergScan, Plan, ScanFiles, Union
from mor.rules.physical.equality import scoped_only
from mor.rules.physical.positions import bitmap_bytes, packed_shift, position_strategy
from mor.rules.physical.reading import (
    LOOKUP_FILES,
    SHARED_SIZE_FILES,
    FileKey,
    SessionFacts,
    file_key,
    reading,
    spark_tasks,
)
from mor.rules.physical.views import needs_barrier

# the fast tier too (`make check`: tests/legs.py)
pytestmark = [pytest.mark.check]

SIZES = FileKey("file_size")  # files read by path, keyed by their size


def _pos_delete(fid: int, rows: int) -> DeleteTask:
    return DeleteTask(
        file_id=fid,
        kind="position",
        path=f"/t/p{fid}.parquet",
        read_path=f"/t/p{fid}.parquet",
        data_seq=5,
        spec_id=0,
        partition_id=0,
        record_count=rows,
        size_bytes=1,
    )


def test_bitmap_while_small_join_beyond_each_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    tasks = [data_file(i, pos=(100,)) for i in range(3)] + [data_file(9)]
    deletes = {100: _pos_delete(100, 30)}
    s = position_strategy(tasks, deletes, SIZES)
    assert s is not None and s.method == "bitmap"
    assert (s.data_files, s.delete_files, s.delete_rows) == (3, 1, 30)
    assert s.bitmap_bytes == 3 * bitmap_bytes(100) == 3 * 16
    assert s.looked_up  # 3 files, 48 bytes: map literals, no broadcast
    assert "looked up by _metadata.file_size in a map literal" in s.describe("_metadata.file_size")
    many = position_strategy(
        [data_file(i, pos=(100,)) for i in range(LOOKUP_FILES + 1)], deletes, SIZES
    )
    assert many is not None and many.method == "bitmap" and not many.looked_up
    assert "broadcast(bitmap file table)" in many.describe("_metadata.file_size")
    for name, value in (
        ("MOR_POSITION_BITMAP_BYTES", "47"),
        ("MOR_POSITION_DRIVER_ROWS", "29"),
        ("MOR_POSITION_DRIVER_FILES", "0"),
    ):
        with monkeypatch.context() as m:
            m.setenv(name, value)
            joined = position_strategy(tasks, deletes, SIZES)
            assert joined is not None and joined.method == "join", name
    assert position_strategy([data_file(9)], deletes, SIZES) is None
    # many delete files: each would be a read on the driver
    many = [data_file(i, pos=(100 + i,)) for i in range(5)]
    per_file = {100 + i: _pos_delete(100 + i, 1) for i in range(5)}
    with monkeypatch.context() as m:
        m.setenv("MOR_POSITION_DRIVER_FILES", "5")
        assert position_strategy(many, per_file, SIZES).method == "bitmap"  # type: ignore[union-attr]
        m.setenv("MOR_POSITION_DRIVER_FILES", "4")
        assert position_strategy(many, per_file, SIZES).method == "join"  # type: ignore[union-attr]


def test_packed_key_only_when_size_and_position_fit() -> None:
    small = [data_file(0)]  # 1 byte, 100 rows
    # the key may also be -1 ... -64 (files of shared sizes): 7 bits are kept for it
    assert packed_shift(small, SIZES) == 63 - SHARED_SIZE_FILES.bit_length() == 56
    big = [data_file(0)]
    big = [type(big[0])(**{**_fields(big[0]), "size_bytes": (1 << 40) - 1})]
    assert packed_shift(big, SIZES) == 23  # 40 bits of size, 23 of position
    many_rows = [type(big[0])(**{**_fields(big[0]), "record_count": 1 << 23})]
    assert packed_shift(many_rows, SIZES) is None  # row_index 2^23 would not fit
    assert packed_shift([], SIZES) is None
    assert packed_shift(small, FileKey("file_path")) is None  # a string key packs nothing


def test_packed_key_of_listed_files_is_their_id_whatever_their_size() -> None:
    """Files read through a file list are keyed by their id: a large file leaves as many bits
    for row_index as a small one, and a million files need 20 bits."""
    ids = FileKey("file_id")
    huge = [type(data_file(0))(**{**_fields(data_file(0)), "size_bytes": (1 << 40) - 1})]
    assert packed_shift(huge, ids) == 62  # 1 << 62 is the largest power of two a long holds
    many = [data_file(i) for i in (0, 999_999)]
    assert packed_shift(many, ids) == 63 - (999_999).bit_length() == 43


def _fields(t: object) -> dict:
    return {f: getattr(t, f) for f in t.__dataclass_fields__}  # type: ignore[attr-defined]


def test_the_packed_key_fits_every_file_not_only_those_with_deletes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every row of the scan is keyed `file key << shift | row_index`: sized for the files with
    deletes alone (id 0 here), file 9's key would wrap onto file 1's at shift 62 and its rows at
    file 1's deleted positions would vanish (the oracle found it: rows missing)."""
    monkeypatch.setenv("MOR_POSITION_BITMAP_BYTES", "0")
    tasks = [data_file(0, pos=(100,))] + [data_file(i) for i in range(1, 10)]
    s = position_strategy(tasks, {100: _pos_delete(100, 3)}, FileKey("file_id"))
    assert s is not None and s.shift == 63 - (9).bit_length() == 59
    big = type(tasks[1])(**{**_fields(tasks[1]), "record_count": 1 << 62})
    assert (
        position_strategy([tasks[0], big], {100: _pos_delete(100, 3)}, FileKey("file_id")).shift
        is None
    )  # a file without deletes whose positions do not fit: the pair key


def test_join_without_size_keys_uses_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOR_POSITION_BITMAP_BYTES", "0")
    tasks = [data_file(0, pos=(100,))]
    s = position_strategy(tasks, {100: _pos_delete(100, 3)}, FileKey("file_path"))
    assert s is not None and s.method == "join" and s.shift is None
    assert "(_metadata.file_path, _metadata.row_index)" in s.describe("_metadata.file_path")


@pytest.mark.parametrize("value", ["lots", "-1"])
def test_a_bad_setting_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("MOR_POSITION_DRIVER_ROWS", value)
    with pytest.raises(ConfigError, match="MOR_POSITION_DRIVER_ROWS must be"):
        position_strategy([data_file(0, pos=(100,))], {100: _pos_delete(100, 3)}, SIZES)


def test_bitmap_words_round_trip() -> None:
    import random
    import struct

    import pyarrow as pa

    from mor.physical.deletes.bitmaps import _few_words, bitmap_words

    rng = random.Random(5)
    for n in (1, 63, 64, 65, 5000):
        want = sorted(rng.sample(range(n * 3), n))
        data = bitmap_words(pa.array(want, pa.int64()))
        words = struct.unpack(f"<{len(data) // 8}Q", data)
        assert len(words) == want[-1] // 64 + 1
        assert [i * 64 + b for i, w in enumerate(words) for b in range(64) if w >> b & 1] == want
        # the Python path for few positions gives the same words, as signed integers
        assert _few_words(want) == list(struct.unpack(f"<{len(data) // 8}q", data))
    assert bitmap_words(pa.array([], pa.int64())) == b"" and _few_words([]) == []


def _sized(file_id: int, size: int, path: str | None = None) -> object:
    t = data_file(file_id)
    return type(t)(**{**_fields(t), "size_bytes": size, "read_path": path or t.read_path})


def test_file_keys_are_sizes_with_shared_sizes_told_apart_by_path() -> None:
    assert file_key([_sized(0, 10), _sized(1, 11)]) == FileKey("file_size")
    mixed = file_key([_sized(0, 10), _sized(1, 10), _sized(2, 11)])
    assert mixed == FileKey("file_size+path", frozenset({10})) and mixed.is_long
    assert "told apart by _metadata.file_path" in mixed.describe()
    crowded = [_sized(i, 10 + i // 2) for i in range(SHARED_SIZE_FILES + 2)]
    assert file_key(crowded) == FileKey("file_path") and not file_key(crowded).is_long
    assert file_key(crowded[:SHARED_SIZE_FILES]).kind == "file_size+path"


def _scan_of(n_files: int) -> IcebergScan:
    data = tuple(_sized(i, 100 + i) for i in range(n_files))
    files = ScanFiles(snapshot_id=None, sequence_number=1, data=data, deletes=(), partitions=("",))
    return IcebergScan(
        table="t", source_key="k", snapshot_id=None, schema_id=0, fields=(), files=files
    )


def test_barrier_only_for_scans_of_several_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    by_path = SessionFacts(lists="off")
    assert not needs_barrier(_scan_of(32), by_path)  # one read of 32 paths: nothing to copy into
    assert needs_barrier(_scan_of(33), by_path)  # two reads, unioned
    assert not needs_barrier(_scan_of(33), SessionFacts(listing=40, lists="off"))
    # through a file list: one read whatever the number of files
    assert not needs_barrier(_scan_of(100_000))
    union = Union(inputs=(_scan_of(2), _scan_of(3)), columns=())
    assert needs_barrier(union)  # two branches
    monkeypatch.setenv("MOR_SCAN_BARRIER", "off")
    assert not needs_barrier(_scan_of(100), by_path)


def test_a_file_spark_hides_in_a_list_sends_its_set_of_files_by_path() -> None:
    files = [_sized(0, 10, "/t/data/a.parquet"), _sized(1, 11, "/t/data/_b.parquet")]
    how = reading(files, SessionFacts())
    assert not how.listed and how.key == FileKey("file_size") and "_b.parquet" in str(how.why)
    assert reading(files[:1], SessionFacts()).listed


def test_spark_packs_small_files_as_iceberg_packs_splits() -> None:
    """Spark's FilePartition rules: 128 MiB splits, a 4 MiB open cost a file (20,000 small
    files: 625 tasks, as Spark made them in a run); a large file is split."""
    facts = SessionFacts()
    assert spark_tasks([1500] * 20_000, facts) == 625
    assert spark_tasks([1 << 30] * 3, facts) == 24
    assert spark_tasks([], facts) == 0


def test_the_scope_is_a_join_key_only_without_global_deletes() -> None:
    from mor.rules import MOR_RULES, optimize

    def delete_side(*deletes: DeleteTask) -> Plan:
        plan, _ = optimize(scan((data_file(0, eq=(frozenset({1}),)),), deletes), MOR_RULES)
        return next(n for n in plan.walk() if isinstance(n, EqDeleteScan))

    assert scoped_only(delete_side(eq_delete(1, ids={1}, part=0), eq_delete(2, ids={1}, part=3)))
    assert not scoped_only(delete_side(eq_delete(1, ids={1}), eq_delete(2, ids={1}, global_=True)))
    assert not scoped_only(scan())  # not a delete scan


def test_broadcasts_are_bounded_by_estimated_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    from mor.rules import MOR_RULES, optimize
    from mor.rules.physical.broadcast import (
        broadcast_allowed,
        default_broadcast_bytes,
        eq_relation_bytes,
        memory_bytes,
        relation_bytes,
    )

    assert [memory_bytes(t) for t in ("4g", "512m", "1024K", "2048", "1.5g", "lots")] == [
        4 << 30,
        512 << 20,
        1 << 20,
        2048,
        3 << 29,
        None,
    ]
    # an eighth of the driver's memory (1g unset), within half of maxResultSize (0: no limit)
    assert default_broadcast_bytes(None, None) == 128 << 20
    assert default_broadcast_bytes("4g", None) == 512 << 20
    assert default_broadcast_bytes("16g", "1g") == 512 << 20
    assert default_broadcast_bytes("16g", "0") == 2 << 30
    # one long a row: a null word and the value, held twice, plus a slot
    assert relation_bytes(1000, 1) == 1000 * (2 * 16 + 32)
    assert relation_bytes(10, 1, 1) > relation_bytes(10, 2)  # a string key weighs more

    def side(ids: set[int], part: int) -> EqDeleteScan:
        d = eq_delete(1, ids=ids, part=part, seq=5)
        data = (data_file(0, eq=(frozenset(ids),)), data_file(2, part=3, eq=(frozenset(ids),)))
        plan, _ = optimize(scan(data, (d,)), MOR_RULES)
        return next(n for n in plan.walk() if isinstance(n, EqDeleteScan))

    # a long key with $del_seq and $del_partition; a string key is variable
    assert eq_relation_bytes(side({1}, 0)) == relation_bytes(10, 3)
    assert eq_relation_bytes(side({2}, 0)) == relation_bytes(10, 2, 1)
    assert broadcast_allowed(10, 100, 100) and not broadcast_allowed(10, 101, 100)
    monkeypatch.setenv("MOR_BROADCAST_ROWS", "9")
    assert not broadcast_allowed(10, 1, 100)
